//! `cargo xtask bench <name>`: benchmarks whose figures go to docs/benchmarks.md.

use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// Which benchmark: sampler, agent-cpu.
    name: String,
}

pub fn run(args: Args) -> Result<()> {
    anyhow::bail!("bench {}: not built yet", args.name)
}
