//! Boots the test VM under qemu with software emulation (TCG: /dev/kvm does not work on these machines), echoes
//! its serial console, and reads the suite's exit status from the `@@RC=<n>@@` marker line.

use anyhow::{bail, Context, Result};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Console lines kept to show when the VM fails to report.
const TAIL: usize = 80;

/// A guest whose kernel reports a CPU stuck this long is not coming back: stop waiting for the marker.
pub const LOCKUP_GIVE_UP_S: u64 = 60;

/// The seconds in a kernel watchdog line `watchdog: BUG: soft lockup - CPU#0 stuck for 52s! [monitor:101]`.
pub fn soft_lockup_secs(line: &str) -> Option<u64> {
    let rest = line.split("soft lockup - CPU#").nth(1)?;
    let secs = rest.split("stuck for ").nth(1)?;
    secs.split('s').next()?.parse().ok()
}

/// The exit status in a console line carrying the marker `@@RC=<n>@@`.
pub fn marker(line: &str) -> Option<i32> {
    let start = line.find("@@RC=")? + "@@RC=".len();
    let rest = &line[start..];
    let end = rest.find("@@")?;
    rest[..end].trim().parse().ok()
}

/// What one boot gave.
#[derive(Debug)]
pub struct Boot {
    /// The suite's exit status.
    pub rc: i32,
    /// The suite's closing `N passed, N failed` line, if it printed one.
    pub summary: Option<String>,
    /// Console lines carrying `@@BENCH ` (a benchmark's results), from that marker on.
    pub bench: Vec<String>,
    /// The test harness's own closing lines (`test result: ok. N passed; M failed; …`), each after the
    /// `host-tests: <binary>` line that named its binary: `<binary>: test result: …`.
    pub results: Vec<String>,
    /// The tests' `skipping <test>: <reason>` lines.
    pub skips: Vec<String>,
    pub elapsed: Duration,
}

/// Runs `boot`, and once more when the guest never reported (it hung, or qemu died: seen under TCG on 6.1, both
/// vCPUs in a soft lockup, the agent's thread one of the two, once while other work loaded the host and once on an
/// idle one), loudly. A guest that ran its suite and reported a failure is never booted again: `boot` returns Ok
/// with its exit status. The guests print every CPU's backtrace on a soft lockup (softlockup_all_cpu_backtrace,
/// printk level 5), for the log to say where the kernel was.
pub fn boot_again_if_silent(label: &str, boot: impl Fn() -> Result<Boot>) -> Result<Boot> {
    boot().or_else(|e| {
        eprintln!("vmtest: {label}: the guest did not report ({e:#}); booting it once more");
        boot().map_err(|e2| e2.context(format!("second boot, after a first that did not report: {e:#}")))
    })
}

/// Iterations of the shell loop that measures how much slower than the host the guest runs.
const PACE_LOOPS: u32 = 100_000;

/// Kernel command-line words for the guest's /init to set `MONITOR_TEST_SLOWDOWN` from (tests/vm/init): the
/// iterations of a `/bin/sh` counting loop and the host's best time for it over three runs. The guest times the
/// same loop with the same shell (Debian's dash) at boot; the ratio is how far its tests' waits must stretch.
/// Empty when the host cannot run the loop (the guest then keeps its floor).
pub fn pace_words() -> String {
    let script = format!("i=0; while [ $i -lt {PACE_LOOPS} ]; do i=$((i+1)); done");
    let best = (0..3)
        .filter_map(|_| {
            let t = Instant::now();
            let ok = Command::new("/bin/sh").args(["-c", &script]).status().is_ok_and(|s| s.success());
            ok.then(|| t.elapsed())
        })
        .min();
    match best {
        Some(d) => format!("PACE_LOOPS={PACE_LOOPS} PACE_HOST_MS={}", d.as_millis().max(1)),
        None => String::new(),
    }
}

/// Boots `kernel` with `initrd`, `memory_mib` of guest memory and the extra kernel command-line words, echoing the
/// console with `label`, until the marker appears (then waits briefly for the power-off) or `timeout` passes (then
/// fails with the console's tail).
pub fn boot_with_memory(
    kernel: &Path,
    initrd: &Path,
    extra_append: &str,
    timeout: Duration,
    label: &str,
    memory_mib: u32,
) -> Result<Boot> {
    let append = format!("console=ttyS0 quiet panic=-1 softlockup_all_cpu_backtrace=1 {extra_append}");
    let memory = memory_mib.to_string();
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.args(["-accel", "tcg", "-cpu", "max", "-m", &memory, "-smp", "2", "-nic", "none"])
        .arg("-kernel")
        .arg(kernel)
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append.trim_end()])
        .args(["-display", "none", "-serial", "stdio", "-monitor", "none", "-no-reboot"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    eprintln!("+ {cmd:?}");
    let started = Instant::now();
    let mut child = cmd.spawn().context("starting qemu-system-x86_64 (apt-get install qemu-system-x86)")?;
    let (tx, rx) = mpsc::channel::<String>();
    let stdout = child.stdout.take().context("qemu stdout")?;
    std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        while r.read_until(b'\n', &mut buf).is_ok_and(|n| n > 0) {
            let line = String::from_utf8_lossy(&buf).trim_end_matches(['\r', '\n']).to_string();
            if tx.send(line).is_err() {
                break;
            }
            buf.clear();
        }
    });
    let mut stderr = child.stderr.take().context("qemu stderr")?;
    let stderr_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });

    let deadline = started + timeout;
    let mut tail: VecDeque<String> = VecDeque::with_capacity(TAIL);
    let mut summary = None;
    let mut bench = Vec::new();
    let (mut results, mut skips, mut binary) = (Vec::new(), Vec::new(), String::new());
    let outcome = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                println!("[{label}] {line}");
                if line.contains(" passed, ") && line.contains(" failed") {
                    summary = Some(line.trim().to_string());
                }
                if let Some(name) = line.trim().strip_prefix("host-tests: ") {
                    binary = name.to_string();
                }
                if let Some(at) = line.find("test result: ") {
                    results.push(format!("{binary}: {}", line[at..].trim_end()));
                }
                if let Some(at) = line.find("skipping ") {
                    skips.push(line[at..].trim_end().to_string());
                }
                if let Some(at) = line.find("@@BENCH ") {
                    bench.push(line[at..].trim_end().to_string());
                }
                let rc = marker(&line);
                let hung = soft_lockup_secs(&line).is_some_and(|secs| secs >= LOCKUP_GIVE_UP_S);
                if tail.len() == TAIL {
                    tail.pop_front();
                }
                tail.push_back(line);
                if let Some(rc) = rc {
                    break Ok(rc);
                }
                if hung {
                    break Err(format!("the guest kernel reports a soft lockup of {LOCKUP_GIVE_UP_S} s or more"));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => break Err(format!("no @@RC=<n>@@ marker within {timeout:?}")),
            Err(mpsc::RecvTimeoutError::Disconnected) => break Err("qemu exited without the marker".to_string()),
        }
    };
    let elapsed = started.elapsed();
    match outcome {
        Ok(rc) => {
            // The init powers off right after the marker; don't wait long for it.
            stop(&mut child, Duration::from_secs(15));
            Ok(Boot { rc, summary, bench, results, skips, elapsed })
        }
        Err(why) => {
            stop(&mut child, Duration::ZERO);
            let qemu_err = stderr_reader.join().unwrap_or_default();
            let tail: Vec<String> = tail.into_iter().collect();
            bail!(
                "{label}: {why} after {:.1} s. Last {} console lines:\n{}\nqemu stderr:\n{}",
                elapsed.as_secs_f64(),
                tail.len(),
                tail.join("\n"),
                qemu_err.trim()
            )
        }
    }
}

/// Waits up to `grace` for qemu to exit, then kills it; always reaps it.
fn stop(child: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_soft_lockup() {
        let l = "[6.1] [   60.384723] watchdog: BUG: soft lockup - CPU#0 stuck for 52s! [monitor:101]";
        assert_eq!(soft_lockup_secs(l), Some(52));
        assert_eq!(soft_lockup_secs("watchdog: BUG: soft lockup - CPU#1 stuck for xs!"), None);
        assert_eq!(soft_lockup_secs("test usage_limit_and_policy ... ok"), None);
    }

    #[test]
    fn reads_the_marker() {
        assert_eq!(marker("@@RC=0@@"), Some(0));
        assert_eq!(marker("[   12.3] x @@RC=101@@ y"), Some(101));
        assert_eq!(marker("@@RC=@@"), None);
        assert_eq!(marker("echo \"@@RC=$rc@@\""), None);
        assert_eq!(marker("no marker"), None);
    }
}
