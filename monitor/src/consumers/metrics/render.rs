//! The families of `/metrics` for one sample and what the agent counted beside it, through prometheus-client's
//! encoder: every family with HELP and TYPE, labels as labels (their values escaped by the crate), histograms as
//! bucket counts that the encoder makes cumulative. Pure: the same inputs give the same text.

use crate::base::reaction::{Counts, Kind, BOUNDS_NS};
use crate::decision::policy::{Decisions, Thresholds};
use crate::feed::Published;
use crate::guard::KillCounts;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeLabelSet, EncodeMetric, MetricEncoder, NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use std::fmt::Result;

/// What the families hold beyond the sample.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Restarts per process name.
    pub restarts: Vec<(String, u64)>,
    pub shed_total: u64,
    /// Under `monitor run`: the front door's requests sent a second time, per reason (none: left out).
    pub retries: Option<[(&'static str, u64); 2]>,
    /// The history is being written to the database.
    pub persisted: bool,
    /// Under `monitor run`: each process's (name, role, launcher state).
    pub states: Vec<(String, String, String)>,
    /// The reaction times per kind (none: the family is left out).
    pub reactions: Vec<(Kind, Counts)>,
    /// The policy's lines, exported so dashboards and alerts draw and compare against the configured values.
    pub thresholds: Thresholds,
    /// The decisions counted since the agent started.
    pub decisions: Decisions,
    /// The config's reloads since start, (good, failed) (none: the family is left out).
    pub reloads: Option<(u64, u64)>,
    /// The last resort's kills since start (none: the counters are left out).
    pub kills: Option<KillCounts>,
    /// The time of the scrape, for the sample's age (0: left out).
    pub now_unix_ms: u64,
    /// Under `monitor run`: the memory per request, per route key since start (none: the families are left out).
    pub growth: Option<std::collections::BTreeMap<String, crate::feed::growth::KeyStats>>,
}

/// No labels: a family of one series.
const NONE: [(&str, &str); 0] = [];

/// A family of gauges: one series per label set.
fn gauges<L: EncodeLabelSet, V: EncodeGaugeValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) -> Result {
    let mut family = e.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in series {
        ConstGauge::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge<V: EncodeGaugeValue>(e: &mut DescriptorEncoder, name: &str, help: &str, v: V) -> Result {
    gauges(e, name, help, [(NONE, v)])
}

/// A family of counters; `name` is the exported one, whose `_total` the encoder writes itself.
fn counters<L: EncodeLabelSet, V: EncodeCounterValue>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: impl IntoIterator<Item = (L, V)>,
) -> Result {
    let name = name.strip_suffix("_total").unwrap_or(name);
    let mut family = e.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in series {
        ConstCounter::new(v).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter<V: EncodeCounterValue>(e: &mut DescriptorEncoder, name: &str, help: &str, v: V) -> Result {
    counters(e, name, help, [(NONE, v)])
}

/// One series of a histogram family: `buckets` are (upper bound, count in that bucket alone); what `count` holds
/// beyond them is in `+Inf` only.
fn histogram(
    family: &mut MetricEncoder,
    labels: &impl EncodeLabelSet,
    buckets: &[(f64, u64)],
    sum: f64,
    count: u64,
) -> Result {
    family.encode_family(labels)?.encode_histogram::<NoLabelSet>(sum, count, buckets, None)
}

/// Every family: `names` are the (series name, role) of each of the sample's processes, in order.
pub(crate) fn encode(e: &mut DescriptorEncoder, p: &Published, names: &[(String, String)], extra: &Extra) -> Result {
    let g = &p.snapshot.group;
    let probes = if crate::sources::build::probes_built() { "built" } else { "not built" };
    let build = [
        ("version", crate::sources::build::VERSION),
        ("revision", crate::sources::build::REVISION),
        ("probes", probes),
    ];
    gauges(
        e,
        "monitor_build_info",
        "1, labelled with the version, the commit and whether the eBPF object is built in.",
        [(build, 1u32)],
    )?;
    gauge(
        e,
        "monitor_group_memory_usage_bytes",
        "The group's unreclaimable memory: anon, shmem and kernel memory (v2 anon + shmem + kernel less reclaimable slab, v1 total_rss + total_shmem + kmem).",
        g.usage_bytes,
    )?;
    gauge(
        e,
        "monitor_group_shmem_bytes",
        "The shmem part of the usage: tmpfs files and shared memory, which killing a process may not free.",
        g.shmem_bytes,
    )?;
    gauge(
        e,
        "monitor_group_kernel_bytes",
        "The kernel part of the usage: page tables, kernel stacks and slab, which grow with the processes.",
        g.kernel_bytes,
    )?;
    gauge(
        e,
        "monitor_group_unattributed_bytes",
        "What the group holds beyond the sampled processes' anon (a lower bound).",
        g.unattributed_bytes,
    )?;
    gauge(
        e,
        "monitor_group_processes_unsampled",
        "Listed processes of the group not sampled.",
        g.processes_unsampled(),
    )?;
    gauge(e, "monitor_group_memory_limit_bytes", "The group's memory limit (cgroup, config or host).", g.limit_bytes)?;
    gauge(e, "monitor_group_memory_ratio", "Usage divided by the limit.", p.decision.ratio)?;
    let state = u32::from(crate::history::ring::state_code(p.decision.state));
    gauge(e, "monitor_policy_state", "The policy's state: 0 normal, 1 refusing, 2 aborting.", state)?;
    gauge(e, "monitor_policy_shadow", "1 when the policy decides but enforces nothing.", u32::from(p.decision.shadow))?;
    gauge(e, "monitor_policy_abort_round", "Victims chosen since entering aborting.", p.decision.abort_round)?;
    policy(e, &extra.thresholds, &extra.decisions)?;
    guard(e, p.decision.kills_halted, extra.kills.as_ref())?;
    if let Some((ok, failed)) = extra.reloads {
        counters(
            e,
            "monitor_config_reloads_total",
            "Config reloads (SIGHUP): ok applied the file, failed kept the running config.",
            [([("result", "ok")], ok), ([("result", "failed")], failed)],
        )?;
    }
    gauge(e, "monitor_probes_enabled", "1 when the eBPF probes count requests.", u32::from(p.probes.enabled))?;
    if let Some(hooks) = &p.probes.hooks {
        let hooks = hooks.to_string();
        let help = "1, labelled with the kernel hooks the probes count from.";
        gauges(e, "monitor_probes_info", help, [([("hooks", hooks.as_str())], 1u32)])?;
    }
    if let Some(pr) = g.pressure {
        counters(
            e,
            "monitor_memory_pressure_seconds_total",
            "Time the group's tasks stalled on memory (PSI): some = at least one, full = all at once.",
            [([("kind", "some")], pr.some_us as f64 / 1e6), ([("kind", "full")], pr.full_us as f64 / 1e6)],
        )?;
    }
    gauge(e, "monitor_sample_ok", "1 when the latest sample of the group succeeded.", u32::from(p.error.is_none()))?;
    if extra.now_unix_ms > 0 {
        let age = extra.now_unix_ms.saturating_sub(p.snapshot.unix_ms) as f64 / 1e3;
        gauge(e, "monitor_sample_age_seconds", "Time since the latest sample was taken.", age)?;
    }
    reactions(e, p)?;
    reaction_histogram(e, &extra.reactions)?;
    let persisted = u32::from(extra.persisted);
    gauge(e, "monitor_history_persisted", "1 when the history is written to the stats database.", persisted)?;
    counter(e, "monitor_shed_requests_total", "Requests the front door refused with 503.", extra.shed_total)?;
    if let Some(r) = &extra.retries {
        counters(
            e,
            "monitor_proxy_retries_total",
            "Requests the front door sent a second time on a new connection, by reason: unsent (the kept-alive \
             connection closed before the request was written), failed (no answer byte, idempotent and bodiless).",
            r.iter().map(|&(reason, n)| ([("reason", reason)], n)),
        )?;
    }
    processes(e, p, names)?;
    restarts(e, names, &extra.restarts)?;
    if let Some(g) = &extra.growth {
        request_growth(e, g)?;
    }
    launcher_states(e, &extra.states)
}

/// The `le` bounds of `monitor_request_memory_growth_bytes`: 64 KiB to 1 GiB, by fours.
const GROWTH_BOUNDS: [u64; 8] = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30];

/// `monitor_request_memory_growth_bytes{route, measure}` (a histogram per route key, its requests measured alone or
/// shared) and `monitor_request_at_abort_total{route}`; at most 65 route keys (`other` holds the rest).
fn request_growth(
    e: &mut DescriptorEncoder,
    routes: &std::collections::BTreeMap<String, crate::feed::growth::KeyStats>,
) -> Result {
    use crate::feed::growth::{lower_bound, Hist};
    let mut family = e.encode_descriptor(
        "monitor_request_memory_growth_bytes",
        "How much each request's process grew its anonymous memory while the request was in flight (from the \
         samples), by route key; measure: exact (alone on its process) or shared (the whole growth to each).",
        None,
        MetricType::Histogram,
    )?;
    // Each fine bucket starts at or above one bound or below the first: bounds by fours fall on its edges.
    let cut = |h: &Hist| {
        let mut out = [(0.0, 0u64); GROWTH_BOUNDS.len()];
        for (o, bound) in out.iter_mut().zip(GROWTH_BOUNDS) {
            o.0 = bound as f64;
        }
        for (&b, &n) in &h.buckets {
            if let Some(i) = GROWTH_BOUNDS.iter().position(|&bound| lower_bound(b) < bound) {
                out[i].1 += n;
            }
        }
        out
    };
    for (route, k) in routes {
        for (measure, h) in [("exact", &k.exact), ("shared", &k.shared)] {
            if h.count() > 0 {
                let labels = [("route", route.as_str()), ("measure", measure)];
                histogram(&mut family, &labels, &cut(h), h.sum as f64, h.count())?;
            }
        }
    }
    counters(
        e,
        "monitor_request_at_abort_total",
        "Requests in flight when their process was told to abort or was killed, by route key.",
        routes.iter().map(|(route, k)| ([("route", route.as_str())], k.at_abort)),
    )
}

/// The label set of a process: its series name and role.
fn process<'a>(name: &'a str, role: &'a str) -> [(&'static str, &'a str); 2] {
    [("process", name), ("role", role)]
}

/// The per-process families of the sample.
fn processes(e: &mut DescriptorEncoder, p: &Published, names: &[(String, String)]) -> Result {
    let procs: Vec<_> = names.iter().zip(p.snapshot.processes.iter()).map(|((n, r), s)| (process(n, r), s)).collect();
    let help = "Resident set of the process.";
    gauges(e, "monitor_process_resident_memory_bytes", help, procs.iter().map(|(l, s)| (*l, s.rss_bytes)))?;
    let help = "RssAnon of the process.";
    gauges(e, "monitor_process_anon_memory_bytes", help, procs.iter().map(|(l, s)| (*l, s.anon_bytes)))?;
    let help = "HTTP requests the process received (eBPF).";
    counters(e, "monitor_http_requests_total", help, procs.iter().map(|(l, s)| (*l, s.traffic.requests_total)))?;
    let help = "HTTP requests received and not yet answered.";
    gauges(e, "monitor_http_requests_in_flight", help, procs.iter().map(|(l, s)| (*l, s.traffic.inflight)))?;
    const CLASSES: [&str; 5] = ["1xx", "2xx", "3xx", "4xx", "5xx"];
    let by_class = procs.iter().flat_map(|(l, s)| {
        CLASSES.iter().zip(s.traffic.responses_by_class).map(move |(c, n)| ((*l, [("class", *c)]), n))
    });
    let help = "HTTP responses the process sent, by status class.";
    counters(e, "monitor_http_responses_total", help, by_class)?;
    let mut family = e.encode_descriptor(
        "monitor_http_request_duration_seconds",
        "Request latency from the log2 histogram (buckets at powers of two microseconds; sum from bucket midpoints).",
        None,
        MetricType::Histogram,
    )?;
    for (l, s) in &procs {
        let (buckets, n, sum) = latency(&s.traffic.latency_hist_us);
        histogram(&mut family, l, &buckets[..n], sum, s.traffic.latency_hist_us.iter().sum())?;
    }
    Ok(())
}

/// `monitor_process_restarts_total`: every process of the sample (0 until restarted) and every name that was
/// restarted, by name.
fn restarts(e: &mut DescriptorEncoder, names: &[(String, String)], counted: &[(String, u64)]) -> Result {
    let mut restarts = counted.to_vec();
    for (n, _) in names {
        if !restarts.iter().any(|(r, _)| r == n) {
            restarts.push((n.clone(), 0));
        }
    }
    restarts.sort();
    let series = restarts.iter().map(|(n, v)| {
        let role = names.iter().find(|(x, _)| x == n).map_or("process", |(_, r)| r.as_str());
        (process(n, role), *v)
    });
    counters(e, "monitor_process_restarts_total", "Times the process was restarted (new pid, same name).", series)
}

/// `monitor_process_state`: under `monitor run`, one series per process labelled with its launcher state.
fn launcher_states(e: &mut DescriptorEncoder, states: &[(String, String, String)]) -> Result {
    if states.is_empty() {
        return Ok(());
    }
    gauges(
        e,
        "monitor_process_state",
        "1 for each process of monitor run, labelled with its launcher state (starting, ready, unhealthy, backing-off, stopped).",
        states.iter().map(|(n, role, state)| ((process(n, role), [("state", state.as_str())]), 1u32)),
    )
}

/// The kernel's OOM kills, the wake-up sources, the brake and the paced interval.
fn reactions(e: &mut DescriptorEncoder, p: &Published) -> Result {
    if let Some(n) = p.snapshot.group.oom_kills {
        counter(e, "monitor_oom_kills_total", "Processes of the group the kernel's OOM killer has killed.", n)?;
    }
    let w = &p.wakeups;
    if !w.armed.is_empty() || !w.off.is_empty() {
        let armed = w.armed.iter().map(|s| ([("source", s.as_str())], 1u32));
        let off = w.off.iter().map(|o| ([("source", o.source.as_str())], 0u32));
        gauges(
            e,
            "monitor_wakeup_armed",
            "1 for each kernel wake-up source of the sampler that is armed, 0 for one configured but off.",
            armed.chain(off),
        )?;
    }
    if let Some(high) = p.brake.as_ref().and_then(|b| b.high_bytes) {
        gauge(e, "monitor_memory_high_bytes", "The group's memory.high as the brake set it.", high)?;
    }
    let interval = p.next_sample_ms as f64 / 1000.0;
    gauge(e, "monitor_sample_interval_seconds", "The interval until the next timed sample, as paced.", interval)
}

/// `monitor_reaction_seconds{action}`: from the sampler's wake-up to the signal sent, the POST answered, or the
/// first 503 after the group entered refusing or aborting.
fn reaction_histogram(e: &mut DescriptorEncoder, reactions: &[(Kind, Counts)]) -> Result {
    if reactions.is_empty() {
        return Ok(());
    }
    let mut family = e.encode_descriptor(
        "monitor_reaction_seconds",
        "Time from the sampler's wake-up to the action: signal sent, POST answered, first 503 after entering \
         refusing or aborting.",
        None,
        MetricType::Histogram,
    )?;
    for (kind, c) in reactions {
        let mut buckets = [(0.0, 0); BOUNDS_NS.len()];
        for (b, (bound, n)) in buckets.iter_mut().zip(BOUNDS_NS.iter().zip(&c.buckets)) {
            *b = (*bound as f64 / 1e9, *n);
        }
        histogram(&mut family, &[("action", kind.as_str())], &buckets, c.sum_ns as f64 / 1e9, c.count())?;
    }
    Ok(())
}

/// The configured lines and the decisions counted.
fn policy(e: &mut DescriptorEncoder, t: &Thresholds, d: &Decisions) -> Result {
    gauges(
        e,
        "monitor_policy_threshold_ratio",
        "The policy's lines as fractions of the limit.",
        [([("line", "refuse")], t.refuse_at), ([("line", "abort")], t.abort_at)],
    )?;
    let help = "How far under a line the group must fall to leave it.";
    gauge(e, "monitor_policy_hysteresis_ratio", help, t.hysteresis)?;
    counters(
        e,
        "monitor_policy_entered_total",
        "Times the group entered refusing or aborting.",
        [([("state", "refusing")], d.entered_refusing), ([("state", "aborting")], d.entered_aborting)],
    )?;
    counter(e, "monitor_policy_victims_total", "Processes chosen to abort (one per abort round).", d.victims)
}

/// The last resort: kills sent per process name, those not enforced (shadow) or not sent, and whether it halted.
fn guard(e: &mut DescriptorEncoder, halted: bool, kills: Option<&KillCounts>) -> Result {
    let help = "1 while the last resort has halted: its kills freed nothing.";
    gauge(e, "monitor_guard_kills_halted", help, u32::from(halted))?;
    let Some(k) = kills else { return Ok(()) };
    if !k.by_name.is_empty() {
        let help = "Processes the guard's last resort killed, by name.";
        counters(e, "monitor_guard_kills_total", help, k.by_name.iter().map(|(n, v)| ([("process", n.as_str())], *v)))?;
    }
    if !k.recycled_by_name.is_empty() {
        let help = "Processes the guard recycled gracefully (they obeyed their abort but kept the group over \
                    refuse_at), by name.";
        let by = k.recycled_by_name.iter().map(|(n, v)| ([("process", n.as_str())], *v));
        counters(e, "monitor_guard_recycles_total", help, by)?;
    }
    let help = "Kills the last resort decided in shadow mode and did not send.";
    counter(e, "monitor_guard_kills_not_enforced_total", help, k.not_enforced)?;
    counter(
        e,
        "monitor_guard_kills_failed_total",
        "Kills the last resort could not send (the process was gone, its pid reused, or it left the group).",
        k.failed,
    )
}

/// The log2 histogram's bucket bounds exported: every other power of two of microseconds, from 2 µs to 2^25 µs
/// (33.6 s), 13 buckets and +Inf per process. Each is a bound of the log2 histogram, so the counts stay exact.
const EXPORTED_BOUNDS: usize = 25;

/// The exported buckets of a log2 histogram, where bucket i counts latencies in [2^i, 2^(i+1)) µs: (upper bound
/// in seconds, count in it alone), how many of them are filled, and the sum from the buckets' midpoints.
fn latency(hist: &[u64]) -> ([(f64, u64); EXPORTED_BOUNDS / 2 + 1], usize, f64) {
    let (mut buckets, mut filled, mut sum, mut pending) = ([(0.0, 0); EXPORTED_BOUNDS / 2 + 1], 0, 0.0, 0);
    for (i, &n) in hist.iter().enumerate() {
        pending += n;
        sum += n as f64 * 1.5 * (1u64 << i.min(62)) as f64 / 1e6;
        if i % 2 == 0 && i < EXPORTED_BOUNDS {
            buckets[filled] = ((1u64 << (i + 1)) as f64 / 1e6, pending);
            (filled, pending) = (filled + 1, 0);
        }
    }
    (buckets, filled, sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::reaction::Reactions;
    use crate::decision::policy::State;
    use crate::decision::snapshot::{ProcSample, Traffic};
    use prometheus_client::collector::Collector;
    use prometheus_client::registry::Registry;
    use std::time::Duration;

    /// The families of one sample, as a scrape would have them.
    #[derive(Debug)]
    struct Fixed(Published, Vec<(String, String)>, Extra);

    impl Collector for Fixed {
        fn encode(&self, mut e: DescriptorEncoder) -> Result {
            encode(&mut e, &self.0, &self.1, &self.2)
        }
    }

    fn render(p: &Published, names: &[(String, String)], extra: &Extra) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(p.clone(), names.to_vec(), extra.clone())));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encoded");
        text
    }

    /// A sample of one process, `name` of role `role`, with the log2 latency histogram `hist`.
    fn one_process(name: &str, role: &str, hist: &[u64]) -> String {
        let mut p = Published::test(State::Normal);
        std::sync::Arc::make_mut(&mut p.snapshot.processes).push(ProcSample {
            pid: 7,
            name: "node".into(),
            comm: "node".into(),
            start_ticks: 1,
            ppid: 1,
            rss_bytes: 4096,
            anon_bytes: 1024,
            traffic: Traffic { requests_total: 5, responses_by_class: [0, 4, 0, 0, 1], ..Traffic::default() },
        });
        std::sync::Arc::make_mut(&mut p.snapshot.processes)[0].traffic.latency_hist_us = hist.to_vec();
        render(&p, &[(name.into(), role.into())], &Extra::default())
    }

    /// The lines of `text` that start with `prefix`.
    fn lines_of<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines().filter(|l| l.starts_with(prefix)).collect()
    }

    #[test]
    fn launcher_states_are_one_series_per_process() {
        let states =
            vec![("m0".into(), "master".into(), "ready".into()), ("tx1".into(), "worker".into(), "unhealthy".into())];
        let text = render(&Published::test(State::Normal), &[], &Extra { states, ..Extra::default() });
        assert!(text.contains("# TYPE monitor_process_state gauge"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_process_state{"),
            [
                "monitor_process_state{process=\"m0\",role=\"master\",state=\"ready\"} 1",
                "monitor_process_state{process=\"tx1\",role=\"worker\",state=\"unhealthy\"} 1"
            ]
        );
        let none = render(&Published::test(State::Normal), &[], &Extra::default());
        assert!(!none.contains("monitor_process_state"), "no launcher, no family: {none}");
    }

    #[test]
    fn oom_kills_wakeups_brake_and_interval() {
        let p =
            Published::test(State::Normal).reacting(3, &["thresholds"], ("events", "cgroup v2 only"), 515_396_075, 20);
        let text = render(&p, &[], &Extra::default());
        assert!(text.contains("# TYPE monitor_oom_kills_total counter\nmonitor_oom_kills_total 3\n"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_wakeup_armed"),
            ["monitor_wakeup_armed{source=\"thresholds\"} 1", "monitor_wakeup_armed{source=\"events\"} 0"]
        );
        assert_eq!(lines_of(&text, "monitor_memory_high_bytes"), ["monitor_memory_high_bytes 515396075"]);
        assert_eq!(lines_of(&text, "monitor_sample_interval_seconds"), ["monitor_sample_interval_seconds 0.02"]);
        assert!(lines_of(&text, "monitor_reaction_seconds").is_empty(), "no reactions kept, no family");

        // A kernel without the count, no wake-up source, no brake (or one not set): the families are left out.
        let mut p = Published::test(State::Normal);
        p.brake = Some(
            serde_json::from_value(serde_json::json!({
                "at": 0.96, "high_bytes": null, "previous": "max", "error": "memory.high: permission denied"
            }))
            .expect("a brake status"),
        );
        let text = render(&p, &[], &Extra::default());
        for absent in ["monitor_oom_kills_total", "monitor_wakeup_armed", "monitor_memory_high_bytes"] {
            assert!(!text.contains(absent), "{absent} in:\n{text}");
        }
        assert_eq!(lines_of(&text, "monitor_sample_interval_seconds"), ["monitor_sample_interval_seconds 0.1"]);
    }

    /// Each route key's growth is a histogram per measure (exact, shared), with the requests at an abort counted.
    #[test]
    fn memory_per_request_is_a_histogram_per_route() {
        let g = crate::feed::growth::RouteGrowth::default();
        g.record("GET /heavy", 48 << 20, true, false);
        g.record("GET /heavy", 50 << 20, true, true);
        g.record("GET /heavy", 20 << 20, false, false);
        g.record("GET /light", 0, true, false);
        let extra = Extra { growth: Some(g.totals()), ..Extra::default() };
        let text = render(&Published::test(State::Normal), &[], &extra);
        assert!(text.contains("# TYPE monitor_request_memory_growth_bytes histogram\n"), "{text}");
        let exact =
            lines_of(&text, "monitor_request_memory_growth_bytes_bucket{route=\"GET /heavy\",measure=\"exact\"");
        assert_eq!(exact.len(), GROWTH_BOUNDS.len() + 1, "{text}");
        assert!(exact[4].ends_with("le=\"1.6777216e+07\"} 0"), "{exact:?}");
        assert!(exact[5].ends_with("le=\"6.7108864e+07\"} 2"), "{exact:?}");
        assert!(exact[8].ends_with("le=\"+Inf\"} 2"), "{exact:?}");
        let sum = "monitor_request_memory_growth_bytes_sum{route=\"GET /heavy\",measure=\"exact\"} 102760448.0\n";
        assert!(text.contains(sum), "{text}");
        assert!(text.contains("monitor_request_memory_growth_bytes_count{route=\"GET /heavy\",measure=\"shared\"} 1\n"));
        let light =
            lines_of(&text, "monitor_request_memory_growth_bytes_bucket{route=\"GET /light\",measure=\"exact\"");
        assert!(light[0].ends_with("le=\"65536\"} 1"), "{light:?}");
        assert!(text.contains("monitor_request_at_abort_total{route=\"GET /heavy\"} 1\n"), "{text}");
        assert!(text.contains("monitor_request_at_abort_total{route=\"GET /light\"} 0\n"));
        let none = render(&Published::test(State::Normal), &[], &Extra::default());
        assert!(!none.contains("monitor_request_"), "left out without a front door");
    }

    #[test]
    fn reaction_times_are_a_histogram_per_action() {
        let r = Reactions::new();
        r.record(Kind::Signal, Duration::from_micros(700));
        r.record(Kind::Signal, Duration::from_millis(12));
        r.record(Kind::Shed, Duration::from_secs(2));
        let extra = Extra { reactions: Kind::ALL.iter().map(|&k| (k, r.counts(k))).collect(), ..Extra::default() };
        let text = render(&Published::test(State::Normal), &[], &extra);
        assert!(text.contains("# TYPE monitor_reaction_seconds histogram\n"), "{text}");
        let signal = lines_of(&text, "monitor_reaction_seconds_bucket{action=\"signal\"");
        assert_eq!(signal.len(), BOUNDS_NS.len() + 1);
        assert_eq!(signal[0], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.0001\"} 0");
        assert_eq!(signal[3], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.001\"} 1");
        assert_eq!(signal[7], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"0.02\"} 2");
        assert_eq!(signal[12], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"1\"} 2");
        assert_eq!(signal[13], "monitor_reaction_seconds_bucket{action=\"signal\",le=\"+Inf\"} 2");
        assert!(text.contains("monitor_reaction_seconds_sum{action=\"signal\"} 0.0127\n"), "{text}");
        assert!(text.contains("monitor_reaction_seconds_count{action=\"signal\"} 2\n"));
        // Nothing posted yet: every bucket 0, still exported so rates work from the start.
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"post\",le=\"+Inf\"} 0\n"));
        // Above the last bound: only in +Inf.
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"shed\",le=\"1\"} 0\n"));
        assert!(text.contains("monitor_reaction_seconds_bucket{action=\"shed\",le=\"+Inf\"} 1\n"));
    }

    #[test]
    fn config_reloads_are_counted_by_result_where_they_are_kept() {
        let p = Published::test(State::Normal);
        let text = render(&p, &[], &Extra { reloads: Some((3, 1)), ..Extra::default() });
        assert_eq!(
            lines_of(&text, "monitor_config_reloads_total{"),
            ["monitor_config_reloads_total{result=\"ok\"} 3", "monitor_config_reloads_total{result=\"failed\"} 1"]
        );
        assert!(text.contains("# HELP monitor_config_reloads_total Config reloads (SIGHUP): ok applied"), "{text}");
        assert!(text.contains("# TYPE monitor_config_reloads_total counter\n"), "{text}");
        let text = render(&p, &[], &Extra::default());
        assert!(!text.contains("monitor_config_reloads_total"), "left out where no reload is counted: {text}");
    }

    #[test]
    fn build_lines_decisions_and_sample_age() {
        let mut p = Published::test(State::Refusing);
        p.snapshot.unix_ms = 1_000_000;
        let mut decisions = Decisions::default();
        for state in [State::Normal, State::Refusing, State::Normal, State::Refusing] {
            decisions.observe(&crate::decision::policy::Decision { state, ..p.decision.clone() });
        }
        let thresholds = Thresholds { refuse_at: 0.8, abort_at: 0.9, ..Thresholds::default() };
        let extra = Extra { thresholds, decisions, now_unix_ms: 1_002_500, ..Extra::default() };
        let text = render(&p, &[], &extra);
        let info = lines_of(&text, "monitor_build_info{");
        assert_eq!(info.len(), 1, "{text}");
        assert!(info[0].contains(&format!("version=\"{}\"", crate::sources::build::VERSION)), "{text}");
        assert!(info[0].contains("revision=\"") && info[0].ends_with("} 1"), "{text}");
        assert_eq!(lines_of(&text, "monitor_policy_state "), ["monitor_policy_state 1"]);
        assert_eq!(
            lines_of(&text, "monitor_policy_threshold_ratio{"),
            [
                "monitor_policy_threshold_ratio{line=\"refuse\"} 0.8",
                "monitor_policy_threshold_ratio{line=\"abort\"} 0.9"
            ]
        );
        assert_eq!(
            lines_of(&text, "monitor_policy_entered_total{state=\"refusing\"}"),
            ["monitor_policy_entered_total{state=\"refusing\"} 2"]
        );
        assert_eq!(lines_of(&text, "monitor_policy_victims_total "), ["monitor_policy_victims_total 0"]);
        assert_eq!(lines_of(&text, "monitor_sample_age_seconds "), ["monitor_sample_age_seconds 2.5"]);
        assert!(lines_of(&text, "monitor_memory_pressure").is_empty(), "no PSI, no family");
        p.snapshot.group.pressure = Some(crate::decision::snapshot::Pressure { some_us: 2_500_000, full_us: 1_000 });
        let text = render(&p, &[], &extra);
        assert_eq!(
            lines_of(&text, "monitor_memory_pressure_seconds_total{"),
            [
                "monitor_memory_pressure_seconds_total{kind=\"some\"} 2.5",
                "monitor_memory_pressure_seconds_total{kind=\"full\"} 0.001"
            ]
        );
    }

    #[test]
    fn guard_kills_by_name_shadow_failed_and_halted() {
        let mut p = Published::test(State::Aborting);
        p.snapshot.group.shmem_bytes = 4096;
        let text = render(&p, &[], &Extra::default());
        assert_eq!(lines_of(&text, "monitor_group_shmem_bytes "), ["monitor_group_shmem_bytes 4096"]);
        assert_eq!(lines_of(&text, "monitor_group_processes_unsampled "), ["monitor_group_processes_unsampled 0"]);
        assert_eq!(lines_of(&text, "monitor_guard_kills_halted "), ["monitor_guard_kills_halted 0"]);
        assert!(!text.contains("monitor_guard_kills_total"), "no book, no counters: {text}");
        assert!(!text.contains("monitor_guard_kills_failed_total"), "{text}");
        // A book with nothing killed yet: the shadow and failed counters start at 0, no series by name.
        let empty = Extra { kills: Some(KillCounts::default()), ..Extra::default() };
        let text = render(&p, &[], &empty);
        assert!(!text.contains("monitor_guard_kills_total"), "{text}");
        assert_eq!(lines_of(&text, "monitor_guard_kills_failed_total "), ["monitor_guard_kills_failed_total 0"]);
        let kills = KillCounts {
            by_name: [("tx\"1".to_string(), 2), ("tx2".to_string(), 1)].into_iter().collect(),
            not_enforced: 3,
            failed: 1,
            recycled_by_name: [("tx2".to_string(), 1)].into_iter().collect(),
        };
        p.decision.kills_halted = true;
        let text = render(&p, &[], &Extra { kills: Some(kills), ..Extra::default() });
        assert!(text.contains("# TYPE monitor_guard_kills_total counter\n"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_guard_kills_total{"),
            ["monitor_guard_kills_total{process=\"tx\\\"1\"} 2", "monitor_guard_kills_total{process=\"tx2\"} 1"]
        );
        assert_eq!(
            lines_of(&text, "monitor_guard_kills_not_enforced_total "),
            ["monitor_guard_kills_not_enforced_total 3"]
        );
        assert_eq!(lines_of(&text, "monitor_guard_kills_failed_total "), ["monitor_guard_kills_failed_total 1"]);
        assert_eq!(lines_of(&text, "monitor_guard_kills_halted "), ["monitor_guard_kills_halted 1"]);
        assert!(text.contains("# TYPE monitor_guard_recycles_total counter\n"), "{text}");
        assert_eq!(
            lines_of(&text, "monitor_guard_recycles_total{"),
            ["monitor_guard_recycles_total{process=\"tx2\"} 1"]
        );
        assert!(!render(&p, &[], &empty).contains("monitor_guard_recycles_total"), "no recycle, no series");
    }

    #[test]
    fn hostile_label_values_are_escaped() {
        // A process name with a double quote, a backslash and a newline stays one line, its value escaped.
        let text = one_process("tx\"1\\a\nb", "wor\"ker", &[]);
        let labels = "process=\"tx\\\"1\\\\a\\nb\",role=\"wor\\\"ker\"";
        assert_eq!(
            lines_of(&text, "monitor_process_resident_memory_bytes{"),
            [format!("monitor_process_resident_memory_bytes{{{labels}}} 4096")]
        );
        assert_eq!(
            lines_of(&text, "monitor_process_restarts_total{"),
            [format!("monitor_process_restarts_total{{{labels}}} 0")]
        );
        assert!(text.lines().all(|l| l.starts_with('#') || l.starts_with("monitor_")), "a line was split:\n{text}");
    }

    #[test]
    fn every_process_has_its_series() {
        let text = one_process("tx1", "worker", &[]);
        let l = "process=\"tx1\",role=\"worker\"";
        for line in [
            format!("monitor_process_resident_memory_bytes{{{l}}} 4096"),
            format!("monitor_process_anon_memory_bytes{{{l}}} 1024"),
            format!("monitor_http_requests_total{{{l}}} 5"),
            format!("monitor_http_requests_in_flight{{{l}}} 0"),
            format!("monitor_http_responses_total{{{l},class=\"2xx\"}} 4"),
            format!("monitor_http_responses_total{{{l},class=\"5xx\"}} 1"),
            "# TYPE monitor_http_requests_total counter".to_string(),
            "# TYPE monitor_http_request_duration_seconds histogram".to_string(),
        ] {
            assert!(text.lines().any(|x| x == line), "{line:?} not in\n{text}");
        }
        assert_eq!(lines_of(&text, "monitor_http_responses_total{").len(), 5, "{text}");
    }

    #[test]
    fn histogram_buckets_are_cumulative() {
        let text = one_process("p", "worker", &[1, 0, 2]);
        let name = "monitor_http_request_duration_seconds";
        assert_eq!(
            lines_of(&text, name),
            [
                format!("{name}_bucket{{process=\"p\",role=\"worker\",le=\"2e-06\"}} 1"),
                // 4 µs is not exported: the next bound is 8 µs, which holds all three.
                format!("{name}_bucket{{process=\"p\",role=\"worker\",le=\"8e-06\"}} 3"),
                format!("{name}_bucket{{process=\"p\",role=\"worker\",le=\"+Inf\"}} 3"),
                // From the buckets' midpoints: 1 × 1.5 µs + 2 × 6 µs.
                format!("{name}_sum{{process=\"p\",role=\"worker\"}} 0.0000135"),
                format!("{name}_count{{process=\"p\",role=\"worker\"}} 3"),
            ]
        );
        // The 32 log2 buckets a probe keeps become 13 bounds and +Inf; a latency past 33.6 s is in +Inf only.
        let mut full = [0u64; 32];
        full[31] = 1;
        let text = one_process("p", "worker", &full);
        let buckets = lines_of(&text, "monitor_http_request_duration_seconds_bucket");
        assert_eq!(buckets.len(), 14, "{text}");
        assert!(buckets[6].contains("le=\"0.008192\"} 0"), "{text}");
        assert!(buckets[12].contains("le=\"33.554432\"} 0"), "{text}");
        assert!(buckets[13].ends_with("le=\"+Inf\"} 1"), "{text}");
    }
}
