//! `cargo xtask setup`: installs what the eBPF build needs (issue 3).

use anyhow::Result;

pub fn run() -> Result<()> {
    eprintln!("setup: nothing to install yet");
    Ok(())
}
