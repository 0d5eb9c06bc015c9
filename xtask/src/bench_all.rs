//! `cargo xtask bench all [--quick] [--skip a,b]`: runs every benchmark as `cargo xtask bench <name>` (a child
//! process each, its printed summary captured) and writes docs/benchmarks.md from what they printed: for each, the
//! command, when it ran, how long it took and the load around it, and its figures beside the baselines it measured
//! in the same run. The page is rewritten after each benchmark, so a run that stops keeps what it finished.
//! What the page says about each benchmark besides its figures lives in bench_all_text.rs.

use super::bench_all_text::{ABOUT_PAGE, TESTS_HOLD};
use crate::util::root;
use anyhow::{Context, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// One benchmark as `bench all` runs it.
pub(super) struct Bench {
    pub name: &'static str,
    pub title: &'static str,
    /// Extra arguments and environment of a full run, then of a `--quick` one.
    pub full: &'static [(&'static str, &'static str)],
    pub quick: &'static [(&'static str, &'static str)],
    /// Programs it needs on PATH.
    pub tools: &'static [&'static str],
    /// Needs a v1 memory cgroup it can create (root).
    pub v1: bool,
    /// What it measures, against what, and its goal (Markdown).
    pub about: &'static str,
}

/// What came of one benchmark.
enum Outcome {
    Pending,
    NotRun(String),
    Ran { started: String, secs: f64, load: (String, String), output: String },
    Failed { started: String, secs: f64, load: (String, String), status: String, tail: String, output: String },
}

/// The longest a benchmark may take before it is stopped (the VM part of `reaction` is the longest).
const TIMEOUT: Duration = Duration::from_secs(90 * 60);

pub fn run(quick: bool, skip: &[String]) -> Result<()> {
    let benches = super::bench_all_text::BENCHES;
    for s in skip {
        if !benches.iter().any(|b| b.name == s) {
            anyhow::bail!("--skip {s}: not a benchmark ({})", names(benches));
        }
    }
    let page = root().join("docs/benchmarks.md");
    let head = Head::now(quick, skip);
    let t0 = Instant::now();
    let mut outcomes: Vec<Outcome> = benches.iter().map(|_| Outcome::Pending).collect();
    for (i, b) in benches.iter().enumerate() {
        outcomes[i] = if skip.iter().any(|s| s == b.name) {
            Outcome::NotRun("left out of this run (`--skip`)".into())
        } else if let Some(reason) = missing(b) {
            Outcome::NotRun(reason)
        } else {
            run_one(b, quick)?
        };
        write_page(&page, &head, benches, &outcomes, quick, t0.elapsed(), i + 1 == benches.len())?;
    }
    eprintln!("bench all: {} written in {:.0} s", page.display(), t0.elapsed().as_secs_f64());
    Ok(())
}

fn names(benches: &[Bench]) -> String {
    benches.iter().map(|b| b.name).collect::<Vec<_>>().join(", ")
}

/// Why this machine cannot run `b`, if it cannot.
fn missing(b: &Bench) -> Option<String> {
    if b.v1 {
        if let Some(reason) = monitor_tests::CgroupV1::unavailable_reason() {
            return Some(format!("needs a v1 memory cgroup it can create: {reason}"));
        }
    }
    let absent: Vec<&str> = b.tools.iter().copied().filter(|t| !monitor_tests::on_path(t)).collect();
    (!absent.is_empty()).then(|| format!("needs {}, not found on this machine", absent.join(", ")))
}

/// The command line a reader types for `b` (its environment first).
fn command_line(b: &Bench, quick: bool) -> String {
    let knobs = if quick { b.quick } else { b.full };
    let env: Vec<String> = knobs.iter().filter(|k| !k.0.starts_with("--")).map(|(k, v)| format!("{k}={v}")).collect();
    let args: Vec<String> = knobs.iter().filter(|k| k.0.starts_with("--")).map(|(k, v)| format!("{k} {v}")).collect();
    let mut s = env.join(" ");
    if !s.is_empty() {
        s.push(' ');
    }
    s.push_str("cargo xtask bench ");
    s.push_str(b.name);
    for a in args {
        s.push(' ');
        s.push_str(&a);
    }
    s
}

fn run_one(b: &Bench, quick: bool) -> Result<Outcome> {
    let knobs = if quick { b.quick } else { b.full };
    let exe = std::env::current_exe().context("the xtask binary")?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(root()).args(["bench", b.name]);
    for (k, v) in knobs {
        if k.starts_with("--") {
            cmd.args([k, v]);
        } else {
            cmd.env(k, v);
        }
    }
    // Its own process group, so a benchmark past its time is stopped with everything it started.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    eprintln!("bench all: {}", command_line(b, quick));
    let (started, load0, t) = (utc_now(), loadavg(), Instant::now());
    let mut child = cmd.spawn().context("starting the xtask binary")?;
    let out = relay(child.stdout.take(), b.name);
    let err = relay(child.stderr.take(), b.name);
    let status = wait(&mut child, TIMEOUT);
    let secs = t.elapsed().as_secs_f64();
    let (output, errors) = (join(out), join(err));
    let load = (load0, loadavg());
    Ok(match status {
        Some(s) if s.success() => Outcome::Ran { started, secs, load, output },
        other => {
            let status =
                other.map_or_else(|| format!("stopped after {} min", TIMEOUT.as_secs() / 60), |s| s.to_string());
            let lines: Vec<&str> = errors.lines().filter(|l| !l.trim().is_empty()).collect();
            let tail = lines[lines.len().saturating_sub(12)..].join("\n");
            Outcome::Failed { started, secs, load, status, tail, output }
        }
    })
}

/// Copies a child's stream to this process's stderr as it comes (prefixed with the benchmark), and keeps it.
fn relay<R: Read + Send + 'static>(
    stream: Option<R>,
    name: &'static str,
) -> Option<(std::thread::JoinHandle<()>, Arc<Mutex<String>>)> {
    let stream = stream?;
    let kept = Arc::new(Mutex::new(String::new()));
    let sink = kept.clone();
    let handle = std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            eprintln!("[{name}] {line}");
            let mut s = sink.lock().unwrap_or_else(|e| e.into_inner());
            s.push_str(&line);
            s.push('\n');
        }
    });
    Some((handle, kept))
}

fn join(r: Option<(std::thread::JoinHandle<()>, Arc<Mutex<String>>)>) -> String {
    let Some((handle, kept)) = r else { return String::new() };
    let _ = handle.join();
    let s = kept.lock().unwrap_or_else(|e| e.into_inner());
    s.clone()
}

/// Waits for `child`; past `limit` its process group is sent SIGTERM, then SIGKILL. None when it was stopped.
fn wait(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            _ => break,
        }
    }
    let group = -(child.id() as i32);
    // SAFETY: kill(2) on the process group this function's caller created for the child.
    unsafe { libc::kill(group, libc::SIGTERM) };
    std::thread::sleep(Duration::from_secs(10));
    // SAFETY: as above.
    unsafe { libc::kill(group, libc::SIGKILL) };
    let _ = child.wait();
    None
}

/// The machine and the run, said once at the top of the page.
struct Head {
    started: String,
    build: String,
    machine: String,
    load: String,
    options: String,
}

impl Head {
    fn now(quick: bool, skip: &[String]) -> Head {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
            })
            .unwrap_or_else(|| "an unknown CPU".into());
        let mem_gib = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| l.strip_prefix("MemTotal:")?.split_whitespace().next()?.parse::<f64>().ok())
            })
            .map_or_else(String::new, |kib| format!(", {:.0} GiB", kib / 1024.0 / 1024.0));
        let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
        let cgroup = if monitor_tests::CgroupV1::unavailable_reason().is_none() {
            "the memory controller on cgroup v1"
        } else if monitor_tests::cgroup2::CgroupV2::unavailable_reason().is_none() {
            "the memory controller on cgroup v2"
        } else {
            "no memory cgroup it can create"
        };
        let mut options = if quick {
            "`cargo xtask bench all --quick`: fewer rounds and shorter runs than the defaults, and no VM (each \
             benchmark's command below says what it ran with)"
                .to_string()
        } else {
            "`cargo xtask bench all`: each benchmark as its command below says".to_string()
        };
        if !skip.is_empty() {
            options.push_str(&format!(", with `--skip {}`", skip.join(",")));
        }
        Head {
            started: utc_now(),
            build: build_id(),
            machine: format!("{cpu}, nproc {nproc}{mem_gib}, Linux {kernel}, {cgroup}"),
            load: loadavg(),
            options,
        }
    }
}

fn write_page(
    page: &Path,
    head: &Head,
    benches: &[Bench],
    outcomes: &[Outcome],
    quick: bool,
    took: Duration,
    done: bool,
) -> Result<()> {
    let mut s = String::from("# Benchmarks\n\n");
    s.push_str(ABOUT_PAGE);
    s.push_str(&format!(
        "\n**This run**: started {}, build {}; {}. {} after {:.0} min; load average (1, 5, 15 min) {} at the \
         start, {} at the end.\n\n**Machine**: {}.\n\n",
        head.started,
        head.build,
        head.options,
        if done { "Finished" } else { "Still running, or stopped," },
        took.as_secs_f64() / 60.0,
        head.load,
        loadavg(),
        head.machine
    ));
    s.push_str("| benchmark | command | result | took |\n| --- | --- | --- | ---: |\n");
    for (b, o) in benches.iter().zip(outcomes) {
        let (result, secs) = match o {
            Outcome::Pending => ("not reached".to_string(), String::new()),
            Outcome::NotRun(_) => ("not run (below)".to_string(), String::new()),
            Outcome::Ran { secs, .. } => ("ran".to_string(), format!("{secs:.0} s")),
            Outcome::Failed { secs, status, .. } => (format!("failed ({status})"), format!("{secs:.0} s")),
        };
        s.push_str(&format!(
            "| [{}](#{}) | `{}` | {result} | {secs} |\n",
            b.title,
            anchor(b.title),
            command_line(b, quick)
        ));
    }
    for (b, o) in benches.iter().zip(outcomes) {
        s.push_str(&format!("\n## {}\n\n{}\n", b.title, b.about.trim_end()));
        s.push_str(&format!("\nCommand (as root): `{}`.\n\n", command_line(b, quick)));
        match o {
            Outcome::Pending => s.push_str("Not reached in this run.\n"),
            Outcome::NotRun(reason) => s.push_str(&format!("**Not run**: {reason}.\n")),
            Outcome::Ran { started, secs, load, output } => {
                s.push_str(&format!(
                    "Ran {started}, {secs:.0} s, load average {} before and {} after. What it printed:\n\n",
                    load.0, load.1
                ));
                s.push_str(&markdown(output));
            }
            Outcome::Failed { started, secs, load, status, tail, output } => {
                s.push_str(&format!(
                    "**Failed** ({status}), started {started}, after {secs:.0} s, load average {} before and {} \
                     after. The last lines it wrote to stderr:\n\n```text\n{tail}\n```\n",
                    load.0, load.1
                ));
                if !output.trim().is_empty() {
                    s.push_str("\nWhat it printed before:\n\n");
                    s.push_str(&markdown(output));
                }
            }
        }
    }
    s.push('\n');
    s.push_str(TESTS_HOLD);
    std::fs::write(page, s).with_context(|| format!("writing {}", page.display()))
}

/// A benchmark's printed summary as Markdown: table rows stay rows, other lines become list items, and the
/// harness lines of `cargo test` are left out.
fn markdown(output: &str) -> String {
    let harness = |l: &str| {
        l.starts_with("running ")
            || l.starts_with("test result:")
            || (l.starts_with("test ") && (l.ends_with(" ... ok") || l.ends_with(" ... ignored")))
            || l == "successes:"
            || l.starts_with("---- ")
    };
    let mut s = String::new();
    let mut in_table = false;
    for line in output.lines().map(str::trim_end).filter(|l| !harness(l.trim())) {
        if line.trim().is_empty() {
            continue;
        }
        let row = line.trim_start().starts_with('|');
        if row != in_table && !s.is_empty() {
            s.push('\n');
        }
        in_table = row;
        if row {
            s.push_str(line.trim_start());
        } else {
            s.push_str("- ");
            s.push_str(line.trim());
        }
        s.push('\n');
    }
    if s.is_empty() {
        s.push_str("(nothing)\n");
    }
    s
}

/// GitHub's anchor for a heading: lower case, spaces to dashes, other punctuation dropped.
fn anchor(title: &str) -> String {
    title
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

fn loadavg() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn build_id() -> String {
    let out = Command::new("git").current_dir(root()).args(["describe", "--always", "--dirty=+uncommitted"]).output();
    match out {
        Ok(o) if o.status.success() => format!("`{}`", String::from_utf8_lossy(&o.stdout).trim()),
        _ => "of an unknown commit".into(),
    }
}

/// `2026-12-01 14:05 UTC`, from the system clock (no time zone database needed).
fn utc_now() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y}-{m:02}-{d:02} {:02}:{:02} UTC", rem / 3600, rem % 3600 / 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_becomes_markdown() {
        let out = "running 1 test\nfirst line\n| a | b |\n| --- | --- |\n| 1 | 2 |\nafter\ntest x ... ok\n";
        assert_eq!(markdown(out), "- first line\n\n| a | b |\n| --- | --- |\n| 1 | 2 |\n\n- after\n");
    }

    #[test]
    fn anchors_follow_headings() {
        assert_eq!(anchor("Front door: instructions per request"), "front-door-instructions-per-request");
        assert_eq!(anchor("eBPF probes"), "ebpf-probes");
    }
}
