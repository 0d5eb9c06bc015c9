//! The home page over per-second samples of a group, fed through the real history (the consumer task, the
//! aggregator, the ring and the per-minute rows) exactly as the sampler feeds it: one `Published` per second on the
//! sampler's feed, decisions from `policy::decide`. Two cells: 24 h of 16 processes and 7 days of 64 (10,080
//! minutes and the last hour's seconds). Criterion times, in one run:
//!
//! - `web-24h-16/page`: the 24 h home page (history query + downsampling + five SVG charts + HTML), goal <= 50 ms;
//! - `web-24h-16/json`: the baseline, the same 24 h data as `/api/v1/dashboard?range=24h` sends it (same query and
//!   downsampling, serialized with serde_json): page / json is what drawing on the server costs;
//! - `web-24h-16/page-5m`: the 5 min page of the same history, for reference;
//! - `web-7d-64/page` and `web-7d-64/json`: the same for the 7 d page of a week of 64 processes, goal <= 100 ms.
//!
//! With `WEB_BENCH_FILL_DB=<path>` it times nothing: it fills the history with the stats database at `<path>` (the
//! real writer thread writes the minutes), prints `WEB_BENCH_RSS {json}` with this process's VmRSS before the
//! history existed and after it held the span (its ring full), and exits. `WEB_BENCH_CELL=7d-64` fills a week of
//! 64 processes instead of the day of 16. `cargo xtask bench web` runs all of it.

use criterion::Criterion;
use monitor::config::StatsConfig;
use monitor::decision::policy::{decide, PolicyState, Thresholds};
use monitor::decision::snapshot::{CgroupVersion, GroupSample, LimitSource, ProcSample, Snapshot, Traffic};
use monitor::feed::{ProbeStatus, Published};
use monitor::history::query::MAX_SERIES;
use monitor::history::{self, HistoryHandle, Inputs};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use web::chart::PLOT_WIDTH;
use web::{Range, Source};

const DAY_S: u64 = 86_400;

/// One cell: how many processes, over how long, under which limit, drawn at which range.
#[derive(Clone, Copy)]
struct Cell {
    /// Criterion's group and `WEB_BENCH_CELL`'s value.
    name: &'static str,
    processes: usize,
    span_s: u64,
    /// The group's limit: the usual hours sit near 65% of it, the busy ones cross the refuse line.
    limit: u64,
    range: Range,
}

const DAY_16: Cell = Cell { name: "24h-16", processes: 16, span_s: DAY_S, limit: 2 << 30, range: Range::Day };
const WEEK_64: Cell = Cell { name: "7d-64", processes: 64, span_s: 7 * DAY_S, limit: 29 << 28, range: Range::Week };

/// Builds the group's samples: a master and workers with their own names, RSS that breathes over each day,
/// steady traffic, two busy hours a day that cross the refuse line, and a worker restart every 6 hours.
struct Feed {
    start_s: u64,
    cell: Cell,
    policy: PolicyState,
    thresholds: Thresholds,
    requests: Vec<u64>,
    names: Vec<String>,
}

impl Feed {
    fn new(start_s: u64, cell: Cell) -> Feed {
        let names = (0..cell.processes).map(|k| if k == 0 { "app-master".into() } else { format!("app-w{k:02}") });
        Feed {
            start_s,
            cell,
            policy: PolicyState::default(),
            thresholds: Thresholds::default(),
            requests: vec![0; cell.processes],
            names: names.collect(),
        }
    }

    fn sample(&mut self, i: u64) -> Published {
        let phase = i as f64 / DAY_S as f64 * std::f64::consts::TAU;
        let of_day = i % DAY_S;
        let busy = (30_000..33_600).contains(&of_day) || (60_000..63_600).contains(&of_day);
        let processes: Vec<ProcSample> = (0..self.cell.processes)
            .map(|k| {
                let restarts = if k == 3 { i / 21_600 } else { 0 };
                let pid = 10_000 + k as u32 * 10 + restarts as u32;
                let base = if k == 0 { 300 << 20 } else { 80 << 20 };
                let wave = (phase + k as f64).sin() * (20 << 20) as f64;
                let rss = (base as f64 + wave) as u64 + if busy { 10 << 20 } else { 0 };
                if k == 3 && i > 0 && i.is_multiple_of(21_600) {
                    self.requests[k] = 0; // a restarted process counts from zero
                }
                self.requests[k] += if k == 0 { 1 } else { 5 + (i + k as u64) % 7 };
                let requests_total = self.requests[k];
                ProcSample {
                    pid,
                    name: self.names[k].clone(),
                    comm: self.names[k].clone(),
                    start_ticks: 1_000 + restarts * 2_160_000,
                    ppid: if k == 0 { 1 } else { 10_000 },
                    rss_bytes: rss,
                    anon_bytes: rss * 9 / 10,
                    traffic: Traffic {
                        accepts_total: requests_total / 4,
                        requests_total,
                        responses_by_class: [0, requests_total, 0, 0, requests_total / 1000],
                        responses_total: requests_total,
                        inflight: (i + k as u64) % 4,
                        latency_p50_us: Some(2_000 + (i % 50) * 10),
                        latency_p99_us: Some(40_000 + (i % 300) * 100),
                        latency_hist_us: vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 0, requests_total, 3, 1],
                        ..Traffic::default()
                    },
                }
            })
            .collect();
        let surge = (300 << 20) * self.cell.processes as u64 / 16;
        let usage: u64 = processes.iter().map(|p| p.anon_bytes).sum::<u64>() + if busy { surge } else { 0 };
        let snapshot = Snapshot {
            seq: i + 1,
            unix_ms: (self.start_s + i) * 1000 + 250,
            mono_ms: i * 1000,
            counted_unix_ms: (self.start_s + i) * 1000 + 250,
            group: GroupSample {
                cgroup: PathBuf::from("/sys/fs/cgroup/memory/bench-web"),
                version: CgroupVersion::V1,
                usage_bytes: usage,
                shmem_bytes: 0,
                kernel_bytes: 0,
                oom_group: None,
                limit_bytes: self.cell.limit,
                limit_source: LimitSource::Cgroup,
                oom_kills: None,
                processes_listed: processes.len(),
                processes_sampled: processes.len(),
                unattributed_bytes: 0,
                pressure: None,
            },
            processes: processes.into(),
            agent_pid: 0,
            protected: Vec::new(),
        };
        let (policy, decision) = decide(&self.policy, &snapshot, &self.thresholds);
        self.policy = policy;
        Published {
            snapshot,
            decision,
            probes: ProbeStatus::on(monitor::config::Hooks::Sock, None),
            error: None,
            wake: monitor::feed::Wake::timer(),
            wakeups: Default::default(),
            brake: None,
            next_sample_ms: 100,
            kill: None,
            recycle: None,
            victim_requests: None,
            abort_signalled: None,
            thresholds: std::sync::Arc::new(self.thresholds.clone()),
            interval_ms: 100,
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// The runtime of the history's consumer: one thread, so a yield after each send lets the consumer take each
/// sample as it comes.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime")
}

/// Feeds the cell's span of samples, ending now, through the real history.
fn fill(rt: &tokio::runtime::Runtime, stats: &StatsConfig, cell: Cell) -> (HistoryHandle, monitor::feed::Feed) {
    let start_s = now_s() - cell.span_s;
    let mut feed = Feed::new(start_s, cell);
    let (tx, rx) = monitor::feed::Feed::new(feed.sample(0));
    let handle = rt.block_on(async {
        let live =
            monitor::config::live::Live::fixed(monitor::config::Config { stats: stats.clone(), ..Default::default() });
        let handle = history::spawn(rx, tx.subscribe("history"), live, Inputs::default());
        tokio::task::yield_now().await;
        for i in 1..cell.span_s {
            tx.publish(Arc::new(feed.sample(i)));
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        handle
    });
    (handle, tx)
}

/// Panics unless the history holds the whole span for every process (no sample lost on the channel); past
/// `MAX_SERIES` processes, the smaller ones are one summed series.
fn check(h: &HistoryHandle, cell: Cell) {
    let all = h.history.dashboard(cell.range, PLOT_WIDTH);
    let covered = all.series.usage_bytes.iter().filter(|v| v.is_finite()).count();
    assert!(covered + 2 >= all.series.len(), "{}: {covered} of {} buckets have data", cell.name, all.series.len());
    let series = cell.processes.min(MAX_SERIES + 1);
    assert_eq!(all.series.procs.len(), series, "one series per process, the smaller ones summed");
    let hour = h.history.dashboard(Range::Hour, PLOT_WIDTH);
    let covered = hour.series.usage_bytes.iter().filter(|v| v.is_finite()).count();
    assert!(covered + 2 >= hour.series.len(), "1 h: {covered} of {} buckets have data", hour.series.len());
}

/// VmRSS of this process in KiB.
fn vm_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// `WEB_BENCH_FILL_DB` mode: fill the database through the history and report this process's RSS.
fn fill_db(path: PathBuf, cell: Cell) {
    let rt = runtime();
    let empty_kib = vm_rss_kib();
    let stats = StatsConfig { path: Some(path.clone()), retention_days: 30 };
    let (handle, tx) = fill(&rt, &stats, cell);
    check(&handle, cell);
    black_box(web::page::render(&handle.history.dashboard(cell.range, PLOT_WIDTH)));
    let full_kib = vm_rss_kib();
    drop(tx);
    rt.block_on(handle.close(Duration::from_secs(300)));
    let line = serde_json::json!({ "cell": cell.name, "empty_kib": empty_kib, "full_kib": full_kib, "db": path });
    println!("WEB_BENCH_RSS {line}");
}

/// Fills the cell's history without a database and times its page against the same data as JSON (and `extra`
/// ranges' pages of the same history, for reference), in criterion's group `web-<cell>`.
fn bench(c: &mut Criterion, rt: &tokio::runtime::Runtime, cell: Cell, extra: &[(&str, Range)]) {
    let (handle, tx) = fill(rt, &StatsConfig::default(), cell);
    check(&handle, cell);
    let h = handle.history.clone();
    let page = web::page::render(&h.dashboard(cell.range, PLOT_WIDTH));
    let json = serde_json::to_vec(&h.dashboard(cell.range, PLOT_WIDTH)).map(|v| v.len()).unwrap_or(0);
    eprintln!("{} page: {} bytes; the same data as JSON: {json} bytes", cell.name, page.len());
    let mut g = c.benchmark_group(format!("web-{}", cell.name));
    g.bench_function("page", |b| b.iter(|| black_box(web::page::render(&h.dashboard(cell.range, PLOT_WIDTH)))));
    g.bench_function("json", |b| {
        b.iter(|| black_box(serde_json::to_vec(&h.dashboard(cell.range, PLOT_WIDTH)).map(|v| v.len())))
    });
    for &(id, range) in extra {
        g.bench_function(id, |b| b.iter(|| black_box(web::page::render(&h.dashboard(range, PLOT_WIDTH)))));
    }
    g.finish();
    // The next cell's history is built without this one's.
    drop((h, tx));
    rt.block_on(handle.close(Duration::from_secs(60)));
}

fn main() {
    if let Some(path) = std::env::var_os("WEB_BENCH_FILL_DB") {
        let cell = match std::env::var("WEB_BENCH_CELL").as_deref() {
            Err(_) | Ok("24h-16") => DAY_16,
            Ok("7d-64") => WEEK_64,
            Ok(other) => panic!("WEB_BENCH_CELL={other:?}: the cells are 24h-16 and 7d-64"),
        };
        fill_db(PathBuf::from(path), cell);
        return;
    }
    let rt = runtime();
    let mut c = Criterion::default().configure_from_args().sample_size(30).measurement_time(Duration::from_secs(6));
    bench(&mut c, &rt, DAY_16, &[("page-5m", Range::FiveMinutes)]);
    bench(&mut c, &rt, WEEK_64, &[]);
    c.final_summary();
}
