//! `cargo xtask setup`: installs what the eBPF build needs, idempotently and quickly when it is there already:
//! rust-src on the `nightly` toolchain (installing a minimal nightly only when none exists, never updating one)
//! and bpf-linker 0.13.0 linked against that nightly's own libLLVM (docs: shared/notes/ebpf-toolchain.md).

use crate::util::run as sh;
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The bpf-linker that works with aya 0.14 / aya-ebpf 0.2.1.
const BPF_LINKER_VERSION: &str = "0.13.0";

#[derive(clap::Args)]
pub struct Args {
    /// Install the Debian packages the tests drive first (.ci/packages; needs root and apt-get), as
    /// `cargo xtask test --install-deps` does.
    #[arg(long)]
    packages: bool,
}

/// `cargo xtask setup [--packages]`.
pub fn task(args: Args) -> Result<()> {
    if args.packages {
        install_packages(&crate::util::root())?;
    }
    run()
}

/// Installs the Debian packages of .ci/packages that are missing (`apt-get update` first only then).
pub fn install_packages(root: &std::path::Path) -> Result<()> {
    let list = std::fs::read_to_string(root.join(".ci/packages")).context("reading .ci/packages")?;
    let wanted: Vec<&str> = list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let installed = |p: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        eprintln!("setup: every package of .ci/packages is installed");
    } else {
        eprintln!("setup: installing {}", missing.join(" "));
        sh(Command::new("apt-get").args(["update", "-qq"]))?;
        sh(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing))?;
    }
    kubernetes_validate()
}

/// The Kubernetes schema check of docs/deploy.md's pod spec (tests/tests/cli/deploy_units.rs): this release of
/// kubernetes-validate, which carries the API's JSON schemas, from PyPI into a virtual environment of its own at
/// [`monitor_tests::bins::kubernetes_validate_venv`]'s path (Debian has no package of it), once per machine.
const KUBERNETES_VALIDATE: &str = "kubernetes-validate==1.37.0";

fn kubernetes_validate() -> Result<()> {
    let venv = monitor_tests::bins::kubernetes_validate_venv();
    let tool = venv.join("bin/kubernetes-validate");
    let runs = |t: &std::path::Path| Command::new(t).arg("--version").output().is_ok_and(|o| o.status.success());
    if runs(&tool) {
        return Ok(());
    }
    sh(Command::new("/usr/bin/python3").args(["-m", "venv", "--clear"]).arg(&venv))?;
    sh(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        KUBERNETES_VALIDATE,
    ]))?;
    if !runs(&tool) {
        bail!("{} does not run after `pip install {KUBERNETES_VALIDATE}`", tool.display());
    }
    Ok(())
}

pub fn run() -> Result<()> {
    nightly_with_rust_src()?;
    bpf_linker()?;
    eprintln!("setup: eBPF toolchain ready (nightly + rust-src, bpf-linker {BPF_LINKER_VERSION})");
    Ok(())
}

/// The stdout of a command, or None when it cannot run or fails.
fn output(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn nightly_with_rust_src() -> Result<()> {
    let toolchains = output(Command::new("rustup").args(["toolchain", "list"]))
        .context("`rustup toolchain list` failed: is rustup installed?")?;
    if !toolchains.lines().any(|l| l.starts_with("nightly-") || l.starts_with("nightly ")) {
        // None at all: install a minimal one. (Never `toolchain install` over an existing nightly: it updates it.)
        return sh(Command::new("rustup").args([
            "toolchain",
            "install",
            "nightly",
            "--profile",
            "minimal",
            "--component",
            "rust-src",
            "--no-self-update",
        ]));
    }
    let installed = output(Command::new("rustup").args(["component", "list", "--toolchain", "nightly", "--installed"]))
        .unwrap_or_default();
    if installed.lines().any(|l| l.starts_with("rust-src")) {
        eprintln!("setup: nightly has rust-src");
        return Ok(());
    }
    sh(Command::new("rustup").args(["component", "add", "rust-src", "--toolchain", "nightly"]))
}

fn bpf_linker() -> Result<()> {
    if let Some(v) = output(Command::new("bpf-linker").arg("--version")) {
        if v.split_whitespace().any(|w| w == BPF_LINKER_VERSION) {
            eprintln!("setup: {} already installed", v.trim());
            return Ok(());
        }
        eprintln!("setup: found {}, installing {BPF_LINKER_VERSION}", v.trim());
    }
    let sysroot = output(Command::new("rustc").args(["+nightly", "--print", "sysroot"]))
        .map(|s| PathBuf::from(s.trim()))
        .context("`rustc +nightly --print sysroot` failed")?;
    let version = output(Command::new("rustc").args(["+nightly", "-vV"])).context("`rustc +nightly -vV` failed")?;
    let major = llvm_major(&version).context("no `LLVM version:` in `rustc +nightly -vV`")?;

    // bpf-linker links the same libLLVM the nightly uses: copy it into our own prefix, as `libLLVM.so` too.
    let home = std::env::var_os("HOME").map(PathBuf::from).context("HOME is not set")?;
    let prefix = home.join(".local/share/monitor-bpf/llvm");
    let lib = prefix.join("lib");
    std::fs::create_dir_all(&lib).with_context(|| format!("mkdir {}", lib.display()))?;
    let mut copied = None;
    for entry in std::fs::read_dir(sysroot.join("lib")).with_context(|| format!("reading {}/lib", sysroot.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with("libLLVM.so.") {
            let dst = lib.join(&name);
            std::fs::copy(entry.path(), &dst)
                .with_context(|| format!("copying {} to {}", entry.path().display(), dst.display()))?;
            copied = Some(name);
        }
    }
    let Some(name) = copied else { bail!("no libLLVM.so.* in {}/lib", sysroot.display()) };
    let link = lib.join("libLLVM.so");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&name, &link).with_context(|| format!("symlink {}", link.display()))?;

    sh(Command::new("cargo")
        .env("LLVM_PREFIX", &prefix)
        .args(["install", "bpf-linker", "--version", BPF_LINKER_VERSION, "--locked", "--no-default-features"])
        .args(["--features", &format!("llvm-{major}")]))
}

/// The LLVM major version from `rustc -vV` output (`LLVM version: 22.1.4` -> 22).
fn llvm_major(version: &str) -> Option<u32> {
    version.lines().find_map(|l| l.strip_prefix("LLVM version:")).and_then(|v| v.trim().split('.').next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::llvm_major;

    #[test]
    fn llvm_major_from_rustc() {
        assert_eq!(llvm_major("rustc 1.97.0-nightly\nhost: x\nLLVM version: 22.1.4\n"), Some(22));
        assert_eq!(llvm_major("rustc 1.95.0\n"), None);
    }
}
