//! Small helpers for running commands from xtask.

use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The workspace root (the folder above xtask/).
pub fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.parent().map(PathBuf::from).unwrap_or(here)
}

pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|v| !v.is_empty()).map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        Some(d) => root().join(d),
        None => root().join("target"),
    }
}

/// Runs a command, echoing it, and fails if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("+ {cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {cmd:?}"))?;
    if !status.success() {
        bail!("{cmd:?} failed: {status}");
    }
    Ok(())
}

/// Runs `what` (a program and its arguments, as `cmd` has them) and returns its standard output, trimmed; fails
/// with its standard error when it fails.
pub fn stdout_of(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd.output().with_context(|| format!("starting {what}"))?;
    if !out.status.success() {
        bail!("{what} failed: {}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY-free: read the effective uid from /proc/self/status.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Makes sure `command` runs (`command --version`), installing the Debian `package` with apt when it does not
/// (`apt-get update` only if the first try fails); `needed_by` names the task in the error a non-root user gets.
pub fn ensure_command(command: &str, package: &str, needed_by: &str) -> Result<()> {
    if Command::new(command).arg("--version").output().is_ok_and(|o| o.status.success()) {
        return Ok(());
    }
    if !is_root() {
        bail!("{needed_by} needs {command}: apt-get install --no-install-recommends {package}");
    }
    let install = || {
        run(Command::new("apt-get").env("DEBIAN_FRONTEND", "noninteractive").args([
            "install",
            "-y",
            "-qq",
            "--no-install-recommends",
            package,
        ]))
    };
    install().or_else(|_| {
        run(Command::new("apt-get").args(["update", "-qq"]))?;
        install()
    })
}
