//! `cargo xtask demo`: the whole system on this host.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> Result<()> {
    anyhow::bail!("demo: not built yet")
}
