//! Stopping `monitor run` ends every process of its group, not only the ones it started: a worker's shell with a
//! child still running, and a crash-looping shell's leftover `sleep`, are gone after SIGTERM and the exit; the group
//! monitor created is removed before it exits. With `cgroup = "auto"` (monitor in the group, as its unit runs it),
//! what its processes leave behind is ended too, and nothing else in the group is touched.

use monitor_tests::agent::free_port;
use monitor_tests::bins::fixture_backend;
use monitor_tests::cgroup::read_procs as procs;
use monitor_tests::config::{bytes, Process};
use monitor_tests::run::{dead, member, processes, Launched};
use monitor_tests::{require_group, Group, MIB};
use std::time::Duration;

#[test]
fn stop_ends_every_process_of_the_group_and_removes_the_group_it_created() {
    let name = "stop_ends_every_process_of_the_group_and_removes_the_group_it_created";
    if !require_group(name) {
        return;
    }
    // The test's cgroup holds the one monitor creates (so a failure leaves nothing behind).
    let parent = Group::here("stop", None);
    let group = parent.path().join("grp");
    let port = free_port();
    let fixture = fixture_backend().display().to_string();
    let config = processes([
        Process::fixture("m0", "master"),
        // A server with a child of its own that outlives nothing by itself.
        Process::shell("tx1", &format!("sleep 600 & exec {fixture} --name tx1 --port {port}"), port),
        // A crash loop: the shell dies on SIGTERM, its `sleep` would live on.
        Process::shell("tx2", "sleep 3; exit 1", free_port()),
    ])
    .cgroup(&group)
    .set("group", "create", true)
    .set("group", "limit_bytes", bytes(512 * MIB));
    let mut run = Launched::start("stop", config, None, &[]);
    run.wait_for(
        "m0 and tx1 ready",
        |s| ["m0", "tx1"].iter().all(|n| member(s, n)["state"] == "ready"),
        Duration::from_secs(15),
    );
    // m0, tx1, tx1's sleep, tx2's shell and its sleep.
    let before = monitor_tests::wait_until("five processes in the group", Duration::from_secs(10), || {
        let p = procs(&group);
        (p.len() >= 5).then_some(p)
    });
    let status = run.terminate(Duration::from_secs(30));
    assert!(status.success(), "monitor run exit: {status}; stderr:\n{}", run.stderr());
    let alive: Vec<u32> = before.iter().copied().filter(|&p| !dead(p)).collect();
    assert!(alive.is_empty(), "processes of the group outlived monitor run: {alive:?} of {before:?}");
    assert!(!group.exists(), "the group monitor created outlived it; stderr:\n{}", run.stderr());
    assert!(!run.stderr().contains("could not remove"), "{}", run.stderr());
    // The leftovers were ended by monitor (not by the test's cgroup guard).
    assert!(run.stderr().contains("ended the processes left in the group"), "{}", run.stderr());
    eprintln!("{name}: {} processes in the group before SIGTERM, none after; the group removed", before.len());
}

#[test]
fn stop_in_its_own_group_ends_what_its_processes_left_and_nothing_else() {
    let name = "stop_in_its_own_group_ends_what_its_processes_left_and_nothing_else";
    if !require_group(name) {
        return;
    }
    let cg = Group::here("stop-auto", Some(512 * MIB));
    // A process of the group that monitor did not start: left alone.
    let mut other = std::process::Command::new("sleep");
    other.arg("600");
    let bystander = monitor_tests::spawn_in_cgroup(&mut other, cg.path());
    let port = free_port();
    let fixture = fixture_backend().display().to_string();
    let config = processes([
        Process::fixture("m0", "master"),
        Process::shell("tx1", &format!("sleep 600 & exec {fixture} --name tx1 --port {port}"), port),
    ])
    .cgroup("auto");
    let mut run = Launched::start("stop-auto", config, Some(cg.path()), &[]);
    run.wait_for(
        "m0 and tx1 ready",
        |s| ["m0", "tx1"].iter().all(|n| member(s, n)["state"] == "ready"),
        Duration::from_secs(15),
    );
    // monitor, m0, tx1, tx1's sleep and the bystander.
    let before = monitor_tests::wait_until("five processes in the group", Duration::from_secs(10), || {
        let p = procs(cg.path());
        (p.len() >= 5).then_some(p)
    });
    let status = run.terminate(Duration::from_secs(30));
    assert!(status.success(), "monitor run exit: {status}; stderr:\n{}", run.stderr());
    let alive: Vec<u32> = before.iter().copied().filter(|&p| !dead(p)).collect();
    assert_eq!(alive, [bystander.pid()], "of {before:?}; stderr:\n{}", run.stderr());
    assert!(run.stderr().contains("ended what the processes left behind"), "{}", run.stderr());
}
