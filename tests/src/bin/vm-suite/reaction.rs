//! Reacting before the kernel's OOM killer with what only cgroup v2 has: the memory brake set on `memory.high` and
//! put back after SIGTERM and after SIGKILL (by the next agent), and the reaction still coming with each of v2's
//! wake-up sources (`memory.events`, PSI) disarmed. The full-speed grower, the stubborn one and the OOM count run
//! on v2 as the host's own tests (tests/tests/reaction, tests/tests/agent/oom_kills.rs).

use crate::support::*;
use monitor_tests::agent::free_port;
use monitor_tests::cgroup2::CgroupV2;
use monitor_tests::config::{strings, Config};
use monitor_tests::reaction::{timing, Grower, GrowerReport, Outcome, Timing};
use monitor_tests::{wait_until, Agent, Hog, MIB};
use serde_json::Value;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitStatus;
use std::time::Duration;

/// The group of the grower tests.
const LIMIT: u64 = 512 * MIB;
/// How long one grower may run before it counts as hung (it grows for seconds at most, even emulated).
const RUN_TIMEOUT: Duration = Duration::from_secs(30);

/// `monitor agent` on `cg` with `config` and nothing else set: the default interval and policy.
fn agent_with(cg: &CgroupV2, name: &str, config: Config) -> Agent {
    let file = config.write(std::env::temp_dir().join(format!("vm-suite-reaction-{name}.toml")));
    let port = free_port();
    let args = ["agent", "--cgroup", &cg.path().display().to_string(), "--listen", &format!("127.0.0.1:{port}")]
        .into_iter()
        .map(String::from)
        .chain(["--config".to_string(), file.display().to_string()])
        .collect();
    Agent::start_args(args, port)
}

/// The abort signal the grower frees its memory on.
fn abort() -> Config {
    Config::new().set("actions", "abort_signal", "SIGUSR2")
}

/// What a grower run gave: how it ended and its closing report (none when it was killed).
struct Run {
    status: ExitStatus,
    report: Option<GrowerReport>,
}

/// Starts `grower <args…>` in `cg`, tells it to go, and waits for it to end (signalled and freed, or killed); a
/// grower still holding its memory after [`RUN_TIMEOUT`] is told to end and reports that it was never signalled.
fn grow(cg: &CgroupV2, args: &[&str]) -> Run {
    let mut g = Grower::spawn_args(&bin_dir().join("grower"), cg.path(), args).unwrap_or_else(|e| panic!("{e}"));
    g.start().unwrap_or_else(|e| panic!("{e}"));
    let outcome = g.finish(RUN_TIMEOUT).unwrap_or_else(|e| panic!("{e}"));
    let pid = g.child.pid();
    let status = g.child.wait_timeout(Duration::from_secs(10));
    let status = status.unwrap_or_else(|| panic!("grower {pid} did not exit after its report: {outcome:?}"));
    let report = match outcome {
        Outcome::Report(r) => Some(r),
        Outcome::Died(_) => None,
    };
    Run { status, report }
}

impl Run {
    fn signal_ns(&self) -> Option<u64> {
        self.report.as_ref().and_then(|r| r.signal_ns)
    }

    fn peak_bytes(&self) -> u64 {
        self.report.as_ref().map_or(0, |r| r.peak_bytes)
    }

    /// What the grower's stamps say of the signal against `line`, with `base` bytes in the group besides it.
    fn timing(&self, base: u64, line: u64) -> Option<Timing> {
        timing(self.report.as_ref()?, base, line)
    }

    /// The growth rate up to the signal, MiB/s.
    fn rate_mib_s(&self) -> f64 {
        self.timing(0, u64::MAX).and_then(|t| t.rate_bytes_s).map_or(0.0, |r| r / MIB as f64)
    }
}

/// Asserts the grower was signalled and freed its memory, and the kernel killed nothing in the group.
fn assert_signalled_not_killed(cg: &CgroupV2, out: &Run, what: &str) {
    let events = cg.read("memory.events");
    assert!(
        out.status.success() && out.signal_ns().is_some(),
        "{what}: the grower ended with {} (signal_ns {:?}, peak {} MiB); memory.events: {events}",
        out.status,
        out.signal_ns(),
        out.peak_bytes() / MIB
    );
    assert_eq!(cg.oom_kills(), 0, "{what}: memory.events: {events}");
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
    let config = Config::new().set("policy", "brake_at", 0.96);
    let high_is = |want: &str| {
        let (want, cg) = (want.to_string(), &cg);
        move || (cg.read("memory.high").trim() == want).then_some(())
    };

    let agent = agent_with(&cg, "brake", config.clone());
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

    let agent = agent_with(&cg, "nobrake", Config::new());
    wait_until("the next agent to put memory.high back", SETTLE, high_is("max"));
    assert_eq!(brake_record(&cg), None, "record left after recovery");
    let s = agent.status();
    assert!(s["group"]["brake"].is_null(), "no brake configured, yet group.brake: {s:#}");
    assert_eq!(cg.read("memory.max").trim(), LIMIT.to_string(), "memory.max touched");
}

/// With `events` off, `pressure` off, and both off (`wakeups = []`), a grower at 100 MiB/s in a 256 MiB group is
/// still signalled before the limit, and `group.wakeups` lists exactly the sources left on.
pub fn each_wakeup_source_disarmed_still_reacts() {
    for (name, armed) in [("events-off", &["pressure"][..]), ("pressure-off", &["events"][..]), ("none", &[][..])] {
        let cg = CgroupV2::create(name, Some(256 * MIB));
        let agent = agent_with(&cg, name, abort().set("policy", "wakeups", strings(armed)));
        let s = agent.status();
        let listed: Vec<&str> =
            s["group"]["wakeups"].as_array().map(|a| a.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
        assert_eq!(listed, armed, "{name}: group.wakeups: {s:#}");
        let out = grow(&cg, &["--rate-mib-s", "100", "--max-mib", "400"]);
        assert_signalled_not_killed(&cg, &out, name);
        println!("{name}: {:.0} MiB/s, signalled at {} MiB held", out.rate_mib_s(), out.peak_bytes() / MIB);
    }
}
