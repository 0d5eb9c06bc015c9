//! The kernel test VM's image: Debian bookworm's root filesystem (the systemd VM's, cached: [`super::rootfs`]) and,
//! over it, a second archive with what is under test: the release `monitor` with its eBPF object, the fixtures
//! (`alloc-hog`, `grower`, `fixture-backend`) and `vm-suite` in /usr/local/bin with a static busybox, tests/vm/init
//! as `/init`, and, for the 6.12 run, the host's integration test binaries ([`super::hosttests`]). The binaries are
//! the host's glibc builds, the same the package is made of: the guest is the same Debian release, so no second
//! (static) build is needed. Each archive is a gzip'd newc cpio; the kernel unpacks one over the other.

use super::hosttests::{self, Binary};
use crate::util::run as sh;
use anyhow::{Context, Result};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Debian's busybox-static: the archiver here, and in the guest the tools minbase lacks (httpd, wget, poweroff
/// without an init system).
pub const BUSYBOX: &str = "/bin/busybox";
/// The binaries the suite needs, all put in the guest's /usr/local/bin.
const BINARIES: [&str; 5] = ["monitor", "alloc-hog", "grower", "fixture-backend", "vm-suite"];

/// Builds the VM's binaries (release, the eBPF object required) and returns their folder. The environment is
/// `cargo xtask build`'s, so the package's build (`cargo xtask dist`) and this one share every artifact.
pub fn build_binaries(root: &Path, target_dir: &Path) -> Result<PathBuf> {
    crate::build::run()?;
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root).env("MONITOR_EBPF_REQUIRED", "1").env_remove("AYA_BUILD_SKIP").args([
        "build",
        "--release",
        "-p",
        "monitor-tests",
    ]);
    for bin in &BINARIES[1..] {
        cmd.args(["--bin", bin]);
    }
    sh(&mut cmd)?;
    Ok(target_dir.join("release"))
}

/// What goes over the root filesystem.
pub struct Overlay<'a> {
    /// The folder of the release binaries ([`build_binaries`]).
    pub bins: &'a Path,
    /// The guest's `/init`.
    pub init: &'a Path,
    /// The host's test binaries to run on v2 (none: the suite only).
    pub host_tests: &'a [Binary],
    /// The workspace root: its docs/ and tests/ go to the same path in the guest (the tests read them there).
    pub root: &'a Path,
}

/// Lays out the overlay in `staging` and packs it into `out`.
pub fn build_overlay(o: &Overlay<'_>, staging: &Path, out: &Path) -> Result<()> {
    if staging.exists() {
        fs::remove_dir_all(staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let local = staging.join("usr/local/bin");
    fs::create_dir_all(&local).with_context(|| format!("mkdir {}", local.display()))?;
    copy_exec(Path::new(BUSYBOX), &local.join("busybox"))?;
    for bin in BINARIES {
        copy_exec(&o.bins.join(bin), &local.join(bin))?;
    }
    copy_exec(o.init, &staging.join("init"))?;
    if !o.host_tests.is_empty() {
        let files = o.host_tests.iter().map(|b| b.exe.clone()).chain(hosttests::fixtures(o.host_tests));
        for file in files {
            strip_into(&file, &beneath(staging, &file))?;
        }
        for dir in ["docs", "tests"] {
            let from = o.root.join(dir);
            let to = beneath(staging, &from);
            fs::create_dir_all(to.parent().context("a parent")?)?;
            sh(Command::new("cp").arg("-a").arg(&from).arg(&to))?;
        }
        let list = staging.join("opt/host-tests/list");
        fs::create_dir_all(list.parent().context("a parent")?)?;
        fs::write(&list, hosttests::guest_list(o.host_tests)).with_context(|| format!("writing {}", list.display()))?;
    }
    pack(staging, out)
}

/// `path` (absolute) under `staging`.
fn beneath(staging: &Path, path: &Path) -> PathBuf {
    staging.join(path.strip_prefix("/").unwrap_or(path))
}

/// Copies an executable without its debug information (a debug test binary is mostly that, and TCG unpacks every
/// byte of the archive at each boot).
fn strip_into(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to.parent().context("a parent")?)?;
    sh(Command::new("objcopy").arg("--strip-debug").arg(from).arg(to))
}

/// Packs the tree `staging` as a gzipped newc cpio archive at `out` (the form the kernel unpacks as its
/// initramfs), written beside it first and renamed into place, so an interrupted run leaves no half archive.
pub fn pack(staging: &Path, out: &Path) -> Result<()> {
    let partial = out.with_extension("partial");
    let script = format!(
        "set -euo pipefail; cd '{}'; find . -mindepth 1 | '{BUSYBOX}' cpio -o -H newc 2>/dev/null | gzip -1 > '{}'",
        staging.display(),
        partial.display()
    );
    sh(Command::new("bash").args(["-c", &script]))?;
    fs::rename(&partial, out).with_context(|| format!("renaming {} to {}", partial.display(), out.display()))
}

/// Concatenated gzip'd cpio archives: the kernel unpacks each in turn, the later over the earlier.
pub fn concat(parts: &[&Path], out: &Path) -> Result<()> {
    let mut file = fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    for p in parts {
        let mut f = fs::File::open(p).with_context(|| format!("opening {}", p.display()))?;
        std::io::copy(&mut f, &mut file).with_context(|| format!("appending {}", p.display()))?;
    }
    Ok(())
}

fn copy_exec(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    fs::set_permissions(to, fs::Permissions::from_mode(0o755))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_absolute_path_goes_beneath_the_staging_folder() {
        assert_eq!(beneath(Path::new("/s"), Path::new("/work/t/debug/grower")), Path::new("/s/work/t/debug/grower"));
    }
}
