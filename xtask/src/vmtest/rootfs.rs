//! The VMs' root filesystem: a Debian bookworm minbase with systemd, built by mmdebstrap from this
//! machine's own apt sources and packed as a gzip'd newc cpio the kernel unpacks as its initramfs. Built once per
//! package list and kept beside the kernels (`<cache>/rootfs-<key>.cpio.gz`), so fresh clones (CI) reuse it.

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The Debian release of the guest: the same as this host's, so the host-built (glibc) binaries run in it.
pub const SUITE: &str = "bookworm";

/// What the guests need beyond minbase: systemd as PID 1 (systemd-sysv) with D-Bus, curl for the requests,
/// python3 to read the API's JSON and the stats database (and the host tests' python servers), bpftool to list BPF
/// programs, procps for ps; wrk and openssl for the host tests the kernel VM runs again on v2; stress-ng (an
/// allocator that respawns what is killed) for the last resort's test and the reaction bench.
pub const PACKAGES: [&str; 10] =
    ["systemd", "systemd-sysv", "dbus", "curl", "python3", "bpftool", "procps", "wrk", "openssl", "stress-ng"];

/// What the systemd VM adds: podman with crun to run the OCI image as a container (netavark, its network backend,
/// is asked for at start even with `--network host`). A second image, not the kernel VMs': these add about 100 MB
/// that every kernel VM boot would unpack under TCG for nothing.
pub const PODMAN: [&str; 3] = ["podman", "crun", "netavark"];

/// The systemd VM's package list: [`PACKAGES`] and [`PODMAN`].
pub fn podman_packages() -> Vec<&'static str> {
    PACKAGES.iter().chain(&PODMAN).copied().collect()
}

/// Trees removed from the image: documentation, manuals and translations nobody reads in the VM (about 60 MB
/// of the 254 MB), kept small because TCG unpacks every byte at each boot.
const TRIM: [&str; 4] = ["usr/share/doc", "usr/share/man", "usr/share/locale", "var/cache/apt"];

/// The recipe's version: change it when the build below changes, so cached images are rebuilt.
const RECIPE: &str = "1";

/// The cache key of an image of these packages: FNV-1a 64 of the suite, the recipe and the package list.
pub fn key(suite: &str, packages: &[&str]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in [suite, RECIPE].iter().chain(packages).flat_map(|s| s.bytes().chain([0u8])) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{suite}-{h:016x}")
}

/// The apt sources mmdebstrap reads: this machine's own (deb822 or one-line), first found.
pub(crate) fn apt_sources() -> Result<PathBuf> {
    let candidates = ["/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"];
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| {
            fs::read_to_string(p)
                .is_ok_and(|t| t.lines().any(|l| l.trim_start().starts_with("deb")) || t.contains("Types: deb"))
        })
        .with_context(|| format!("none of {candidates:?} names a Debian mirror"))
}

/// The packed image of `packages` (one of the lists above), built when missing. Returns its path.
pub fn ensure(cache: &Path, packages: &[&str]) -> Result<PathBuf> {
    let name = key(SUITE, packages);
    let out = cache.join(format!("rootfs-{name}.cpio.gz"));
    if out.is_file() {
        return Ok(out);
    }
    if !crate::util::is_root() {
        bail!("building the VM's root filesystem (mmdebstrap into a directory, device nodes) needs root");
    }
    fs::create_dir_all(cache).with_context(|| format!("mkdir {}", cache.display()))?;
    let staging = cache.join(format!("rootfs-building-{name}"));
    if staging.exists() {
        fs::remove_dir_all(&staging).with_context(|| format!("removing {}", staging.display()))?;
    }
    let sources = apt_sources()?;
    let t = std::time::Instant::now();
    let result = build(&staging, &sources, packages, &out);
    // The unpacked tree is only a step (about 200 MB): never left behind.
    let _ = fs::remove_dir_all(&staging);
    result?;
    // Images of other package lists are stale: the two of today's lists are kept (about 70 and 110 MB).
    let current = [key(SUITE, &PACKAGES), key(SUITE, &podman_packages())].map(|k| format!("rootfs-{k}.cpio.gz"));
    for entry in fs::read_dir(cache).into_iter().flatten().flatten() {
        let p = entry.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("rootfs-") && name.ends_with(".cpio.gz") && !current.iter().any(|c| c == name) {
            let _ = fs::remove_file(&p);
        }
    }
    let size = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "vmtest: root filesystem {} ({:.0} MiB packed) built in {:.1} s",
        out.display(),
        size as f64 / 1048576.0,
        t.elapsed().as_secs_f64()
    );
    Ok(out)
}

fn build(staging: &Path, sources: &Path, packages: &[&str], out: &Path) -> Result<()> {
    let include = packages.join(",");
    sh(Command::new("mmdebstrap")
        .args(["--variant=minbase", "--quiet", &format!("--include={include}"), SUITE])
        .arg(staging)
        .arg(sources))?;
    for t in TRIM {
        let p = staging.join(t);
        if p.exists() {
            fs::remove_dir_all(&p).with_context(|| format!("removing {}", p.display()))?;
        }
    }
    // The kernel opens /dev/console for PID 1 before anything mounts devtmpfs.
    let console = staging.join("dev/console");
    if !console.exists() {
        sh(Command::new("mknod").arg(&console).args(["c", "5", "1"]))?;
    }
    super::image::pack(staging, out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_follows_the_package_list() {
        let a = key("bookworm", &["systemd", "curl"]);
        assert_eq!(a, key("bookworm", &["systemd", "curl"]));
        assert_ne!(a, key("bookworm", &["systemd", "curl", "procps"]));
        assert_ne!(a, key("trixie", &["systemd", "curl"]));
        // The separator keeps ["ab", "c"] apart from ["a", "bc"].
        assert_ne!(key("x", &["ab", "c"]), key("x", &["a", "bc"]));
        assert!(a.starts_with("bookworm-"));
    }
}
