//! `cargo xtask bench probes`: wrk against nginx detached, on each set of hooks (per-syscall tracepoints, raw
//! `sys_exit`, socket tracepoints), on the socket set with nginx untraced, and with two empty `cgroup_skb` programs
//! on nginx's cgroup2 group, interleaved rounds in one run (monitor/benches/probes_overhead.rs, run as root). Prints
//! the throughput ratios and the probe cost per request of each mode; the figures go to docs/benchmarks.md (`cargo xtask bench all`).
//!
//! Knobs passed through: `PROBES_BENCH_ROUNDS` (6), `PROBES_BENCH_SECS` (5), `PROBES_BENCH_CONNS` (32).

use crate::util::{is_root, root, run as sh};
use anyhow::{bail, Result};
use std::process::Command;

pub fn run() -> Result<()> {
    if !is_root() {
        bail!("bench probes: needs root (loads eBPF programs); run it with sudo -E");
    }
    sh(Command::new("cargo").current_dir(root()).env("MONITOR_EBPF_REQUIRED", "1").args([
        "bench",
        "-p",
        "monitor",
        "--bench",
        "probes_overhead",
    ]))
}
