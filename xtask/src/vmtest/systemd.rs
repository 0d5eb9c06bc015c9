//! `cargo xtask vmtest --systemd`: the Debian package on a real Debian host. A bookworm root filesystem (cached,
//! [`super::rootfs`]) and a small second archive with the .deb, the fixture binaries and the scenario
//! (tests/vm/systemd/) are unpacked by the Debian 6.1 kernel as its initramfs; systemd runs as PID 1 on cgroup v2
//! only; the scenario runs as a unit once the system is up, prints `ok`/`FAILED` per check on the serial console,
//! `@@RC=<failures>@@`, and powers the VM off.

use super::{image, kernel, qemu, rootfs};
use crate::util::target_dir;
use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Guest memory: the unpacked root filesystem (about 200 MB) lives in it, beside app.service's 256 MiB limit.
const MEMORY_MIB: u32 = 2048;

/// The fixture binaries the scenario runs (tests/src/bin), built for the host (glibc; the guest is the same
/// Debian release).
const FIXTURES: [&str; 3] = ["fixture-backend", "grower", "alloc-hog"];

/// Kernel command line: systemd from the initramfs as PID 1, cgroup v2 only, its status lines off the console
/// (the scenario's lines are the ones to read).
const APPEND: &str = "rdinit=/lib/systemd/systemd systemd.unified_cgroup_hierarchy=1 \
                      systemd.show_status=false systemd.journald.forward_to_console=0";

/// Runs the systemd VM. `deb`: a package built already, else `cargo xtask dist` builds one.
pub fn run(deb: Option<PathBuf>, timeout: Duration) -> Result<()> {
    let started = Instant::now();
    let root = root();
    let target = target_dir();
    super::ensure_packages()?;
    ensure_mmdebstrap()?;

    let t = Instant::now();
    crate::setup::run().context("the package carries the eBPF object")?;
    // The release monitor and the fixtures, shared with the kernel VMs' image.
    image::build_binaries(&root, &target)?;
    let deb = match deb {
        Some(d) => d,
        None => {
            crate::dist::ensure_cargo_deb()?;
            crate::dist::package(&root, &target)?
        }
    };
    let build_s = t.elapsed().as_secs_f64();

    let cache = kernel::cache_dir(&target);
    let t = Instant::now();
    let base = rootfs::ensure(&cache, &rootfs::podman_packages())?;
    let rootfs_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let oci = ensure_image(&target)?;
    let image_s = t.elapsed().as_secs_f64();
    let kernel = kernel::ensure(kernel::Series::V6_1, &cache)?;

    let work = target.join("vmtest-systemd");
    let overlay = work.join("overlay.cpio.gz");
    build_overlay(&root, &target, &deb, &oci, &work.join("overlay"), &overlay)?;
    let initrd = work.join("initrd.gz");
    image::concat(&[&base, &overlay], &initrd)?;

    let boot = qemu::boot_again_if_silent("systemd", || {
        qemu::boot_with_memory(&kernel.vmlinuz, &initrd, APPEND, timeout, "systemd", MEMORY_MIB)
    });
    eprintln!("vmtest --systemd ({}, {}):", kernel.package, deb.display());
    eprintln!(
        "  package and fixtures built in {build_s:.1} s; root filesystem ready in {rootfs_s:.1} s; image in {image_s:.1} s"
    );
    let _ = fs::remove_file(&initrd);
    let boot = boot?;
    let summary = boot.summary.as_deref().unwrap_or("no summary line");
    eprintln!("  VM: rc {} ({summary}) in {:.1} s", boot.rc, boot.elapsed.as_secs_f64());
    eprintln!("  total {:.1} s", started.elapsed().as_secs_f64());
    if boot.rc != 0 {
        bail!("vmtest --systemd: {} checks failed", boot.rc);
    }
    Ok(())
}

/// The OCI image the scenario runs as a container, `cargo xtask dist --image`'s (without the servers' runtime: the
/// scenario mounts the fixture binaries in), kept in its own folder (target/vmtest-systemd/image) and built again
/// when the release binary is newer. Returns the archive.
pub(crate) fn ensure_image(target: &Path) -> Result<PathBuf> {
    let binary = target.join("release/monitor");
    let cache = kernel::cache_dir(target);
    let out_dir = target.join("vmtest-systemd/image");
    let spec = crate::dist::image::Spec { binary: &binary, include: &[], cache: &cache, out_dir: &out_dir };
    if let Some(built) = crate::dist::image::built(&spec)? {
        return Ok(built.archive);
    }
    Ok(crate::dist::image::build(&spec)?.archive)
}

/// mmdebstrap builds the root filesystem: installed when missing.
pub(crate) fn ensure_mmdebstrap() -> Result<()> {
    crate::util::ensure_command("mmdebstrap", "mmdebstrap", "building the VMs' root filesystem")
}

/// The second archive, unpacked over the root filesystem: the package and the OCI image in /root, the fixtures in
/// /usr/local/bin, tests/vm/systemd/ in /usr/local/share/vm-scenario, the scenario's unit enabled, and no getty on
/// the console.
fn build_overlay(root: &Path, target: &Path, deb: &Path, oci: &Path, staging: &Path, out: &Path) -> Result<()> {
    if staging.exists() {
        fs::remove_dir_all(staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let dirs = ["root", "usr/local/bin", "usr/local/share/vm-scenario", "etc/systemd/system/multi-user.target.wants"];
    for d in dirs {
        fs::create_dir_all(staging.join(d)).with_context(|| format!("mkdir {d}"))?;
    }
    // The archive sets these directories' modes over the base's.
    fs::set_permissions(staging.join("root"), fs::Permissions::from_mode(0o700))?;
    fs::copy(deb, staging.join("root/monitor.deb")).with_context(|| format!("copying {}", deb.display()))?;
    fs::copy(oci, staging.join("root/monitor.oci.tar")).with_context(|| format!("copying {}", oci.display()))?;
    let bins = target.join("release");
    for f in FIXTURES {
        copy_mode(&bins.join(f), &staging.join("usr/local/bin").join(f), 0o755)?;
    }
    let scenario = root.join("tests/vm/systemd");
    for entry in fs::read_dir(&scenario).with_context(|| format!("reading {}", scenario.display()))? {
        let from = entry?.path();
        let name = from.file_name().context("a file name")?;
        let mode = if from.extension().is_some_and(|x| x == "sh") { 0o755 } else { 0o644 };
        copy_mode(&from, &staging.join("usr/local/share/vm-scenario").join(name), mode)?;
    }
    let units = staging.join("etc/systemd/system");
    copy_mode(&scenario.join("vm-scenario.service"), &units.join("vm-scenario.service"), 0o644)?;
    symlink("../vm-scenario.service", units.join("multi-user.target.wants/vm-scenario.service"))?;
    for getty in ["serial-getty@ttyS0.service", "getty@tty1.service"] {
        symlink("/dev/null", units.join(getty))?;
    }
    fs::write(staging.join("etc/hostname"), "monitor-vm\n")?;
    let script = format!(
        "set -euo pipefail; cd '{}'; find . -mindepth 1 | '{}' cpio -o -H newc 2>/dev/null | gzip -1 > '{}'",
        staging.display(),
        image::BUSYBOX,
        out.display()
    );
    sh(Command::new("bash").args(["-c", &script]))
}

fn copy_mode(from: &Path, to: &Path, mode: u32) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(mode))?;
    Ok(())
}
