//! `cargo xtask vmtest [--kernel 6.1|6.12|all]`: runs the in-VM suite (tests/src/bin/vm-suite) on real cgroup v2
//! and on Debian's 6.1 and 6.12 kernels, in qemu with software emulation, and on 6.12 the host suite's tests that
//! make a memory group ([`hosttests`]), so they run on v2 too. Installs qemu and busybox-static when missing,
//! fetches the kernels and builds the root filesystem once per machine, builds the release binaries (the package's
//! own) and an archive of them over the root filesystem, boots each kernel, and exits with the tests' status read
//! from the serial console (failing loudly when the VM never reports).
//! The suite and its choices: tests/vm/README.md. `--systemd` instead boots a Debian host with systemd and the
//! package installed (vmtest/systemd.rs).

pub(crate) mod hosttests;
pub(crate) mod image;
pub(crate) mod kernel;
pub(crate) mod qemu;
pub(crate) mod rootfs;
pub(crate) mod systemd;

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use kernel::Series;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct Args {
    /// Which kernel to boot: 6.1, 6.12 or all.
    #[arg(long, default_value = "all", value_parser = ["6.1", "6.12", "all"])]
    kernel: String,
    /// Run only the tests whose name contains this (or one of its comma-separated parts).
    #[arg(long)]
    filter: Option<String>,
    /// Seconds one VM may run before it counts as hung (default 420; 600 with --systemd).
    #[arg(long)]
    timeout: Option<u64>,
    /// Boot a Debian bookworm host with systemd as PID 1 instead, install the package and run the deployment
    /// scenario of tests/vm/systemd/ (Debian 6.1 kernel).
    #[arg(long)]
    systemd: bool,
    /// Only get everything ready and stop: the kernels and the root filesystem into the cache, the release binaries
    /// the guests and the package are made of, and cargo-deb (what CI runs at low priority beside its tests).
    #[arg(long, conflicts_with = "systemd")]
    prepare: bool,
    /// With --systemd: install this .deb instead of building one with `cargo xtask dist`.
    #[arg(long, requires = "systemd")]
    deb: Option<PathBuf>,
}

/// Debian packages the VM needs on the host, with a file each installs: qemu, and a static busybox (the archiver,
/// and the guest's httpd, wget and poweroff).
const PACKAGES: [(&str, &str); 2] =
    [("qemu-system-x86", "/usr/bin/qemu-system-x86_64"), ("busybox-static", "/bin/busybox")];

fn installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
}

/// Installs the packages above when missing (apt-get update only if the first try fails).
pub(crate) fn ensure_packages() -> Result<()> {
    let missing: Vec<&str> = PACKAGES
        .iter()
        .filter(|(p, file)| !installed(p) || !std::path::Path::new(file).exists())
        .map(|(p, _)| *p)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !crate::util::is_root() {
        bail!("vmtest needs these Debian packages: apt-get install --no-install-recommends {}", missing.join(" "));
    }
    let install = || {
        let mut cmd = Command::new("apt-get");
        cmd.env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing);
        sh(&mut cmd)
    };
    if install().is_err() {
        sh(Command::new("apt-get").args(["update", "-qq"]))?;
        install()?;
    }
    Ok(())
}

pub fn run(args: Args) -> Result<()> {
    if args.systemd {
        return systemd::run(args.deb, Duration::from_secs(args.timeout.unwrap_or(600)));
    }
    let series: Vec<Series> = match args.kernel.as_str() {
        "6.1" => vec![Series::V6_1],
        "6.12" => vec![Series::V6_12],
        _ => Series::ALL.to_vec(),
    };
    let started = Instant::now();
    let root = root();
    let target = crate::util::target_dir();
    ensure_packages()?;
    systemd::ensure_mmdebstrap()?;
    if args.prepare {
        let cache = kernel::cache_dir(&target);
        rootfs::ensure(&cache, &rootfs::PACKAGES)?;
        rootfs::ensure(&cache, &rootfs::podman_packages())?;
        for s in series {
            kernel::ensure(s, &cache)?;
        }
        crate::setup::run().context("the agent's eBPF object is part of the suite")?;
        image::build_binaries(&root, &target)?;
        crate::dist::ensure_cargo_deb()?;
        systemd::ensure_image(&target)?;
        eprintln!(
            "vmtest: kernels, root filesystems, release binaries, cargo-deb and the OCI image ready in {:.1} s (cache {})",
            started.elapsed().as_secs_f64(),
            cache.display()
        );
        return Ok(());
    }
    crate::setup::run().context("the agent's eBPF object is part of the suite")?;

    let t = Instant::now();
    let bins = image::build_binaries(&root, &target)?;
    // The host suite's tests that make a group run again on v2, in the 6.12 guest.
    let host_tests = if series.contains(&Series::V6_12) { hosttests::collect(&root, &target)? } else { Vec::new() };
    let listed: usize = host_tests.iter().map(|b| b.tests.len()).sum();
    eprintln!("vmtest: binaries built in {:.1} s; {listed} host tests to run on v2", t.elapsed().as_secs_f64());

    let t = Instant::now();
    let cache = kernel::cache_dir(&target);
    let base = rootfs::ensure(&cache, &rootfs::PACKAGES)?;
    let kernels = series.iter().map(|&s| kernel::ensure(s, &cache)).collect::<Result<Vec<_>>>()?;
    eprintln!(
        "vmtest: kernels and root filesystem ready in {:.1} s (cache {})",
        t.elapsed().as_secs_f64(),
        cache.display()
    );

    let filter = args.filter.as_deref().unwrap_or("");
    let mut extra = if filter.is_empty() { String::new() } else { format!("VM_FILTER={filter} ") };
    extra.push_str(&qemu::pace_words());
    let work = target.join("vmtest");
    let mut results = Vec::new();
    // In-VM tests over all kernels; a kernel that gives no count counts as one failure.
    let (mut passed, mut failed_tests) = (0u64, 0u64);
    for k in &kernels {
        let label = k.series.name();
        let mine: Vec<hosttests::Binary> =
            if k.series == Series::V6_12 { filtered(&host_tests, filter) } else { Vec::new() };
        let t = Instant::now();
        let overlay = work.join(format!("overlay-{label}.cpio.gz"));
        let init = root.join("tests/vm/init");
        let o = image::Overlay { bins: &bins, init: &init, host_tests: &mine, root: &root };
        image::build_overlay(&o, &work.join("overlay"), &overlay)?;
        let initrd = work.join(format!("initrd-{label}.gz"));
        image::concat(&[&base, &overlay], &initrd)?;
        let size = std::fs::metadata(&overlay).map(|m| m.len()).unwrap_or(0);
        eprintln!(
            "vmtest: {label}: image ({:.1} MiB over the root filesystem) in {:.1} s",
            size as f64 / 1048576.0,
            t.elapsed().as_secs_f64()
        );
        // The suite takes a few minutes under TCG; each host test up to about half a minute more.
        let timeout = Duration::from_secs(
            args.timeout.unwrap_or(420 + 40 * mine.iter().map(|b| b.tests.len() as u64).sum::<u64>()),
        );
        let booted = qemu::boot_again_if_silent(label, || {
            qemu::boot_with_memory(&k.vmlinuz, &initrd, &extra, timeout, label, MEMORY_MIB)
        });
        let _ = std::fs::remove_file(&initrd);
        let line = match booted {
            Ok(b) => {
                match b.summary.as_deref().and_then(counts) {
                    Some((p, f)) => (passed, failed_tests) = (passed + p, failed_tests + f),
                    None => failed_tests += 1,
                }
                let mut ran = 0;
                for r in &b.results {
                    if let Some((p, f)) = harness_counts(r) {
                        (passed, failed_tests) = (passed + p, failed_tests + f);
                        ran += 1;
                    }
                }
                // A binary that printed no closing line crashed or hung: one failure each.
                failed_tests += (mine.len() as u64).saturating_sub(ran);
                let verdict = if b.rc == 0 && ran as usize >= mine.len() { "passed" } else { "FAILED" };
                let summary = b.summary.as_deref().unwrap_or("no summary line");
                let mut line = format!(
                    "Linux {label} ({}): {verdict} (rc {}; {summary}) in {:.1} s",
                    k.package,
                    b.rc,
                    b.elapsed.as_secs_f64()
                );
                for r in b.results.iter().chain(&b.skips) {
                    line.push_str(&format!("\n    {r}"));
                }
                (verdict == "passed", line)
            }
            Err(e) => {
                failed_tests += 1;
                (false, format!("Linux {label} ({}): FAILED: {e:#}", k.package))
            }
        };
        results.push(line);
    }
    eprintln!("vmtest results ({:.1} s in all):", started.elapsed().as_secs_f64());
    for (_, line) in &results {
        eprintln!("  {line}");
    }
    // A plain closing line for whoever reads the log (CI): the in-VM tests of every kernel.
    println!("vmtest: {passed} passed, {failed_tests} failed");
    let failed = results.iter().filter(|(ok, _)| !ok).count();
    if failed > 0 {
        bail!("vmtest: {failed} of {} kernels failed", results.len());
    }
    Ok(())
}

/// Guest memory: the unpacked root filesystem (about 200 MB) and the test binaries live in it, beside the tests'
/// groups (up to 2 GiB: a group's limit must be reachable before the guest's own memory runs out).
pub(crate) const MEMORY_MIB: u32 = 4096;

/// The host tests whose name contains one of the comma-separated parts of `filter` (all when it is empty);
/// binaries left with none are dropped.
fn filtered(bins: &[hosttests::Binary], filter: &str) -> Vec<hosttests::Binary> {
    let parts: Vec<&str> = filter.split(',').map(str::trim).collect();
    bins.iter()
        .map(|b| hosttests::Binary {
            tests: b.tests.iter().filter(|t| parts.iter().any(|p| t.contains(p))).cloned().collect(),
            ..b.clone()
        })
        .filter(|b| !b.tests.is_empty())
        .collect()
}

/// (passed, failed) from the test harness's `<binary>: test result: ok. 3 passed; 1 failed; …`.
fn harness_counts(line: &str) -> Option<(u64, u64)> {
    let rest = &line[line.find("test result: ")? + "test result: ".len()..];
    let mut got = (None, None);
    for part in rest.split(['.', ';']) {
        let mut words = part.split_whitespace();
        let (Some(n), Some(what)) = (words.next(), words.next()) else { continue };
        match what {
            "passed" => got.0 = n.parse().ok(),
            "failed" => got.1 = n.parse().ok(),
            _ => {}
        }
    }
    Some((got.0?, got.1?))
}

/// (passed, failed) from the suite's closing line `… N passed, M failed`.
fn counts(summary: &str) -> Option<(u64, u64)> {
    let words: Vec<&str> = summary.split_whitespace().collect();
    let at = |word: &str| {
        let i = words.iter().position(|w| w.trim_end_matches(',') == word)?;
        words.get(i.checked_sub(1)?)?.parse().ok()
    };
    Some((at("passed")?, at("failed")?))
}

#[cfg(test)]
mod tests {
    use super::{counts, harness_counts};

    #[test]
    fn reads_the_suite_counts() {
        assert_eq!(counts("vm-suite: 8 passed, 0 failed"), Some((8, 0)));
        assert_eq!(counts("vm-suite: 3 passed, 5 failed"), Some((3, 5)));
        assert_eq!(counts("vm-suite: passed"), None);
    }

    #[test]
    fn reads_the_harness_counts() {
        let line = "agent: test result: FAILED. 12 passed; 2 failed; 0 ignored; 0 measured; 140 filtered out; finished in 1.0s";
        assert_eq!(harness_counts(line), Some((12, 2)));
        assert_eq!(harness_counts("run: test result: ok. 3 passed; 0 failed; 0 ignored"), Some((3, 0)));
        assert_eq!(harness_counts("no result here"), None);
    }
}
