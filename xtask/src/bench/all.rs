//! `cargo xtask bench all [--quick] [--skip a,b | --only a,b | --rewrite]`: runs every benchmark as `cargo xtask bench <name>` (a
//! child process each, its printed summary captured) and writes docs/benchmarks.md whole from what they printed
//! (bench/all_page.rs): for each, the command, when it ran, how long it took and the load around it, its headline
//! figures (bench/all_figures.rs) and all it printed. The page is rewritten after each benchmark, so a run that
//! stops keeps what it finished, and what each printed is kept in target/bench-all/run.json: `--rewrite` writes the
//! page again from it without running anything (after a change to the page's text, in bench/all_text.rs, or to how
//! figures are read), or, when target/bench-all/ is gone, from what the page itself says each benchmark printed.

use super::all_text::Bench;
use crate::util::root;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// What came of one benchmark.
#[derive(Debug, PartialEq)]
pub(super) enum Outcome {
    Pending,
    NotRun(String),
    /// It ran: `status` None when it succeeded, else how it ended and the last lines of its stderr.
    Done {
        /// The command line it ran with, its knobs as they were ([`command_line`]).
        command: String,
        started: String,
        secs: f64,
        load: (String, String),
        status: Option<(String, String)>,
        output: String,
    },
}

/// A whole run: what the page is written from, kept in target/bench-all/run.json.
#[derive(Debug, PartialEq)]
pub(super) struct Run {
    pub head: Head,
    pub quick: bool,
    /// One per benchmark, in the order of the list.
    pub outcomes: Vec<Outcome>,
    pub took_secs: f64,
    pub end_load: String,
    pub done: bool,
}

/// The longest a benchmark may take before it is stopped (the VM part of `reaction` is the longest).
const TIMEOUT: Duration = Duration::from_secs(90 * 60);

pub fn run(quick: bool, skip: &[String], rewrite: bool) -> Result<()> {
    let benches = super::all_text::BENCHES;
    let page = root().join("docs/benchmarks.md");
    let saved = crate::util::target_dir().join("bench-all/run.json");
    if rewrite {
        let mut run = if saved.exists() {
            let text = std::fs::read_to_string(&saved).with_context(|| format!("reading {}", saved.display()))?;
            Run::from_json(&serde_json::from_str(&text)?, benches)?
        } else {
            eprintln!("bench all: no {}; the figures are read back from the page itself", saved.display());
            let text = std::fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?;
            super::all_page::read(&text, benches)?
        };
        run.head.options = compact_trail(&run.head.options);
        return write_page(&page, benches, &run);
    }
    for s in skip {
        if !benches.iter().any(|b| b.name == s) {
            anyhow::bail!("--skip {s}: not a benchmark ({})", names(benches));
        }
    }
    let t0 = Instant::now();
    let mut run = Run {
        head: Head::now(quick, skip),
        quick,
        outcomes: benches.iter().map(|_| Outcome::Pending).collect(),
        took_secs: 0.0,
        end_load: loadavg(),
        done: false,
    };
    for (i, b) in benches.iter().enumerate() {
        run.outcomes[i] = if skip.iter().any(|s| s == b.name) {
            Outcome::NotRun("left out of this run (`--skip`)".into())
        } else if let Some(reason) = missing(b) {
            Outcome::NotRun(reason)
        } else {
            run_one(b, quick)?
        };
        (run.took_secs, run.end_load, run.done) = (t0.elapsed().as_secs_f64(), loadavg(), i + 1 == benches.len());
        if let Some(dir) = saved.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&saved, run.to_json(benches).to_string())
            .with_context(|| format!("writing {}", saved.display()))?;
        write_page(&page, benches, &run)?;
    }
    eprintln!("bench all: {} written in {:.0} s", page.display(), t0.elapsed().as_secs_f64());
    Ok(())
}

/// `--only a,b`: runs those benchmarks again and keeps every other section of the last run (run.json, or the page
/// itself when that is gone); the page's head names the benchmarks run again and when.
pub fn run_only(quick: bool, only: &[String]) -> Result<()> {
    let benches = super::all_text::BENCHES;
    for o in only {
        if !benches.iter().any(|b| b.name == o) {
            anyhow::bail!("--only {o}: not a benchmark ({})", names(benches));
        }
    }
    let page = root().join("docs/benchmarks.md");
    let saved = crate::util::target_dir().join("bench-all/run.json");
    let mut run = if saved.exists() {
        let text = std::fs::read_to_string(&saved).with_context(|| format!("reading {}", saved.display()))?;
        Run::from_json(&serde_json::from_str(&text)?, benches)?
    } else {
        let text = std::fs::read_to_string(&page).with_context(|| format!("reading {}", page.display()))?;
        super::all_page::read(&text, benches)?
    };
    let again = Head::now(quick, &[]);
    for (i, b) in benches.iter().enumerate() {
        if only.iter().any(|o| o == b.name) {
            run.outcomes[i] = match missing(b) {
                Some(reason) => Outcome::NotRun(reason),
                None => run_one(b, quick)?,
            };
        }
    }
    run.head.options = rerun_trail(&run.head.options, only, &again.started, &again.build);
    if let Some(dir) = saved.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&saved, run.to_json(benches).to_string()).with_context(|| format!("writing {}", saved.display()))?;
    write_page(&page, benches, &run)
}

impl Run {
    fn to_json(&self, benches: &[Bench]) -> Value {
        let outcomes: Vec<Value> = self
            .outcomes
            .iter()
            .zip(benches)
            .map(|(o, b)| match o {
                Outcome::Pending => json!({"name": b.name, "kind": "pending"}),
                Outcome::NotRun(reason) => json!({"name": b.name, "kind": "not_run", "reason": reason}),
                Outcome::Done { command, started, secs, load, status, output } => json!({
                    "name": b.name, "kind": "done", "command": command, "started": started, "secs": secs, "load": [load.0, load.1],
                    "status": status.as_ref().map(|(s, tail)| json!([s, tail])), "output": output,
                }),
            })
            .collect();
        let h = &self.head;
        json!({
            "head": {"started": h.started, "build": h.build, "machine": h.machine, "load": h.load, "options": h.options},
            "quick": self.quick, "outcomes": outcomes, "took_secs": self.took_secs, "end_load": self.end_load,
            "done": self.done,
        })
    }

    /// The run `to_json` kept. Outcomes go by benchmark name: one the run did not know (added since) is Pending.
    fn from_json(v: &Value, benches: &[Bench]) -> Result<Run> {
        let text =
            |v: &Value, k: &str| v[k].as_str().map(str::to_string).with_context(|| format!("no {k} in run.json"));
        let h = &v["head"];
        let head = Head {
            started: text(h, "started")?,
            build: text(h, "build")?,
            machine: text(h, "machine")?,
            load: text(h, "load")?,
            options: text(h, "options")?,
        };
        let saved = v["outcomes"].as_array().context("no outcomes in run.json")?;
        let mut outcomes = Vec::new();
        for b in benches {
            let Some(o) = saved.iter().find(|o| o["name"].as_str() == Some(b.name)) else {
                outcomes.push(Outcome::Pending);
                continue;
            };
            outcomes.push(match o["kind"].as_str() {
                Some("not_run") => Outcome::NotRun(text(o, "reason")?),
                Some("done") => Outcome::Done {
                    // A run kept before commands were: the one its mode declares.
                    command: o["command"]
                        .as_str()
                        .map_or_else(|| command_line(b, v["quick"].as_bool().unwrap_or(false)), str::to_string),
                    started: text(o, "started")?,
                    secs: o["secs"].as_f64().unwrap_or(0.0),
                    load: (
                        o["load"][0].as_str().unwrap_or("").to_string(),
                        o["load"][1].as_str().unwrap_or("").to_string(),
                    ),
                    status: o["status"]
                        .as_array()
                        .map(|a| (a[0].as_str().unwrap_or("").to_string(), a[1].as_str().unwrap_or("").to_string())),
                    output: text(o, "output")?,
                },
                _ => Outcome::Pending,
            });
        }
        Ok(Run {
            head,
            quick: v["quick"].as_bool().unwrap_or(false),
            outcomes,
            took_secs: v["took_secs"].as_f64().unwrap_or(0.0),
            end_load: text(v, "end_load")?,
            done: v["done"].as_bool().unwrap_or(false),
        })
    }
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
pub(super) fn command_line(b: &Bench, quick: bool) -> String {
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
    let status = match status {
        Some(s) if s.success() => None,
        other => {
            let status =
                other.map_or_else(|| format!("stopped after {} min", TIMEOUT.as_secs() / 60), |s| s.to_string());
            let lines: Vec<&str> = errors.lines().filter(|l| !l.trim().is_empty()).collect();
            Some((status, lines[lines.len().saturating_sub(12)..].join("\n")))
        }
    };
    Ok(Outcome::Done { command: command_line(b, quick), started, secs, load, status, output })
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
#[derive(Debug, PartialEq)]
pub(super) struct Head {
    pub started: String,
    pub build: String,
    pub machine: String,
    pub load: String,
    pub options: String,
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

/// `options` with the benchmarks in `only` said to have run again on `started` with `build` (quoted already). The
/// page adds ". Finished after …": each note starts with its own full stop instead of ending with one.
fn rerun_trail(options: &str, only: &[String], started: &str, build: &str) -> String {
    let names = only.iter().map(|o| format!("`{o}`")).collect::<Vec<_>>().join(", ");
    compact_trail(&format!("{options}. {names} run again on {started}, build {build}"))
}

/// `options` with each benchmark named in one "run again" note only, its last.
fn compact_trail(options: &str) -> String {
    let mut parts = options.split(". ");
    let head = parts.next().unwrap_or_default();
    let parts: Vec<&str> = parts.collect();
    let mut seen: Vec<&str> = Vec::new();
    let mut kept: Vec<String> = Vec::new();
    for part in parts.iter().rev() {
        match part.split_once(" run again on ") {
            Some((names, when)) => {
                let fresh: Vec<&str> = names.split(", ").filter(|n| !seen.contains(n)).collect();
                seen.extend(names.split(", "));
                if !fresh.is_empty() {
                    kept.push(format!("{} run again on {when}", fresh.join(", ")));
                }
            }
            None => kept.push(part.to_string()),
        }
    }
    kept.iter().rev().fold(head.to_string(), |out, part| format!("{out}. {part}"))
}

fn write_page(page: &std::path::Path, benches: &[Bench], run: &Run) -> Result<()> {
    let text = super::all_page::page(benches, run);
    std::fs::write(page, text).with_context(|| format!("writing {}", page.display()))
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

/// `2026-12-01 14:05 UTC`, from the system clock.
fn utc_now() -> String {
    let t = humantime::format_rfc3339_seconds(SystemTime::now()).to_string();
    // 2026-12-01T14:05:09Z -> 2026-12-01 14:05 UTC
    match (t.get(..10), t.get(11..16)) {
        (Some(day), Some(hm)) => format!("{day} {hm} UTC"),
        _ => t,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A benchmark's outcome as the tests' sample run has it: started, took and load fixed, with `output` and the
    /// failed `status` (exit status, stderr's tail) if any.
    pub(in crate::bench) fn done(output: &str, status: Option<(&str, &str)>) -> Outcome {
        Outcome::Done {
            command: String::new(),
            started: "2026-12-02 08:52 UTC".into(),
            secs: 183.0,
            load: ("1.33 1.11 1.56".into(), "1.13 1.16 1.50".into()),
            status: status.map(|(s, tail)| (s.to_string(), tail.to_string())),
            output: output.into(),
        }
    }

    #[test]
    fn a_benchmark_run_again_is_named_once_with_its_last_run() {
        let options = "`cargo xtask bench all --quick`: fewer rounds (each says). `reaction` run again on \
                       2026-12-03 08:18 UTC, build `385d7ac`. `agent-cpu`, `proxy`, `web` run again on 2026-12-04 \
                       13:45 UTC, build `385099f`. `proxy` run again on 2026-12-04 16:26 UTC, build `e48a0b7`";
        let only = ["proxy".to_string(), "reaction".to_string()];
        assert_eq!(
            rerun_trail(options, &only, "2026-12-05 05:11 UTC", "`2844a30`"),
            "`cargo xtask bench all --quick`: fewer rounds (each says). `agent-cpu`, `web` run again on 2026-12-04 \
             13:45 UTC, build `385099f`. `proxy`, `reaction` run again on 2026-12-05 05:11 UTC, build `2844a30`"
        );
        // A first run again: the options as they were, and the note.
        assert_eq!(
            rerun_trail("`cargo xtask bench all`: each benchmark as its command below says", &only[..1], "D", "`B`"),
            "`cargo xtask bench all`: each benchmark as its command below says. `proxy` run again on D, build `B`"
        );
    }

    #[test]
    fn a_run_survives_run_json_and_a_new_benchmark_is_pending() {
        let benches = super::super::all_text::BENCHES;
        let mut outcomes: Vec<Outcome> = benches.iter().map(|_| Outcome::Pending).collect();
        outcomes[0] = done("ratio full/raw = 1.16 (goal <= 1.5)\n", None);
        outcomes[1] = Outcome::NotRun("needs wrk, not found on this machine".into());
        outcomes[2] = done("", Some(("exit status: 101", "error: it broke")));
        let run = Run {
            head: Head {
                started: "2026-12-02 08:52 UTC".into(),
                build: "`bfd4da2`".into(),
                machine: "AMD EPYC, nproc 2".into(),
                load: "1.33 1.11 1.56".into(),
                options: "`cargo xtask bench all --quick`".into(),
            },
            quick: true,
            outcomes,
            took_secs: 1560.0,
            end_load: "38.48 11.93 5.07".into(),
            done: true,
        };
        let json = run.to_json(benches);
        assert_eq!(Run::from_json(&json, benches).expect("read back"), run);
        // A benchmark added since the run: its outcome is Pending, the others keep theirs by name.
        let mut fewer = json.clone();
        if let Some(list) = fewer["outcomes"].as_array_mut() {
            list.remove(1);
        }
        let back = Run::from_json(&fewer, benches).expect("read back");
        assert_eq!(back.outcomes[1], Outcome::Pending);
        assert_eq!(back.outcomes[0], run.outcomes[0]);
        assert_eq!(back.outcomes[2], run.outcomes[2]);
    }
}
