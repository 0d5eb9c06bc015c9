//! Project tasks: `cargo xtask setup | build | dist | demo | test | bench | vmtest | fuzz | man`.

use anyhow::Result;
use clap::{Parser, Subcommand};

mod bench;
mod build;
mod demo;
mod dist;
mod fuzz;
mod man;
mod setup;
mod test;
mod util;
mod vmtest;

#[derive(Parser)]
#[command(about = "monitor's project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what the eBPF build needs (rust-src on nightly, bpf-linker), idempotently; with `--packages` the
    /// Debian packages the tests drive too.
    Setup(setup::Args),
    /// Build the eBPF object and the agent (release).
    Build,
    /// Build the Debian package (cargo-deb): target/debian/monitor_<version>-1_amd64.deb.
    Dist(dist::Args),
    /// Run the whole system on this host: a limited test cgroup, processes in it, the agent, a small load.
    Demo(demo::Args),
    /// Run every test (unit, integration, root and eBPF ones when allowed).
    Test(test::Args),
    /// Benchmarks: `sampler`, `host-reads`, `agent-cpu`, `probes`, `proxy`, `proxy-instructions`, `reaction`, `web`,
    /// `config`, `cluster`; `all` runs them and writes docs/benchmarks.md whole.
    Bench(bench::Args),
    /// Run the in-VM suite on real cgroup v2 and Debian kernels 6.1 / 6.12, and the host tests that make a group
    /// on v2 (qemu, software emulation).
    Vmtest(vmtest::Args),
    /// Fuzz every parser of outside input for a bounded time (cargo-fuzz, nightly).
    Fuzz(fuzz::Args),
    /// Write the man pages and shell completions, generated from the command line's definition.
    Man(man::Args),
}

fn main() -> Result<()> {
    match Cli::parse().task {
        Task::Setup(a) => setup::task(a),
        Task::Build => build::run(),
        Task::Dist(a) => dist::run(a),
        Task::Demo(a) => demo::run(a),
        Task::Test(a) => test::run(a),
        Task::Bench(a) => bench::run(a),
        Task::Vmtest(a) => vmtest::run(a),
        Task::Fuzz(a) => fuzz::run(a),
        Task::Man(a) => man::run(a),
    }
}
