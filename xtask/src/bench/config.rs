//! `cargo xtask bench config`: how long `monitor check-config` (the release binary) takes on a file of 100,000
//! `[[process]]` tables, against the same on 10,000 measured in the same run. Linear validation takes about ten
//! times as long for ten times the processes; a check that compares each process with every other would take a
//! hundred times. Each size is timed 3 times and the fastest kept.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};

/// A config of `n` processes: one master, the rest workers, each with its own name and port, but the last, which
/// reuses the first's port. So each size ends in the same error, named at its line: more than 65,535 processes
/// cannot all have ports of their own, and the bench times the same path for both sizes.
fn config(n: usize) -> String {
    let mut s = String::from("[group]\ncgroup = \"auto\"\n");
    for i in 0..n {
        let role = if i == 0 { "master" } else { "worker" };
        let port = if i + 1 == n { 1 } else { 1 + i % 65_535 };
        let _ = write!(s, "[[process]]\nname = \"p{i}\"\nrole = \"{role}\"\ncommand = [\"srv\"]\nport = {port}\n");
    }
    s
}

/// The fastest of 3 runs of `check-config` on a file of `n` processes, and its one-line answer.
fn time_check(bin: &std::path::Path, dir: &std::path::Path, n: usize) -> Result<(Duration, String)> {
    let file = dir.join(format!("processes-{n}.toml"));
    std::fs::write(&file, config(n)).with_context(|| format!("writing {}", file.display()))?;
    let mut best = Duration::MAX;
    let mut said = String::new();
    for _ in 0..3 {
        let t0 = Instant::now();
        let out = Command::new(bin).arg("check-config").arg(&file).output().context("running monitor check-config")?;
        best = best.min(t0.elapsed());
        // The first line: past 65,535 processes every reused port is a problem of its own, each on a line.
        let text = String::from_utf8_lossy(if out.status.success() { &out.stdout } else { &out.stderr }).into_owned();
        said = text.lines().next().unwrap_or_default().trim().to_string();
    }
    Ok((best, said))
}

pub fn run() -> Result<()> {
    sh(Command::new("cargo").current_dir(root()).args(["build", "--release", "-p", "monitor", "--bin", "monitor"]))?;
    let bin = crate::util::target_dir().join("release/monitor");
    let dir = monitor_tests::temp_dir("bench-config");
    let (small, said_small) = time_check(&bin, &dir, 10_000)?;
    let (large, said) = time_check(&bin, &dir, 100_000)?;
    let _ = std::fs::remove_dir_all(&dir);
    if !said_small.contains("process[9999].port") || !said.contains("process[65535].port") {
        bail!("check-config did not name the first reused port: {said_small} / {said}");
    }
    let ratio = large.as_secs_f64() / small.as_secs_f64();
    println!("check-config, fastest of 3 (release):");
    println!("  10,000 processes:  {:>7.3} s: {said_small}", small.as_secs_f64());
    println!("  100,000 processes: {:>7.3} s (goal < 2 s): {said}", large.as_secs_f64());
    println!("  ratio {ratio:.1} for 10 times the processes (linear: about 10; quadratic: about 100)");
    Ok(())
}
