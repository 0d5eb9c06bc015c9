//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs the cargo-fuzz targets in fuzz/ (every parser of outside input:
//! cgroup and /proc files, mountinfo and cgroup paths, the socket tables and sock_diag replies, the config, signed
//! cache ids, the routing header, the brake's record, the cluster's hop header and gossip datagram, the once-only rule
//! they share, and the action POSTs' proof) for N seconds each (default 20), on the nightly toolchain, each from its
//! seed corpus kept in the tree (fuzz/corpus/<target>/, seeded from tests/fixtures and from what the code itself
//! produces) and the inputs earlier runs found (target/fuzz-corpus/<target>/, where a run adds what it finds: the tree
//! keeps only chosen inputs). The targets are the `[[bin]]`s of fuzz/Cargo.toml, as `cargo fuzz list` gives them:
//! adding one there is all it takes for this task and CI to run it. Installs cargo-fuzz when it is missing. A crash
//! fails the task and leaves its input in fuzz/artifacts/<target>/.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per target.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// Install cargo-fuzz when missing and build every target, and stop (what CI runs beside its first build).
    #[arg(long)]
    build_only: bool,
    /// Only these targets (default: all).
    targets: Vec<String>,
}

/// Every target, as fuzz/Cargo.toml declares them.
fn targets(root: &Path) -> Result<Vec<String>> {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["+nightly", "fuzz", "list", "--fuzz-dir", "fuzz"]);
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    }
    let list: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(String::from).collect();
    if list.is_empty() {
        bail!("{cmd:?} lists no target");
    }
    Ok(list)
}

pub fn run(args: Args) -> Result<()> {
    let root = root();
    let have = Command::new("cargo").args(["+nightly", "fuzz", "--version"]).output();
    if !have.is_ok_and(|o| o.status.success()) {
        sh(Command::new("cargo").args(["install", "cargo-fuzz", "--locked"]))?;
    }
    let all = targets(&root)?;
    let chosen: Vec<&str> = if args.targets.is_empty() {
        all.iter().map(String::as_str).collect()
    } else {
        for t in &args.targets {
            if !all.contains(t) {
                bail!("unknown fuzz target {t:?} (one of {})", all.join(", "));
            }
        }
        args.targets.iter().map(String::as_str).collect()
    };
    // One build for every target, then each run from its corpus.
    sh(Command::new("cargo").current_dir(&root).args(["+nightly", "fuzz", "build", "--fuzz-dir", "fuzz"]))?;
    if args.build_only {
        eprintln!("fuzz: {} targets built", all.len());
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    /// Every file in fuzz/fuzz_targets/ is a `[[bin]]` of fuzz/Cargo.toml (so `cargo fuzz list`, this task and CI
    /// run it) and has a seed corpus, and every `[[bin]]` has its file.
    #[test]
    fn every_target_file_is_declared_and_seeded() {
        let fuzz = crate::util::root().join("fuzz");
        let manifest = std::fs::read_to_string(fuzz.join("Cargo.toml")).expect("fuzz/Cargo.toml");
        let declared: Vec<&str> =
            manifest.lines().filter_map(|l| l.strip_prefix("path = \"fuzz_targets/")?.strip_suffix(".rs\"")).collect();
        let mut files: Vec<String> = std::fs::read_dir(fuzz.join("fuzz_targets"))
            .expect("fuzz/fuzz_targets")
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".rs").map(String::from))
            .collect();
        files.sort();
        let mut sorted = declared.clone();
        sorted.sort();
        assert_eq!(sorted, files, "fuzz/Cargo.toml's [[bin]] paths against fuzz/fuzz_targets/");
        for name in &declared {
            assert!(manifest.contains(&format!("name = \"{name}\"")), "[[bin]] {name} named after its file");
            let seeds = std::fs::read_dir(fuzz.join("corpus").join(name)).map(|d| d.count()).unwrap_or(0);
            assert!(seeds > 0, "fuzz/corpus/{name}/ holds no seed");
        }
    }
}
