//! The agent's measurements and policy on a memory group: three `alloc-hog` processes of known size in a 512 MiB
//! group watched by `monitor agent --cgroup`; `/api/v1/status` must report the limit, the usage (within 5% of the
//! processes' RssAnon), each process's RSS, and follow the policy as the group grows past 85% and 92% and shrinks
//! back below the hysteresis, on whichever hierarchy the host offers (the test VM runs it on v2). Also, on v1's own
//! files: THP-backed memory is counted, relative and nested groups, no limit = host.

use monitor_tests::group::Group;
use monitor_tests::scenario::{self, wait_usage_matches};
use monitor_tests::status::{close, f64_at, mem_total, process, str_at, u64_at};
use monitor_tests::{proc, require, require_group, require_v1, Agent, CgroupV1, Hog, MIB};
use serde_json::Value;
use std::time::Duration;

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");
/// How long the agent (sampling every 50 ms) may take to show a change.
const SETTLE: Duration = Duration::from_secs(10);

#[test]
fn alloc_hog_holds_what_it_says() {
    let test = "alloc_hog_holds_what_it_says";
    if !require_group(test) {
        return;
    }
    let cg = Group::here("hog", Some(256 * MIB));
    let mut hog = Hog::spawn(HOG, cg.path(), 64, false);
    assert_eq!(cg.procs(), vec![hog.pid()]);
    for mib in [64, 100, 20, 0, 30] {
        hog.set_mib(mib);
        let anon = hog.rss_anon();
        assert!(close(anon, mib * MIB, 0.0, 4 * MIB), "{mib} MiB asked, RssAnon {anon}");
        let charged = cg.anon().unwrap_or(0);
        assert!(close(charged, mib * MIB, 0.0, 4 * MIB), "{mib} MiB asked, the group's anon {charged}");
    }
}

/// The memory scenario (`monitor_tests::scenario::memory`) on a 512 MiB group, and what the status adds: the
/// policy's lines, shadow mode off, the probes' state, and every key of a process entry.
#[test]
fn group_usage_limit_processes_and_policy() {
    let test = "group_usage_limit_processes_and_policy";
    if !require_group(test) {
        return;
    }
    let group = Group::here("accept", Some(512 * MIB));
    let seen = scenario::memory(&group, HOG.as_ref(), 2, SETTLE);
    let s = &seen.normal;
    assert!((f64_at(s, "/policy/refuse_at") - 0.85).abs() < 1e-9);
    assert!((f64_at(s, "/policy/abort_at") - 0.92).abs() < 1e-9);
    assert_eq!(s.pointer("/policy/shadow").and_then(Value::as_bool), Some(false));
    assert!(s.pointer("/probes/enabled").and_then(Value::as_bool).is_some(), "probes.enabled: {s:#}");
    for &pid in &seen.pids {
        let p = process(s, pid).unwrap_or_else(|| panic!("pid {pid} not listed"));
        for k in ["name", "role", "requests_total", "inflight", "restarts"] {
            assert!(p.get(k).is_some(), "process entry lacks {k}: {p}");
        }
    }
    // The kernel's own count agrees with the agent's usage.
    let usage = u64_at(s, "/group/usage_bytes");
    assert!(close(usage, seen.kernel_anon, 0.05, 0), "usage {usage}, memory.stat's anon {}", seen.kernel_anon);
}

/// The `[always] madvise never` word in brackets.
fn thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')? + 1;
    let end = text[start..].find(']')? + start;
    Some(text[start..end].to_string())
}

#[test]
fn thp_backed_memory_is_counted() {
    let test = "thp_backed_memory_is_counted";
    if !require_v1(test) {
        return;
    }
    let mode = thp_mode();
    let thp_on = matches!(mode.as_deref(), Some("always" | "madvise"));
    if !require(thp_on, test, &format!("transparent huge pages are off here ({mode:?})")) {
        return;
    }
    let cg = CgroupV1::create("thp", Some(512 * MIB));
    let mut hog = Hog::spawn(HOG, cg.path(), 256, true);
    let mut huge = proc::anon_huge_pages(hog.pid()).unwrap_or(0);
    if huge < 64 * MIB {
        // The kernel found too few free 2 MiB blocks (fragmented memory): it is asked to compact them (root, as
        // require_v1 made sure), and the hog maps its memory again.
        drop(hog);
        if let Err(e) = std::fs::write("/proc/sys/vm/compact_memory", "1") {
            panic!("compacting memory (/proc/sys/vm/compact_memory): {e}");
        }
        hog = Hog::spawn(HOG, cg.path(), 256, true);
        huge = proc::anon_huge_pages(hog.pid()).unwrap_or(0);
    }
    let backed = format!("the kernel backed only {huge} bytes with huge pages, after compacting memory");
    if !require(huge >= 64 * MIB, test, &backed) {
        return;
    }
    let charged_huge = cg.stat("total_rss_huge").unwrap_or(0);
    assert!(charged_huge >= 64 * MIB, "the cgroup's total_rss_huge is {charged_huge}");
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog), SETTLE);
    let usage = u64_at(&s, "/group/usage_bytes");
    assert!(usage >= huge, "usage {usage} leaves out the {huge} bytes of huge pages");
    let p = process(&s, hog.pid()).unwrap_or_else(|| panic!("pid {} not listed: {s:#}", hog.pid()));
    let anon = u64_at(p, "/anon_bytes");
    assert!(close(anon, hog.rss_anon(), 0.02, 2 * MIB), "anon_bytes {anon}, RssAnon {}", hog.rss_anon());
}

#[test]
fn relative_path_and_nested_group_inherit_the_limit() {
    let test = "relative_path_and_nested_group_inherit_the_limit";
    if !require_v1(test) {
        return;
    }
    let parent = CgroupV1::create("parent", Some(256 * MIB));
    let child = parent.create_child("child", None);
    let hog = Hog::spawn(HOG, child.path(), 40, false);
    // Relative to the memory controller's mount, e.g. `monitor-test-1-2-parent/monitor-test-1-3-child`.
    let agent = Agent::start(&child.relative(), &[]);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog), SETTLE);
    assert_eq!(u64_at(&s, "/group/limit_bytes"), 256 * MIB, "the parent's limit applies: {s:#}");
    assert_eq!(str_at(&s, "/group/limit_source"), "cgroup");
    assert_eq!(str_at(&s, "/group/version"), "v1");
}

#[test]
fn no_limit_anywhere_means_the_host_memory() {
    let test = "no_limit_anywhere_means_the_host_memory";
    if !require_v1(test) {
        return;
    }
    let root_limit = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.limit_in_bytes").unwrap_or_default();
    let unlimited = root_limit.trim().parse::<u64>().is_ok_and(|b| b >= 1 << 60);
    if !require(unlimited, test, "the v1 memory root has a limit") {
        return;
    }
    let cg = CgroupV1::create("nolimit", None);
    let hog = Hog::spawn(HOG, cg.path(), 16, false);
    let agent = Agent::start(&cg.path().display().to_string(), &[]);
    let s = wait_usage_matches(&agent, std::slice::from_ref(&hog), SETTLE);
    let total = mem_total();
    assert_eq!(str_at(&s, "/group/limit_source"), "host", "{s:#}");
    assert_eq!(u64_at(&s, "/group/limit_bytes"), total);
}
