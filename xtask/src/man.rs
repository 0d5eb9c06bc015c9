//! `cargo xtask man [--out DIR]`: builds the monitor binary and has it write its man pages and shell completions
//! (`monitor generate-docs`) under DIR (default target/dist/doc): `man/monitor*.1` and
//! `completions/{monitor.bash,_monitor,monitor.fish}`. [`generate`] is the part the packaging task calls with the
//! binary it ships.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    /// Where to write (default: target/dist/doc under the workspace).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The monitor binary to run (default: built now, target/debug/monitor).
    #[arg(long, value_name = "FILE")]
    monitor: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let monitor = match a.monitor {
        Some(m) => m,
        None => {
            // The pages only need the command line's definition: a debug build is enough and quick.
            sh(Command::new("cargo").current_dir(root()).args(["build", "-p", "monitor", "--bin", "monitor"]))?;
            crate::util::target_dir().join("debug/monitor")
        }
    };
    let out = a.out.unwrap_or_else(|| crate::util::target_dir().join("dist/doc"));
    generate(&monitor, &out)?;
    eprintln!("man pages in {}, completions in {}", out.join("man").display(), out.join("completions").display());
    Ok(())
}

/// Runs `monitor_binary generate-docs out`: writes `out/man/*.1` and `out/completions/*`.
pub fn generate(monitor_binary: &Path, out: &Path) -> Result<()> {
    if !monitor_binary.is_file() {
        bail!("{}: no monitor binary there (build it with `cargo build -p monitor`)", monitor_binary.display());
    }
    let status = Command::new(monitor_binary)
        .arg("generate-docs")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .status()
        .with_context(|| format!("starting {}", monitor_binary.display()))?;
    if !status.success() {
        bail!("{} generate-docs {}: {status}", monitor_binary.display(), out.display());
    }
    Ok(())
}
