//! `cargo xtask bench reaction`: the grower suite (tests/src/reaction.rs). Does the agent abort a fast grower before
//! the kernel's OOM killer acts, and how soon after the group crosses 92%?
//!
//! On this host (cgroup v1): modes `timer`, `events` and `stubborn` (a grower that ignores every signal, so only
//! the agent's SIGKILL at kill_at stops it), speeds 200 MB/s, 1 GB/s and full speed, release binaries from
//! target/release. Then in the test VM (cgroup v2, qemu with software emulation, xtask/src/vmtest/): the same
//! cells plus `brake`, `brake-kill` (the brake before the last resort, against a grower that ignores every signal)
//! and `held` (the brake alone against that grower, the last resort off), through
//! `vm-suite bench-reaction`, whose summaries come back on the serial console.
//!
//! The respawn cell (tests/src/reaction/respawn.rs): `stress-ng --vm 2 --vm-bytes 700M`, which starts a new worker
//! for each one killed, in a 512 MiB group beside a 40 MiB bystander, without and with the agent (the defaults; in
//! the VM with `brake_at = 0.96`): the kernel's OOM kills and the agent's kills per second, and the floor (what the
//! group grows while a killed worker dies, against the headroom above the kill line).
//!
//! `BENCH_REACTION_RUNS` (default 20) runs per cell, `BENCH_REACTION_IDLE_S` (10) idle seconds per mode,
//! `BENCH_REACTION_MODES` / `BENCH_REACTION_SPEEDS` (e.g. `timer` / `200,0`, or `stubborn` / `300,0`) to run fewer
//! cells (`respawn` names the respawn cell; `BENCH_REACTION_RESPAWN_RUNS` (3) runs of `BENCH_REACTION_RESPAWN_S`
//! (20) seconds), and `BENCH_REACTION_VM` = `6.1`, `6.12`, `all` (default) or `none` for the kernels booted.
//! `BENCH_REACTION_VM_RUNS`, `_VM_IDLE_S`, `_VM_MODES` and `_VM_SPEEDS` set the VM's cells apart from the host's
//! (emulated, each run there takes some ten times as long).

use crate::util::root;
use crate::vmtest::{self, image, kernel, qemu, rootfs};
use anyhow::{bail, Context, Result};
use monitor_tests::reaction::respawn::{self, Pair};
use monitor_tests::reaction::{self, Bins, Hierarchy, Plan, Summary};
use monitor_tests::CgroupV1;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub fn run() -> Result<()> {
    if let Some(reason) = CgroupV1::unavailable_reason() {
        bail!("the reaction benchmark makes v1 memory cgroups on this host: {reason}");
    }
    let vm_kernels = vm_kernels()?;
    let root = root();
    let target = crate::util::target_dir();
    // The release binaries the test VM and the package are made of, built as they are (the same invocations, so
    // neither rebuilds the other's).
    crate::setup::run().context("the agent carries its eBPF object")?;
    image::build_binaries(&root, &target)?;
    let build = build_id(&root);
    let bins = Bins::in_dir(&target.join("release")).map_err(anyhow::Error::msg)?;
    let work = monitor_tests::temp_dir("bench-reaction");
    let plan = Plan::from_env(Hierarchy::V1, work.clone(), false).map_err(anyhow::Error::msg)?;
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let group = match plan.crowd {
        0 => format!("v1, Linux {} (host)", kernel.trim()),
        n => format!("v1, Linux {} (host), {n} sleeping processes besides", kernel.trim()),
    };
    eprintln!(
        "bench reaction: agent {build}; {} runs per cell on {group}, {} s idle per mode; load {}",
        plan.runs,
        plan.idle.as_secs(),
        loadavg()
    );
    let started = Instant::now();
    let mut cells = reaction::run_suite(&plan, &bins, &group);
    let mut pairs = respawn::run_cell(&plan, &bins, &group);
    let _ = std::fs::remove_dir_all(&work);
    println!("\nOn this host ({:.0} s, load after: {}):\n", started.elapsed().as_secs_f64(), loadavg());
    print_tables(&cells, &pairs);

    let mut missing = Vec::new();
    if !vm_kernels.is_empty() {
        match vm_cells(&root, &target, &vm_kernels) {
            Ok(vm) => {
                cells.extend(vm.cells);
                pairs.extend(vm.pairs);
                missing.extend(vm.failed);
                if vm.build != build {
                    eprintln!(
                        "bench reaction: the VM's binaries were built from {}, the host's from {build}",
                        vm.build
                    );
                }
            }
            Err(e) => missing.push(format!("the VM part: {e:#}")),
        }
        println!(
            "\nAll cells (agent {build}; under qemu TCG every instruction is emulated, so the v2 rows are slower):\n"
        );
        print_tables(&cells, &pairs);
    }
    if !missing.is_empty() {
        bail!("missing from the table: {}", missing.join("; "));
    }
    Ok(())
}

/// The grower cells' table and the respawn cell's, each when it has rows.
fn print_tables(cells: &[Summary], pairs: &[Pair]) {
    if !cells.is_empty() {
        println!("{}", reaction::table(cells));
    }
    if !pairs.is_empty() {
        println!("stress-ng --vm 2 --vm-bytes 700M, which starts a new worker for each one killed:\n");
        println!("{}", respawn::table(pairs));
    }
}

/// The kernels `BENCH_REACTION_VM` asks for (default all; `none`: no VM).
fn vm_kernels() -> Result<Vec<kernel::Series>> {
    Ok(match std::env::var("BENCH_REACTION_VM").unwrap_or_default().trim() {
        "" | "all" => kernel::Series::ALL.to_vec(),
        "none" => Vec::new(),
        "6.1" => vec![kernel::Series::V6_1],
        "6.12" => vec![kernel::Series::V6_12],
        other => bail!("BENCH_REACTION_VM={other}: one of 6.1, 6.12, all, none"),
    })
}

/// The commit the binaries were built from, `+` uncommitted changes when the tree differs from it.
fn build_id(root: &Path) -> String {
    let out = Command::new("git").current_dir(root).args(["describe", "--always", "--dirty=+uncommitted"]).output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => "of an unknown commit".to_string(),
    }
}

fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// What the VM part gave.
struct VmResults {
    /// The v2 cells and the respawn cell's runs.
    cells: Vec<Summary>,
    pairs: Vec<Pair>,
    /// The kernels that gave none.
    failed: Vec<String>,
    /// The commit the VM's binaries were built from.
    build: String,
}

/// Boots each kernel with the bench as its init's work.
fn vm_cells(root: &Path, target: &Path, series: &[kernel::Series]) -> Result<VmResults> {
    vmtest::ensure_packages()?;
    crate::setup::run().context("the VM's agent carries its eBPF object")?;
    // The VM's own cell choices: `BENCH_REACTION_VM_<KNOB>` over `BENCH_REACTION_<KNOB>` (the host's cells are
    // done by now).
    for knob in ["RUNS", "IDLE_S", "MODES", "SPEEDS", "RESPAWN_RUNS", "RESPAWN_S"] {
        if let Some(v) = std::env::var(format!("BENCH_REACTION_VM_{knob}")).ok().filter(|v| !v.trim().is_empty()) {
            std::env::set_var(format!("BENCH_REACTION_{knob}"), v.trim());
        }
    }
    vmtest::systemd::ensure_mmdebstrap()?;
    let bins = image::build_binaries(root, target)?;
    let vm_build = build_id(root);
    let work = target.join("vmtest-reaction");
    std::fs::create_dir_all(&work)?;
    let cache = kernel::cache_dir(target);
    let base = rootfs::ensure(&cache, &rootfs::PACKAGES)?;
    let overlay = work.join("overlay.cpio.gz");
    let init = root.join("tests/vm/init");
    let o = image::Overlay { bins: &bins, init: &init, host_tests: &[], root };
    image::build_overlay(&o, &work.join("overlay"), &overlay)?;
    let initrd = work.join("initrd.gz");
    image::concat(&[&base, &overlay], &initrd)?;
    // The init runs `vm-suite $VM_SUITE_ARGS`; the host's settings go on too: kernel command-line words
    // KEY=value become the init's environment.
    let append: Vec<String> = std::iter::once("VM_SUITE_ARGS=bench-reaction".to_string())
        .chain(
            [
                "BENCH_REACTION_RUNS",
                "BENCH_REACTION_IDLE_S",
                "BENCH_REACTION_MODES",
                "BENCH_REACTION_SPEEDS",
                "BENCH_REACTION_RESPAWN_RUNS",
                "BENCH_REACTION_RESPAWN_S",
            ]
            .iter()
            .filter_map(|k| {
                std::env::var(k).ok().filter(|v| !v.trim().is_empty()).map(|v| format!("{k}={}", v.trim()))
            }),
        )
        .collect();
    let plan = Plan::from_env(Hierarchy::V2, work.clone(), true).map_err(anyhow::Error::msg)?;
    let cells = plan.modes.len() * plan.speeds.len();
    // Per run under emulation: the agent's start, the grow and the teardown take up to about 15 s; plus the idle
    // stretches, the respawn cell's two stress-ng runs (each with its start and teardown) and the boot.
    let respawn = plan.respawn_runs as u64 * 2 * (plan.respawn_s + 30);
    let timeout = Duration::from_secs(
        120 + (cells * plan.runs) as u64 * 15 + plan.modes.len() as u64 * plan.idle.as_secs() + respawn,
    );
    let (mut out, mut pairs, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    for &s in series {
        let k = kernel::ensure(s, &cache)?;
        let label = format!("reaction {}", s.name());
        match qemu::boot_with_memory(&k.vmlinuz, &initrd, &append.join(" "), timeout, &label, vmtest::MEMORY_MIB) {
            Ok(boot) => {
                let got: Vec<Summary> = boot
                    .bench
                    .iter()
                    .filter_map(|l| l.strip_prefix(reaction::VM_LINE))
                    .map(|json| {
                        serde_json::from_str(json).map_err(|e| e.to_string()).and_then(|v| Summary::from_json(&v))
                    })
                    .collect::<Result<_, _>>()
                    .map_err(anyhow::Error::msg)?;
                let runs: Vec<Pair> = boot
                    .bench
                    .iter()
                    .filter_map(|l| l.strip_prefix(respawn::VM_LINE))
                    .map(|json| serde_json::from_str(json).map_err(|e| e.to_string()).and_then(|v| Pair::from_json(&v)))
                    .collect::<Result<_, _>>()
                    .map_err(anyhow::Error::msg)?;
                if got.is_empty() && runs.is_empty() {
                    failed.push(format!("Linux {} ({}): no results (rc {})", s.name(), k.package, boot.rc));
                }
                eprintln!(
                    "Linux {} ({}): {} cells and {} respawn runs in {:.0} s",
                    s.name(),
                    k.package,
                    got.len(),
                    runs.len(),
                    boot.elapsed.as_secs_f64()
                );
                out.extend(got);
                pairs.extend(runs);
            }
            Err(e) => failed.push(format!("Linux {} ({}): {e:#}", s.name(), k.package)),
        }
    }
    Ok(VmResults { cells: out, pairs, failed, build: vm_build })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_init_runs_the_suite_with_the_bench_s_arguments() {
        let init = std::fs::read_to_string(root().join("tests/vm/init")).expect("tests/vm/init");
        assert!(init.lines().any(|l| l.trim_start().starts_with("/usr/local/bin/vm-suite $VM_SUITE_ARGS")), "{init}");
        assert!(init.contains("@@RC=$rc@@"), "the marker stays: {init}");
    }
}
