//! `cargo xtask fuzz [--seconds N] [TARGET…]`: runs the cargo-fuzz targets in fuzz/ (every parser of outside input:
//! cgroup and /proc files, mountinfo and cgroup paths, the socket tables and sock_diag replies, the config, signed
//! cache ids, the routing header, the brake's record, the cluster's hop header and gossip datagram, the once-only rule
//! they share, and the action POSTs' proof) for N seconds each (default 20), on the nightly toolchain, each from its
//! seed corpus kept in the tree (fuzz/corpus/<target>/, seeded from tests/fixtures and from what the code itself
//! produces) and the inputs earlier runs found (target/fuzz-corpus/<target>/, where a run adds what it finds: the tree
//! keeps only chosen inputs). `--jobs N` runs N targets at once, one core each. The targets are the `[[bin]]`s of
//! fuzz/Cargo.toml, as `cargo fuzz list` gives them: adding one there is all it takes for this task and CI to run it.
//! Installs cargo-fuzz when it is missing. A crash fails the task and leaves its input in fuzz/artifacts/<target>/.

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
    /// Targets run at once, each its own libFuzzer process on one core (CI runs two: its two cores). With more than
    /// one, each target's output goes to target/fuzz-logs/<target>.log and its final lines are printed as it ends.
    #[arg(long, default_value_t = 1)]
    jobs: usize,
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
    let jobs = args.jobs.max(1);
    if jobs == 1 {
        for t in &chosen {
            eprintln!("fuzz: {t} for {} s", args.seconds);
            sh(&mut fuzz_run(&root, t, args.seconds)?)?;
        }
    } else {
        run_in_parallel(&root, &chosen, args.seconds, jobs)?;
    }
    eprintln!("fuzz: {} targets, {} s each: no crash", chosen.len(), args.seconds);
    Ok(())
}

/// `cargo fuzz run` of one target for `seconds`, from the inputs earlier runs found and its seed corpus.
fn fuzz_run(root: &Path, target: &str, seconds: u64) -> Result<Command> {
    let seeds = root.join("fuzz/corpus").join(target);
    let found = crate::util::target_dir().join("fuzz-corpus").join(target);
    std::fs::create_dir_all(&seeds)?;
    std::fs::create_dir_all(&found)?;
    // libFuzzer writes new inputs into the first corpus directory and reads the others.
    let mut cmd = Command::new("cargo");
    cmd.current_dir(root).args(["+nightly", "fuzz", "run", "--fuzz-dir", "fuzz", target]).arg(&found).arg(&seeds);
    cmd.args([
        "--",
        &format!("-max_total_time={seconds}"),
        "-rss_limit_mb=2048",
        "-max_len=65536",
        "-print_final_stats=1",
    ]);
    Ok(cmd)
}

/// Runs the targets `jobs` at a time, each one's output in target/fuzz-logs/<target>.log. As each ends its last lines
/// (libFuzzer's final stats) are printed, or on a failure the last 80, with the log's path; every target runs even
/// after one fails, and the task then fails naming them.
fn run_in_parallel(root: &Path, chosen: &[&str], seconds: u64, jobs: usize) -> Result<()> {
    let logs = crate::util::target_dir().join("fuzz-logs");
    std::fs::create_dir_all(&logs)?;
    let mut waiting = chosen.iter().rev().copied().collect::<Vec<_>>();
    let mut running: Vec<(&str, std::path::PathBuf, std::process::Child)> = Vec::new();
    let mut failed = Vec::new();
    while !waiting.is_empty() || !running.is_empty() {
        while running.len() < jobs {
            let Some(t) = waiting.pop() else { break };
            let log = logs.join(format!("{t}.log"));
            let file = std::fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
            let mut cmd = fuzz_run(root, t, seconds)?;
            cmd.stdout(file.try_clone()?).stderr(file);
            eprintln!("fuzz: {t} for {} s (output in {})", seconds, log.display());
            let child = cmd.spawn().with_context(|| format!("starting {cmd:?}"))?;
            running.push((t, log, child));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let mut i = 0;
        while i < running.len() {
            let Some(status) = running[i].2.try_wait()? else {
                i += 1;
                continue;
            };
            let (t, log, _) = running.swap_remove(i);
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let tail = if status.success() { 8 } else { 80 };
            eprintln!("fuzz: {t} ended ({status}); the last lines of {}:", log.display());
            for l in &lines[lines.len().saturating_sub(tail)..] {
                eprintln!("  {l}");
            }
            if !status.success() {
                failed.push(t);
            }
        }
    }
    if !failed.is_empty() {
        bail!("fuzz: {} failed (a crash leaves its input in fuzz/artifacts/<target>/)", failed.join(", "));
    }
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
