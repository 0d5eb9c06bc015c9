//! The kernel's wake-ups for the sampler, besides its timer: cgroup v1 memory thresholds ([`v1`]), cgroup v2
//! `memory.events` changes and a PSI trigger on `memory.pressure` ([`v2`]). Each one makes the sampler re-read the
//! group and decide at once, so a grower is seen within milliseconds of crossing a line rather than at the next
//! tick. They are only wake-ups: the decision is always taken on a fresh sample (v1's usage counts page cache; the
//! policy decides on anonymous memory).

use crate::feed::{Wake, WakeSource, WakeupOff, WakeupStatus};
use std::time::Instant;

pub mod eventfd;
pub mod v1;
pub mod v2;

use crate::config::WakeupKind;
use crate::decision::snapshot::CgroupVersion;
use crate::sources::cgroup::Group;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

/// What ended a [`Wakeups::wait`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Ready {
    /// Time to sample: the timer ran out or the kernel woke the sampler.
    Sample(Wake),
    /// The other fd passed to `wait` is readable (the sampler's own requests).
    Other,
}

/// The kernel wake-up sources of one group, armed where the kernel offers them.
pub(crate) struct Wakeups {
    /// The sources the config asks for.
    wanted: Vec<WakeupKind>,
    thresholds: Option<v1::Thresholds>,
    events: Option<v2::Events>,
    pressure: Option<v2::Pressure>,
    status: Arc<WakeupStatus>,
}

impl Wakeups {
    /// Arms the sources in `wanted` that the group's cgroup version offers; the status says which are armed and
    /// why the others are not.
    pub(crate) fn arm(group: &Group, wanted: &[WakeupKind], pacing: bool) -> Wakeups {
        let mut w = Wakeups {
            thresholds: None,
            events: None,
            pressure: None,
            status: Arc::new(WakeupStatus::default()),
            wanted: wanted.to_vec(),
        };
        let mut off = Vec::new();
        for kind in WakeupKind::ALL {
            let why = |reason: String| WakeupOff { source: kind.as_str().to_string(), reason };
            if !wanted.contains(&kind) {
                off.push(why("off in the config ([policy] wakeups)".into()));
                continue;
            }
            let result = match (kind, group.version) {
                (WakeupKind::Thresholds, CgroupVersion::V1) => {
                    v1::Thresholds::open(&group.dir).map(|t| w.thresholds = Some(t))
                }
                (WakeupKind::Events, CgroupVersion::V2) => v2::Events::open(&group.dir).map(|e| w.events = Some(e)),
                (WakeupKind::Pressure, CgroupVersion::V2) => {
                    v2::Pressure::open(&group.dir).map(|p| w.pressure = Some(p))
                }
                (WakeupKind::Thresholds, CgroupVersion::V2) => {
                    Err("cgroup v1 only (cgroup v2 has no usage thresholds)".into())
                }
                (_, CgroupVersion::V1) => Err("cgroup v2 only".into()),
            };
            if let Err(reason) = result {
                off.push(why(reason));
            }
        }
        for o in &off {
            if !o.reason.starts_with("off in the config") && !o.reason.contains("only") {
                tracing::warn!(source = %o.source, "kernel wake-up not armed: {}", o.reason);
            }
        }
        w.status = Arc::new(WakeupStatus { armed: Vec::new(), off, pacing });
        w.refresh_status();
        w
    }

    /// The same sources armed on `group` anew (a group removed and created again under the same path).
    pub(crate) fn rearm(&self, group: &Group) -> Wakeups {
        Wakeups::arm(group, &self.wanted, self.status.pacing)
    }

    fn refresh_status(&mut self) {
        let mut armed = Vec::new();
        if self.thresholds.is_some() {
            armed.push(WakeupKind::Thresholds.as_str().to_string());
        }
        if self.events.is_some() {
            armed.push(WakeupKind::Events.as_str().to_string());
        }
        if self.pressure.is_some() {
            armed.push(WakeupKind::Pressure.as_str().to_string());
        }
        if armed != self.status.armed {
            let mut s = (*self.status).clone();
            s.armed = armed;
            self.status = Arc::new(s);
        }
    }

    /// Which sources are armed, for the published sample.
    pub fn status(&self) -> &Arc<WakeupStatus> {
        &self.status
    }

    /// Whether a kernel threshold follows the group's usage (then pacing need not assume the worst growth).
    pub(crate) fn follows_usage(&self) -> bool {
        self.thresholds.is_some()
    }

    /// Drops every source while the group cannot be read (see [`rearm`](Self::rearm)).
    pub(crate) fn suspend(&mut self) {
        let armed: Vec<WakeupKind> = [
            (WakeupKind::Thresholds, self.thresholds.is_some()),
            (WakeupKind::Events, self.events.is_some()),
            (WakeupKind::Pressure, self.pressure.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, on)| on.then_some(k))
        .collect();
        if armed.is_empty() {
            return;
        }
        (self.thresholds, self.events, self.pressure) = (None, None, None);
        let mut s = (*self.status).clone();
        for k in armed {
            s.off.retain(|o| o.source != k.as_str());
            let reason = "the group cannot be read: armed again when it can".to_string();
            s.off.push(WakeupOff { source: k.as_str().to_string(), reason });
        }
        self.status = Arc::new(s);
        self.refresh_status();
    }

    /// A source that failed: it is dropped, and the status says why.
    fn disarm(&mut self, kind: WakeupKind, reason: String) {
        tracing::warn!(source = kind.as_str(), "kernel wake-up disarmed: {reason}");
        match kind {
            WakeupKind::Thresholds => self.thresholds = None,
            WakeupKind::Events => self.events = None,
            WakeupKind::Pressure => self.pressure = None,
        }
        let mut s = (*self.status).clone();
        s.off.retain(|o| o.source != kind.as_str());
        s.off.push(WakeupOff { source: kind.as_str().to_string(), reason });
        self.status = Arc::new(s);
        self.refresh_status();
    }

    /// After each sample: makes sure the v1 ladder of thresholds is registered for the group's limit.
    pub(crate) fn after_sample(&mut self, limit: u64, lines: &[f64]) {
        let Some(t) = self.thresholds.as_mut() else { return };
        let usage = match t.usage() {
            Ok(u) => u,
            Err(e) => return self.disarm(WakeupKind::Thresholds, format!("memory.usage_in_bytes: {e}")),
        };
        if let Err(e) = t.ensure(limit, lines, usage) {
            self.disarm(WakeupKind::Thresholds, e);
        }
    }

    /// Waits until `deadline` or a kernel wake-up, or until `other` is readable. `events` and `pressure` wake the
    /// sampler at most once per `min_gap` after `last_sample` (the brake makes `memory.events` change at every
    /// throttled charge); thresholds at once (they fire once per level crossed).
    pub fn wait(&mut self, deadline: Instant, other: Option<RawFd>, min_gap: Duration, last_sample: Instant) -> Ready {
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ready::Sample(Wake { source: WakeSource::Timer, at: now });
            }
            let gap_over = last_sample + min_gap;
            let slow_ok = now >= gap_over;
            let mut until = deadline;
            if !slow_ok && (self.events.is_some() || self.pressure.is_some()) {
                until = until.min(gap_over);
            }
            let mut fds: Vec<(libc::pollfd, Slot)> = Vec::with_capacity(4);
            let mut add = |fd: RawFd, events: libc::c_short, slot: Slot| {
                fds.push((libc::pollfd { fd, events, revents: 0 }, slot));
            };
            if let Some(fd) = other {
                add(fd, libc::POLLIN, Slot::Other);
            }
            if let Some(t) = &self.thresholds {
                for fd in t.fds() {
                    add(fd, libc::POLLIN, Slot::Thresholds);
                }
            }
            if slow_ok {
                if let Some(e) = &self.events {
                    add(e.fd(), libc::POLLPRI, Slot::Events);
                }
                if let Some(p) = &self.pressure {
                    add(p.fd(), libc::POLLPRI, Slot::Pressure);
                }
            }
            let mut raw: Vec<libc::pollfd> = fds.iter().map(|(p, _)| *p).collect();
            let timeout = until.saturating_duration_since(now);
            // Rounded up, so the timer never wakes before its deadline and spins.
            let ms = timeout.as_micros().div_ceil(1000).min(i32::MAX as u128) as i32;
            // SAFETY: `raw` is a valid array of pollfd of the given length.
            let n = unsafe { libc::poll(raw.as_mut_ptr(), raw.len() as libc::nfds_t, ms) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                // Not expected with valid fds; fall back to the timer for this wait.
                std::thread::sleep(timeout);
                continue;
            }
            if n == 0 {
                continue;
            }
            let at = Instant::now();
            for (p, (_, slot)) in raw.iter().zip(fds.iter()) {
                if p.revents == 0 {
                    continue;
                }
                match slot {
                    Slot::Other => return Ready::Other,
                    Slot::Thresholds => {
                        let fired = self.thresholds.as_ref().is_some_and(v1::Thresholds::fired);
                        tracing::debug!(fired, "memory threshold woke the sampler");
                        if fired {
                            return Ready::Sample(Wake { source: WakeSource::Thresholds, at });
                        }
                    }
                    Slot::Events => {
                        if let Some(e) = self.events.as_mut() {
                            e.consume();
                        }
                        if p.revents & libc::POLLNVAL != 0 {
                            self.disarm(WakeupKind::Events, "memory.events: the group is gone".into());
                        }
                        return Ready::Sample(Wake { source: WakeSource::Events, at });
                    }
                    Slot::Pressure => {
                        if p.revents & (libc::POLLERR | libc::POLLNVAL) != 0 {
                            self.disarm(WakeupKind::Pressure, "memory.pressure: the group is gone".into());
                        }
                        return Ready::Sample(Wake { source: WakeSource::Pressure, at });
                    }
                }
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Slot {
    Other,
    Thresholds,
    Events,
    Pressure,
}
