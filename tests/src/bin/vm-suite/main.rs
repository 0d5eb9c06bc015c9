//! `vm-suite`: monitor's acceptance tests on a real cgroup v2 hierarchy with the memory controller and on real
//! kernels, run inside the test VM by `cargo xtask vmtest` (see tests/vm/README.md).
//!
//! `vm-suite` runs every test (those whose name contains `$VM_FILTER`, or one of its comma-separated parts, when it is set), one after the other, each
//! with its guards cleaned up whatever happens, prints `test <name> ... ok|FAILED` and a closing
//! `vm-suite: N passed, N failed`, and exits non-zero when a test failed. `monitor`, `alloc-hog`, `fixture-backend`
//! and `grower` must sit beside it. `vm-suite serve <port>` is the tiny HTTP server the traffic tests start.
//! `vm-suite bench-reaction` runs the grower suite of `cargo xtask bench reaction` on cgroup v2
//! (tests/src/reaction.rs).

mod front_door;
mod memory;
mod reaction;
mod server;
mod support;
mod traffic;

use monitor_tests::cgroup2::CgroupV2;
use std::process::ExitCode;
use std::time::Instant;

/// Every test, in the order they run.
const TESTS: &[(&str, fn())] = &[
    ("nested_limit_changed_at_run_time", memory::nested_limit_changed_at_run_time),
    ("memory_high_is_not_the_limit", memory::memory_high_is_not_the_limit),
    ("process_moved_out_disappears", memory::process_moved_out_disappears),
    ("own_server_counts_exactly", traffic::own_server_counts_exactly),
    ("busybox_httpd_counts", traffic::busybox_httpd_counts),
    ("fixture_backend_counts_exactly", traffic::fixture_backend_counts_exactly),
    ("configured_hooks_have_no_fallback", traffic::configured_hooks_have_no_fallback),
    ("run_creates_the_group_and_serves", front_door::run_creates_the_group_and_serves),
    ("brake_set_and_restored", reaction::brake_set_and_restored),
    ("each_wakeup_source_disarmed_still_reacts", reaction::each_wakeup_source_disarmed_still_reacts),
];

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("serve") {
        return server::main(&args[1..]);
    }
    if args.first().map(String::as_str) == Some("bench-reaction") && args.len() == 1 {
        return monitor_tests::reaction::vm_main(&support::bin_dir());
    }
    if !args.is_empty() {
        eprintln!("usage: vm-suite [serve <port> | bench-reaction]   (VM_FILTER=<part of a test name> selects tests)");
        return ExitCode::FAILURE;
    }
    if let Some(reason) = CgroupV2::unavailable_reason() {
        eprintln!("vm-suite: cannot run here: {reason}");
        return ExitCode::FAILURE;
    }
    if std::env::var_os("MONITOR_BIN").is_none() {
        std::env::set_var("MONITOR_BIN", support::bin_dir().join("monitor"));
    }
    let filter = std::env::var("VM_FILTER").unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    println!("vm-suite on Linux {}", kernel.trim());
    let (mut passed, mut failed) = (0, 0);
    let started = Instant::now();
    let parts: Vec<&str> = filter.split(',').map(str::trim).collect();
    for &(name, test) in TESTS.iter().filter(|(name, _)| parts.iter().any(|p| name.contains(p))) {
        println!("test {name} ...");
        let t0 = Instant::now();
        // The default panic hook prints the message; the guards inside the test clean up while unwinding.
        let ok = std::panic::catch_unwind(test).is_ok();
        let secs = t0.elapsed().as_secs_f64();
        if ok {
            passed += 1;
            println!("test {name} ... ok ({secs:.1} s)");
        } else {
            failed += 1;
            println!("test {name} ... FAILED ({secs:.1} s)");
        }
    }
    println!("vm-suite took {:.1} s", started.elapsed().as_secs_f64());
    println!("vm-suite: {passed} passed, {failed} failed");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
