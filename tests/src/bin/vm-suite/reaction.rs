//! Reacting before the kernel's OOM killer on real cgroup v2 groups: a grower at full speed signalled before the
//! limit, run after run; the memory brake set on `memory.high` and put back after SIGTERM and after SIGKILL (by
//! the next agent); a grower that ignores the signal counted as an OOM kill; and the reaction still coming with
//! each kernel wake-up source disarmed.

use crate::support::*;
use monitor_tests::agent::free_port;
use monitor_tests::cgroup::parse_stat;
use monitor_tests::cgroup2::CgroupV2;
use monitor_tests::{spawn_in_cgroup, wait_until, Agent, ChildGuard, Hog, MIB};
use serde_json::Value;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

/// The group of the grower tests.
const LIMIT: u64 = 512 * MIB;
/// Runs of the full-speed grower; every one must be signalled before the limit.
const RUNS: usize = 20;
/// How long one grower may run before it counts as hung (it grows for seconds at most, even emulated).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);
/// The abort signal the grower frees its memory on.
const ABORT: &str = "[actions]\nabort_signal = \"SIGUSR2\"\n";

/// `monitor agent` on `cg` with `config` (TOML) and nothing else set: the default interval and policy.
fn agent_with(cg: &CgroupV2, name: &str, config: &str) -> Agent {
    let file = std::env::temp_dir().join(format!("vm-suite-reaction-{name}.toml"));
    std::fs::write(&file, config).unwrap_or_else(|e| panic!("write {}: {e}", file.display()));
    let port = free_port();
    let args = ["agent", "--cgroup", &cg.path().display().to_string(), "--listen", &format!("127.0.0.1:{port}")]
        .into_iter()
        .map(String::from)
        .chain(["--config".to_string(), file.display().to_string()])
        .collect();
    Agent::start_args(args, port)
}

/// The kernel's count of OOM kills in the group (`memory.events oom_kill`).
fn oom_kills(cg: &CgroupV2) -> u64 {
    let events = cg.read("memory.events");
    parse_stat(&events, "oom_kill").unwrap_or_else(|| panic!("no oom_kill in memory.events: {events}"))
}

/// What a grower run gave (its closing JSON line).
struct Outcome {
    status: ExitStatus,
    signal_ns: Option<u64>,
    peak_bytes: u64,
    /// (CLOCK_MONOTONIC ns, bytes held) after each chunk.
    chunks: Vec<(u64, u64)>,
}

/// A running `grower` in a group, started by [`Grower::go`]; killed on drop.
struct Grower {
    child: ChildGuard,
    stdin: Option<ChildStdin>,
    rest: Option<JoinHandle<String>>,
}

impl Grower {
    /// Starts `grower <args…>` in `cg` and waits for its `ready` line.
    fn start(cg: &CgroupV2, args: &[&str]) -> Grower {
        let mut cmd = Command::new(bin_dir().join("grower"));
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let mut child = spawn_in_cgroup(&mut cmd, cg.path());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            panic!("grower started without pipes");
        };
        let mut out = BufReader::new(stdout);
        let mut line = String::new();
        match out.read_line(&mut line) {
            Ok(n) if n > 0 && line.starts_with("ready ") => {}
            r => panic!("grower {}: expected `ready <pid>`, got {line:?} ({r:?})", child.pid()),
        }
        let rest = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        Grower { child, stdin: Some(stdin), rest: Some(rest) }
    }

    fn go(&mut self) {
        let pid = self.child.pid();
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("grower {pid} has no stdin"));
        if let Err(e) = writeln!(stdin, "go").and_then(|()| stdin.flush()) {
            panic!("grower {pid}: cannot start it: {e}");
        }
    }

    /// Waits for the grower to end (signalled and freed, or killed); panics after [`RUN_TIMEOUT`].
    fn finish(mut self) -> Outcome {
        let pid = self.child.pid();
        let Some(status) = self.child.wait_timeout(RUN_TIMEOUT) else {
            // Closing stdin ends a grower holding its memory; its line then says whether it was ever signalled.
            self.stdin = None;
            let status = self.child.wait_timeout(Duration::from_secs(5));
            let text = self.rest.take().filter(|_| status.is_some()).and_then(|r| r.join().ok()).unwrap_or_default();
            panic!("grower {pid} still running after {RUN_TIMEOUT:?} (then {status:?}); its output: {text}");
        };
        let text = self.rest.take().and_then(|r| r.join().ok()).unwrap_or_default();
        let report = text.lines().rev().find_map(|l| serde_json::from_str::<Value>(l).ok());
        let Some(report) = report else {
            return Outcome { status, signal_ns: None, peak_bytes: 0, chunks: Vec::new() };
        };
        let chunks = report["chunks"]
            .as_array()
            .map(|c| c.iter().filter_map(|p| Some((p.get(0)?.as_u64()?, p.get(1)?.as_u64()?))).collect())
            .unwrap_or_default();
        Outcome {
            status,
            signal_ns: report["signal_ns"].as_u64(),
            peak_bytes: report["peak_bytes"].as_u64().unwrap_or(0),
            chunks,
        }
    }
}

impl Outcome {
    /// The growth rate in MiB/s over the run.
    fn rate_mib_s(&self) -> f64 {
        match (self.chunks.first(), self.chunks.last()) {
            (Some(a), Some(b)) if b.0 > a.0 => (b.1 - a.1) as f64 / MIB as f64 / ((b.0 - a.0) as f64 / 1e9),
            _ => 0.0,
        }
    }

    /// Milliseconds from the first chunk that took the group (with `base` bytes besides the grower) over `line`
    /// to the signal's arrival (negative: signalled before the chunk was stamped).
    fn line_to_signal_ms(&self, base: u64, line: u64) -> Option<f64> {
        let crossed = self.chunks.iter().find(|(_, b)| base + b >= line)?.0;
        Some((self.signal_ns? as f64 - crossed as f64) / 1e6)
    }
}

/// Asserts the grower was signalled and freed its memory, and the kernel killed nothing in the group.
fn assert_signalled_not_killed(cg: &CgroupV2, out: &Outcome, what: &str) {
    let events = cg.read("memory.events");
    assert!(
        out.status.success() && out.signal_ns.is_some(),
        "{what}: the grower ended with {} (signal_ns {:?}, peak {} MiB); memory.events: {events}",
        out.status,
        out.signal_ns,
        out.peak_bytes / MIB
    );
    assert_eq!(oom_kills(cg), 0, "{what}: memory.events: {events}");
}

/// A 512 MiB group with two 40 MiB bystanders, the agent with its defaults and `abort_signal = "SIGUSR2"`, and a
/// grower at full speed up to 700 MiB: in every run the grower is signalled (it frees everything and exits 0)
/// and the kernel kills nothing.
pub fn fast_grower_signalled_before_the_limit() {
    let cg = CgroupV2::create("fast", Some(LIMIT));
    let bystanders: Vec<Hog> = (0..2).map(|_| Hog::spawn(hog_bin(), cg.path(), 40, false)).collect();
    let agent = agent_with(&cg, "fast", ABORT);
    let s = wait_usage_matches(&agent, &bystanders);
    println!("armed wake-ups: {}, next sample in {} ms", s["group"]["wakeups"], s["group"]["next_sample_ms"]);
    let mut lags = Vec::new();
    for run in 1..=RUNS {
        let base = cg.stat("anon").unwrap_or(0);
        let mut g = Grower::start(&cg, &["--max-mib", "700"]);
        g.go();
        let out = g.finish();
        assert_signalled_not_killed(&cg, &out, &format!("run {run} of {RUNS}"));
        let lag = out.line_to_signal_ms(base, LIMIT * 92 / 100);
        println!(
            "run {run}: {:.0} MiB/s, signalled at {} MiB held ({} MiB in the group before), 92% to signal {}",
            out.rate_mib_s(),
            out.peak_bytes / MIB,
            base / MIB,
            lag.map_or("-".into(), |l| format!("{l:.1} ms"))
        );
        lags.extend(lag);
        // Back to normal before the next run, so each one starts from the same place.
        agent.wait_for(|s| state(s) == Some("normal"), SETTLE);
    }
    lags.sort_by(f64::total_cmp);
    if let (Some(first), Some(mid), Some(last)) = (lags.first(), lags.get(lags.len() / 2), lags.last()) {
        println!("92% to signal, {} runs: min {first:.1} ms, median {mid:.1} ms, max {last:.1} ms", lags.len());
    }
}

/// The record the brake keeps on the group's directory (`user.monitor.brake`), if any.
fn brake_record(cg: &CgroupV2) -> Option<String> {
    let path = CString::new(cg.path().as_os_str().as_bytes()).unwrap_or_default();
    let mut buf = [0u8; 256];
    // SAFETY: both names are NUL-terminated C strings; buf is writable for buf.len() bytes.
    let n =
        unsafe { libc::getxattr(path.as_ptr(), c"user.monitor.brake".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Sends `sig` to the agent and, for SIGTERM, waits until it has exited (a zombie, as its parent has not reaped it).
fn signal_agent(agent: &Agent, sig: i32) {
    let pid = agent.pid();
    // SAFETY: kill has no memory preconditions; the pid is our own child, not reaped yet.
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
    wait_until(&format!("agent {pid} to exit on signal {sig}"), SETTLE, || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        matches!(stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()), None | Some('Z')).then_some(())
    });
}

/// `[policy] brake_at = 0.96` on a 512 MiB group: `memory.high` is floor(0.96 × 512 MiB) rounded down to a page
/// while the agent runs, and `max` again after its SIGTERM; after its SIGKILL the braked value stays (with its
/// record), and the next agent, started without the brake, puts `max` back as it starts.
pub fn brake_set_and_restored() {
    let cg = CgroupV2::create("brake", Some(LIMIT));
    let hog = Hog::spawn(hog_bin(), cg.path(), 20, false);
    assert_eq!(cg.read("memory.high").trim(), "max");
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let braked = (0.96 * LIMIT as f64).floor() as u64 / page * page;
    let config = "[policy]\nbrake_at = 0.96\n";
    let high_is = |want: &str| {
        let (want, cg) = (want.to_string(), &cg);
        move || (cg.read("memory.high").trim() == want).then_some(())
    };

    let agent = agent_with(&cg, "brake", config);
    wait_until("memory.high at the brake", SETTLE, high_is(&braked.to_string()));
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog));
    let brake = &s["group"]["brake"];
    assert_eq!(brake["high_bytes"].as_u64(), Some(braked), "group.brake: {s:#}");
    assert_eq!(brake["previous"].as_str(), Some("max"), "group.brake: {s:#}");
    assert_eq!(brake["at"].as_f64(), Some(0.96), "group.brake: {s:#}");
    assert!(brake["error"].is_null(), "group.brake: {s:#}");
    assert_eq!(u64_at(&s, "/group/limit_bytes"), LIMIT, "memory.high is not the limit: {s:#}");
    assert_eq!(cg.read("memory.max").trim(), LIMIT.to_string(), "memory.max touched");
    assert_eq!(brake_record(&cg), Some(format!("previous=max set={braked}")));

    signal_agent(&agent, libc::SIGTERM);
    assert_eq!(cg.read("memory.high").trim(), "max", "after SIGTERM; agent stderr:\n{}", agent.stderr());
    assert_eq!(brake_record(&cg), None, "record left after SIGTERM");
    drop(agent);

    let agent = agent_with(&cg, "brake", config);
    wait_until("memory.high at the brake again", SETTLE, high_is(&braked.to_string()));
    signal_agent(&agent, libc::SIGKILL);
    drop(agent);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(cg.read("memory.high").trim(), braked.to_string(), "nothing runs after SIGKILL");
    assert_eq!(brake_record(&cg), Some(format!("previous=max set={braked}")));

    let agent = agent_with(&cg, "nobrake", "");
    wait_until("the next agent to put memory.high back", SETTLE, high_is("max"));
    assert_eq!(brake_record(&cg), None, "record left after recovery");
    let s = agent.status();
    assert!(s["group"]["brake"].is_null(), "no brake configured, yet group.brake: {s:#}");
    assert_eq!(cg.read("memory.max").trim(), LIMIT.to_string(), "memory.max touched");
}

/// A grower that ignores the abort signal in a 256 MiB group is killed by the kernel at the limit; the agent's
/// `group.oom_kills` goes from 0 to 1.
pub fn grower_ignoring_the_signal_is_counted() {
    let cg = CgroupV2::create("oom", Some(256 * MIB));
    let agent = agent_with(&cg, "oom", ABORT);
    agent.wait_for(|s| s.pointer("/group/oom_kills").and_then(Value::as_u64) == Some(0), SETTLE);
    let mut g = Grower::start(&cg, &["--max-mib", "400", "--ignore-signal"]);
    g.go();
    let out = g.finish();
    let events = cg.read("memory.events");
    assert_eq!(out.status.signal(), Some(libc::SIGKILL), "grower ended with {}; memory.events: {events}", out.status);
    assert_eq!(oom_kills(&cg), 1, "memory.events: {events}");
    let s = agent.wait_for(|s| s.pointer("/group/oom_kills").and_then(Value::as_u64) == Some(1), SETTLE);
    assert!(s.pointer("/group/error").is_none_or(Value::is_null), "{s:#}");
}

/// With `events` off, `pressure` off, and both off (`wakeups = []`), a grower at 100 MiB/s in a 256 MiB group is
/// still signalled before the limit, and `group.wakeups` lists exactly the sources left on.
pub fn each_wakeup_source_disarmed_still_reacts() {
    for (name, wakeups, armed) in [
        ("events-off", r#"["pressure"]"#, &["pressure"][..]),
        ("pressure-off", r#"["events"]"#, &["events"][..]),
        ("none", "[]", &[][..]),
    ] {
        let cg = CgroupV2::create(name, Some(256 * MIB));
        let agent = agent_with(&cg, name, &format!("[policy]\nwakeups = {wakeups}\n{ABORT}"));
        let s = agent.status();
        let listed: Vec<&str> =
            s["group"]["wakeups"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        assert_eq!(listed, armed, "{name}: group.wakeups: {s:#}");
        let mut g = Grower::start(&cg, &["--rate-mib-s", "100", "--max-mib", "400"]);
        g.go();
        let out = g.finish();
        assert_signalled_not_killed(&cg, &out, name);
        println!("{name}: {:.0} MiB/s, signalled at {} MiB held", out.rate_mib_s(), out.peak_bytes / MIB);
    }
}
