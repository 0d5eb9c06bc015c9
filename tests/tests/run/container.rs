//! `monitor run` as a container's entrypoint, in a container made the way a runtime makes one: new PID, mount and
//! cgroup namespaces (`unshare --cgroup --pid --mount --fork --mount-proc`) entered from a memory group of the
//! test's with its limit, and the cgroup filesystem mounted anew inside, so that the namespace's root is the
//! container's group. monitor is PID 1 there:
//! - with `cgroup = "auto"` the group is the namespace's, with the container's limit, and monitor is a member of it;
//! - the orphans a start-up shell leaves behind are reaped as they exit (the kernel hands them to PID 1, as it hands
//!   them to monitor outside a container, where it asks to be their reaper);
//! - the probes, which would count by the kernel's pids, are off, with the reason;
//! - SIGTERM drains and exits 0;
//! - a group of its own under the container's is refused on cgroup v2, where the kernel forbids it, with a message
//!   that names `auto`; v1 has no such rule and makes it.

use monitor_tests::agent::{free_port, process};
use monitor_tests::config::Process;
use monitor_tests::group::Hierarchy;
use monitor_tests::run::{launcher, processes, Launched, Run, Spec};
use monitor_tests::{pace, require_group, require_program, Group, MIB};
use std::time::{Duration, Instant};

/// Mounts the cgroup filesystem inside the new namespaces as a runtime does (cgroup2 at /sys/fs/cgroup; on a v1
/// host a tmpfs there with the memory hierarchy under it), then runs the rest of its arguments. A runtime mounts on
/// the container's own root filesystem; here the host's mount is covered with a tmpfs first (the kernel refuses a
/// second cgroup2 mount right on top of the first).
const MOUNT_CGROUPS: &str = "set -e
if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
  mount -t tmpfs cgroup /sys/fs/cgroup
  mount -t cgroup2 cgroup2 /sys/fs/cgroup
else
  mount -t tmpfs cgroup /sys/fs/cgroup
  mkdir /sys/fs/cgroup/memory
  mount -t cgroup -o memory cgroup /sys/fs/cgroup/memory
fi
exec \"$0\" \"$@\"";

fn container() -> Vec<String> {
    ["unshare", "--cgroup", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c", MOUNT_CGROUPS]
        .map(String::from)
        .to_vec()
}

/// The group's directory as the container sees it.
fn namespace_root() -> &'static str {
    match Hierarchy::here() {
        Ok(Hierarchy::V2) => "/sys/fs/cgroup",
        _ => "/sys/fs/cgroup/memory",
    }
}

/// The children of `pid` (pids as this test sees them).
fn children(pid: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|text| text.split_ascii_whitespace().filter_map(|p| p.parse().ok()).collect::<Vec<u32>>())
        .collect()
}

/// `pid`'s command name and state letter.
fn comm_and_state(pid: u32) -> Option<(String, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = stat.rsplit_once(')')?;
    let comm = head.split_once('(')?.1.to_string();
    Some((comm, rest.trim_start().chars().next()?))
}

/// The container's PID 1 (monitor), as this test sees it: unshare's only child.
fn pid_one(run: &Launched) -> u32 {
    let kids = children(run.pid());
    assert_eq!(kids.len(), 1, "unshare has one child, the container's PID 1: {kids:?}");
    kids[0]
}

fn sigterm(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        // SAFETY: kill has no memory-safety preconditions; the pid is the container's PID 1, which this test started.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
}

/// A master whose start-up shell leaves five sleeps behind, orphans that outlive it by `lasting` seconds.
fn master_leaving_orphans(port: u16, lasting: u32) -> Vec<String> {
    let mut master = Process::fixture_on("m0", "master", port).command;
    let script = format!("for i in 1 2 3 4 5; do (sleep {lasting} &); done; exec \"$0\" \"$@\"");
    master.splice(0..0, ["sh".to_string(), "-c".into(), script]);
    master
}

/// The five orphans are `monitor`'s children now, and once they exit they are reaped: gone, not zombies.
fn orphans_are_reaped(run: &Launched, monitor: u32, lasting: u32) {
    let orphans: Vec<u32> = children(monitor)
        .into_iter()
        .filter(|&p| comm_and_state(p).is_some_and(|(comm, state)| comm == "sleep" && state != 'Z'))
        .collect();
    assert_eq!(orphans.len(), 5, "the start-up shell's orphans are monitor's: {:?}", children(monitor));
    let deadline = Instant::now() + pace::scaled(Duration::from_secs(u64::from(lasting) + 10));
    loop {
        let left: Vec<_> = orphans.iter().filter_map(|&p| Some((p, comm_and_state(p)?))).collect();
        if left.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "orphans not reaped: {left:?}\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
    let zombies: Vec<u32> =
        children(monitor).into_iter().filter(|&p| comm_and_state(p).is_some_and(|(_, s)| s == 'Z')).collect();
    assert!(zombies.is_empty(), "zombies under monitor: {zombies:?}");
}

#[test]
fn as_pid_1_in_a_cgroup_namespace_auto_is_the_container_and_orphans_are_reaped() {
    let test = "as_pid_1_in_a_cgroup_namespace_auto_is_the_container_and_orphans_are_reaped";
    if !require_group(test) || !require_program(test, "unshare") {
        return;
    }
    let lasting = 5 * pace::stretch();
    let port = free_port();
    let spec = Spec {
        workers: 2,
        limit_mib: 256,
        own_group: true,
        probes: true,
        wrapper: container(),
        master_port: Some(port),
        master_command: Some(master_leaving_orphans(port, lasting)),
        ..Spec::default()
    };
    let mut run = Run::start("container", &spec);
    let monitor = pid_one(&run);
    assert_eq!(comm_and_state(monitor).map(|c| c.0).as_deref(), Some("monitor"), "PID 1 is monitor");

    let st = run.status();
    assert_eq!(st["group"]["cgroup"], namespace_root(), "auto is the container's group: {}", st["group"]);
    assert_eq!(st["group"]["limit_bytes"], 256 * MIB, "the container's limit: {}", st["group"]);
    // monitor counts itself: PID 1 in its own namespace.
    assert!(process(&st, 1).is_some(), "monitor is a member of the group it guards: {}", st["processes"]);
    assert_eq!(launcher(&st).len(), 3, "{st}");
    // The probes would count by the kernel's pids, not the container's: off, and the reason says what to do.
    let probes = &st["probes"];
    assert_eq!(probes["enabled"], false, "{probes}");
    assert!(probes["reason"].as_str().is_some_and(|r| r.contains("PID namespace of its own")), "{probes}");
    let r = run.get("/r4/CodeSystem/1", &[]);
    assert_eq!(r.status, 200, "served through the front door: {}", r.text());
    // The kernel handed the orphans to PID 1, which reaps them.
    orphans_are_reaped(&run, monitor, lasting);

    // The runtime's stop: SIGTERM to PID 1, which drains and exits 0 (unshare passes the code on).
    sigterm(monitor);
    let status = run.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "monitor run's exit; stderr:\n{}", run.stderr());
    assert!(run.stderr().contains("SIGTERM: draining"), "{}", run.stderr());
    assert!(run.cg.procs().is_empty(), "the container is empty: {:?}", run.cg.procs());
}

#[test]
fn outside_a_container_the_processes_orphans_are_monitors_and_reaped() {
    let test = "outside_a_container_the_processes_orphans_are_monitors_and_reaped";
    if !require_group(test) {
        return;
    }
    // monitor is not PID 1 here: it asked to be its descendants' reaper.
    let lasting = 5 * pace::stretch();
    let port = free_port();
    let spec = Spec {
        workers: 1,
        master_port: Some(port),
        master_command: Some(master_leaving_orphans(port, lasting)),
        ..Spec::default()
    };
    let run = Run::start("orphans-reaped", &spec);
    orphans_are_reaped(&run, run.pid(), lasting);
}

#[test]
fn a_group_of_its_own_inside_a_container_is_refused_on_v2_and_made_on_v1() {
    let test = "a_group_of_its_own_inside_a_container_is_refused_on_v2_and_made_on_v1";
    if !require_group(test) || !require_program(test, "unshare") {
        return;
    }
    let cg = Group::here("container-sub", Some(256 * MIB));
    let port = free_port();
    let config = processes([Process::fixture_on("m0", "master", port)]).cgroup("sub").set("group", "create", true).set(
        "policy",
        "interval_ms",
        50,
    );
    let mut run = Launched::start_wrapped(&cg.relative(), config, &container(), Some(cg.path()), &[]);
    match Hierarchy::here() {
        Ok(Hierarchy::V2) => {
            let status = run.wait_exit(Duration::from_secs(20));
            let err = run.stderr();
            assert_eq!(status.code(), Some(1), "refused at start:\n{err}");
            assert!(err.contains("cgroup = \"auto\""), "the message says to use auto:\n{err}");
            assert!(err.contains("/sys/fs/cgroup"), "and names the group:\n{err}");
        }
        _ => {
            let st = run.wait_for(
                "the master ready",
                |s| launcher(s).iter().all(|p| p["state"] == "ready"),
                Duration::from_secs(20),
            );
            assert_eq!(st["group"]["cgroup"], "/sys/fs/cgroup/memory/sub", "{}", st["group"]);
            sigterm(pid_one(&run));
            let status = run.wait_exit(Duration::from_secs(30));
            assert_eq!(status.code(), Some(0), "stderr:\n{}", run.stderr());
            assert!(!cg.path().join("sub").exists(), "the group monitor made is removed at the stop");
        }
    }
}
