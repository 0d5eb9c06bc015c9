//! cgroup v1 memory thresholds: one eventfd registered through `cgroup.event_control` on `memory.usage_in_bytes`
//! at a ladder of levels. The kernel signals it from the charge path when the usage crosses a level either way
//! (it checks every 128 page events per CPU, about every 512 KiB), so a grower is seen within a step of crossing
//! a line.
//!
//! The ladder is fixed for a limit: a level every half percent of the limit from 75% up to the limit, every 5%
//! below, and each line exactly. It is not re-armed around the usage after each wake-up because registering one
//! level costs the kernel an RCU grace period (`synchronize_rcu`, about 17 ms on this project's VMs: measured by
//! registering 20 levels from a script), which would stall the sampler at the moment it matters. A new limit gets a
//! new ladder, registered by a thread of its own, nearest levels first, while the old one keeps watching.
//!
//! `memory.usage_in_bytes` counts page cache besides the anonymous, shared and kernel memory the policy decides on,
//! so the usage crosses each line before those do; the dense levels above 75% wake the sampler again within half a
//! percent of growth until they have crossed too.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Where the dense part of the ladder starts, as a fraction of the limit.
const DENSE_FROM: f64 = 0.75;
/// The dense step and the coarse step, as fractions of the limit.
const DENSE_STEP: f64 = 0.005;
const COARSE_STEP: f64 = 0.05;

/// How far above each line the levels registered right after the lines reach, as a fraction of the limit: the
/// usage crosses a line before the anonymous memory does (it counts page cache and kernel memory too), so these
/// are the levels that wake the sampler when the anonymous memory itself crosses.
const BAND_ABOVE_LINE: f64 = 0.03;

/// The ladder of levels for `limit` and `lines` (fractions of the limit), in the order to register them (each
/// registration takes an RCU grace period, so the whole ladder takes about a second, and a grower may come before
/// it is all there): the lines above `usage` (highest first), then the dense levels just above each of them, then
/// the other dense levels above `usage` from the bottom up, then the coarse levels above it, then every level
/// below it, nearest first. Unique, none at 0.
pub(crate) fn ladder(limit: u64, lines: &[f64], usage: u64) -> Vec<u64> {
    let at = |f: f64| (limit as f64 * f).round() as u64;
    let coarse_n = (DENSE_FROM / COARSE_STEP).round() as u32;
    let coarse: Vec<u64> = (1..coarse_n).map(|i| at(f64::from(i) * COARSE_STEP)).collect();
    let dense_n = ((1.0 - DENSE_FROM) / DENSE_STEP).round() as u32;
    let dense: Vec<u64> = (0..=dense_n).map(|i| at(DENSE_FROM + f64::from(i) * DENSE_STEP)).collect();
    let mut by_line: Vec<f64> = lines.to_vec();
    by_line.sort_by(|a, b| b.total_cmp(a));
    let line_levels: Vec<u64> = by_line.iter().map(|&f| at(f)).collect();
    let bands = by_line.iter().flat_map(|&f| {
        let (lo, hi) = (at(f), at(f + BAND_ABOVE_LINE));
        dense.iter().copied().filter(move |&l| l > lo && l <= hi)
    });
    let mut below: Vec<u64> =
        coarse.iter().chain(dense.iter()).chain(line_levels.iter()).copied().filter(|&l| l <= usage).collect();
    below.sort_unstable_by(|a, b| b.cmp(a));
    let mut out = Vec::new();
    let order = line_levels
        .iter()
        .copied()
        .chain(bands.collect::<Vec<_>>())
        .chain(dense.iter().copied())
        .chain(coarse.iter().copied())
        .filter(|&l| l > usage)
        .chain(below);
    for l in order {
        if l > 0 && !out.contains(&l) {
            out.push(l);
        }
    }
    out
}

/// A ladder being registered or registered: its eventfd and the thread that registers it.
struct Armed {
    efd: Arc<OwnedFd>,
    limit: u64,
    arming: Option<JoinHandle<Result<(), String>>>,
}

/// The thresholds of one group.
pub struct Thresholds {
    dir: PathBuf,
    control: Arc<File>,
    usage: Arc<File>,
    /// The ladder in use.
    current: Option<Armed>,
    /// A ladder for a new limit, being registered.
    next: Option<Armed>,
}

impl Thresholds {
    /// Opens the group's `cgroup.event_control` and `memory.usage_in_bytes`; the reason in one line if it cannot.
    pub fn open(dir: &Path) -> Result<Thresholds, String> {
        let control = OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.event_control"))
            .map_err(|e| format!("cgroup.event_control: {e}"))?;
        let usage = File::open(dir.join("memory.usage_in_bytes")).map_err(|e| format!("memory.usage_in_bytes: {e}"))?;
        Ok(Thresholds {
            dir: dir.to_path_buf(),
            control: Arc::new(control),
            usage: Arc::new(usage),
            current: None,
            next: None,
        })
    }

    /// `memory.usage_in_bytes` now.
    pub fn usage(&self) -> std::io::Result<u64> {
        read_usage(&self.usage)
    }

    /// The eventfds to poll (the ladder in use, and one being registered).
    pub fn fds(&self) -> impl Iterator<Item = RawFd> + '_ {
        self.current.iter().chain(self.next.iter()).map(|a| a.efd.as_raw_fd())
    }

    /// Makes sure a ladder for `limit` is registered or being registered; swaps in a new one once its thread is
    /// done. Err when the kernel refused a level (the source is then off).
    pub fn ensure(&mut self, limit: u64, lines: &[f64], usage: u64) -> Result<(), String> {
        if let Some(next) = self.next.as_mut() {
            if next.arming.as_ref().is_some_and(JoinHandle::is_finished) {
                finish(next)?;
                self.current = self.next.take();
            }
        }
        if let Some(cur) = self.current.as_mut() {
            if cur.arming.as_ref().is_some_and(JoinHandle::is_finished) {
                finish(cur)?;
            }
        }
        let wanted = |a: &Option<Armed>| a.as_ref().is_some_and(|a| a.limit == limit);
        if wanted(&self.current) || wanted(&self.next) {
            return Ok(());
        }
        let armed = self.start(limit, ladder(limit, lines, usage))?;
        if self.current.is_none() {
            self.current = Some(armed);
        } else {
            self.next = Some(armed);
        }
        Ok(())
    }

    /// A new eventfd, its levels registered by a thread of its own.
    fn start(&self, limit: u64, levels: Vec<u64>) -> Result<Armed, String> {
        let efd = Arc::new(super::eventfd::new().map_err(|e| format!("eventfd: {e}"))?);
        let (control, usage, fd, dir) = (self.control.clone(), self.usage.clone(), efd.clone(), self.dir.clone());
        let arming = std::thread::Builder::new()
            .name("thresholds".into())
            .spawn(move || {
                for level in levels {
                    let line = format!("{} {} {}", fd.as_raw_fd(), usage.as_raw_fd(), level);
                    (&*control)
                        .write_all(line.as_bytes())
                        .map_err(|e| format!("{}/cgroup.event_control: {e}", dir.display()))?;
                }
                Ok(())
            })
            .map_err(|e| format!("starting the thread that registers the thresholds: {e}"))?;
        Ok(Armed { efd, limit, arming: Some(arming) })
    }

    /// Reads the eventfds' counters (resetting them): whether a level fired since the last call.
    pub(crate) fn fired(&self) -> bool {
        // Every counter is read, so that none stays set.
        self.current.iter().chain(self.next.iter()).fold(false, |any, a| super::eventfd::take(&a.efd) | any)
    }
}

/// Joins a ladder's registering thread.
fn finish(a: &mut Armed) -> Result<(), String> {
    match a.arming.take().map(JoinHandle::join) {
        Some(Ok(r)) => r,
        Some(Err(_)) => Err("the thread that registers the thresholds panicked".into()),
        None => Ok(()),
    }
}

fn read_usage(f: &File) -> std::io::Result<u64> {
    let mut buf = [0u8; 32];
    let n = f.read_at(&mut buf, 0)?;
    std::str::from_utf8(&buf[..n])
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "memory.usage_in_bytes: not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn dense_near_the_top_coarse_below_and_the_lines_exactly() {
        let limit = 1000 * MIB;
        let mut l = ladder(limit, &[0.85, 0.92, 0.8333], 0);
        assert_eq!(l.len(), 14 + 51 + 1, "coarse 5%..70%, dense 75%..100%, and the one line off the ladder");
        l.sort_unstable();
        assert_eq!(l[0], 50 * MIB);
        assert_eq!(l[13], 700 * MIB);
        assert_eq!(l[14], 750 * MIB);
        assert!(l.contains(&((limit as f64 * 0.8333).round() as u64)));
        assert_eq!(*l.last().expect("levels"), limit);
        assert!(l.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_lines_first_then_the_band_above_each_then_the_rest() {
        let limit = 1000 * MIB;
        let l = ladder(limit, &[0.85, 0.92], 301 * MIB);
        assert_eq!(&l[..2], &[920 * MIB, 850 * MIB], "the lines, highest first: {l:?}");
        let band92: Vec<u64> = (1..=6).map(|k| (920 + 5 * k) * MIB).collect();
        assert_eq!(&l[2..8], band92.as_slice(), "then 3% above the abort line: {l:?}");
        let band85: Vec<u64> = (1..=6).map(|k| (850 + 5 * k) * MIB).collect();
        assert_eq!(&l[8..14], band85.as_slice(), "then 3% above the refuse line: {l:?}");
        assert_eq!(&l[14..16], &[750 * MIB, 755 * MIB], "then the dense levels from the bottom: {l:?}");
        // The coarse ones above the usage, then those below it, nearest first.
        let first_coarse = l.iter().position(|&x| x < 750 * MIB).expect("coarse levels");
        assert_eq!(&l[first_coarse..first_coarse + 2], &[350 * MIB, 400 * MIB]);
        let first_below = l.iter().position(|&x| x <= 301 * MIB).expect("some below");
        assert_eq!(&l[first_below..first_below + 2], &[300 * MIB, 250 * MIB]);
        assert_eq!(*l.last().expect("levels"), 50 * MIB);
        assert_eq!(l.len(), 14 + 51, "coarse 5%..70%, dense 75%..100% (both lines are on it)");
    }

    #[test]
    fn no_limit_no_levels() {
        assert!(ladder(0, &[0.85], 0).is_empty());
    }
}
