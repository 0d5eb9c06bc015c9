//! `cargo xtask build`: builds the agent (release) with its eBPF object; fails when the object cannot be built
//! (run `cargo xtask setup` first) instead of producing an agent with probes disabled.

use crate::util::{root, run as sh};
use anyhow::Result;
use std::process::Command;

pub fn run() -> Result<()> {
    sh(Command::new("cargo").current_dir(root()).env("MONITOR_EBPF_REQUIRED", "1").env_remove("AYA_BUILD_SKIP").args([
        "build",
        "--release",
        "-p",
        "monitor",
    ]))
}
