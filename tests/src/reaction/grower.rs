//! The `grower` fixture's side of a run: starting it in the group, telling it to go, reading its closing report,
//! and what its stamps say (crossing the line, the signal, the overshoot, its own speed).

use crate::{spawn_in_cgroup, ChildGuard};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{Death, Outcome, Speed, GROWER_MAX_MIB};

/// The grower's closing line.
#[derive(Debug, Clone, PartialEq)]
pub struct GrowerReport {
    /// When the signal arrived (`CLOCK_MONOTONIC` ns); None: never signalled.
    pub signal_ns: Option<u64>,
    pub freed_ns: u64,
    pub peak_bytes: u64,
    /// (stamp ns, bytes held after the chunk), one per chunk.
    pub chunks: Vec<(u64, u64)>,
}

/// Parses `{"signal_ns": N|null, "freed_ns": N, "peak_bytes": N, "chunks": [[t, bytes], ...]}`.
pub fn parse_report(line: &str) -> Result<GrowerReport, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("grower report {line:?}: {e}"))?;
    let num = |k: &str| v.get(k).and_then(Value::as_u64).ok_or_else(|| format!("grower report: no {k}"));
    let signal_ns = match v.get("signal_ns") {
        Some(Value::Null) => None,
        Some(s) => Some(s.as_u64().ok_or("grower report: bad signal_ns")?),
        None => return Err("grower report: no signal_ns".into()),
    };
    let chunks = v
        .get("chunks")
        .and_then(Value::as_array)
        .ok_or("grower report: no chunks")?
        .iter()
        .map(|c| match c.as_array().map(Vec::as_slice) {
            Some([t, b]) => t.as_u64().zip(b.as_u64()).ok_or_else(|| format!("bad chunk {c}")),
            _ => Err(format!("bad chunk {c}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(GrowerReport { signal_ns, freed_ns: num("freed_ns")?, peak_bytes: num("peak_bytes")?, chunks })
}

/// What the grower's stamps say about one signalled run.
#[derive(Debug, Clone, PartialEq)]
pub struct Timing {
    /// Crossing the line to the signal, ns; 0 when the signal came before the line.
    pub latency_ns: u64,
    /// The signal came before the group reached the line.
    pub before_line: bool,
    /// The grower's bytes at the signal.
    pub held_bytes: u64,
    /// base + the grower's bytes at the signal − the line (negative: below the line).
    pub overshoot_bytes: i64,
    /// The grower's speed from its first to its last chunk before the signal, bytes/s (None: under two chunks).
    pub rate_bytes_s: Option<f64>,
}

/// The timing of a signalled run from the grower's stamps, `base` (the group's anon before the grower started)
/// and the line. The crossing is the first chunk stamp at which base + bytes held >= line; the grower's bytes at
/// the signal are those of the last chunk stamped at or before it (a chunk being touched then is not counted).
pub fn timing(report: &GrowerReport, base: u64, line: u64) -> Option<Timing> {
    let signal = report.signal_ns?;
    let crossing = report.chunks.iter().find(|&&(_, b)| base + b >= line).map(|&(t, _)| t);
    let (latency_ns, before_line) = match crossing {
        Some(t) if t <= signal => (signal - t, false),
        _ => (0, true),
    };
    let upto: Vec<&(u64, u64)> = report.chunks.iter().take_while(|&&(t, _)| t <= signal).collect();
    let held = upto.last().map_or(0, |&&(_, b)| b);
    let overshoot_bytes = (base + held) as i64 - line as i64;
    let rate_bytes_s = match (upto.first(), upto.last()) {
        (Some(&&(t0, b0)), Some(&&(t1, b1))) if t1 > t0 => Some((b1 - b0) as f64 / ((t1 - t0) as f64 / 1e9)),
        _ => None,
    };
    Some(Timing { latency_ns, before_line, held_bytes: held, overshoot_bytes, rate_bytes_s })
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock the grower stamps its chunks with.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Parses the uncooperative grower's `chunk <t_ns> <bytes>` line.
pub fn parse_chunk(line: &str) -> Option<(u64, u64)> {
    match line.split_whitespace().collect::<Vec<_>>().as_slice() {
        ["chunk", t, b] => Some((t.parse().ok()?, b.parse().ok()?)),
        _ => None,
    }
}

/// A running grower (killed on drop), its output lines read on a thread.
pub struct Grower {
    pub child: ChildGuard,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// When its output closed (`CLOCK_MONOTONIC` ns; 0: not yet): it exited, its memory freed.
    closed_ns: Arc<AtomicU64>,
}

impl Grower {
    /// Starts a grower up to [`GROWER_MAX_MIB`] at `speed` in `cgroup` and waits for its `ready` line.
    pub fn spawn(bin: &Path, cgroup: &Path, speed: Speed) -> Result<Grower, String> {
        let (max, rate) = (GROWER_MAX_MIB.to_string(), speed.0.to_string());
        Self::spawn_args(bin, cgroup, &["--max-mib", &max, "--rate-mb-s", &rate])
    }

    /// Starts the uncooperative grower (`--ignore-all`: only SIGKILL stops it) up to `max_mib` at `speed`.
    pub fn spawn_stubborn(bin: &Path, cgroup: &Path, speed: Speed, max_mib: u64) -> Result<Grower, String> {
        let (max, rate) = (max_mib.to_string(), speed.0.to_string());
        Self::spawn_args(bin, cgroup, &["--ignore-all", "--max-mib", &max, "--rate-mb-s", &rate])
    }

    /// Starts `grower <args…>` in `cgroup` and waits for its `ready` line.
    pub fn spawn_args(bin: &Path, cgroup: &Path, args: &[&str]) -> Result<Grower, String> {
        let mut cmd = Command::new(bin);
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped());
        let mut child = spawn_in_cgroup(&mut cmd, cgroup);
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("grower started without pipes".into());
        };
        let (tx, lines) = mpsc::channel();
        let closed_ns = Arc::new(AtomicU64::new(0));
        let closed = closed_ns.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    return;
                }
            }
            // Stamped before the channel disconnects, so `finish` sees it.
            closed.store(now_ns(), Ordering::SeqCst);
        });
        let first = lines.recv_timeout(Duration::from_secs(10)).map_err(|e| format!("grower never ready: {e}"))?;
        if !first.starts_with("ready ") {
            return Err(format!("grower said {first:?}, not `ready <pid>`"));
        }
        Ok(Grower { child, stdin: Some(stdin), lines, closed_ns })
    }

    pub fn start(&mut self) -> Result<(), String> {
        let stdin = self.stdin.as_mut().ok_or("grower's stdin is closed")?;
        stdin.write_all(b"go\n").and_then(|()| stdin.flush()).map_err(|e| format!("starting the grower: {e}"))
    }

    /// Waits for the report or the grower's death; past `timeout`, closes its stdin (it then reports unsignalled).
    pub fn finish(&mut self, timeout: Duration) -> Result<Outcome, String> {
        use std::os::unix::process::ExitStatusExt;
        let mut closed = false;
        let mut deadline = Instant::now() + timeout;
        let mut chunks = Vec::new();
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) if line.starts_with('{') => return parse_report(&line).map(Outcome::Report),
                Ok(line) => chunks.extend(parse_chunk(&line)),
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait_timeout(Duration::from_secs(10));
                    return Ok(Outcome::Died(Death {
                        how: status.map_or("did not exit".into(), |s| s.to_string()),
                        signal: status.and_then(|s| s.signal()),
                        closed_ns: self.closed_ns.load(Ordering::SeqCst),
                        chunks,
                    }));
                }
                Err(mpsc::RecvTimeoutError::Timeout) if !closed => {
                    self.stdin = None;
                    closed = true;
                    deadline = Instant::now() + Duration::from_secs(10);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Err("the grower neither reported nor died".into()),
            }
        }
    }
}

/// How a `held` run ended ([`Grower::hold`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub death: Death,
    /// The window ended with the grower alive, and the bench killed it.
    pub ended_by_bench: bool,
    /// At the window's end, before the kill: `CLOCK_MONOTONIC` ns and what `at_end` read then (the group's anon).
    pub end: Option<(u64, u64)>,
}

impl Grower {
    /// Watches a grower that ignores every signal for `window` after [`Grower::start`], collecting the stamps it
    /// prints as it goes. If it dies first (the kernel's OOM killer), that is how it ended; if it is alive at the
    /// end, `at_end` is read (the group's anon) and the bench SIGKILLs it, its own child.
    pub fn hold(&mut self, window: Duration, at_end: impl Fn() -> Option<u64>) -> Result<Held, String> {
        use std::os::unix::process::ExitStatusExt;
        let deadline = Instant::now() + window;
        let mut chunks = Vec::new();
        let mut end = None;
        let mut ended_by_bench = false;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(if ended_by_bench { Duration::from_secs(10) } else { left }) {
                Ok(line) => chunks.extend(parse_chunk(&line)),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) if !ended_by_bench => {
                    let t = now_ns();
                    end = at_end().map(|anon| (t, anon));
                    // SAFETY: kill(2) on our own child's pid, which we have not reaped.
                    unsafe { libc::kill(self.child.pid() as libc::pid_t, libc::SIGKILL) };
                    ended_by_bench = true;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => return Err("the held grower did not die of SIGKILL".into()),
            }
        }
        let status = self.child.wait_timeout(Duration::from_secs(10));
        let death = Death {
            how: status.map_or("did not exit".into(), |s| s.to_string()),
            signal: status.and_then(|s| s.signal()),
            closed_ns: self.closed_ns.load(Ordering::SeqCst),
            chunks,
        };
        Ok(Held { death, ended_by_bench, end })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(signal: Option<u64>, chunks: &[(u64, u64)]) -> GrowerReport {
        GrowerReport { signal_ns: signal, freed_ns: 0, peak_bytes: 0, chunks: chunks.to_vec() }
    }

    #[test]
    fn parses_the_grower_report() {
        let r = parse_report(r#"{"signal_ns": 50, "freed_ns": 60, "peak_bytes": 8, "chunks": [[10,4],[20,8]]}"#);
        assert_eq!(
            r,
            Ok(report(Some(50), &[(10, 4), (20, 8)])).map(|mut r| {
                r.freed_ns = 60;
                r.peak_bytes = 8;
                r
            })
        );
        let r = parse_report(r#"{"signal_ns": null, "freed_ns": 1, "peak_bytes": 0, "chunks": []}"#);
        assert_eq!(r.map(|r| r.signal_ns), Ok(None));
        for bad in ["", "{}", r#"{"signal_ns": 1, "freed_ns": 1, "peak_bytes": 0, "chunks": [[1]]}"#] {
            assert!(parse_report(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_from_the_crossing_chunk_to_the_signal() {
        let line = 100;
        // base 60: the chunk holding 40 crosses at t=30; the signal at 45 (the chunk at 50 came after it).
        let r = report(Some(45), &[(10, 20), (20, 30), (30, 40), (40, 44), (50, 48)]);
        let t = timing(&r, 60, line).expect("signalled");
        assert_eq!((t.latency_ns, t.before_line, t.overshoot_bytes), (15, false, 4));
        // 24 bytes from t=10 to t=40: 0.8e9 bytes/s.
        assert_eq!(t.rate_bytes_s, Some(24.0 / 30e-9));
        // Signalled before the line: latency 0, overshoot negative.
        let t = timing(&r, 60, 200).expect("signalled");
        assert_eq!((t.latency_ns, t.before_line, t.overshoot_bytes), (0, true, 104 - 200));
        // Signalled before the first chunk.
        let t = timing(&report(Some(5), &[(10, 20)]), 60, line).expect("signalled");
        assert_eq!((t.overshoot_bytes, t.rate_bytes_s), (-40, None));
        assert_eq!(timing(&report(None, &[(10, 20)]), 60, line), None);
    }

    #[test]
    fn parses_chunk_lines() {
        assert_eq!(parse_chunk("chunk 123 4194304"), Some((123, 4_194_304)));
        assert_eq!(parse_chunk("ready 7"), None);
        assert_eq!(parse_chunk("chunk 1"), None);
    }
}
