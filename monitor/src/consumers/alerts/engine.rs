//! The alert book: a pure state machine from "conditions true now" to notifications. A condition that appears
//! fires once; one that disappears is resolved after `quiet` (if it comes back within `quiet` it is the same
//! incident and nothing is sent).

use super::{Condition, Notification, Status};
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

#[derive(Debug, Clone)]
struct Active {
    cond: Condition,
    starts_at: SystemTime,
    /// When the condition stopped being true (a resolution is pending until `quiet` has passed).
    cleared_at: Option<SystemTime>,
}

/// What is firing, and for how long.
#[derive(Debug, Default)]
pub(crate) struct Book {
    quiet: Duration,
    active: HashMap<String, Active>,
}

impl Book {
    pub fn new(quiet: Duration) -> Book {
        Book { quiet, active: HashMap::new() }
    }

    /// A reloaded `[alerts] quiet_s`: the incidents open now keep their state.
    pub(crate) fn set_quiet(&mut self, quiet: Duration) {
        self.quiet = quiet;
    }

    /// Feeds the conditions true at `now`; returns what to send. Annotations of a firing alert are refreshed
    /// silently (the victim's RSS changes every sample; that is not a new notification).
    pub(crate) fn observe(&mut self, now: SystemTime, conditions: &[Condition]) -> Vec<Notification> {
        let mut out = Vec::new();
        let mut seen = Vec::with_capacity(conditions.len());
        for c in conditions {
            let fp = c.fingerprint();
            match self.active.get_mut(&fp) {
                Some(a) => {
                    a.cleared_at = None;
                    a.cond.annotations.clone_from(&c.annotations);
                }
                None => {
                    let a = Active { cond: c.clone(), starts_at: now, cleared_at: None };
                    out.push(notification(&fp, &a, Status::Firing, None));
                    self.active.insert(fp.clone(), a);
                }
            }
            seen.push(fp);
        }
        let mut resolved = Vec::new();
        for (fp, a) in self.active.iter_mut() {
            if seen.contains(fp) {
                continue;
            }
            let cleared = *a.cleared_at.get_or_insert(now);
            if now.duration_since(cleared).unwrap_or_default() >= self.quiet {
                out.push(notification(fp, a, Status::Resolved, Some(cleared)));
                resolved.push(fp.clone());
            }
        }
        for fp in resolved {
            self.active.remove(&fp);
        }
        out
    }

    /// Every alert currently firing (including those whose resolution is pending), for sinks that expect a
    /// periodic re-send (Alertmanager).
    pub fn firing(&self) -> Vec<Notification> {
        let mut v: Vec<Notification> =
            self.active.iter().map(|(fp, a)| notification(fp, a, Status::Firing, None)).collect();
        v.sort_by(|a, b| a.fingerprint.cmp(&b.fingerprint));
        v
    }
}

fn notification(fp: &str, a: &Active, status: Status, ends_at: Option<SystemTime>) -> Notification {
    let mut labels = a.cond.labels.clone();
    labels.insert("alertname".into(), a.cond.name.clone());
    Notification {
        status,
        fingerprint: fp.to_string(),
        labels,
        annotations: a.cond.annotations.clone(),
        starts_at: a.starts_at,
        ends_at,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + s)
    }

    fn refusing(usage: &str) -> Condition {
        Condition::new("MonitorGroupRefusing").label("cgroup", "/g").annotate("usage_bytes", usage)
    }

    #[test]
    fn fires_once_and_resolves_once() {
        let mut b = Book::new(Duration::ZERO);
        let n = b.observe(at(0), &[refusing("1")]);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].status, Status::Firing);
        assert_eq!(n[0].labels.get("alertname").map(String::as_str), Some("MonitorGroupRefusing"));
        // Every further sample with the condition true sends nothing, even with new annotations.
        for s in 1..50 {
            assert!(b.observe(at(s), &[refusing(&s.to_string())]).is_empty());
        }
        assert_eq!(b.firing()[0].annotations.get("usage_bytes").map(String::as_str), Some("49"));
        let n = b.observe(at(50), &[]);
        assert_eq!(n.len(), 1);
        assert_eq!((n[0].status, n[0].starts_at, n[0].ends_at), (Status::Resolved, at(0), Some(at(50))));
        assert!(b.observe(at(51), &[]).is_empty());
        assert!(b.firing().is_empty());
    }

    #[test]
    fn flapping_within_quiet_is_one_incident() {
        let mut b = Book::new(Duration::from_secs(30));
        assert_eq!(b.observe(at(0), &[refusing("1")]).len(), 1);
        assert!(b.observe(at(10), &[]).is_empty()); // cleared, resolution pending
        assert!(b.observe(at(20), &[refusing("1")]).is_empty()); // back within 30 s: same incident
        assert!(b.observe(at(30), &[]).is_empty());
        assert!(b.observe(at(59), &[]).is_empty());
        let n = b.observe(at(60), &[]);
        assert_eq!(n.len(), 1);
        assert_eq!((n[0].status, n[0].ends_at), (Status::Resolved, Some(at(30))));
        // After it resolved, a new occurrence is a new incident.
        let n = b.observe(at(100), &[refusing("1")]);
        assert_eq!((n.len(), n[0].starts_at), (1, at(100)));
    }

    #[test]
    fn fingerprints_depend_on_name_and_labels_only() {
        let a = refusing("1");
        assert_eq!(a.fingerprint(), refusing("2").fingerprint());
        assert_ne!(a.fingerprint(), Condition::new("MonitorGroupRefusing").label("cgroup", "/h").fingerprint());
        assert_ne!(a.fingerprint(), Condition::new("MonitorGroupAborting").label("cgroup", "/g").fingerprint());
        assert_ne!(
            Condition::new("x").label("ab", "c").fingerprint(),
            Condition::new("x").label("a", "bc").fingerprint()
        );
        assert_eq!(a.fingerprint().len(), 16);
        // Alertmanager's fingerprint of {alertname="MonitorGroupRefusing", cgroup="/g"} (FNV-1a 64 over the sorted
        // label set, alertname included, 0xff after each name and value), computed apart from this code.
        assert_eq!(a.fingerprint(), "5a2d93b148690ce6");
        assert_eq!(Condition::new("x").label("ab", "c").fingerprint(), "c41de5558db0d412");
    }

    #[test]
    fn independent_alerts() {
        let mut b = Book::new(Duration::ZERO);
        let crash = Condition::new("MonitorProcessRestarting").label("process", "tx1");
        assert_eq!(b.observe(at(0), &[refusing("1"), crash.clone()]).len(), 2);
        let n = b.observe(at(1), std::slice::from_ref(&crash));
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].labels.get("alertname").map(String::as_str), Some("MonitorGroupRefusing"));
        assert_eq!(b.firing().len(), 1);
    }
}
