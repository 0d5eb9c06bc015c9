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
    /// Benchmarks: `sampler`, `host-reads`, `agent-cpu`, `probes`, `proxy`, `proxy-instructions`, `reaction`,
    /// `reaction-crowd`, `web`, `config`, `cluster`, `image`; `all` runs them and writes docs/benchmarks.md whole.
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
    forget_cargo_run_env();
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

/// Drops the variables `cargo run` (and so `cargo xtask`) sets for this binary, before any cargo is spawned from it.
///
/// Cargo checks a build script's `rerun-if-env-changed` against its own environment, and some build scripts name
/// variables that `cargo run` sets: ring's names `CARGO_PKG_NAME` and `CARGO_MANIFEST_DIR`. A cargo spawned by
/// `cargo xtask …` would then see `xtask`'s values, one spawned by `target/debug/xtask …` (as CI's background job
/// does) or by hand none, and each would rebuild ring and everything above it that the other had built: over five
/// minutes of a release build, once for the release binaries and once for the fuzz targets.
fn forget_cargo_run_env() {
    const SET_BY_CARGO_RUN: [&str; 4] =
        ["CARGO_CRATE_NAME", "CARGO_BIN_NAME", "CARGO_PRIMARY_PACKAGE", "CARGO_RUSTC_CURRENT_DIR"];
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("CARGO_PKG_") || name.starts_with("CARGO_MANIFEST_") || SET_BY_CARGO_RUN.contains(&name) {
            // Single-threaded here: nothing else reads the environment yet.
            std::env::remove_var(name);
        }
    }
}
