//! The host's integration test binaries, run again in the 6.12 VM on cgroup v2. Every test that makes its memory
//! group with `monitor_tests::Group::here` lists itself in `target/test-groups.txt` during `cargo xtask test` (one
//! `<test target> <test>` line each); the VM runs exactly those tests of these binaries, with `--exact`, on the
//! hierarchy production runs. The binaries are the host's own debug builds (glibc; the guest is the same Debian
//! release), copied to the same absolute paths in the guest, because each names its fixtures by the path cargo
//! built them at (`CARGO_BIN_EXE_*`).

use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The list the host suite writes, in the target directory.
pub const GROUPS_FILE: &str = "test-groups.txt";

/// The integration test binaries (tests/tests/<name>) that run on v2: those that drive the agent, the front door
/// and the reaction against a group.
pub const BINARIES: [&str; 5] = ["agent", "reaction", "run", "proxy", "bounds"];

/// One test binary and the tests of it to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binary {
    pub name: String,
    pub exe: PathBuf,
    pub tests: Vec<String>,
}

/// Reads `<test target> <test>` lines into the tests of each test target.
pub fn parse_groups(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut by_exe: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let Some((exe, test)) = line.trim().split_once(' ') else { continue };
        let tests = by_exe.entry(exe.to_string()).or_default();
        if !tests.iter().any(|t| t == test) {
            tests.push(test.to_string());
        }
    }
    for tests in by_exe.values_mut() {
        tests.sort();
    }
    by_exe
}

/// Builds the test binaries as `cargo xtask test` does (`--workspace`: the same features, so the same executables,
/// and a no-op after it) and returns them with the tests the host suite listed, binaries with none left out. Fails
/// when there is no list: `cargo xtask test` (as root) writes it.
pub fn collect(root: &Path, target: &Path) -> Result<Vec<Binary>> {
    let list = target.join(GROUPS_FILE);
    let text = std::fs::read_to_string(&list).with_context(|| {
        format!(
            "{} is missing: `cargo xtask test` as root writes it (the tests that make a memory group, to run on v2)",
            list.display()
        )
    })?;
    let groups = parse_groups(&text);
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root)
        .args(["test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"])
        .stdout(Stdio::piped());
    eprintln!("+ {cmd:?}");
    let out = cmd.output().context("cargo test --no-run")?;
    if !out.status.success() {
        bail!("cargo test --no-run failed: {}", out.status);
    }
    let mut bins = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let (Some(name), Some(exe)) = (v.pointer("/target/name").and_then(|n| n.as_str()), v["executable"].as_str())
        else {
            continue;
        };
        let is_test =
            v.pointer("/target/kind").and_then(|k| k.as_array()).is_some_and(|k| k.iter().any(|x| x == "test"));
        if !is_test || !BINARIES.contains(&name) {
            continue;
        }
        let Some(tests) = groups.get(name) else { continue };
        bins.push(Binary { name: name.to_string(), exe: PathBuf::from(exe), tests: tests.clone() });
    }
    bins.sort_by_key(|b| BINARIES.iter().position(|n| *n == b.name));
    if bins.is_empty() {
        bail!(
            "{} names none of the test binaries {BINARIES:?} as they are built now: run `cargo xtask test`",
            list.display()
        );
    }
    Ok(bins)
}

/// The fixtures the test binaries start, by the absolute paths compiled into them: cargo's debug builds of this
/// workspace's binaries beside the test executables' `deps/` folder.
pub fn fixtures(bins: &[Binary]) -> Vec<PathBuf> {
    let Some(dir) = bins.first().and_then(|b| b.exe.parent()).and_then(Path::parent) else { return Vec::new() };
    ["alloc-hog", "grower", "fixture-backend", "bare-hop", "byte-relay", "thread-holder"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.is_file())
        .collect()
}

/// The guest's list: one line per binary, its path and the tests to run.
pub fn guest_list(bins: &[Binary]) -> String {
    bins.iter().map(|b| format!("{} {}\n", b.exe.display(), b.tests.join(" "))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_list_by_test_target() {
        let text = "agent actions::a\nrun drain::x\nagent actions::a\nagent v1::b\n\nbroken\n";
        let got = parse_groups(text);
        assert_eq!(got.len(), 2);
        assert_eq!(got["agent"], ["actions::a", "v1::b"]);
        assert_eq!(got["run"], ["drain::x"]);
    }

    #[test]
    fn the_guest_list_is_a_line_per_binary() {
        let bins = vec![
            Binary {
                name: "agent".into(),
                exe: "/t/debug/deps/agent-1".into(),
                tests: vec!["a::x".into(), "b::y".into()],
            },
            Binary { name: "run".into(), exe: "/t/debug/deps/run-2".into(), tests: vec!["c::z".into()] },
        ];
        assert_eq!(guest_list(&bins), "/t/debug/deps/agent-1 a::x b::y\n/t/debug/deps/run-2 c::z\n");
    }
}
