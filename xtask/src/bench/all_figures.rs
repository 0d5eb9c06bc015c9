//! The headline figures of each benchmark, read from what it printed, for the table at the top of its section of
//! docs/benchmarks.md. Each value is the printed figure as printed, with its unit (`46.0 µs`, `0.562%`, a ratio as
//! `1.89x`): the strings README.md and docs/*.md quote, each linked to its section
//! (`[1.89x](benchmarks.md#cluster-forwarding-and-gossip)`; tests/tests/cli/docs_check.rs holds the quotes to the
//! page). A figure a benchmark did not print is said so on the page. The tests feed each reader the output of a
//! recorded run (xtask/fixtures/bench-all/).

/// One figure: what it is, and its value in this run (None: not in what the benchmark printed).
#[derive(Debug, PartialEq)]
pub(super) struct Figure {
    pub what: String,
    pub value: Option<String>,
}

fn fig(what: impl Into<String>, value: Option<String>) -> Figure {
    Figure { what: what.into(), value }
}

/// The figures of benchmark `name` in its `output` (none for a benchmark without a reader).
pub(super) fn figures(name: &str, output: &str) -> Vec<Figure> {
    match name {
        "sampler" => sampler(output),
        "host-reads" => host_reads(output),
        "agent-cpu" => agent_cpu(output),
        "probes" => probes(output),
        "proxy" => proxy(output),
        "proxy-instructions" => proxy_instructions(output),
        "web" => web(output),
        "config" => config(output),
        "reaction" | "reaction-crowd" => reaction(output),
        "cluster" => cluster(output),
        "image" => image(output),
        _ => Vec::new(),
    }
}

/// Units a printed number may be followed by, after a space.
const UNITS: &[&str] = &["ns", "µs", "ms", "s", "B/s", "kB/s", "MB/s", "GB/s", "B", "kB", "MB", "MiB", "GiB"];

/// The number printed right after `key` in `text` (spaces skipped), with its sign, a `%` stuck to it or the unit
/// word after it: `46.0 µs`, `+32 µs`, `0.562%`.
fn value_after(text: &str, key: &str) -> Option<String> {
    let rest = text[text.find(key)? + key.len()..].trim_start();
    number_with_unit(rest)
}

/// The number at the start of `text` with its unit, as [`value_after`] takes it.
fn number_with_unit(text: &str) -> Option<String> {
    let len = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(text.len(), |(i, _)| i);
    let number = text[..len].trim_end_matches('.');
    if !number.bytes().any(|b| b.is_ascii_digit()) {
        return None;
    }
    let rest = &text[number.len()..];
    if rest.starts_with('%') {
        return Some(format!("{number}%"));
    }
    let unit = rest.strip_prefix(' ').and_then(|r| r.split(|c: char| c.is_whitespace() || ",;:()".contains(c)).next());
    Some(match unit.filter(|u| UNITS.contains(u)) {
        Some(u) => format!("{number} {u}"),
        None => number.to_string(),
    })
}

/// The ratio printed right after `key`, as `1.89x`.
fn ratio_after(text: &str, key: &str) -> Option<String> {
    value_after(text, key).map(|v| format!("{v}x"))
}

/// The first printed line that starts with `start` (lines are trimmed).
fn line<'a>(output: &'a str, start: &str) -> Option<&'a str> {
    output.lines().map(str::trim).find(|l| l.starts_with(start))
}

/// A printed Markdown table: its header cells and its rows' cells.
struct Table<'a> {
    header: Vec<&'a str>,
    rows: Vec<Vec<&'a str>>,
}

impl<'a> Table<'a> {
    /// The column whose header starts with `name`.
    fn col(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h.starts_with(name))
    }

    /// The cell of `row` under the header starting with `name`.
    fn cell(&self, row: &[&'a str], name: &str) -> Option<&'a str> {
        row.get(self.col(name)?).copied()
    }

    /// The first row whose first cell starts with `first`.
    fn row(&self, first: &str) -> Option<&[&'a str]> {
        self.rows.iter().find(|r| r.first().is_some_and(|c| c.starts_with(first))).map(Vec::as_slice)
    }
}

fn cells(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split('|').map(str::trim).collect()
}

/// Every table in `output`: runs of lines starting with `|`, the first the header, the `---` line skipped.
fn tables(output: &str) -> Vec<Table<'_>> {
    let mut out: Vec<Table> = Vec::new();
    let mut open = false;
    for l in output.lines().map(str::trim) {
        if !l.starts_with('|') {
            open = false;
            continue;
        }
        let c = cells(l);
        if !open {
            out.push(Table { header: c, rows: Vec::new() });
            open = true;
        } else if !c.iter().all(|x| x.trim_start_matches(':').trim_end_matches(':').starts_with("---")) {
            if let Some(t) = out.last_mut() {
                t.rows.push(c);
            }
        }
    }
    out
}

/// The table whose header has a column starting with `column`.
fn table<'a>(output: &'a str, column: &str) -> Option<Table<'a>> {
    tables(output).into_iter().find(|t| t.col(column).is_some())
}

fn sampler(out: &str) -> Vec<Figure> {
    let files = table(out, "µs per read");
    let file = |first: &str, col: &str| files.as_ref().and_then(|t| t.cell(t.row(first)?, col));
    let read = |first: &str| file(first, "µs per read").and_then(number_with_unit).map(|v| format!("{v} µs"));
    vec![
        fig("full sample, 16 processes", value_after(out, "full sample ")),
        fig("raw pread of the same files", value_after(out, "raw pread of the same files ")),
        fig("full sample / raw pread", ratio_after(out, "ratio full/raw = ")),
        fig("one core spent sampling at a 100 ms interval", value_after(out, "that is ")),
        fig("one pread of the group's `memory.stat`", read("group `memory.stat`")),
        fig("one pread of the group's `cgroup.procs`", read("group `cgroup.procs`")),
        fig("one pread of `/proc/<pid>/statm`", read("`/proc/<pid>/statm`")),
        fig("one pread of `/proc/<pid>/status`", read("`/proc/<pid>/status`")),
        fig("`status` / `statm`", file("`/proc/<pid>/status`", "/ statm").and_then(number_with_unit).map(|v| v + "x")),
        fig("one pread of `/proc/<pid>/stat`", read("`/proc/<pid>/stat`")),
    ]
}

fn host_reads(out: &str) -> Vec<Figure> {
    let sockets = line(out, "LISTEN sockets").unwrap_or("");
    let procs = out.lines().map(str::trim).find(|l| l.contains("processes sampled, per process")).unwrap_or("");
    vec![
        fig("LISTEN sockets from sock_diag, one read", value_after(sockets, "sock_diag ")),
        fig("LISTEN sockets from `/proc/self/net/tcp`, one read", value_after(sockets, "/proc/self/net/tcp ")),
        fig("one readiness check's `port_owner`", value_after(sockets, "port_owner ")),
        fig("a sample, per process, `statm` kept open", value_after(procs, "statm kept open ")),
        fig("a sample, per process, open-read-close", value_after(procs, "open-read-close ")),
    ]
}

fn agent_cpu(out: &str) -> Vec<Figure> {
    let mut v = Vec::new();
    for l in out.lines().map(str::trim).filter(|l| l.starts_with("agent at ")) {
        // `agent at 100 ms, <what> (<detail>), <n> s: …`: the cell is what lies between the first comma and the
        // time, without its detail.
        let head = l.split_once(" s: ").map_or(l, |(h, _)| h);
        let what = head.split_once(", ").and_then(|(_, r)| r.rsplit_once(", ")).map_or("", |(w, _)| w);
        let what = what.split(" (").next().unwrap_or(what);
        let samples = l.split_once(" samples, ").and_then(|(a, _)| a.rsplit(' ').next()).map(String::from);
        v.push(fig(format!("{what}: the agent's CPU, share of one core"), value_after(l, " of CPU = ")));
        v.push(fig(format!("{what}: its sampler thread"), value_after(l, "by thread: sampler ")));
        v.push(fig(format!("{what}: samples taken"), samples));
        v.push(fig(
            format!("{what}: the baseline, this sleeping process"),
            value_after(l, "(this sleeping process): "),
        ));
    }
    v
}

fn probes(out: &str) -> Vec<Figure> {
    let mut v = Vec::new();
    if let Some(t) = table(out, "median ratio") {
        for r in t.rows.iter().filter(|r| r.first().is_some_and(|m| *m != "detached")) {
            let mode = r[0];
            let median = t.cell(r, "median ratio").and_then(number_with_unit).map(|x| x + "x");
            v.push(fig(format!("{mode}: throughput / detached, median of the rounds"), median));
            v.push(fig(
                format!("{mode}: CPU per request over detached, median"),
                t.cell(r, "median cost").map(String::from),
            ));
        }
    }
    for l in out.lines().map(str::trim) {
        if let Some((set, rest)) = l.split_once(": BPF run time (") {
            v.push(fig(format!("{set}: time in the programs per request"), value_after(rest, "): ")));
        }
    }
    v
}

fn proxy(out: &str) -> Vec<Figure> {
    let mut v = Vec::new();
    let counted = line(out, "instructions per request (valgrind").and_then(|l| l.split_once("): ")).map_or("", |p| p.1);
    for (who, name) in [("monitor ", "monitor run"), ("bare hop ", "the bare hop"), ("nginx ", "nginx")] {
        let n = counted.split(", ").find_map(|p| p.strip_prefix(who)).and_then(number_with_unit);
        v.push(fig(format!("instructions per request (callgrind), {name}"), n));
    }
    for l in out.lines().map(str::trim).filter(|l| l.starts_with("c=")) {
        let Some((c, rest)) = l.split_once(": ") else { continue };
        let added = rest.split_once("added p50 over direct: ").map_or("", |(_, a)| a.split(';').next().unwrap_or(""));
        v.push(fig(format!("monitor / nginx throughput at {c}"), ratio_after(rest, "monitor/nginx throughput ")));
        v.push(fig(format!("median of the rounds' monitor / nginx at {c}"), ratio_after(rest, "per-round ratios ")));
        let nginx_part = rest.split_once("monitor/bare hop ").map_or(rest, |(n, _)| n);
        v.push(fig(format!("lowest round's monitor / nginx at {c}"), ratio_after(nginx_part, "lowest ")));
        v.push(fig(format!("highest round's monitor / nginx at {c}"), ratio_after(nginx_part, "highest ")));
        v.push(fig(format!("goal monitor >= nginx at {c}"), verdict(nginx_part)));
        v.push(fig(
            format!("instructions per request, monitor / nginx (at {c})"),
            ratio_after(nginx_part, "instructions "),
        ));
        v.push(fig(format!("monitor's added p50 over direct at {c}"), value_after(added, "monitor ")));
        v.push(fig(format!("nginx's added p50 over direct at {c}"), value_after(added, "nginx ")));
        v.push(fig(format!("monitor / bare hop throughput at {c}"), ratio_after(rest, "monitor/bare hop ")));
        let hop = rest.split_once("monitor/bare hop ").map_or("", |(_, h)| h.split(',').next().unwrap_or(""));
        v.push(fig(format!("median of the rounds' monitor / bare hop at {c}"), ratio_after(hop, "per-round ratios ")));
        let hop_part =
            rest.split_once("monitor/bare hop ").map_or("", |(_, h)| h.split("byte relay/nginx").next().unwrap_or(""));
        v.push(fig(format!("lowest round's monitor / bare hop at {c}"), ratio_after(hop_part, "lowest ")));
        v.push(fig(
            format!("instructions per request, monitor / bare hop (at {c})"),
            ratio_after(hop_part, "instructions "),
        ));
        let off = rest.split_once("memory per request on/off throughput ").map_or("", |(_, o)| o);
        v.push(fig(format!("memory per request on / off at {c}"), ratio_after(off, "per-round ratios ")));
        v.push(fig(format!("lowest round's memory per request on / off at {c}"), ratio_after(off, "lowest ")));
        v.push(fig(format!("goal on / off >= 0.98 at {c}"), verdict(off)));
        // `syscalls / context switches per request: monitor 9.10 / 2.05, bare hop 8.02 / 2.01, …` (perf).
        let counts = rest.split_once("syscalls / context switches per request: ").map_or("", |(_, a)| a);
        for (who, name) in [("monitor", "monitor"), ("bare hop", "the bare hop")] {
            let pair = counts.split(", ").find_map(|p| p.strip_prefix(who)?.strip_prefix(' ')).filter(|p| *p != "n/a");
            v.push(fig(format!("{name}'s syscalls / context switches per request at {c}"), pair.map(String::from)));
        }
    }
    v
}

/// `met` or `not met`, from the first `goal >= …: met` in `text`.
fn verdict(text: &str) -> Option<String> {
    let rest = &text[text.find("goal >= ")?..];
    let (_, after) = rest.split_once(": ")?;
    [("not met", "not met"), ("met", "met")].iter().find(|(w, _)| after.starts_with(w)).map(|(_, v)| v.to_string())
}

fn proxy_instructions(out: &str) -> Vec<Figure> {
    let Some(t) = table(out, "instructions per request") else { return Vec::new() };
    let mut v = Vec::new();
    for r in &t.rows {
        let n = t.cell(r, "instructions per request").map(String::from);
        v.push(fig(format!("{}: instructions per request", r[0]), n));
    }
    let monitor = t.row("monitor run");
    let ratio = |col: &str| monitor.and_then(|r| t.cell(r, col)).and_then(number_with_unit).map(|x| x + "x");
    v.push(fig("monitor run / nginx", ratio("/ nginx")));
    v.push(fig("monitor run / bare hyper hop", ratio("/ bare hyper hop")));
    v
}

fn web(out: &str) -> Vec<Figure> {
    let day = line(out, "render, 24 h").unwrap_or("");
    let week = line(out, "render, 7 d").unwrap_or("");
    let loaded = line(out, "24 h × 16 processes loaded").unwrap_or("");
    let week_loaded = line(out, "7 d × 64 processes loaded").unwrap_or("");
    vec![
        fig("the 24 h page, render", value_after(day, " page ")),
        fig("the same data as JSON", value_after(day, "baseline JSON of the same data ")),
        fig("page / JSON", ratio_after(day, "ratio page/json = ")),
        fig("the 7 d page of 64 processes, render", value_after(week, " page ")),
        fig("the same week as JSON", value_after(week, "baseline JSON of the same data ")),
        fig("7 d page / JSON", ratio_after(week, "ratio page/json = ")),
        fig("the agent's VmRSS, empty database", value_after(out, "empty database (baseline): VmRSS ")),
        fig("the agent's VmRSS, a day of 16 processes", value_after(loaded, "VmRSS ")),
        fig("with a full hour's ring added, at most", value_after(out, "bounds it): <= ")),
        fig("the agent's VmRSS, empty database, 64 processes", value_after(out, "(baseline, week): VmRSS ")),
        fig("the agent's VmRSS, a week of 64 processes", value_after(week_loaded, "VmRSS ")),
        fig("the agent's peak RSS, a week of 64 processes", value_after(week_loaded, "(peak ")),
    ]
}

fn config(out: &str) -> Vec<Figure> {
    vec![
        fig("check-config, 100,000 processes", value_after(out, "100,000 processes:")),
        fig("check-config, 10,000 processes", value_after(out, "10,000 processes:")),
        fig("100,000 / 10,000", ratio_after(out, "ratio ")),
    ]
}

/// A table cell's number with its unit, or `-` where the cell says there is none (`- MB/s`: nothing measured).
fn cell_value(cell: &str) -> Option<String> {
    if cell.starts_with("- ") || cell == "-" {
        return Some("-".to_string());
    }
    number_with_unit(cell)
}

/// The second half of a `p50 / p99 ms` cell, with its unit: `0.7 ms` of `0.5 / 0.7 ms`.
fn p99(cell: &str) -> Option<String> {
    cell_value(cell.split_once(" / ")?.1)
}

fn reaction(out: &str) -> Vec<Figure> {
    // With the test VM's cells the host's tables are printed twice: on their own, then in "All cells" with the VM's.
    let out = out.find("\nAll cells").map_or(out, |i| &out[i..]);
    let mut v = Vec::new();
    for t in tables(out) {
        if t.col("with the agent: kernel OOM kills").is_some() {
            v.extend(respawn(&t));
            continue;
        }
        let signalled = t.col("agent acted first").is_some();
        let held = t.col("held to the window's end").is_some();
        if !signalled && !held && t.col("killed by the agent").is_none() {
            continue;
        }
        // The group (hierarchy and kernel) is named only where the table has more than one.
        let one_group = t.rows.iter().all(|r| r.first() == t.rows.first().and_then(|f| f.first()));
        for r in &t.rows {
            let cell = |name: &str| t.cell(r, name);
            let (group, mode, grower) = (r[0], cell("mode").unwrap_or(""), cell("grower").unwrap_or(""));
            let what = |figure: &str| match one_group {
                true => format!("{mode}, {grower}: {figure}"),
                false => format!("{mode}, {grower} ({group}): {figure}"),
            };
            if held {
                v.push(fig(what("held to the window's end"), cell("held to the window's end").map(String::from)));
                v.push(fig(what("kernel OOM kills"), cell("kernel OOM kills").map(String::from)));
                v.push(fig(what("throttled above 96%"), cell("throttled above 96%").and_then(cell_value)));
                v.push(fig(what("speed before 96%"), cell("grower's speed before 96%").and_then(cell_value)));
                v.push(fig(what("speed above 96%"), cell("its speed above 96%").and_then(cell_value)));
            } else if signalled {
                v.push(fig(what("agent acted first"), cell("agent acted first").map(String::from)));
                v.push(fig(what("crossing 92% -> signal p99"), cell("crossing 92%").and_then(p99)));
                if grower == "full speed" {
                    v.push(fig(what("grower's own speed"), cell("grower's own speed").and_then(cell_value)));
                }
            } else {
                v.push(fig(what("killed by the agent"), cell("killed by the agent").map(String::from)));
                v.push(fig(what("kernel OOM kills"), cell("kernel OOM kills").map(String::from)));
                v.push(fig(what("crossing 97% -> SIGKILL p99"), cell("crossing 97% -> SIGKILL").and_then(p99)));
            }
        }
    }
    v
}

/// The respawn cell's table (stress-ng without and with the agent): per run, the kernel's kills both ways and the
/// agent's.
fn respawn(t: &Table) -> Vec<Figure> {
    let mut v = Vec::new();
    for r in &t.rows {
        let cell = |name: &str| t.cell(r, name).map(String::from);
        let run = format!("respawn, run {} ({})", t.cell(r, "run").unwrap_or("?"), r[0]);
        v.push(fig(format!("{run}: kernel OOM kills without the agent"), cell("without the agent: kernel OOM kills")));
        v.push(fig(format!("{run}: kernel OOM kills with the agent"), cell("with the agent: kernel OOM kills")));
        v.push(fig(format!("{run}: agent kills"), cell("agent kills")));
    }
    v
}

fn cluster(out: &str) -> Vec<Figure> {
    let local = line(out, "local (b's cache)").unwrap_or("");
    let forwarded = line(out, "forwarded (a's cache").unwrap_or("");
    let gossip = |n: &str| line(out, &format!("gossip at {n} members")).unwrap_or("");
    vec![
        fig("forwarded / local p50", ratio_after(out, "forwarded / local p50: ")),
        fig("throughput forwarded / local", ratio_after(out, "throughput forwarded / local ")),
        fig("local p50", value_after(local, "p50 ")),
        fig("forwarded p50", value_after(forwarded, "p50 ")),
        fig("the floor: one byte-relay hop / local p50", ratio_after(out, "one byte-relay hop / local p50: ")),
        fig("forwarded over the floor", ratio_after(out, "forwarded over floor: ")),
        fig("gossip sent per node, 3 members", value_after(gossip("3"), "per node sent ")),
        fig("gossip sent per node, 50 members", value_after(gossip("50"), "per node sent ")),
        fig("gossip of the whole cluster, 50 members", value_after(gossip("50"), "the whole cluster ")),
    ]
}

fn image(out: &str) -> Vec<Figure> {
    vec![
        fig("image archive", value_after(out, "archive:")),
        fig("image unpacked", value_after(out, "unpacked:")),
        fig(
            "podman run to ready (master and two workers)",
            value_after(line(out, "podman run to /healthz").unwrap_or(""), "median of 5:"),
        ),
        fig(
            "podman run to one bare server's answer",
            value_after(line(out, "baseline:").unwrap_or(""), "median of 5:"),
        ),
        fig("ready / bare server", ratio_after(out, "ratio ")),
        fig("podman stop (drain, exit 0)", value_after(line(out, "podman stop").unwrap_or(""), "median of 5:")),
    ]
}

#[cfg(test)]
mod tests;
