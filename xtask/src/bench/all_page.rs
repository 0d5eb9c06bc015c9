//! docs/benchmarks.md from a run, whole: [`page`] writes the opening, the run and the machine, a table of the
//! benchmarks, a section each (what it measures, its command, when it ran, its figures, all it printed) and the
//! bounds the tests hold. [`read`] takes a page apart into the run it was written from, so `--rewrite` works from the
//! page itself when target/bench-all/ is gone, and a test holds docs/benchmarks.md to exactly what [`page`] writes:
//! the page is not edited by hand.

use super::all::{command_line, Head, Outcome, Run};
use super::all_figures::figures;
use super::all_text::{Bench, ABOUT_PAGE, TESTS_HOLD};
use anyhow::{bail, Context, Result};
use monitor_tests::markdown::anchor;

const RUN: &str = "**This run**: started ";
const MACHINE: &str = "**Machine**: ";
const FINISHED: &str = "Finished";
const STOPPED: &str = "Stopped, or still running,";
const PRINTED: &str = "What it printed:\n\n";
const PRINTED_BEFORE: &str = "\nWhat it printed before:\n\n";
const QUICK: &str = "`cargo xtask bench all --quick`";

/// The page for `run` of `benches`.
pub(super) fn page(benches: &[Bench], run: &Run) -> String {
    let (head, quick) = (&run.head, run.quick);
    let mut s = String::from("# Benchmarks\n\n");
    s.push_str(ABOUT_PAGE);
    s.push_str(&format!(
        "\n{RUN}{}, build {}; {}. {} after {:.0} min; load average (1, 5, 15 min) {} at the start, {} at the end.\
         \n\n{MACHINE}{}.\n\n",
        head.started,
        head.build,
        head.options,
        if run.done { FINISHED } else { STOPPED },
        run.took_secs / 60.0,
        head.load,
        run.end_load,
        head.machine
    ));
    s.push_str("| benchmark | command | result | took |\n| --- | --- | --- | ---: |\n");
    for (b, o) in benches.iter().zip(&run.outcomes) {
        let (result, secs) = match o {
            Outcome::Pending => ("not reached".to_string(), String::new()),
            Outcome::NotRun(_) => ("not run (below)".to_string(), String::new()),
            Outcome::Done { secs, status: None, .. } => ("ran".to_string(), format!("{secs:.0} s")),
            Outcome::Done { secs, status: Some((status, _)), .. } => {
                (format!("failed ({status})"), format!("{secs:.0} s"))
            }
        };
        s.push_str(&format!(
            "| [{}](#{}) | `{}` | {result} | {secs} |\n",
            b.title,
            anchor(b.title),
            command(b, o, quick)
        ));
    }
    for (b, o) in benches.iter().zip(&run.outcomes) {
        s.push_str(&format!("\n## {}\n\n{}\n", b.title, b.about.trim_end()));
        s.push_str(&format!("\nCommand: `{}`.\n\n", command(b, o, quick)));
        s.push_str(&section(b, o));
    }
    s.push('\n');
    s.push_str(TESTS_HOLD);
    s
}

/// The command a section names: the one it ran with, or (not run) the one the page's mode declares.
fn command(b: &Bench, o: &Outcome, quick: bool) -> String {
    match o {
        Outcome::Done { command, .. } if !command.is_empty() => command.clone(),
        _ => command_line(b, quick),
    }
}

/// A benchmark's section after its command: what came of it.
fn section(b: &Bench, o: &Outcome) -> String {
    match o {
        Outcome::Pending => "Not reached in this run.\n".to_string(),
        Outcome::NotRun(reason) => format!("**Not run**: {reason}.\n"),
        Outcome::Done { started, secs, load, status: None, output, .. } => {
            let mut s = format!("Ran {started}, {secs:.0} s, load average {} before and {} after.\n\n", load.0, load.1);
            let figures = figures(b.name, output);
            if !figures.is_empty() {
                s.push_str("| figure | this run |\n| --- | ---: |\n");
                for f in &figures {
                    let value = f.value.as_deref().unwrap_or("not in what it printed");
                    s.push_str(&format!("| {} | {value} |\n", f.what));
                }
                s.push('\n');
            }
            s.push_str(PRINTED);
            s.push_str(&markdown(output));
            s
        }
        Outcome::Done { started, secs, load, status: Some((status, tail)), output, .. } => {
            let mut s = format!(
                "**Failed** ({status}), started {started}, after {secs:.0} s, load average {} before and {} after. \
                 The last lines it wrote to stderr:\n\n```text\n{tail}\n```\n",
                load.0, load.1
            );
            if !output.trim().is_empty() {
                s.push_str(PRINTED_BEFORE);
                s.push_str(&markdown(output));
            }
            s
        }
    }
}

/// The run a page written by [`page`] was written from, as far as the page says it: each benchmark's output as the
/// page kept it (its summary lines), the figures read again from it. A benchmark the page has no section for (added
/// since) is Pending.
pub(super) fn read(text: &str, benches: &[Bench]) -> Result<Run> {
    let line = |prefix: &str| {
        text.lines().find_map(|l| l.strip_prefix(prefix)).with_context(|| format!("no line `{prefix}…` on the page"))
    };
    let head_line = line(RUN)?;
    let (started, rest) = split(head_line, ", build ")?;
    let (build, rest) = split(rest, "; ")?;
    let (options, state, rest) = if let Some((o, r)) = rest.rsplit_once(&format!(". {FINISHED} after ")) {
        (o, true, r)
    } else {
        let (o, r) = rest.rsplit_once(&format!(". {STOPPED} after ")).context("no `Finished after` on the page")?;
        (o, false, r)
    };
    let (minutes, rest) = split(rest, " min; load average (1, 5, 15 min) ")?;
    let (load, rest) = split(rest, " at the start, ")?;
    let end_load = rest.strip_suffix(" at the end.").context("no `at the end.` on the page")?;
    let machine = line(MACHINE)?.strip_suffix('.').context("the machine line ends without a full stop")?;
    let mut outcomes = Vec::new();
    for b in benches {
        let heading = format!("\n## {}\n\n", b.title);
        let Some(at) = text.find(&heading) else {
            outcomes.push(Outcome::Pending);
            continue;
        };
        let body = &text[at + heading.len()..];
        let body = &body[..body.find("\n## ").unwrap_or(body.len())];
        let (_, after) = split(body, "\nCommand: `")?;
        let (ran, outcome) = split(after, "`.\n\n")?;
        let mut outcome = read_outcome(outcome).with_context(|| format!("the section of {}", b.title))?;
        if let Outcome::Done { command, .. } = &mut outcome {
            *command = ran.to_string();
        }
        outcomes.push(outcome);
    }
    Ok(Run {
        head: Head {
            started: started.to_string(),
            build: build.to_string(),
            machine: machine.to_string(),
            load: load.to_string(),
            options: options.to_string(),
        },
        quick: options.starts_with(QUICK),
        outcomes,
        took_secs: minutes.parse::<f64>().with_context(|| format!("minutes {minutes:?}"))? * 60.0,
        end_load: end_load.to_string(),
        done: state,
    })
}

/// One section's outcome, as [`section`] wrote it.
fn read_outcome(text: &str) -> Result<Outcome> {
    if text.starts_with("Not reached in this run.") {
        return Ok(Outcome::Pending);
    }
    if let Some(reason) = text.strip_prefix("**Not run**: ") {
        let reason = reason.trim_end().strip_suffix('.').context("a reason without a full stop")?;
        return Ok(Outcome::NotRun(reason.to_string()));
    }
    let (status, rest) = match text.strip_prefix("**Failed** (") {
        Some(failed) => {
            let (status, rest) = split(failed, "), started ")?;
            (Some(status), rest)
        }
        None => (None, text.strip_prefix("Ran ").context("no `Ran`, `**Failed**`, `**Not run**` or `Not reached`")?),
    };
    let (started, rest) = split(rest, if status.is_some() { ", after " } else { ", " })?;
    let (secs, rest) = split(rest, " s, load average ")?;
    let (before, rest) = split(rest, " before and ")?;
    let (after, rest) = split(rest, " after.")?;
    let secs = secs.parse::<f64>().with_context(|| format!("seconds {secs:?}"))?;
    let load = (before.to_string(), after.to_string());
    let started = started.to_string();
    let Some(status) = status else {
        let (_, printed) = split(rest, PRINTED)?;
        return Ok(Outcome::Done {
            command: String::new(),
            started,
            secs,
            load,
            status: None,
            output: unmarkdown(printed),
        });
    };
    let (_, rest) = split(rest, "```text\n")?;
    let (tail, rest) = split(rest, "\n```\n")?;
    let output = rest.split_once(PRINTED_BEFORE).map_or_else(String::new, |(_, p)| unmarkdown(p));
    let status = Some((status.to_string(), tail.to_string()));
    Ok(Outcome::Done { command: String::new(), started, secs, load, status, output })
}

/// `text` split at the first `at`, which must be there.
fn split<'a>(text: &'a str, at: &str) -> Result<(&'a str, &'a str)> {
    match text.split_once(at) {
        Some(parts) => Ok(parts),
        None => bail!("no {at:?} in {:?}", text.chars().take(120).collect::<String>()),
    }
}

/// A benchmark's printed summary as Markdown: table rows stay rows, other lines become list items, and the
/// harness lines of `cargo test` are left out.
pub(super) fn markdown(output: &str) -> String {
    let mut s = String::new();
    let mut in_table = false;
    for line in output.lines().filter_map(summary_line) {
        let row = line.starts_with('|');
        if row != in_table && !s.is_empty() {
            s.push('\n');
        }
        in_table = row;
        if !row {
            s.push_str("- ");
        }
        s.push_str(line);
        s.push('\n');
    }
    if s.is_empty() {
        s.push_str("(nothing)\n");
    }
    s
}

/// The lines [`markdown`] made Markdown of, as the page keeps them.
fn unmarkdown(md: &str) -> String {
    let mut s = String::new();
    for line in md.lines().filter(|l| !l.trim().is_empty() && *l != "(nothing)") {
        s.push_str(line.strip_prefix("- ").unwrap_or(line));
        s.push('\n');
    }
    s
}

/// A printed line as the page keeps it: trimmed; None for blank lines, the harness lines of `cargo test` (its
/// `test name ... ` prefix taken off what follows it) and log lines of the programs a benchmark started.
pub(super) fn summary_line(line: &str) -> Option<&str> {
    let mut l = line.trim();
    if let Some(rest) = l.strip_prefix("test ").and_then(|r| r.split_once(" ... ")).map(|(_, rest)| rest) {
        l = rest.trim();
    }
    let harness = l.starts_with("running ")
        || l.starts_with("test result:")
        || matches!(l, "ok" | "ignored" | "FAILED" | "successes:" | "failures:");
    // A `tracing` line: `2026-12-01T14:25:05.599825Z  WARN target: …`.
    let log = l.len() > 20
        && l.as_bytes()[..4].iter().all(u8::is_ascii_digit)
        && l.as_bytes()[10] == b'T'
        && [" TRACE ", " DEBUG ", " INFO ", " WARN ", " ERROR "].iter().any(|k| l.contains(k));
    (!l.is_empty() && !harness && !log && !kernel_or_record(l)).then_some(l)
}

/// A line for machines, not the page: a guest kernel's console line (`[vm 6.12] [   75.812237] grower invoked
/// oom-killer…`, the OOM killer's report of a run that expects it) or a `@@BENCH` record the figures were read from.
fn kernel_or_record(line: &str) -> bool {
    let mut l = line;
    while let Some(rest) = l.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else { return false };
        let stamp = inside.trim_start();
        if !stamp.is_empty()
            && stamp.split_once('.').is_some_and(|(s, f)| {
                !s.is_empty() && !f.is_empty() && s.bytes().chain(f.bytes()).all(|b| b.is_ascii_digit())
            })
        {
            return true;
        }
        l = after.trim_start();
    }
    l.starts_with("@@BENCH ")
}

#[cfg(test)]
mod tests;
