//! `cargo xtask test`: the whole suite. Makes sure the eBPF toolchain is there (`setup`, quick when it is), builds the
//! agent (the integration tests run the real binary), then runs `cargo test --workspace`. Tests that need root or eBPF
//! skip with a printed reason locally and fail in CI (`monitor_tests::in_ci` says when). It ends with `N passed, M
//! failed, K skipped` and each skip's test and reason: the tests write their skips to the file `MONITOR_TEST_SKIPS`
//! names, and a skipped test, which returns normally, is one cargo counts as passed, so N is cargo's passed less the
//! skipped tests (matched by name to cargo's `test <name> ... ok` lines). `--install-deps` first installs the Debian
//! packages the tests drive (.ci/packages), as CI does.

use crate::util::{root, run as sh};
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;
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
        crate::setup::install_packages(&root)?;
    }
    if let Err(e) = crate::setup::run() {
        if monitor_tests::in_ci() {
            return Err(e.context("the eBPF toolchain is required in CI"));
        }
        eprintln!("test: eBPF toolchain not installed ({e:#}); the agent is built without probes");
    }
    sh(Command::new("cargo").current_dir(&root).args(["build", "-p", "monitor", "--bins"]))?;
    let target = crate::util::target_dir();
    let bin = target.join("debug/monitor");
    let skips_file = target.join("test-skips.txt");
    let _ = std::fs::remove_file(&skips_file);
    // The tests that make a memory group list themselves here, for `cargo xtask vmtest` to run again on v2; a
    // filtered run leaves the whole suite's list as it is.
    let groups_file = target.join(crate::vmtest::hosttests::GROUPS_FILE);
    let partial = groups_file.with_extension("partial");
    let _ = std::fs::remove_file(&partial);
    let mut cmd = Command::new("cargo");
    cmd.current_dir(&root)
        .env("MONITOR_BIN", &bin)
        .env("MONITOR_TEST_SKIPS", &skips_file)
        .env("MONITOR_TEST_GROUPS", &partial)
        .args(["test", "--workspace", "--no-fail-fast"])
        .args(&args.rest)
        .stdout(Stdio::piped());
    eprintln!("+ {cmd:?}");
    let mut child = cmd.spawn().context("starting cargo test")?;
    let mut totals = Totals::default();
    let mut results = Results::default();
    if let Some(out) = child.stdout.take() {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            println!("{line}");
            totals.add(&line);
            results.add(&line);
        }
    }
    let status = child.wait().context("waiting for cargo test")?;
    if args.rest.is_empty() && std::fs::rename(&partial, &groups_file).is_err() {
        // No test made a group (no root here): no list rather than a stale one.
        let _ = std::fs::remove_file(&groups_file);
    }
    let skips = Skip::parse_all(&std::fs::read_to_string(&skips_file).unwrap_or_default());
    let summary = Summary::of(&totals, &results, &skips);
    println!("\n{}", summary.text(&skips));
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

/// How many times each test name passed: cargo test's `test <name> ... ok` lines (one per test binary that has a
/// test of that name).
#[derive(Debug, Default)]
struct Results {
    passed: BTreeMap<String, u64>,
}

impl Results {
    fn add(&mut self, line: &str) {
        let Some((name, outcome)) = line.strip_prefix("test ").and_then(|l| l.rsplit_once(" ... ")) else { return };
        if outcome.trim_end() == "ok" {
            *self.passed.entry(name.to_string()).or_default() += 1;
        }
    }
}

/// One line of the skip file: `<test name>: <reason>`, the name as cargo test prints it (`brake::tests::x`).
#[derive(Debug, PartialEq)]
struct Skip {
    test: String,
    reason: String,
}

impl Skip {
    fn parse_all(text: &str) -> Vec<Skip> {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| match l.split_once(": ") {
                Some((test, reason)) => Skip { test: test.to_string(), reason: reason.to_string() },
                None => Skip { test: l.to_string(), reason: String::new() },
            })
            .collect()
    }
}

/// The counts the run ends with.
#[derive(Debug, PartialEq)]
struct Summary {
    /// Tests that passed and did not skip.
    passed: u64,
    failed: u64,
    /// Tests that skipped and then returned (cargo counted them as passed).
    skipped: u64,
    ignored: u64,
    /// Skip lines of tests with no `... ok` line left to match: tests that failed after a skip (counted in
    /// `failed`), or whose result line was lost in their own output (`--nocapture`).
    unmatched: Vec<usize>,
}

impl Summary {
    /// Each skip line is a test that skipped once in one test binary (the helper writes one line per test and
    /// process), so a name's skips are subtracted up to the number of times that name passed.
    fn of(totals: &Totals, results: &Results, skips: &[Skip]) -> Summary {
        let mut left = results.passed.clone();
        let mut unmatched = Vec::new();
        let mut skipped = 0;
        for (i, s) in skips.iter().enumerate() {
            match left.get_mut(&s.test) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    skipped += 1;
                }
                _ => unmatched.push(i),
            }
        }
        Summary {
            passed: totals.passed.saturating_sub(skipped),
            failed: totals.failed,
            skipped,
            ignored: totals.ignored,
            unmatched,
        }
    }

    fn text(&self, skips: &[Skip]) -> String {
        let mut s = format!(
            "cargo xtask test: {} passed, {} failed, {} skipped ({} ignored)",
            self.passed, self.failed, self.skipped, self.ignored
        );
        for (i, k) in skips.iter().enumerate() {
            let how = if self.unmatched.contains(&i) { "skipped, then did not pass" } else { "skipped" };
            s.push_str(&format!("\n  {how} {}: {}", k.test, k.reason));
        }
        s
    }
}

/// Installs the missing packages of .ci/packages with apt-get, as .ci/run does.
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

    /// The output of a run: three binaries, skips among the passed tests, a failure after a skip.
    const OUTPUT: &str = "\
running 3 tests
test brake::tests::engage_follow_release ... ok
test brake::tests::records_parse_and_print ... ok
test tests::shared_name ... ok
test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.1s
running 4 tests
test v1::thp_backed_memory_is_counted ... ok
test v1::alloc_hog_holds_what_it_says ... ok
test tests::shared_name ... ok
test web::chromium_renders_the_home_page ... FAILED
test result: FAILED. 3 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 9s
running 2 tests
test probes::counts ... ignored
test src/lib.rs - feed (line 12) ... ok
test result: ok. 1 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.2s
";

    fn summary(skips: &str) -> (Summary, Vec<Skip>) {
        let (mut totals, mut results) = (Totals::default(), Results::default());
        for l in OUTPUT.lines() {
            totals.add(l);
            results.add(l);
        }
        let skips = Skip::parse_all(skips);
        (Summary::of(&totals, &results, &skips), skips)
    }

    #[test]
    fn skipped_tests_are_not_counted_as_passed() {
        for (skips, passed, skipped, unmatched) in [
            ("", 7, 0, vec![]),
            ("brake::tests::engage_follow_release: no filesystem here keeps user xattrs\n", 6, 1, vec![]),
            (
                "v1::thp_backed_memory_is_counted: needs root\nbrake::tests::engage_follow_release: needs root\n",
                5,
                2,
                vec![],
            ),
            // The same name in two binaries, skipped in both, then in a third that has no such test.
            ("tests::shared_name: a\ntests::shared_name: b\ntests::shared_name: c\n", 5, 2, vec![2]),
            // Skipped, then failed: counted once, as failed.
            ("web::chromium_renders_the_home_page: chromium not installed\n", 7, 0, vec![0]),
            ("src/lib.rs - feed (line 12): needs root\n", 6, 1, vec![]),
            // A name cargo never printed as passing.
            ("nowhere: x\n", 7, 0, vec![0]),
        ] {
            let (s, _) = summary(skips);
            assert_eq!((s.passed, s.skipped, s.unmatched), (passed, skipped, unmatched), "{skips}");
            assert_eq!((s.failed, s.ignored), (1, 1), "{skips}");
            assert_eq!(s.passed + s.skipped, 7, "cargo's passed: every skipped test is one of them");
        }
    }

    #[test]
    fn the_summary_names_each_skip() {
        let skips = "v1::thp_backed_memory_is_counted: needs root\nweb::chromium_renders_the_home_page: no chromium\n";
        let (s, skips) = summary(skips);
        assert_eq!(
            s.text(&skips),
            "cargo xtask test: 6 passed, 1 failed, 1 skipped (1 ignored)\n  \
             skipped v1::thp_backed_memory_is_counted: needs root\n  \
             skipped, then did not pass web::chromium_renders_the_home_page: no chromium"
        );
    }

    #[test]
    fn skip_lines_split_at_the_first_colon_space() {
        let skips = Skip::parse_all("a::b: needs x: y\n\nbare\n");
        assert_eq!(
            skips,
            vec![
                Skip { test: "a::b".into(), reason: "needs x: y".into() },
                Skip { test: "bare".into(), reason: String::new() },
            ]
        );
    }
}
