//! Operator alerts: conditions derived from each decision (and raised by other parts: launcher, stats database)
//! become firing and resolved notifications, de-duplicated by a stable fingerprint, with flapping folded into one
//! incident, and sent to any combination of sinks (a command, a webhook, an Alertmanager).

pub mod engine;
pub mod kill;
pub mod names;
pub mod oom;
pub mod sinks;
pub mod task;
pub mod watch;

use serde::Serialize;
use std::collections::BTreeMap;
use std::time::SystemTime;

/// A condition that is true now: its name and labels identify it; annotations describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
}

impl Condition {
    pub fn new(name: &str) -> Condition {
        Condition { name: name.into(), labels: BTreeMap::new(), annotations: BTreeMap::new() }
    }

    pub fn label(mut self, k: &str, v: impl Into<String>) -> Condition {
        self.labels.insert(k.into(), v.into());
        self
    }

    pub(crate) fn annotate(mut self, k: &str, v: impl Into<String>) -> Condition {
        self.annotations.insert(k.into(), v.into());
        self
    }

    /// Stable identity, the one Alertmanager shows for the same alert (prometheus/common's label set fingerprint):
    /// FNV-1a 64 over the label set with `alertname` among the labels, sorted by name, each name and value followed
    /// by the byte 0xff, as 16 hex digits.
    pub fn fingerprint(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |bytes: &[u8]| {
            for b in bytes.iter().chain(&[0xff]) {
                h ^= u64::from(*b);
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        };
        let name = ("alertname", self.name.as_str());
        let mut set: Vec<(&str, &str)> = self.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        if !self.labels.contains_key("alertname") {
            set.push(name);
        }
        set.sort_unstable();
        for (k, v) in set {
            eat(k.as_bytes());
            eat(v.as_bytes());
        }
        format!("{h:016x}")
    }
}

/// Firing or resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Firing,
    Resolved,
}

/// One notification to send.
#[derive(Debug, Clone, PartialEq)]
pub struct Notification {
    pub status: Status,
    pub fingerprint: String,
    /// `alertname` is among the labels.
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub starts_at: SystemTime,
    /// Set when resolved.
    pub ends_at: Option<SystemTime>,
}

/// RFC 3339 with milliseconds, UTC (`2026-11-30T12:00:00.000Z`).
pub(crate) fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}
