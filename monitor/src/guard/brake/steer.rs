//! The brake's steering on the sampler's thread: where it may be set (`[policy] brake_at` on cgroup v2 outside
//! shadow mode), engaging it and moving it as the limit moves, trying again after a failure, releasing it, and what
//! the published samples say of it.

use super::{Brake, BrakeStatus};
use crate::config::PolicyConfig;
use crate::decision::snapshot::CgroupVersion;
use crate::sources::cgroup::Group;
use std::time::{Duration, Instant};

/// A brake that could not be set is tried again this often (and whenever the limit changes).
const RETRY: Duration = Duration::from_secs(10);

/// The brake of one group, from start to release.
#[derive(Debug, Default)]
pub struct Steering {
    /// `[policy] brake_at`, where the brake may be set (cgroup v2, not in shadow mode).
    at: Option<f64>,
    /// The brake while it is engaged.
    brake: Option<Brake>,
    /// What the published samples say of the brake (None when it is not configured).
    status: Option<BrakeStatus>,
    /// The limit the brake was last engaged or moved for (or failed at), and when it last failed.
    limit: u64,
    failed_at: Option<Instant>,
}

impl Steering {
    /// At start: puts back a `memory.high` an agent killed while braking left behind (cgroup v2), and says where
    /// the brake may be set. The status says why not otherwise.
    pub fn start(group: &Group, policy: &PolicyConfig) -> Steering {
        if group.version == CgroupVersion::V2 {
            match Brake::recover(&group.dir) {
                Ok(Some(old)) => {
                    tracing::warn!(memory_high = %old, "put back the memory.high a previous agent left braked")
                }
                Ok(None) => {}
                Err(e) => tracing::warn!("memory brake: looking for a brake left behind: {e}"),
            }
        }
        if policy.brake_at.is_some() && group.version != CgroupVersion::V2 {
            tracing::warn!("[policy] brake_at is set, but the brake needs cgroup v2 (memory.high): off");
        }
        let (at, status) = place(group, policy);
        Steering { at, status, ..Steering::default() }
    }

    /// A reloaded `[policy]`: the brake in or out of shadow mode (released in it, set again out of it).
    pub(crate) fn set_policy(&mut self, group: &Group, policy: &PolicyConfig) {
        let (at, status) = place(group, policy);
        if at != self.at {
            self.release();
            *self = Steering { at, status, ..Steering::default() };
        }
    }

    /// The group was created again: the brake set on the old one goes with it, and is set on the new one at the
    /// next sample.
    pub(crate) fn regroup(&mut self) {
        self.brake = None;
        self.limit = 0;
    }

    /// Engages the brake for `limit`, or moves it when the limit changed. A failure is said in the status and
    /// tried again when the limit changes or after [`RETRY`].
    pub(crate) fn steer(&mut self, group: &Group, limit: u64) {
        let Some(at) = self.at else { return };
        let retry = self.failed_at.is_some_and(|t| t.elapsed() >= RETRY);
        if limit == self.limit && !retry {
            return;
        }
        self.limit = limit;
        let result = match self.brake.as_mut() {
            Some(b) => b.follow_limit(limit),
            None => Brake::engage(&group.dir, at, limit).map(|b| {
                self.brake = Some(b);
            }),
        };
        match result {
            Ok(()) => {
                self.failed_at = None;
                if let Some(b) = &self.brake {
                    let status = b.status();
                    if self.status.as_ref().and_then(|s| s.high_bytes) != status.high_bytes {
                        tracing::info!(memory_high = ?status.high_bytes, previous = %status.previous, note = ?status.note, "memory brake set");
                    }
                    if let Some(w) = &status.warning {
                        tracing::warn!("memory brake: {w}");
                    }
                    self.status = Some(status);
                }
            }
            Err(e) => {
                if self.failed_at.is_none() {
                    tracing::warn!("memory brake not set: {e}");
                }
                self.failed_at = Some(Instant::now());
                self.status = Some(BrakeStatus::failed(at, &e));
            }
        }
    }

    /// Puts the group's own `memory.high` back (the sampler is stopping, or the policy no longer brakes).
    pub fn release(&mut self) {
        if let Some(b) = self.brake.take() {
            match b.release() {
                Ok(()) => tracing::info!("memory brake released: the group's own memory.high is back"),
                Err(e) => tracing::error!("memory brake: putting the group's memory.high back: {e}"),
            }
        }
    }

    /// The brake, for the published sample.
    pub fn status(&self) -> Option<BrakeStatus> {
        self.status.clone()
    }
}

/// Where the brake may be set for `policy` on `group` (None when it is not configured, or with the status that
/// says why not).
fn place(group: &Group, policy: &PolicyConfig) -> (Option<f64>, Option<BrakeStatus>) {
    let Some(at) = policy.brake_at else { return (None, None) };
    let off = |why: &str| BrakeStatus {
        at,
        high_bytes: None,
        previous: String::new(),
        error: Some(why.to_string()),
        note: None,
        warning: None,
    };
    if group.version != CgroupVersion::V2 {
        return (None, Some(off("cgroup v2 only (memory.high): this group is on cgroup v1")));
    }
    if policy.shadow {
        return (None, Some(off("shadow mode: the brake is not set")));
    }
    (Some(at), None)
}
