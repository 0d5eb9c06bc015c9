//! The test VM's initramfs: static busybox with its applet links, the static (musl) `monitor` with its eBPF object,
//! `alloc-hog`, `grower`, `fixture-backend` and `vm-suite`, and tests/vm/init as `/init`; packed with `busybox cpio
//! -H newc | gzip -1`.

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The target the VM's binaries are built for (static, no loader needed).
pub const MUSL: &str = "x86_64-unknown-linux-musl";
/// Debian's busybox-static.
pub const BUSYBOX: &str = "/bin/busybox";
/// The binaries the suite needs, all put in the VM's /bin.
const BINARIES: [&str; 5] = ["monitor", "alloc-hog", "grower", "fixture-backend", "vm-suite"];

/// True when an ELF file asks for no program interpreter (statically linked, static-pie included).
pub fn is_static_elf(bytes: &[u8]) -> Result<bool> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        bail!("not a 64-bit little-endian ELF file");
    }
    let u16_at = |o: usize| bytes.get(o..o + 2).map(|b| u16::from_le_bytes([b[0], b[1]]));
    let phoff = bytes.get(0x20..0x28).map(|b| b.iter().rev().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)));
    let (Some(phoff), Some(phentsize), Some(phnum)) = (phoff, u16_at(0x36), u16_at(0x38)) else {
        bail!("truncated ELF header");
    };
    let phoff = usize::try_from(phoff).context("program header offset")?;
    for i in 0..usize::from(phnum) {
        let at = phoff + i * usize::from(phentsize);
        let Some(p_type) = bytes.get(at..at + 4) else { bail!("truncated program headers") };
        // PT_INTERP = 3
        if u32::from_le_bytes([p_type[0], p_type[1], p_type[2], p_type[3]]) == 3 {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Makes sure the musl target is installed for the active toolchain.
pub fn ensure_musl_target() -> Result<()> {
    let out = Command::new("rustup").args(["target", "list", "--installed"]).output().context("running rustup")?;
    if String::from_utf8_lossy(&out.stdout).lines().any(|l| l.trim() == MUSL) {
        return Ok(());
    }
    sh(Command::new("rustup").args(["target", "add", MUSL]))
}

/// Builds the VM's binaries (release, stripped, the eBPF object required) and returns their folder.
pub fn build_binaries(root: &Path, target_dir: &Path) -> Result<PathBuf> {
    ensure_musl_target()?;
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root)
        .env("MONITOR_EBPF_REQUIRED", "1")
        .env_remove("AYA_BUILD_SKIP")
        // Small images boot faster; no debugger runs in the VM.
        .env("CARGO_PROFILE_RELEASE_DEBUG", "0")
        .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
        .args(["build", "--release", "--target", MUSL, "-p", "monitor", "--bin", "monitor"])
        .args(["-p", "monitor-tests", "--bin", "alloc-hog", "--bin", "grower"])
        .args(["--bin", "fixture-backend", "--bin", "vm-suite"]);
    sh(&mut cmd)?;
    let dir = target_dir.join(MUSL).join("release");
    for bin in BINARIES {
        let path = dir.join(bin);
        let bytes = fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        if !is_static_elf(&bytes).with_context(|| path.display().to_string())? {
            bail!("{} is dynamically linked: the VM has no loader", path.display());
        }
    }
    Ok(dir)
}

/// Lays out the initramfs tree in `staging` and packs it into `out` (gzip'd newc cpio).
pub fn build_initramfs(root: &Path, bins: &Path, staging: &Path, out: &Path) -> Result<()> {
    build_initramfs_with_init(bins, &root.join("tests/vm/init"), staging, out)
}

/// [`build_initramfs`] with `init` as `/init`.
pub fn build_initramfs_with_init(bins: &Path, init: &Path, staging: &Path, out: &Path) -> Result<()> {
    let busybox = fs::read(BUSYBOX).with_context(|| format!("reading {BUSYBOX} (apt-get install busybox-static)"))?;
    if !is_static_elf(&busybox)? {
        bail!("{BUSYBOX} is not static: install busybox-static (not busybox)");
    }
    if staging.exists() {
        fs::remove_dir_all(staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    for d in ["bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev", "tmp", "etc", "root"] {
        fs::create_dir_all(staging.join(d)).with_context(|| format!("mkdir {}", staging.join(d).display()))?;
    }
    copy_exec(Path::new(BUSYBOX), &staging.join("bin/busybox"))?;
    let list = Command::new(BUSYBOX).arg("--list-full").output().context("busybox --list-full")?;
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim).filter(|l| !l.is_empty()) {
        let link = staging.join(applet);
        if applet == "bin/busybox" || link.exists() {
            continue;
        }
        if let Some(parent) = link.parent() {
            fs::create_dir_all(parent)?;
        }
        symlink("/bin/busybox", &link).with_context(|| format!("symlink {}", link.display()))?;
    }
    for bin in BINARIES {
        copy_exec(&bins.join(bin), &staging.join("bin").join(bin))?;
    }
    copy_exec(init, &staging.join("init"))?;
    pack(staging, out)
}

/// Packs the tree `staging` as a gzipped newc cpio archive at `out` (the form the kernel unpacks as its
/// initramfs), written beside it first and renamed into place, so an interrupted run leaves no half archive.
pub fn pack(staging: &Path, out: &Path) -> Result<()> {
    let partial = out.with_extension("partial");
    let script = format!(
        "set -euo pipefail; cd '{}'; find . | '{BUSYBOX}' cpio -o -H newc 2>/dev/null | gzip -1 > '{}'",
        staging.display(),
        partial.display()
    );
    sh(Command::new("bash").args(["-c", &script]))?;
    fs::rename(&partial, out).with_context(|| format!("renaming {} to {}", partial.display(), out.display()))
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
    fn tells_static_from_dynamic() {
        let me = fs::read("/proc/self/exe").expect("own executable");
        // This test binary is a normal glibc executable: it names the loader.
        assert!(!is_static_elf(&me).expect("an ELF"));
        if let Ok(bb) = fs::read(BUSYBOX) {
            // Static when busybox-static is installed; either way it parses.
            is_static_elf(&bb).expect("an ELF");
        }
    }

    #[test]
    fn rejects_what_is_not_elf() {
        assert!(is_static_elf(b"#!/bin/sh\n").is_err());
        assert!(is_static_elf(&[0x7f, b'E', b'L', b'F', 2, 1, 0, 0]).is_err());
    }
}
