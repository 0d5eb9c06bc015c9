//! `cargo xtask test`: the whole suite. Makes sure the eBPF toolchain is there (`setup`, quick when it is), builds
//! the agent (the integration tests run the real binary), then runs `cargo test --workspace`. Tests that need root
//! or eBPF skip with a printed reason locally and fail in CI (`CI=true`). It ends with `N passed, M failed, K
//! skipped` and the reason of each skip (the tests write them to a file it names in `MONITOR_TEST_SKIPS`).
//! `--install-deps` first installs the Debian packages the tests drive (.ci/packages), as CI does.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[derive(clap::Args)]
pub struct Args {
    /// Install the Debian packages the tests drive first (.ci/packages; needs root and apt-get).
    #[arg(long)]
    install_deps: bool,
    /// Extra arguments passed to `cargo test` (e.g. a test name filter).
    #[arg(trailing_var_arg = true)]
    rest: Vec<String>,
}

pub fn run(args: Args) -> Result<()> {
    let root = root();
    if args.install_deps {
        install_deps(&root)?;
    }
    if let Err(e) = crate::setup::run() {
        if std::env::var("CI").as_deref() == Ok("true") {
            return Err(e.context("the eBPF toolchain is required in CI"));
        }
        eprintln!("test: eBPF toolchain not installed ({e:#}); the agent is built without probes");
    }
    sh(Command::new("cargo").current_dir(&root).args(["build", "-p", "monitor", "--bins"]))?;
    let target = crate::util::target_dir();
    let bin = target.join("debug/monitor");
    let skips_file = target.join("test-skips.txt");
    let _ = std::fs::remove_file(&skips_file);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&root)
        .env("MONITOR_BIN", &bin)
        .env("MONITOR_TEST_SKIPS", &skips_file)
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(&args.rest)
        .stdout(Stdio::piped());
    eprintln!("+ {cmd:?}");
    let mut child = cmd.spawn().context("starting cargo test")?;
    let mut totals = Totals::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            totals.add(&line);
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    let skips: Vec<String> =
        std::fs::read_to_string(&skips_file).unwrap_or_default().lines().map(String::from).collect();
    println!(
        "\ncargo xtask test: {} passed, {} failed, {} skipped ({} ignored)",
        totals.passed,
        totals.failed,
        skips.len(),
        totals.ignored
    );
    for s in &skips {
        println!("  skipped {s}");
    }
    if !status.success() {
        bail!("cargo test failed: {status}");
    }
    Ok(())
}

/// The sums of cargo test's `test result:` lines.
#[derive(Debug, Default, PartialEq)]
struct Totals {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl Totals {
    /// Adds `test result: ok. 3 passed; 0 failed; 1 ignored; …`.
    fn add(&mut self, line: &str) {
        let Some(rest) = line.strip_prefix("test result: ") else { return };
        for part in rest.split(['.', ';']) {
            let mut words = part.split_whitespace();
            let (Some(n), Some(what)) = (words.next().and_then(|n| n.parse::<u64>().ok()), words.next()) else {
                continue;
            };
            match what {
                "passed" => self.passed += n,
                "failed" => self.failed += n,
                "ignored" => self.ignored += n,
                _ => {}
            }
        }
    }
}

/// Installs the missing packages of .ci/packages with apt-get, as .ci/run does.
fn install_deps(root: &std::path::Path) -> Result<()> {
    let list = std::fs::read_to_string(root.join(".ci/packages")).context("reading .ci/packages")?;
    let wanted: Vec<&str> = list.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
    let installed = |p: &str| {
        Command::new("dpkg-query")
            .args(["-W", "-f=${Status}", p])
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("install ok installed"))
    };
    let missing: Vec<&str> = wanted.into_iter().filter(|p| !installed(p)).collect();
    if missing.is_empty() {
        eprintln!("test: every package of .ci/packages is installed");
        return Ok(());
    }
    eprintln!("test: installing {}", missing.join(" "));
    sh(Command::new("apt-get").args(["update", "-qq"]))?;
    sh(Command::new("apt-get")
        .env("DEBIAN_FRONTEND", "noninteractive")
        .args(["install", "-y", "-qq", "--no-install-recommends"])
        .args(&missing))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_add_up_every_result_line() {
        let mut t = Totals::default();
        for l in [
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.1s",
            "running 2 tests",
            "test result: FAILED. 5 passed; 2 failed; 0 ignored; 0 measured; 0 filtered out; finished in 1s",
        ] {
            t.add(l);
        }
        assert_eq!(t, Totals { passed: 8, failed: 2, ignored: 1 });
    }
}
