//! `cargo xtask vmtest [--kernel 6.1|6.12|all]`: runs the in-VM suite (tests/src/bin/vm-suite) on real cgroup v2
//! and on Debian's 6.1 and 6.12 kernels, in qemu with software emulation. Installs qemu and busybox-static when
//! missing, fetches the kernels once per machine, builds static binaries and an initramfs, boots each kernel,
//! and exits with the suite's status read from the serial console (failing loudly when the VM never reports).
//! The suite and its choices: tests/vm/README.md. `--systemd` instead boots a Debian host with systemd and the
//! package installed (vmtest/systemd.rs).

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
    /// Run only the in-VM tests whose name contains this.
    #[arg(long)]
    filter: Option<String>,
    /// Seconds one VM may run before it counts as hung (default 420; 600 with --systemd).
    #[arg(long)]
    timeout: Option<u64>,
    /// Boot a Debian bookworm host with systemd as PID 1 instead, install the package and run the deployment
    /// scenario of tests/vm/systemd/ (Debian 6.1 kernel).
    #[arg(long)]
    systemd: bool,
    /// With --systemd: install this .deb instead of building one with `cargo xtask dist`.
    #[arg(long, requires = "systemd")]
    deb: Option<PathBuf>,
}

/// Debian packages the VM needs on the host, with a file each installs: qemu, a static busybox for the
/// initramfs, and musl's C compiler wrapper for the C parts of the static build (bundled SQLite).
const PACKAGES: [(&str, &str); 3] = [
    ("qemu-system-x86", "/usr/bin/qemu-system-x86_64"),
    ("busybox-static", "/bin/busybox"),
    ("musl-tools", "/usr/bin/x86_64-linux-musl-gcc"),
];

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
    crate::setup::run().context("the agent's eBPF object is part of the suite")?;

    let t = Instant::now();
    let bins = image::build_binaries(&root, &target)?;
    let work = target.join("vmtest");
    let initrd = work.join("initramfs.gz");
    image::build_initramfs(&root, &bins, &work.join("initramfs"), &initrd)?;
    let size = std::fs::metadata(&initrd).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "vmtest: binaries and initramfs ({:.1} MiB) in {:.1} s",
        size as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    let cache = kernel::cache_dir(&target);
    let kernels = series.iter().map(|&s| kernel::ensure(s, &cache)).collect::<Result<Vec<_>>>()?;
    eprintln!("vmtest: kernels ready in {:.1} s (cache {})", t.elapsed().as_secs_f64(), cache.display());

    let extra = args.filter.as_deref().map(|f| format!("VM_FILTER={f}")).unwrap_or_default();
    let timeout = Duration::from_secs(args.timeout.unwrap_or(420));
    let mut results = Vec::new();
    // In-VM tests over all kernels; a kernel that gives no count counts as one failure.
    let (mut passed, mut failed_tests) = (0u64, 0u64);
    for k in &kernels {
        let label = k.series.name();
        let booted = qemu::boot_again_if_silent(label, || qemu::boot(&k.vmlinuz, &initrd, &extra, timeout, label));
        let line = match booted {
            Ok(b) => {
                match b.summary.as_deref().and_then(counts) {
                    Some((p, f)) => (passed, failed_tests) = (passed + p, failed_tests + f),
                    None => failed_tests += 1,
                }
                let verdict = if b.rc == 0 { "passed" } else { "FAILED" };
                let summary = b.summary.as_deref().unwrap_or("no summary line");
                let line = format!(
                    "Linux {label} ({}): {verdict} (rc {}; {summary}) in {:.1} s",
                    k.package,
                    b.rc,
                    b.elapsed.as_secs_f64()
                );
                (b.rc == 0, line)
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
    use super::counts;

    #[test]
    fn reads_the_suite_counts() {
        assert_eq!(counts("vm-suite: 8 passed, 0 failed"), Some((8, 0)));
        assert_eq!(counts("vm-suite: 3 passed, 5 failed"), Some((3, 5)));
        assert_eq!(counts("vm-suite: passed"), None);
    }
}
