//! `cargo xtask build`: builds the agent (release) with its eBPF object.

use crate::util::{root, run as sh};
use anyhow::Result;
use std::process::Command;

pub fn run() -> Result<()> {
    sh(Command::new("cargo").current_dir(root()).args(["build", "--release", "-p", "monitor"]))
}
