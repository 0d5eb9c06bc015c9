//! A cell's figures from its runs (percentiles, the goals it misses), as JSON for the trip out of the VM, and the
//! Markdown table the bench prints.

use crate::MIB;
use serde_json::{json, Value};

use super::{HoldTiming, Idle, KillTiming, Mode, Run, Speed, Timing, GOAL_BRAKE_SLOWDOWN, GOAL_IDLE_PCT, GOAL_P99_MS};

/// One cell's figures: what the bench prints and the VM sends to the host (as JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// The hierarchy and kernel, e.g. `v1, Linux 6.18.44 (host)`.
    pub group: String,
    pub mode: Mode,
    pub speed: Speed,
    /// Completed runs, and runs that failed for another reason (the harness, the agent's start).
    pub runs: usize,
    pub errors: usize,
    pub acted_first: usize,
    pub signalled: usize,
    pub oom_kills: u64,
    /// Signalled runs in which the signal came before the line.
    pub before_line: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub overshoot_p50_mib: Option<f64>,
    pub overshoot_max_mib: Option<f64>,
    /// The grower's own speed, median of the signalled runs, MB/s.
    pub rate_mb_s: Option<f64>,
    /// The mode's idle CPU, % of a core: the agent's utime+stime, its threads' run time, the bench's own.
    pub idle_pct: Option<f64>,
    pub idle_pct_ns: Option<f64>,
    pub idle_own_pct: Option<f64>,
    pub idle_seconds: Option<f64>,
    /// Runs in which the grower died by the agent's SIGKILL (its log says so).
    pub killed_by_agent: usize,
    /// Bystanders gone, over all runs.
    pub bystanders_lost: usize,
    /// Crossing `kill_at` to the agent's SIGKILL (its own `CLOCK_MONOTONIC` stamp), ms.
    pub sigkill_p50_ms: Option<f64>,
    pub sigkill_p99_ms: Option<f64>,
    /// Crossing `kill_at` to the grower's death, over the runs it died in after crossing, ms.
    pub kill_p50_ms: Option<f64>,
    pub kill_p99_ms: Option<f64>,
    /// Mode `held`: runs whose window ended with the grower alive, held at `memory.high`.
    pub held_to_end: usize,
    /// Mode `held`: time above the brake's line, s (median), and the grower's speed before it and above it,
    /// MB/s (medians).
    pub held_p50_s: Option<f64>,
    pub rate_before_mb_s: Option<f64>,
    pub rate_above_mb_s: Option<f64>,
}

/// The nearest-rank percentile `q` (0..=1) of `v`; None when empty.
pub fn percentile(v: &[f64], q: f64) -> Option<f64> {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return None;
    }
    s.sort_by(f64::total_cmp);
    let rank = ((q * s.len() as f64).ceil() as usize).clamp(1, s.len());
    Some(s[rank - 1])
}

impl Summary {
    pub fn new(group: &str, mode: Mode, speed: Speed, runs: &[Run], errors: usize, idle: Option<&Idle>) -> Summary {
        let timings: Vec<Timing> = runs.iter().filter_map(Run::timing).collect();
        let ms: Vec<f64> = timings.iter().map(|t| t.latency_ns as f64 / 1e6).collect();
        let over: Vec<f64> = timings.iter().map(|t| t.overshoot_bytes as f64 / MIB as f64).collect();
        let mut rates: Vec<f64> = timings.iter().filter_map(|t| t.rate_bytes_s).map(|r| r / 1e6).collect();
        let kills: Vec<KillTiming> = runs.iter().filter_map(Run::kill_timing).collect();
        let kill_ms: Vec<f64> = kills.iter().map(|t| t.latency_ns as f64 / 1e6).collect();
        let sigkill_ms: Vec<f64> = runs.iter().filter_map(Run::sigkill_latency_ns).map(|ns| ns as f64 / 1e6).collect();
        if mode.last_resort() {
            rates = kills.iter().filter_map(|t| t.rate_bytes_s).map(|r| r / 1e6).collect();
        }
        let holds: Vec<HoldTiming> = runs.iter().filter_map(Run::hold_timing).collect();
        let held_s: Vec<f64> = holds.iter().map(|t| t.held_ns as f64 / 1e9).collect();
        let before: Vec<f64> = holds.iter().filter_map(|t| t.rate_before_bytes_s).map(|r| r / 1e6).collect();
        let above: Vec<f64> = holds.iter().filter_map(|t| t.rate_above_bytes_s).map(|r| r / 1e6).collect();
        Summary {
            group: group.to_string(),
            mode,
            speed,
            runs: runs.len(),
            errors,
            acted_first: runs.iter().filter(|r| r.acted_first()).count(),
            signalled: runs.iter().filter(|r| r.signalled()).count(),
            oom_kills: runs.iter().map(|r| r.oom_kills).sum(),
            before_line: timings.iter().filter(|t| t.before_line).count(),
            p50_ms: percentile(&ms, 0.5),
            p99_ms: percentile(&ms, 0.99),
            overshoot_p50_mib: percentile(&over, 0.5),
            overshoot_max_mib: percentile(&over, 1.0),
            rate_mb_s: percentile(&rates, 0.5),
            idle_pct: idle.map(Idle::agent_pct),
            idle_pct_ns: idle.and_then(Idle::agent_pct_ns),
            idle_own_pct: idle.map(Idle::own_pct),
            idle_seconds: idle.map(|i| i.seconds),
            killed_by_agent: runs.iter().filter(|r| r.killed_by_agent).count(),
            bystanders_lost: runs.iter().map(|r| r.bystanders_lost).sum(),
            sigkill_p50_ms: percentile(&sigkill_ms, 0.5),
            sigkill_p99_ms: percentile(&sigkill_ms, 0.99),
            kill_p50_ms: percentile(&kill_ms, 0.5),
            kill_p99_ms: percentile(&kill_ms, 0.99),
            held_to_end: runs.iter().filter(|r| r.ended_by_bench && r.oom_kills == 0).count(),
            held_p50_s: percentile(&held_s, 0.5),
            rate_before_mb_s: percentile(&before, 0.5),
            rate_above_mb_s: percentile(&above, 0.5),
        }
    }

    /// Mode `held`: the grower's speed before the brake's line over its speed above it.
    pub fn slowed_by(&self) -> Option<f64> {
        match (self.rate_before_mb_s, self.rate_above_mb_s) {
            (Some(b), Some(a)) if a > 0.0 => Some(b / a),
            _ => None,
        }
    }

    /// The goals this cell misses: `OOM` (not 0 kills with the agent first in every run), `p99` (> 20 ms),
    /// `idle` (>= 0.5% of a core).
    pub fn missed(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.mode == Mode::Held {
            // memory.high slows the grower at least GOAL_BRAKE_SLOWDOWN times above its line, the bystanders stay.
            // Nothing else stops the grower here, so the kernel's OOM kill at the limit is expected, not missed.
            if self.slowed_by().is_none_or(|x| x < GOAL_BRAKE_SLOWDOWN) || self.errors > 0 || self.runs == 0 {
                out.push("brake");
            }
            if self.bystanders_lost > 0 {
                out.push("bystanders");
            }
            return out;
        }
        if self.mode.last_resort() {
            // The agent's SIGKILL ends the grower in every run, the kernel kills nobody, the bystanders stay.
            if self.oom_kills > 0 || self.killed_by_agent < self.runs || self.errors > 0 || self.runs == 0 {
                out.push("OOM");
            }
            if self.bystanders_lost > 0 {
                out.push("bystanders");
            }
            if self.idle_pct.is_some_and(|p| p >= GOAL_IDLE_PCT) {
                out.push("idle");
            }
            return out;
        }
        if self.oom_kills > 0 || self.errors > 0 || self.runs == 0 {
            out.push("OOM");
        }
        // Runs the abort's signal did not end: the kernel's kill, or the agent's own last resort before it.
        if self.acted_first < self.runs {
            out.push("signal");
        }
        if self.p99_ms.is_none_or(|p| p > GOAL_P99_MS) {
            out.push("p99");
        }
        if self.idle_pct.is_some_and(|p| p >= GOAL_IDLE_PCT) {
            out.push("idle");
        }
        out
    }

    pub fn to_json(&self) -> Value {
        json!({
            "group": self.group, "mode": self.mode.name(), "speed_mb_s": self.speed.0,
            "runs": self.runs, "errors": self.errors, "acted_first": self.acted_first,
            "signalled": self.signalled, "oom_kills": self.oom_kills, "before_line": self.before_line,
            "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
            "overshoot_p50_mib": self.overshoot_p50_mib, "overshoot_max_mib": self.overshoot_max_mib,
            "rate_mb_s": self.rate_mb_s, "idle_pct": self.idle_pct, "idle_pct_ns": self.idle_pct_ns,
            "idle_own_pct": self.idle_own_pct, "idle_seconds": self.idle_seconds,
            "killed_by_agent": self.killed_by_agent, "bystanders_lost": self.bystanders_lost,
            "kill_p50_ms": self.kill_p50_ms, "kill_p99_ms": self.kill_p99_ms,
            "sigkill_p50_ms": self.sigkill_p50_ms, "sigkill_p99_ms": self.sigkill_p99_ms,
            "held_to_end": self.held_to_end, "held_p50_s": self.held_p50_s,
            "rate_before_mb_s": self.rate_before_mb_s, "rate_above_mb_s": self.rate_above_mb_s,
        })
    }

    pub fn from_json(v: &Value) -> Result<Summary, String> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64).ok_or_else(|| format!("summary: no {k} in {v}"));
        let f = |k: &str| v.get(k).and_then(Value::as_f64);
        let mode = v.get("mode").and_then(Value::as_str).and_then(Mode::from_name);
        Ok(Summary {
            group: v.get("group").and_then(Value::as_str).ok_or("summary: no group")?.to_string(),
            mode: mode.ok_or_else(|| format!("summary: bad mode in {v}"))?,
            speed: Speed(n("speed_mb_s")?),
            runs: n("runs")? as usize,
            errors: n("errors")? as usize,
            acted_first: n("acted_first")? as usize,
            signalled: n("signalled")? as usize,
            oom_kills: n("oom_kills")?,
            before_line: n("before_line")? as usize,
            p50_ms: f("p50_ms"),
            p99_ms: f("p99_ms"),
            overshoot_p50_mib: f("overshoot_p50_mib"),
            overshoot_max_mib: f("overshoot_max_mib"),
            rate_mb_s: f("rate_mb_s"),
            idle_pct: f("idle_pct"),
            idle_pct_ns: f("idle_pct_ns"),
            idle_own_pct: f("idle_own_pct"),
            idle_seconds: f("idle_seconds"),
            // Absent from the summaries of a VM built before the stubborn cells.
            killed_by_agent: v.get("killed_by_agent").and_then(Value::as_u64).unwrap_or(0) as usize,
            bystanders_lost: v.get("bystanders_lost").and_then(Value::as_u64).unwrap_or(0) as usize,
            sigkill_p50_ms: f("sigkill_p50_ms"),
            sigkill_p99_ms: f("sigkill_p99_ms"),
            kill_p50_ms: f("kill_p50_ms"),
            kill_p99_ms: f("kill_p99_ms"),
            held_to_end: v.get("held_to_end").and_then(Value::as_u64).unwrap_or(0) as usize,
            held_p50_s: f("held_p50_s"),
            rate_before_mb_s: f("rate_before_mb_s"),
            rate_above_mb_s: f("rate_above_mb_s"),
        })
    }
}

pub(crate) fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".to_string(), |x| format!("{x:.digits$}"))
}

fn idle_cell(c: &Summary) -> String {
    match c.idle_pct {
        Some(p) => {
            format!("{p:.3}% / {}% ({}%, {} s)", opt(c.idle_pct_ns, 3), opt(c.idle_own_pct, 3), opt(c.idle_seconds, 0))
        }
        None => "-".to_string(),
    }
}

fn missed_cell(c: &Summary) -> String {
    let missed = c.missed();
    if missed.is_empty() {
        "none".to_string()
    } else {
        missed.join(", ")
    }
}

/// The cells as Markdown tables, the goals beside the figures: the abort cells, then the stubborn ones and the held
/// ones (when run).
pub fn table(cells: &[Summary]) -> String {
    let (held, rest): (Vec<&Summary>, Vec<&Summary>) = cells.iter().partition(|c| c.mode == Mode::Held);
    let (stubborn, abort): (Vec<&Summary>, Vec<&Summary>) = rest.into_iter().partition(|c| c.mode.last_resort());
    let mut out = String::new();
    if !abort.is_empty() || (stubborn.is_empty() && held.is_empty()) {
        out.push_str(&abort_table(&abort));
    }
    for (cells, table) in [(&stubborn, stubborn_table as fn(&[&Summary]) -> String), (&held, held_table)] {
        if !cells.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&table(cells));
        }
    }
    out
}

/// The held cells: the grower ignores the abort and the last resort is off, so `memory.high` at brake_at is what
/// holds it.
fn held_table(cells: &[&Summary]) -> String {
    let mut out = String::from(
        "| group | mode | grower | held to the window's end | kernel OOM kills | bystanders lost \
         | throttled above 96% (median) | grower's speed before 96% (median) | its speed above 96% (median) \
         | slowed by | goals missed |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in cells {
        let errors = if c.errors > 0 { format!(" ({} runs failed)", c.errors) } else { String::new() };
        let slowed = c.slowed_by().map_or("-".to_string(), |x| format!("{x:.0}x"));
        out.push_str(&format!(
            "| {} | {} | {} | {}/{}{errors} | {} | {} | {} s | {} MB/s | {} MB/s | {slowed} | {} |\n",
            c.group,
            c.mode.describe(),
            c.speed.label(),
            c.held_to_end,
            c.runs + c.errors,
            c.oom_kills,
            c.bystanders_lost,
            opt(c.held_p50_s, 1),
            opt(c.rate_before_mb_s, 0),
            opt(c.rate_above_mb_s, 2),
            missed_cell(c),
        ));
    }
    out.push_str(&format!(
        "\nGoals (held): above 96% the grower goes at least {GOAL_BRAKE_SLOWDOWN}x slower than before; both \
         bystanders live. The grower ignores every signal it can and the agent's last resort is off, so the agent's \
         abort is ignored and only the brake (`brake_at = 0.96`: `memory.high`) slows it. memory.high throttles, it \
         does not stop: with no swap the grower keeps gaining, slowly, and the kernel's OOM killer ends it at the \
         limit unless the window ({} s from its start) ends first, so the OOM kills counted here are expected. They \
         measure the time the brake buys; the last resort's cells (brake-kill) show the agent using it. Throttled: \
         from the group reaching 96% of the limit (with its anon before the grower started; placed inside the \
         crossing chunk) to the window's end or the grower's death. Speed above 96%: what the grower gained from \
         the line to its last stamp (or the group's anon at the window's end), over that time; before: the \
         grower's stamps below the line.\n",
        super::HOLD.as_secs()
    ));
    out
}

/// The stubborn cells: the grower ignores the abort, so the agent's SIGKILL at kill_at is what stops it.
fn stubborn_table(cells: &[&Summary]) -> String {
    let mut out = String::from(
        "| group | mode | grower | killed by the agent | kernel OOM kills | bystanders lost \
         | crossing 97% -> SIGKILL p50 / p99 | crossing 97% -> grower dead p50 / p99 | grower's own speed (median) \
         | agent idle CPU: ticks / run time (baseline) | goals missed |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in cells {
        let errors = if c.errors > 0 { format!(" ({} runs failed)", c.errors) } else { String::new() };
        out.push_str(&format!(
            "| {} | {} | {} | {}/{}{errors} | {} | {} | {} / {} ms | {} / {} ms | {} MB/s | {} | {} |\n",
            c.group,
            c.mode.describe(),
            c.speed.label(),
            c.killed_by_agent,
            c.runs + c.errors,
            c.oom_kills,
            c.bystanders_lost,
            opt(c.sigkill_p50_ms, 2),
            opt(c.sigkill_p99_ms, 2),
            opt(c.kill_p50_ms, 1),
            opt(c.kill_p99_ms, 1),
            opt(c.rate_mb_s, 0),
            idle_cell(c),
            missed_cell(c),
        ));
    }
    out.push_str(
        "\nGoals (stubborn): the agent's SIGKILL ends the grower and the kernel kills nobody in every run; both \
         bystanders live. The grower ignores every signal it can. The crossing is the group reaching kill_at (0.97 \
         of the limit, with the group's anon before it started; placed inside the crossing chunk by the grower's \
         speed); -> SIGKILL runs to the agent's own stamp of the kill (`kills[].sent_mono_ns` in its status, the same \
         clock), -> dead to the grower's output closing, which comes after its exit has freed its memory.\n",
    );
    out
}

fn abort_table(cells: &[&Summary]) -> String {
    let mut out = String::from(
        "| group | mode | grower | agent acted first | kernel OOM kills | crossing 92% -> signal p50 / p99 \
         | overshoot past the line at the signal p50 / max | grower's own speed (median) \
         | agent idle CPU: ticks / run time (baseline) | goals missed |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for c in cells {
        let errors = if c.errors > 0 { format!(" ({} runs failed)", c.errors) } else { String::new() };
        let mut notes = Vec::new();
        if c.signalled > 0 && c.signalled < c.runs {
            notes.push(format!("of {} signalled", c.signalled));
        }
        if c.before_line > 0 {
            notes.push(format!("{} before the line", c.before_line));
        }
        let before = if notes.is_empty() { String::new() } else { format!(" ({})", notes.join(", ")) };
        let idle = idle_cell(c);
        out.push_str(&format!(
            "| {} | {} | {} | {}/{}{errors} | {} | {} / {} ms{before} | {} / {} MiB | {} MB/s | {idle} | {} |\n",
            c.group,
            c.mode.describe(),
            c.speed.label(),
            c.acted_first,
            c.runs + c.errors,
            c.oom_kills,
            opt(c.p50_ms, 1),
            opt(c.p99_ms, 1),
            opt(c.overshoot_p50_mib, 1),
            opt(c.overshoot_max_mib, 1),
            opt(c.rate_mb_s, 0),
            missed_cell(c),
        ));
    }
    out.push_str(&format!(
        "\nGoals: the agent first and 0 OOM kills in every run; crossing -> signal p99 <= {GOAL_P99_MS} ms; idle CPU < \
         {GOAL_IDLE_PCT}% of a core. Goals missed: OOM (the kernel killed, or runs failed), signal (runs the abort's \
         signal did not end), p99, idle, bystanders. p99 is nearest-rank: the slowest run of a cell of 100 runs or \
         fewer. Idle CPU is measured once per mode, in its first run (before the grower starts).\n"
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reaction::{Death, GrowerReport, Outcome};

    fn report(signal: Option<u64>, chunks: &[(u64, u64)]) -> GrowerReport {
        GrowerReport { signal_ns: signal, freed_ns: 0, peak_bytes: 0, chunks: chunks.to_vec() }
    }

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), Some(10.0));
        assert_eq!(percentile(&v, 0.99), Some(20.0));
        assert_eq!(percentile(&[3.0], 0.99), Some(3.0));
        assert_eq!(percentile(&[], 0.5), None);
    }

    #[test]
    fn summaries_travel_as_json() {
        let runs = vec![
            Run {
                base: 80 * MIB,
                oom_kills: 0,
                peak_usage: None,
                outcome: Outcome::Report(report(Some(45), &[(30, 420 * MIB)])),
                killed_by_agent: false,
                bystanders_lost: 0,
                kill_sent_ns: None,
                held: false,
                ended_by_bench: false,
                held_end: None,
            },
            Run {
                base: 80 * MIB,
                oom_kills: 1,
                peak_usage: None,
                outcome: Outcome::Died(death(0, &[])),
                killed_by_agent: false,
                bystanders_lost: 0,
                kill_sent_ns: None,
                held: false,
                ended_by_bench: false,
                held_end: None,
            },
        ];
        let idle = Idle { seconds: 10.0, agent_ticks: 3, own_ticks: 0, agent_ns: Some(25_000_000), hz: 100.0 };
        let s = Summary::new("v2, Linux 6.12 (VM, TCG)", Mode::Brake, Speed(0), &runs, 1, Some(&idle));
        assert_eq!((s.acted_first, s.signalled, s.oom_kills, s.runs, s.errors), (1, 1, 1, 2, 1));
        assert_eq!(s.idle_pct, Some(0.3));
        assert_eq!(s.missed(), vec!["OOM", "signal"]);
        assert_eq!(Summary::from_json(&s.to_json()), Ok(s.clone()));
        let t = table(&[s]);
        assert!(t.contains("| 1/3 (1 runs failed) | 1 |"), "{t}");
    }

    fn death(closed_ns: u64, chunks: &[(u64, u64)]) -> Death {
        Death { how: "signal: 9 (SIGKILL)".into(), signal: Some(9), closed_ns, chunks: chunks.to_vec() }
    }

    #[test]
    fn held_cells_time_the_brake_and_compare_the_speeds() {
        // base 80 MiB, the brake's line 0.96 x 512 MiB = 491.52 MiB: the grower's 400 MiB chunk at 1 s stays below
        // it, the 420 MiB one at 1.1 s crosses (at 411.52 MiB, 1.0576 s). The window ends at 11.0576 s with the
        // group at 501.52 MiB: 10 MiB in 10 s above the line.
        let line = super::super::brake_line_bytes();
        let chunks = [(0, 0), (1_000_000_000, 400 * MIB), (1_100_000_000, 420 * MIB)];
        let crossing = 1_000_000_000 + ((line - 480 * MIB) as f64 / (20 * MIB) as f64 * 1e8) as u64;
        let run = |held: bool| Run {
            base: 80 * MIB,
            oom_kills: u64::from(!held),
            peak_usage: None,
            outcome: Outcome::Died(death(12_000_000_000, &chunks)),
            killed_by_agent: false,
            bystanders_lost: 0,
            kill_sent_ns: None,
            held: true,
            ended_by_bench: held,
            held_end: held.then_some((crossing + 10_000_000_000, line + 10 * MIB)),
        };
        let s = Summary::new("v2, Linux 6.12 (VM, TCG)", Mode::Held, Speed(0), &[run(true), run(true)], 0, None);
        assert_eq!((s.held_to_end, s.oom_kills), (2, 0));
        assert!(s.held_p50_s.is_some_and(|h| (h - 10.0).abs() < 1e-6), "{s:?}");
        assert!(s.rate_before_mb_s.is_some_and(|r| (r - 400.0 * MIB as f64 / 1e6).abs() < 1e-6), "{s:?}");
        assert!(s.rate_above_mb_s.is_some_and(|r| (r - MIB as f64 / 1e6).abs() < 1e-6), "{s:?}");
        assert!(s.missed().is_empty(), "{:?}", s.missed());
        assert_eq!(Summary::from_json(&s.to_json()), Ok(s.clone()));
        let t = table(std::slice::from_ref(&s));
        assert!(t.contains("| 2/2 | 0 | 0 | 10.0 s | 419 MB/s | 1.05 MB/s | 400x | none |"), "{t}");
        // A kernel OOM kill at the limit is what a held run may end in: not a goal missed.
        let oom = Summary::new("v2", Mode::Held, Speed(0), &[run(true), run(false)], 0, None);
        assert_eq!((oom.held_to_end, oom.oom_kills), (1, 1));
        assert!(oom.missed().is_empty(), "{:?}", oom.missed());
        // A brake that slows the grower less than 10x misses its goal.
        let weak = Summary { rate_above_mb_s: s.rate_before_mb_s.map(|b| b / 5.0), ..s.clone() };
        assert_eq!(weak.missed(), vec!["brake"]);
    }

    #[test]
    fn stubborn_cells_count_the_agents_kills_and_time_them_from_kill_at() {
        // base 80 MiB: the chunk holding 420 MiB is past kill_at (0.97 × 512 MiB = 496.6 MiB), stamped at 1 ms;
        // 416.6 MiB was reached at 0.83 ms.
        let chunks = [(0, 400 * MIB), (1_000_000, 420 * MIB)];
        let run = |closed_ns: u64, by_agent: bool, lost: usize| Run {
            base: 80 * MIB,
            oom_kills: u64::from(!by_agent),
            peak_usage: None,
            outcome: Outcome::Died(death(closed_ns, &chunks)),
            killed_by_agent: by_agent,
            bystanders_lost: lost,
            kill_sent_ns: by_agent.then_some(1_000_000),
            held: false,
            ended_by_bench: false,
            held_end: None,
        };
        let runs = [run(4_000_000, true, 0), run(9_000_000, true, 0), run(3_000_000, false, 1)];
        let s = Summary::new("v1, Linux 6.18 (host)", Mode::Stubborn, Speed(300), &runs, 0, None);
        assert_eq!((s.killed_by_agent, s.oom_kills, s.bystanders_lost), (2, 1, 1));
        let ms = |x: Option<f64>| x.map(|v| (v * 100.0).round() / 100.0);
        assert_eq!((ms(s.kill_p50_ms), ms(s.kill_p99_ms)), (Some(3.17), Some(8.17)));
        assert_eq!(s.rate_mb_s, Some(20.0 * MIB as f64 / 1e-3 / 1e6));
        assert_eq!(s.missed(), vec!["OOM", "bystanders"]);
        assert_eq!(Summary::from_json(&s.to_json()), Ok(s.clone()));
        // The SIGKILL stamped at 1 ms: 0.17 ms after the crossing, in both runs the agent killed.
        assert_eq!((ms(s.sigkill_p50_ms), ms(s.sigkill_p99_ms)), (Some(0.17), Some(0.17)));
        let t = table(&[s]);
        assert!(t.contains("| 2/3 | 1 | 1 | 0.17 / 0.17 ms | 3.2 / 8.2 ms |"), "{t}");
        assert!(!t.contains("agent acted first"), "only the stubborn table: {t}");
    }
}
