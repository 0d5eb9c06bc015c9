//! The page against the run it is written from, and docs/benchmarks.md against the generator.

use super::*;
use crate::bench::all::tests::done;
use crate::bench::all_text::BENCHES;

#[test]
fn kernel_console_lines_and_records_are_left_out() {
    let out = "[reaction 6.12] vm: 6.12.118\n\
               [reaction 6.12] [   75.812237] grower invoked oom-killer: gfp_mask=0xcc0\n\
               [   75.816014]  <TASK>\n\
               [reaction 6.12] @@BENCH reaction {\"acted_first\":5}\n\
               [reaction 6.12] [run 1.5] stays\n\
               [1.] stays too\n";
    assert_eq!(markdown(out), "- [reaction 6.12] vm: 6.12.118\n- [reaction 6.12] [run 1.5] stays\n- [1.] stays too\n");
}

#[test]
fn output_becomes_markdown() {
    let out = "running 1 test\ntest x ... first line\n| a | b |\n| --- | --- |\n| 1 | 2 |\nafter\nok\n\
               2026-12-01T14:25:05.599825Z  WARN monitor::sampler: request counting is off\n\
               test result: ok. 1 passed\n";
    assert_eq!(markdown(out), "- first line\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n- after\n");
    assert_eq!(unmarkdown(&markdown(out)), "first line\n| a | b |\n| --- | --- |\n| 1 | 2 |\nafter\n");
    assert_eq!(markdown(""), "(nothing)\n");
    assert_eq!(unmarkdown("(nothing)\n"), "");
}

/// A run with every kind of outcome: done, failed with and without output, not run, not reached.
fn run() -> Run {
    let mut outcomes: Vec<Outcome> = BENCHES.iter().map(|_| Outcome::Pending).collect();
    outcomes[0] = done("16 processes: raw pread of the same files 39.5 µs, full sample 46.0 µs\n", None);
    outcomes[1] = done("", None);
    outcomes[2] = Outcome::NotRun("needs nginx, wrk, not found on this machine".into());
    outcomes[3] =
        done("c=1: monitor/nginx throughput 0.92\n| a | b |\n", Some(("exit status: 101", "error: one\nerror: two")));
    outcomes[4] = done("", Some(("stopped after 90 min", "")));
    for (o, b) in outcomes.iter_mut().zip(BENCHES) {
        if let Outcome::Done { command, .. } = o {
            *command = crate::bench::all::command_line(b, true);
        }
    }
    // Run again with the full knobs on a quick page: its section names what it ran with.
    if let Outcome::Done { command, .. } = &mut outcomes[4] {
        *command = crate::bench::all::command_line(&BENCHES[4], false);
    }
    Run {
        head: Head {
            started: "2026-12-02 08:52 UTC".into(),
            build: "`bfd4da2`".into(),
            machine: "AMD EPYC, nproc 2, 24 GiB, Linux 6.18.44, the memory controller on cgroup v1".into(),
            load: "1.33 1.11 1.56".into(),
            options: format!("{QUICK}: fewer rounds, with `--skip web`"),
        },
        quick: true,
        outcomes,
        took_secs: 26.0 * 60.0,
        end_load: "38.48 11.93 5.07".into(),
        done: false,
    }
}

#[test]
fn a_page_reads_back_into_its_run() {
    let run = run();
    let text = page(BENCHES, &run);
    assert_eq!(read(&text, BENCHES).expect("read back"), run);
    assert!(text.contains(&format!("{RUN}2026-12-02 08:52 UTC, build `bfd4da2`; {QUICK}")), "{text}");
    assert!(text.contains("\n## Sampler\n\n"), "{text}");
    let full = format!("\nCommand: `{}`.\n", crate::bench::all::command_line(&BENCHES[4], false));
    assert!(BENCHES[4].full != BENCHES[4].quick && text.contains(&full), "{text}");
    assert!(text.contains("**Not run**: needs nginx, wrk, not found on this machine.\n"), "{text}");
    assert!(text.contains("**Failed** (exit status: 101), started 2026-12-02 08:52 UTC, after 183 s"), "{text}");
    assert!(text.ends_with(TESTS_HOLD), "the bounds the tests hold close the page");
    // The sampler's figures, read from its output; the ones it did not print say so.
    assert!(text.contains("| full sample, 16 processes | 46.0 µs |\n"), "{text}");
    assert!(text.contains("| full sample / raw pread | not in what it printed |\n"), "{text}");
}

#[test]
fn a_page_that_is_not_the_generators_is_refused() {
    let text = page(BENCHES, &run());
    for (from, to) in [
        (RUN, "**This run** started "),
        (". Stopped, or still running, after ", ". Done after "),
        ("Ran 2026-12-02 08:52 UTC, 183 s, load", "Ran on 2026-12-02, load"),
        ("**Failed** (exit status: 101), started", "**Failed**: exit status 101, started"),
    ] {
        assert!(text.contains(from), "{from}");
        assert!(read(&text.replacen(from, to, 1), BENCHES).is_err(), "{from} -> {to}");
    }
}

/// The page in the repository is exactly what the generator writes from what it says each benchmark printed: no
/// part of it is edited by hand (change bench/all_text.rs or bench/all_figures.rs, then `cargo xtask bench all
/// --rewrite`).
#[test]
fn docs_benchmarks_md_is_what_the_generator_writes() {
    let path = crate::util::root().join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let run = read(&text, BENCHES).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let again = page(BENCHES, &run);
    if again != text {
        let (a, b): (Vec<&str>, Vec<&str>) = (text.lines().collect(), again.lines().collect());
        let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
        panic!(
            "docs/benchmarks.md differs from what `cargo xtask bench all --rewrite` writes, from line {}:\n  page: \
             {:?}\n  generator: {:?}",
            at + 1,
            a.get(at),
            b.get(at)
        );
    }
}

/// The value of `knob` on a section's command line (`KNOB=value …`), else `default`.
fn knob(command: &str, knob: &str, default: u64) -> u64 {
    command
        .split_whitespace()
        .find_map(|w| w.strip_prefix(knob)?.strip_prefix('='))
        .map_or(default, |v| v.parse().unwrap_or_else(|e| panic!("{knob}={v}: {e}")))
}

/// The number right after `key` in `output`.
fn printed(output: &str, key: &str) -> Option<u64> {
    let rest = &output[output.find(key)? + key.len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Each section's command names the knobs its run used: the rounds, seconds and requests it printed are the ones
/// its command line sets (or the benchmark's defaults when it sets none).
#[test]
fn each_sections_command_agrees_with_what_its_run_printed() {
    let path = crate::util::root().join("docs/benchmarks.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let run = read(&text, BENCHES).unwrap_or_else(|e| panic!("{}: {e:#}", path.display()));
    let mut checked = 0;
    for (b, o) in BENCHES.iter().zip(&run.outcomes) {
        let Outcome::Done { command, status: None, output, .. } = o else { continue };
        let agree = |what: &str, knob_value: u64, key: &str| {
            let seen = printed(output, key).unwrap_or_else(|| panic!("{}: no {key:?} in what it printed", b.name));
            assert_eq!(seen, knob_value, "{}: `{command}` sets {what} {knob_value}, its run printed {seen}", b.name);
        };
        match b.name {
            "proxy" => {
                agree("rounds", knob(command, "BENCH_ROUNDS", 7), "means over ");
                agree("seconds", knob(command, "BENCH_SECONDS", 5), "wrk -t1 -cC -d");
                checked += 1;
            }
            "proxy-instructions" => {
                agree("requests", knob(command, "BENCH_REQUESTS", 2000), "curl: ");
                checked += 1;
            }
            _ => {}
        }
    }
    assert!(checked > 0, "no section of docs/benchmarks.md to check");
    // And a disagreement is found.
    assert_eq!(knob("BENCH_SECONDS=3 BENCH_ROUNDS=3 cargo xtask bench proxy", "BENCH_ROUNDS", 7), 3);
    assert_eq!(printed("means over 5 interleaved round(s):", "means over "), Some(5));
}
