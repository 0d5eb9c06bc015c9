//! Debian kernels for the test VM: the newest `linux-image-6.1.0-<abi>-amd64` or `linux-image-6.12.<n>+deb12-amd64`
//! that apt knows, downloaded once per machine (never installed: `apt-get download` + `dpkg-deb -x`), of which
//! only `boot/vmlinuz-*` is kept, in a cache outside the work tree so fresh clones (CI) reuse it.

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A kernel series the suite runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Series {
    V6_1,
    V6_12,
}

impl Series {
    pub const ALL: [Series; 2] = [Series::V6_1, Series::V6_12];

    pub fn name(self) -> &'static str {
        match self {
            Series::V6_1 => "6.1",
            Series::V6_12 => "6.12",
        }
    }

    /// The package name's parts around the number that orders its versions.
    fn affixes(self) -> (&'static str, &'static str) {
        match self {
            Series::V6_1 => ("linux-image-6.1.0-", "-amd64"),
            Series::V6_12 => ("linux-image-6.12.", "+deb12-amd64"),
        }
    }

    /// The `apt-cache search --names-only` pattern for its packages.
    fn pattern(self) -> &'static str {
        match self {
            Series::V6_1 => r"^linux-image-6\.1\.0-[0-9]+-amd64$",
            Series::V6_12 => r"^linux-image-6\.12\.[0-9]+\+deb12-amd64$",
        }
    }
}

/// A kernel image ready to boot.
#[derive(Debug, Clone)]
pub struct Kernel {
    pub series: Series,
    pub vmlinuz: PathBuf,
    /// The Debian package it came from.
    pub package: String,
}

/// Where kernels are kept: `$MONITOR_VMTEST_CACHE`, else `$XDG_CACHE_HOME/monitor-vmtest`, else
/// `$HOME/.cache/monitor-vmtest`, else `<target>/vmtest/kernels`.
pub fn cache_dir(target: &Path) -> PathBuf {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("MONITOR_VMTEST_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("monitor-vmtest")))
        .or_else(|| var("HOME").map(|d| d.join(".cache/monitor-vmtest")))
        .unwrap_or_else(|| target.join("vmtest/kernels"))
}

/// The newest package of `series` among `apt-cache search` output lines (`name - description`).
pub fn pick(series: Series, search_output: &str) -> Option<String> {
    let (prefix, suffix) = series.affixes();
    search_output
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|name| {
            let n: u32 = name.strip_prefix(prefix)?.strip_suffix(suffix)?.parse().ok()?;
            Some((n, name))
        })
        .max()
        .map(|(_, name)| name.to_string())
}

fn search(series: Series) -> Result<Option<String>> {
    let out = Command::new("apt-cache")
        .args(["search", "--names-only", series.pattern()])
        .output()
        .context("running apt-cache (is this a Debian machine?)")?;
    Ok(pick(series, &String::from_utf8_lossy(&out.stdout)))
}

/// The kernel of `series` from the cache, downloading it the first time.
pub fn ensure(series: Series, cache: &Path) -> Result<Kernel> {
    let dir = cache.join(series.name());
    let vmlinuz = dir.join("vmlinuz");
    let package_file = dir.join("package");
    if vmlinuz.is_file() {
        let package = fs::read_to_string(&package_file).unwrap_or_default().trim().to_string();
        return Ok(Kernel { series, vmlinuz, package });
    }
    let package = match search(series)? {
        Some(p) => p,
        None => {
            // An empty or old package list: refresh it once.
            sh(Command::new("apt-get").args(["update", "-qq"]))?;
            match search(series)? {
                Some(p) => p,
                None => bail!("apt knows no package matching {} (Debian 12 with bookworm-updates?)", series.pattern()),
            }
        }
    };
    eprintln!("vmtest: downloading {package} into {}", dir.display());
    let work = dir.join("download");
    let _ = fs::remove_dir_all(&work);
    fs::create_dir_all(&work).with_context(|| format!("mkdir {}", work.display()))?;
    sh(Command::new("apt-get").current_dir(&work).args(["download", "-q", &package]))?;
    let deb = fs::read_dir(&work)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", work.display()))?;
    let tree = work.join("x");
    sh(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tree))?;
    let image = fs::read_dir(tree.join("boot"))
        .with_context(|| format!("{} has no boot/", deb.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("vmlinuz-")))
        .with_context(|| format!("{} has no boot/vmlinuz-*", deb.display()))?;
    let partial = dir.join("vmlinuz.partial");
    fs::copy(&image, &partial).with_context(|| format!("copying {}", image.display()))?;
    fs::write(&package_file, format!("{package}\n"))?;
    fs::rename(&partial, &vmlinuz)?;
    fs::remove_dir_all(&work).with_context(|| format!("removing {}", work.display()))?;
    Ok(Kernel { series, vmlinuz, package })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEARCH: &str = "\
linux-image-6.1.0-9-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-57-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.1.0-57-cloud-amd64 - Linux 6.1 for x86-64 cloud (signed)
linux-image-6.1.0-48-amd64 - Linux 6.1 for 64-bit PCs (signed)
linux-image-6.12.100+deb12-amd64 - Linux 6.12 for 64-bit PCs (signed)
linux-image-6.12.117+deb12-amd64 - Linux 6.12 for 64-bit PCs (signed)
linux-image-6.12.117+deb12-rt-amd64 - Linux 6.12 for 64-bit PCs (signed), PREEMPT_RT
linux-image-6.12.99+deb12-amd64 - Linux 6.12 for 64-bit PCs (signed)
";

    #[test]
    fn picks_the_newest_plain_amd64_image() {
        assert_eq!(pick(Series::V6_1, SEARCH).as_deref(), Some("linux-image-6.1.0-57-amd64"));
        assert_eq!(pick(Series::V6_12, SEARCH).as_deref(), Some("linux-image-6.12.117+deb12-amd64"));
    }

    #[test]
    fn nothing_known_is_none() {
        assert_eq!(pick(Series::V6_1, ""), None);
        assert_eq!(pick(Series::V6_12, "linux-image-6.12.1+deb12-cloud-amd64 - cloud\n"), None);
    }

    #[test]
    fn the_cache_can_be_named() {
        // Only the explicit override is checked: HOME differs between machines.
        if let Some(dir) = std::env::var_os("MONITOR_VMTEST_CACHE").filter(|v| !v.is_empty()) {
            assert_eq!(cache_dir(Path::new("/t")), PathBuf::from(dir));
        } else {
            assert!(
                cache_dir(Path::new("/t")).ends_with("monitor-vmtest")
                    || cache_dir(Path::new("/t")).ends_with("kernels")
            );
        }
    }
}
