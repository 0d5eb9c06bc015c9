//! Loading the probes and reading what they counted: the per-tgid traffic summed over a server's processes and
//! compared with what the clients sent (`monitor_tests::clients::Sent`), waiting for the kernel's last exits.

use monitor::decision::snapshot::Traffic;
use monitor::sources::probes::{CloseHook, Hooks, Probes};
use monitor_tests::clients::Sent;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// Loads and attaches the probes, panicking with the reason (the object must be built for these tests).
/// `PROBES_HOOKS=sock` (or `raw`, or `tracepoints`) forces one set of hooks, so the exact-count tests cover all;
/// `raw_close` is `raw` with `close` on the raw `sys_enter` (what a host refusing the `close` tracepoint runs).
pub fn load_probes() -> Probes {
    let p = match std::env::var("PROBES_HOOKS").as_deref() {
        Ok("tracepoints") => return load_probes_with(Hooks::Tracepoints),
        Ok("raw") => return load_probes_with(Hooks::RawSysExit),
        Ok("raw_close") => return load_probes_raw_close(),
        Ok("sock") => return load_probes_with(Hooks::Sock),
        Ok(other) => panic!("PROBES_HOOKS={other}: expected `sock`, `raw`, `raw_close` or `tracepoints`"),
        Err(_) => Probes::load(),
    };
    match p {
        Ok(p) => {
            eprintln!("probes attached with {:?}", p.hooks());
            p
        }
        Err(e) => panic!("Probes::load: {e} (build the object with `cargo xtask setup`)"),
    }
}

/// Loads and attaches the probes on the given hooks (no fallback), panicking with the reason.
pub fn load_probes_with(hooks: Hooks) -> Probes {
    match Probes::load_with(hooks) {
        Ok(p) => p,
        Err(e) => panic!("Probes::load_with({hooks:?}): {e} (build the object with `cargo xtask setup`)"),
    }
}

/// Loads the raw `sys_exit` set with `close` on the raw `sys_enter` tracepoint, panicking with the reason.
pub fn load_probes_raw_close() -> Probes {
    match Probes::load_with_close(Hooks::RawSysExit, CloseHook::RawSysEnter) {
        Ok(p) => p,
        Err(e) => {
            panic!("Probes::load_with_close(RawSysExit, RawSysEnter): {e} (build the object with `cargo xtask setup`)")
        }
    }
}

/// Accepts counted for one connection opened while the probes ran but accepted before its process was traced:
/// the socket programs learn of the connection when it opens and count the accept at the process's first traced
/// read or write on it (1); the syscall hooks count at `accept`, which ran untraced (0).
pub fn late_accepts(probes: &Probes) -> u64 {
    u64::from(probes.hooks() == Hooks::Sock)
}

/// Sums the traffic of several tgids (nginx workers).
pub fn total(m: &HashMap<u32, Traffic>, pids: &[u32]) -> Traffic {
    let mut t = Traffic::default();
    for p in pids {
        if let Some(x) = m.get(p) {
            t.accepts_total += x.accepts_total;
            t.requests_total += x.requests_total;
            t.responses_total += x.responses_total;
            for i in 0..5 {
                t.responses_by_class[i] += x.responses_by_class[i];
            }
            t.inflight += x.inflight;
            t.bytes_in += x.bytes_in;
            t.bytes_out += x.bytes_out;
            t.latency_hist_us.resize(x.latency_hist_us.len().max(t.latency_hist_us.len()), 0);
            for (a, b) in t.latency_hist_us.iter_mut().zip(&x.latency_hist_us) {
                *a += b;
            }
        }
    }
    if let Ok(h) = <[u64; monitor_common::stats::HIST_BUCKETS]>::try_from(t.latency_hist_us.as_slice()) {
        t.latency_p50_us = monitor::sources::probes::percentile(&h, 0.5);
        t.latency_p99_us = monitor::sources::probes::percentile(&h, 0.99);
    }
    t
}

/// The counts the test compares: (accepts, requests, responses, by class).
pub fn counts(t: &Traffic) -> (u64, u64, u64, [u64; 5]) {
    (t.accepts_total, t.requests_total, t.responses_total, t.responses_by_class)
}

/// Reads the probes until the summed counts of `pids` equal `want` (bounded: the server's exit tracepoint may
/// run just after the client saw the response), then once more after a pause to be sure nothing more arrives.
/// Returns the final summed traffic; panics with both sides when they differ.
pub fn assert_counts(probes: &mut Probes, pids: &[u32], want: &Sent, what: &str) -> Traffic {
    let want = (want.connects, want.requests, want.responses(), want.by_class);
    poll_total(probes, pids, |t| counts(t) == want);
    std::thread::sleep(Duration::from_millis(300));
    let got = total(&read(probes), pids);
    assert_eq!(counts(&got), want, "{what}: (accepts, requests, responses, by class) counted vs sent");
    // Every final response here answers a request read on its socket: one latency each.
    let latencies: u64 = got.latency_hist_us.iter().sum();
    assert_eq!(latencies, got.responses_total, "{what}: latencies recorded vs final responses");
    eprintln!(
        "{what}: counted {:?} as sent; in-flight {}, latencies {} (p50 {:?} µs, p99 {:?} µs)",
        counts(&got),
        got.inflight,
        got.latency_hist_us.iter().sum::<u64>(),
        got.latency_p50_us,
        got.latency_p99_us
    );
    got
}

/// The summed traffic of `pids`, read every 20 ms until `done` holds of it or 5 s have passed; the last read.
pub fn poll_total(probes: &mut Probes, pids: &[u32], done: impl Fn(&Traffic) -> bool) -> Traffic {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = total(&read(probes), pids);
        if done(&got) || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Like [`poll_total`], but panics with `what` when `done` does not hold within the 5 s.
pub fn wait_total(probes: &mut Probes, pids: &[u32], what: &str, done: impl Fn(&Traffic) -> bool) -> Traffic {
    let got = poll_total(probes, pids, &done);
    assert!(done(&got), "{what}: not within 5 s: {got:?}");
    got
}

/// Every traced tgid's traffic now.
pub fn read(probes: &mut Probes) -> HashMap<u32, Traffic> {
    match probes.read() {
        Ok(m) => m,
        Err(e) => panic!("probes.read: {e}"),
    }
}

/// Makes `pids` the traced set.
pub fn sync(probes: &mut Probes, pids: &[u32]) {
    if let Err(e) = probes.sync_pids(pids) {
        panic!("sync_pids({pids:?}): {e}");
    }
}
