//! Builds the eBPF object (`monitor-ebpf`, for `bpfel-unknown-none`) with aya-build and leaves it in
//! `OUT_DIR/monitor-ebpf` for `monitor::sources::probes` to embed.
//!
//! Without the eBPF toolchain (a `nightly` with rust-src, and `bpf-linker` on PATH) the build still succeeds: the
//! object is left empty and `MONITOR_EBPF_SKIPPED` says why, so the agent runs with probes disabled. In CI
//! (tests/src/ci.rs says when) or with `MONITOR_EBPF_REQUIRED=1` (`cargo xtask build`) a missing toolchain fails the
//! build instead. `AYA_BUILD_SKIP=1` skips on purpose.

// The test crate's rule for "in CI", included by path: a build script cannot depend on the test crate.
#[path = "../tests/src/ci.rs"]
mod ci;

use anyhow::{anyhow, bail, Context as _, Result};
use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The file in OUT_DIR that `monitor::sources::probes` includes (aya-build names it after the bin target).
const OBJECT: &str = "monitor-ebpf";

fn main() -> Result<()> {
    for var in ["CI", "MONITOR_EBPF_REQUIRED", "AYA_BUILD_SKIP", "PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").context("CARGO_MANIFEST_DIR")?);
    let workspace = manifest.parent().ok_or_else(|| anyhow!("no parent of {}", manifest.display()))?;
    let ebpf_dir = workspace.join("monitor-ebpf");
    println!("cargo:rerun-if-changed={}", workspace.join("monitor-common/src").display());
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("src").display());
    println!("cargo:rerun-if-changed={}", ebpf_dir.join("Cargo.toml").display());
    let out_dir = PathBuf::from(env::var("OUT_DIR").context("OUT_DIR")?);
    let object = out_dir.join(OBJECT);
    println!("cargo:rustc-env=MONITOR_GIT_REVISION={}", revision(workspace));

    let required = ci::in_ci() || env::var("MONITOR_EBPF_REQUIRED").is_ok_and(|v| v == "1");
    let skip = env::var("AYA_BUILD_SKIP").is_ok_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
    if skip {
        return skipped(&object, "AYA_BUILD_SKIP is set");
    }
    if let Err(missing) = toolchain() {
        if required {
            bail!("eBPF toolchain missing ({missing}) and the object is required (in CI, or MONITOR_EBPF_REQUIRED=1): run `cargo xtask setup`");
        }
        return skipped(&object, &format!("{missing}; run `cargo xtask setup`"));
    }

    // aya-build runs `cargo build --package monitor-ebpf` in the current directory; monitor-ebpf is excluded
    // from our workspace, so run it from its own folder where it is the root package.
    env::set_current_dir(&ebpf_dir).with_context(|| format!("cd {}", ebpf_dir.display()))?;
    // aya-build hands every line the inner cargo prints to cargo as a warning: on a first build that is one
    // "warning: Compiling …" per crate of the eBPF build. Quiet, the inner cargo prints only what went wrong.
    // The build script is single-threaded here; the variable is read by the cargo it starts.
    env::set_var("CARGO_TERM_QUIET", "true");
    let dir = ebpf_dir.to_str().ok_or_else(|| anyhow!("non-UTF-8 path {}", ebpf_dir.display()))?;
    let package = aya_build::Package { name: "monitor-ebpf", root_dir: dir, ..Default::default() };
    aya_build::build_ebpf([package], aya_build::Toolchain::Nightly).context("building monitor-ebpf")?;
    if std::fs::metadata(&object).map(|m| m.len()).unwrap_or(0) == 0 {
        bail!("aya-build left no object at {}", object.display());
    }
    println!("cargo:rustc-env=MONITOR_EBPF_SKIPPED=");
    Ok(())
}

/// Leaves an empty object and the reason, so the crate builds and the agent reports probes disabled.
fn skipped(object: &Path, reason: &str) -> Result<()> {
    println!("cargo:warning=eBPF probes not built: {reason}");
    std::fs::write(object, []).with_context(|| format!("writing {}", object.display()))?;
    println!("cargo:rustc-env=MONITOR_EBPF_SKIPPED={reason}");
    Ok(())
}

/// Checks for a `nightly` toolchain with rust-src and for `bpf-linker`, naming what is missing. Asks cargo to
/// rerun this script when either appears (`cargo xtask setup` installs them).
fn toolchain() -> Result<(), String> {
    let cargo_home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let path = env::var_os("PATH").unwrap_or_default();
    match env::split_paths(&path).map(|d| d.join("bpf-linker")).find(|p| p.is_file()) {
        Some(linker) => println!("cargo:rerun-if-changed={}", linker.display()),
        None => {
            if let Some(bin) = cargo_home.map(|h| h.join("bin")) {
                println!("cargo:rerun-if-changed={}", bin.display());
            }
            return Err("bpf-linker is not on PATH".into());
        }
    }
    let sysroot = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .env_remove("RUSTC")
        .env_remove("RUSTUP_TOOLCHAIN")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .ok_or("no nightly toolchain (`rustup run nightly rustc` failed)")?;
    // rustup rewrites this file when a component is added.
    println!("cargo:rerun-if-changed={}", sysroot.join("lib/rustlib/components").display());
    if !sysroot.join("lib/rustlib/src/rust/library/core").is_dir() {
        return Err("rust-src is not installed on the nightly toolchain".into());
    }
    Ok(())
}

/// The commit the binary is built from (12 hex digits), or `unknown` outside a git checkout (a source package). Asks
/// cargo to rerun this script when HEAD moves.
fn revision(workspace: &Path) -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .arg("-C")
            .arg(workspace)
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
    };
    let Some(rev) = git(&["rev-parse", "--short=12", "HEAD"]) else { return "unknown".into() };
    // Only files that exist: cargo takes a missing one for changed, and would run this script (and rebuild the
    // crate) at every build.
    let watch = |p: PathBuf| {
        if p.exists() {
            println!("cargo:rerun-if-changed={}", p.display());
        }
    };
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        watch(PathBuf::from(dir).join("HEAD"));
    }
    if let (Some(common), Some(branch)) =
        (git(&["rev-parse", "--git-common-dir"]), git(&["symbolic-ref", "-q", "HEAD"]))
    {
        let common = workspace.join(common);
        watch(common.join(&branch));
        watch(common.join("packed-refs"));
    }
    rev
}
