//! `cargo xtask test`: the whole suite. Makes sure the eBPF toolchain is there (`setup`, quick when it is), builds
//! the agent (the integration tests run the real binary), then runs `cargo test --workspace`. Tests that need root
//! or eBPF skip with a printed reason locally and fail in CI (`CI=true`).

use crate::util::{root, run as sh};
use anyhow::Result;
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    /// Extra arguments passed to `cargo test` (e.g. a test name filter).
    #[arg(trailing_var_arg = true)]
    rest: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let root = root();
    if let Err(e) = crate::setup::run() {
        if std::env::var("CI").as_deref() == Ok("true") {
            return Err(e.context("the eBPF toolchain is required in CI"));
        }
        eprintln!("test: eBPF toolchain not installed ({e:#}); the agent is built without probes");
    }
    sh(Command::new("cargo").current_dir(&root).args(["build", "-p", "monitor", "--bins"]))?;
    let bin = root.join("target/debug/monitor");
    sh(Command::new("cargo")
        .current_dir(&root)
        .env("MONITOR_BIN", &bin)
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(&args.rest))
}
