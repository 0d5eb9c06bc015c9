//! The kernel's wake-ups for the sampler, besides its timer: cgroup v1 memory thresholds ([`v1`]), cgroup v2
//! `memory.events` changes and a PSI trigger on `memory.pressure` ([`v2`]). Each one makes the sampler re-read the
//! group and decide at once, so a grower is seen within milliseconds of crossing a line rather than at the next
//! tick. They are only wake-ups: the decision is always taken on a fresh sample (v1's usage counts page cache; the
//! policy decides on anonymous memory).

use serde::Serialize;
use std::time::Instant;

/// What woke the sampler for a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeSource {
    /// The sampler's own timer (at the paced interval).
    Timer,
    /// A cgroup v1 memory threshold fired.
    Thresholds,
    /// cgroup v2 `memory.events` changed.
    Events,
    /// The cgroup v2 PSI trigger fired.
    Pressure,
}

impl WakeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeSource::Timer => "timer",
            WakeSource::Thresholds => "thresholds",
            WakeSource::Events => "events",
            WakeSource::Pressure => "pressure",
        }
    }
}

/// The wake-up a sample was taken for: its source and the instant the sampler woke, from which every consumer
/// times its reaction (signal sent, POST sent, first 503).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Wake {
    pub source: WakeSource,
    #[serde(skip)]
    pub at: Instant,
}

impl Wake {
    /// A timer wake-up now.
    pub fn timer() -> Wake {
        Wake { source: WakeSource::Timer, at: Instant::now() }
    }
}

/// Which wake-up sources are armed, and why the others are not (`group.wakeups` in `/api/v1/status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct WakeupStatus {
    /// The sources armed now (`thresholds`, `events`, `pressure`), in that order.
    pub armed: Vec<String>,
    /// Each configured source that is not armed, with the reason (not offered by this cgroup version, refused by
    /// the kernel, off in the config).
    pub off: Vec<WakeupOff>,
    /// Whether pacing adapts the interval (`[policy] pacing`).
    pub pacing: bool,
}

/// A wake-up source that is not armed.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct WakeupOff {
    pub source: String,
    pub reason: String,
}
