//! The home page over 24 h of per-second samples of a 16-process group, fed through the real history (the
//! consumer task, the aggregator, the ring and the per-minute rows) exactly as the sampler feeds it: one
//! `Published` per second on the sampler's feed, decisions from `policy::decide`. Criterion times, in one run:
//!
//! - `web-24h-16/page`: the 24 h home page (history query + downsampling + five SVG charts + HTML), goal <= 50 ms;
//! - `web-24h-16/json`: the baseline, the same 24 h data as `/api/v1/dashboard?range=24h` sends it (same query and
//!   downsampling, serialized with serde_json): page / json is what drawing on the server costs;
//! - `web-24h-16/page-5m`: the 5 min page of the same history, for reference.
//!
//! With `WEB_BENCH_FILL_DB=<path>` it times nothing: it fills the history with the stats database at `<path>` (the
//! real writer thread writes the 1440 minutes), prints `WEB_BENCH_RSS {json}` with this process's VmRSS before
//! the history existed and after it held 24 h (its ring full), and exits. `cargo xtask bench web` runs both.

use criterion::Criterion;
use monitor::config::StatsConfig;
use monitor::decision::policy::{decide, PolicyState, Thresholds};
use monitor::decision::snapshot::{CgroupVersion, GroupSample, LimitSource, ProcSample, Snapshot, Traffic};
use monitor::feed::{ProbeStatus, Published};
use monitor::history::{self, HistoryHandle, Inputs};
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use web::chart::PLOT_WIDTH;
use web::{Range, Source};

const PROCESSES: usize = 16;
const DAY_S: u64 = 86_400;
const LIMIT: u64 = 2 << 30;

/// Builds the group's samples: a master and 15 workers with their own names, RSS that breathes over the day,
/// steady traffic, two busy hours that cross the refuse line, and a worker restart every 6 hours.
struct Feed {
    start_s: u64,
    policy: PolicyState,
    thresholds: Thresholds,
    requests: [u64; PROCESSES],
}

impl Feed {
    fn new(start_s: u64) -> Feed {
        Feed { start_s, policy: PolicyState::default(), thresholds: Thresholds::default(), requests: [0; PROCESSES] }
    }

    fn sample(&mut self, i: u64) -> Published {
        let phase = i as f64 / DAY_S as f64 * std::f64::consts::TAU;
        let busy = (30_000..33_600).contains(&i) || (60_000..63_600).contains(&i);
        let processes: Vec<ProcSample> = (0..PROCESSES)
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
                    name: if k == 0 { "app-master".into() } else { format!("app-w{k:02}") },
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
        let usage: u64 = processes.iter().map(|p| p.anon_bytes).sum::<u64>() + if busy { 300 << 20 } else { 0 };
        let snapshot = Snapshot {
            seq: i + 1,
            unix_ms: (self.start_s + i) * 1000 + 250,
            mono_ms: i * 1000,
            group: GroupSample {
                cgroup: PathBuf::from("/sys/fs/cgroup/memory/bench-web"),
                version: CgroupVersion::V1,
                usage_bytes: usage,
                shmem_bytes: 0,
                kernel_bytes: 0,
                oom_group: None,
                limit_bytes: LIMIT,
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

/// Feeds 24 h of samples, ending now, through the real history.
fn fill(rt: &tokio::runtime::Runtime, stats: &StatsConfig) -> (HistoryHandle, monitor::feed::Feed) {
    let start_s = now_s() - DAY_S;
    let mut feed = Feed::new(start_s);
    let (tx, rx) = monitor::feed::Feed::new(feed.sample(0));
    let handle = rt.block_on(async {
        let live =
            monitor::config::live::Live::fixed(monitor::config::Config { stats: stats.clone(), ..Default::default() });
        let handle = history::spawn(rx, tx.subscribe("history"), live, Inputs::default());
        tokio::task::yield_now().await;
        for i in 1..DAY_S {
            tx.publish(Arc::new(feed.sample(i)));
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        handle
    });
    (handle, tx)
}

/// Panics unless the history holds the whole day for every process (no sample lost on the channel).
fn check(h: &HistoryHandle) {
    let day = h.history.dashboard(Range::Day, PLOT_WIDTH);
    let covered = day.series.usage_bytes.iter().filter(|v| v.is_finite()).count();
    assert!(covered + 2 >= day.series.len(), "24 h: {covered} of {} buckets have data", day.series.len());
    assert_eq!(day.series.procs.len(), PROCESSES, "one series per process");
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
fn fill_db(path: PathBuf) {
    let rt = runtime();
    let empty_kib = vm_rss_kib();
    let stats = StatsConfig { path: Some(path.clone()), retention_days: 30 };
    let (handle, tx) = fill(&rt, &stats);
    check(&handle);
    black_box(web::page::render(&handle.history.dashboard(Range::Day, PLOT_WIDTH)));
    let full_kib = vm_rss_kib();
    drop(tx);
    rt.block_on(handle.close(Duration::from_secs(120)));
    let line = serde_json::json!({ "empty_kib": empty_kib, "full_kib": full_kib, "db": path });
    println!("WEB_BENCH_RSS {line}");
}

fn main() {
    if let Some(path) = std::env::var_os("WEB_BENCH_FILL_DB") {
        fill_db(PathBuf::from(path));
        return;
    }
    let rt = runtime();
    let (handle, _tx) = fill(&rt, &StatsConfig::default());
    check(&handle);
    let h = handle.history.clone();
    let page = web::page::render(&h.dashboard(Range::Day, PLOT_WIDTH));
    let json = serde_json::to_vec(&h.dashboard(Range::Day, PLOT_WIDTH)).map(|v| v.len()).unwrap_or(0);
    eprintln!("24 h page: {} bytes; the same data as JSON: {json} bytes", page.len());

    let mut c = Criterion::default().configure_from_args().sample_size(30).measurement_time(Duration::from_secs(6));
    let mut g = c.benchmark_group("web-24h-16");
    g.bench_function("page", |b| b.iter(|| black_box(web::page::render(&h.dashboard(Range::Day, PLOT_WIDTH)))));
    g.bench_function("json", |b| {
        b.iter(|| black_box(serde_json::to_vec(&h.dashboard(Range::Day, PLOT_WIDTH)).map(|v| v.len())))
    });
    g.bench_function("page-5m", |b| {
        b.iter(|| black_box(web::page::render(&h.dashboard(Range::FiveMinutes, PLOT_WIDTH))))
    });
    g.finish();
    c.final_summary();
}
