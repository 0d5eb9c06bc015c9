//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs the cargo-fuzz targets in fuzz/ (every parser of outside input:
//! cgroup and /proc files, mountinfo and cgroup paths, the config, signed cache ids, the routing header, the brake's
//! record) for N seconds each (default 20), on the nightly toolchain, each from its seed corpus kept in the tree
//! (fuzz/corpus/<target>/, seeded from tests/fixtures) and the inputs earlier runs found (target/fuzz-corpus/<target>/,
//! where a run adds what it finds: the tree keeps only chosen inputs). Installs cargo-fuzz when it
//! is missing. A crash fails the task and leaves its input in fuzz/artifacts/<target>/.

use crate::util::{root, run as sh};
use anyhow::{bail, Result};
use std::process::Command;

/// Every target, as fuzz/Cargo.toml names them.
const TARGETS: &[&str] =
    &["cgroup_files", "proc_files", "mounts_and_paths", "config", "tokens", "routing", "brake_record"];

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per target.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Only these targets (default: all).
    targets: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let root = root();
    let have = Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output();
    if !have.is_ok_and(|o| o.status.success()) {
        sh(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let chosen: Vec<&str> = if args.targets.is_empty() {
        TARGETS.to_vec()
    } else {
        for t in &args.targets {
            if !TARGETS.contains(&t.as_str()) {
                bail!("unknown fuzz target {t:?} (one of {})", TARGETS.join(", "));
            }
        }
        args.targets.iter().map(String::as_str).collect()
    };
    // One build for every target, then each run from its corpus.
    sh(Command::new("cargo").current_dir(&root).args(["+nightly", "fuzz", "build", "--fuzz-dir", "fuzz"]))?;
    for t in &chosen {
        let seeds = root.join("fuzz/corpus").join(t);
        let found = crate::util::target_dir().join("fuzz-corpus").join(t);
        std::fs::create_dir_all(&seeds)?;
        std::fs::create_dir_all(&found)?;
        eprintln!("fuzz: {t} for {} s", args.seconds);
        // libFuzzer writes new inputs into the first corpus directory and reads the others.
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&root).args(["+nightly", "fuzz", "run", "--fuzz-dir", "fuzz", t]).arg(&found).arg(&seeds);
        sh(cmd.args([
            "--",
            &format!("-max_total_time={}", args.seconds),
            "-rss_limit_mb=2048",
            "-max_len=65536",
            "-print_final_stats=1",
        ]))?;
    }
    eprintln!("fuzz: {} targets, {} s each: no crash", chosen.len(), args.seconds);
    Ok(())
}
