//! `cargo xtask dist --image`: the OCI image that runs `monitor run` as a container's entrypoint (PID 1), written
//! as an OCI archive, `target/dist/monitor-<version>.oci.tar` (`podman load -i …`, `skopeo copy oci-archive:…`).
//!
//! The release binary is linked against glibc, so the image's base is Debian bookworm's minbase (the release of
//! this host, whose glibc the binary was linked against), made by mmdebstrap from this machine's apt sources, without
//! docs (copyright files kept), manuals and translations, plus the packages `--include` names: the servers'
//! runtime, `nodejs` or `python3`. The binary goes in without its debug info. The base is kept per package list beside the VM kernels, so a second build
//! only lays the binary over it. buildah assembles and commits the image in storage of its own under
//! target/dist/containers (the vfs driver: no runtime, any filesystem), removed afterwards: the host's containers
//! storage is never touched.

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The image's name; its tag is the binary's version.
pub const NAME: &str = "monitor";

/// Where the binary goes in the image, and its configuration by default.
const BINARY: &str = "/usr/local/bin/monitor";
const CONFIG: &str = "/etc/monitor/run.toml";

/// What the image is made of.
pub struct Spec<'a> {
    /// The release binary.
    pub binary: &'a Path,
    /// Debian packages over minbase (the servers' runtime).
    pub include: &'a [String],
    /// Where the base archives are kept.
    pub cache: &'a Path,
    /// The folder the archive is written to (and buildah's storage made in, for the build only).
    pub out_dir: &'a Path,
}

/// A built image.
pub struct Built {
    pub archive: PathBuf,
    pub reference: String,
}

/// The version the binary says (`monitor --version` prints `monitor X.Y.Z`).
fn version(binary: &Path) -> Result<String> {
    let out =
        Command::new(binary).arg("--version").output().with_context(|| format!("running {}", binary.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(&text).with_context(|| format!("{} --version printed {text:?}", binary.display()))
}

fn parse_version(text: &str) -> Option<String> {
    let v = text.split_whitespace().nth(1)?;
    v.chars().all(|c| c.is_ascii_alphanumeric() || ".-+".contains(c)).then(|| v.replace('+', "_"))
}

/// The base's cache file for this package list.
fn base_archive(cache: &Path, include: &[String]) -> PathBuf {
    let mut packages: Vec<&str> = vec!["image-base"];
    packages.extend(include.iter().map(String::as_str));
    cache.join(format!("image-{}.tar", crate::vmtest::rootfs::key(crate::vmtest::rootfs::SUITE, &packages)))
}

/// The base archive, built with mmdebstrap when missing.
fn ensure_base(cache: &Path, include: &[String]) -> Result<PathBuf> {
    let out = base_archive(cache, include);
    if out.is_file() {
        return Ok(out);
    }
    fs::create_dir_all(cache).with_context(|| format!("mkdir {}", cache.display()))?;
    let partial = out.with_extension("tar.partial.tar");
    let mut cmd = Command::new("mmdebstrap");
    cmd.args(["--variant=minbase", "--quiet", "--format=tar"]);
    for exclude in ["/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*"] {
        cmd.arg(format!("--dpkgopt=path-exclude={exclude}"));
    }
    cmd.arg("--dpkgopt=path-include=/usr/share/doc/*/copyright");
    // apt's lists and caches are of no use in a running container.
    cmd.arg("--customize-hook=rm -rf \"$1\"/var/lib/apt/lists/* \"$1\"/var/cache/apt/*");
    if !include.is_empty() {
        cmd.arg(format!("--include={}", include.join(",")));
    }
    cmd.arg(crate::vmtest::rootfs::SUITE).arg(&partial).arg(crate::vmtest::rootfs::apt_sources()?);
    let built = sh(&mut cmd);
    if built.is_err() {
        let _ = fs::remove_file(&partial);
    }
    built?;
    fs::rename(&partial, &out).with_context(|| format!("renaming {} to {}", partial.display(), out.display()))?;
    Ok(out)
}

/// buildah with the build's own storage.
struct Buildah {
    storage: PathBuf,
}

impl Buildah {
    fn cmd(&self) -> Command {
        let mut c = Command::new("buildah");
        c.arg("--root").arg(self.storage.join("root")).arg("--runroot").arg(self.storage.join("run"));
        c.args(["--storage-driver", "vfs"]);
        c
    }

    /// Runs buildah with `args`; returns its standard output, trimmed.
    fn run(&self, args: &[&str]) -> Result<String> {
        let what = format!("buildah {}", args.join(" "));
        eprintln!("+ {what}");
        crate::util::stdout_of(self.cmd().args(args), &what)
    }

    /// Removes the storage (vfs keeps whole copies of every layer: hundreds of MB).
    fn clear(&self) -> Result<()> {
        if self.storage.exists() {
            fs::remove_dir_all(&self.storage).with_context(|| format!("removing {}", self.storage.display()))?;
        }
        Ok(())
    }
}

/// The archive [`build`] writes for `spec`, when it is there and newer than the binary (else `None`).
pub fn built(spec: &Spec<'_>) -> Result<Option<Built>> {
    let named = named(spec)?;
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    Ok(match (modified(&named.archive), modified(spec.binary)) {
        (Some(a), Some(b)) if a >= b => Some(named),
        _ => None,
    })
}

/// Where the image of `spec.binary`'s version goes, and its name.
fn named(spec: &Spec<'_>) -> Result<Built> {
    let version = version(spec.binary)?;
    Ok(Built {
        archive: spec.out_dir.join(format!("{NAME}-{version}.oci.tar")),
        reference: format!("localhost/{NAME}:{version}"),
    })
}

/// Builds the image and writes its OCI archive.
pub fn build(spec: &Spec<'_>) -> Result<Built> {
    if !crate::util::is_root() {
        bail!("building the image (a Debian base with device nodes, buildah's storage) needs root");
    }
    crate::util::ensure_command("buildah", "buildah", "cargo xtask dist --image")?;
    crate::util::ensure_command("mmdebstrap", "mmdebstrap", "cargo xtask dist --image")?;
    let Built { archive, reference } = named(spec)?;
    let base = ensure_base(spec.cache, spec.include)?;
    fs::create_dir_all(spec.out_dir).with_context(|| format!("mkdir {}", spec.out_dir.display()))?;
    // The release profile keeps debug info (for the benchmarks' profiles): the image's copy goes without, as the
    // package's does.
    let stripped = spec.out_dir.join("monitor.stripped");
    sh(Command::new("strip").arg("--strip-debug").arg("-o").arg(&stripped).arg(spec.binary))?;
    let buildah = Buildah { storage: spec.out_dir.join("containers") };
    buildah.clear()?;
    let built = assemble(&buildah, &stripped, &base, &reference, &archive);
    let _ = fs::remove_file(&stripped);
    let cleared = buildah.clear();
    built?;
    cleared?;
    Ok(Built { archive, reference })
}

fn assemble(b: &Buildah, binary: &Path, base: &Path, reference: &str, archive: &Path) -> Result<()> {
    let path = |p: &Path| p.to_str().map(String::from).with_context(|| format!("{} is not UTF-8", p.display()));
    let ctr = b.run(&["from", "--name", "monitor-image-build", "scratch"])?;
    b.run(&["add", &ctr, &path(base)?, "/"])?;
    b.run(&["copy", "--chmod", "0755", &ctr, &path(binary)?, BINARY])?;
    let entrypoint = format!("[\"{BINARY}\"]");
    let cmd = format!("[\"run\", \"--config\", \"{CONFIG}\"]");
    b.run(&[
        "config",
        "--entrypoint",
        &entrypoint,
        "--cmd",
        &cmd,
        "--stop-signal",
        "SIGTERM",
        "--port",
        "8080/tcp",
        "--port",
        "9464/tcp",
        "--workingdir",
        "/",
        "--label",
        "org.opencontainers.image.title=monitor",
        "--label",
        &format!("org.opencontainers.image.version={}", reference.rsplit(':').next().unwrap_or_default()),
        &ctr,
    ])?;
    b.run(&["commit", "--rm", "--quiet", &ctr, reference])?;
    let _ = fs::remove_file(archive);
    b.run(&["push", "--quiet", reference, &format!("oci-archive:{}:{reference}", path(archive)?)])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_second_word_and_tag_safe() {
        assert_eq!(parse_version("monitor 0.1.0\n").as_deref(), Some("0.1.0"));
        assert_eq!(parse_version("monitor 1.2.3+deb1").as_deref(), Some("1.2.3_deb1"));
        assert_eq!(parse_version("monitor").as_deref(), None);
        assert_eq!(parse_version("monitor 1.0/../x").as_deref(), None);
    }

    #[test]
    fn each_package_list_has_its_own_base() {
        let cache = Path::new("/c");
        let none = base_archive(cache, &[]);
        let node = base_archive(cache, &["nodejs".to_string()]);
        assert_ne!(none, node);
        assert_eq!(node, base_archive(cache, &["nodejs".to_string()]));
        assert!(none.to_string_lossy().starts_with("/c/image-bookworm-"), "{}", none.display());
    }
}
