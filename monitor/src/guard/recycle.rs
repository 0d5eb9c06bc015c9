//! The recycle, carried out ([`crate::decision::policy::recycle`] decides it): a process that obeyed its abort but
//! keeps the group over `refuse_at` is restarted gracefully, never SIGKILLed.
//!
//! - Under `monitor run` (a process the launcher started): the front door already sends it no new requests (the
//!   group refuses, and it is the abort's victim); its requests in flight are waited for, up to the drain timeout
//!   (`[proxy] drain_timeout_s`), then it gets SIGTERM, and the launcher starts it again as after any exit, saying
//!   it was recycled.
//! - Under `monitor agent`: `[actions] recycle_signal` is sent at once; with none set nothing can be done, and the
//!   record (and so the alert) says so, while the group keeps refusing.
//! - One at a time; in shadow mode decided and recorded, never sent. The signal goes through a pidfd with the
//!   sampled start time checked, so a reused pid is never hit.

use crate::decision::policy::{Decision, RecycleOrder};
use crate::decision::snapshot::{ProcessRole, Snapshot};
use crate::guard::{KillBook, RecycleRecord};
use std::time::{Duration, Instant};

/// A recycle ordered and not yet sent: its requests in flight are being waited for.
#[derive(Debug)]
struct Pending {
    order: RecycleOrder,
    rec: RecycleRecord,
    since: Instant,
}

/// The sampler's recycler.
#[derive(Debug, Default)]
pub(crate) struct Recycler {
    /// `[actions] recycle_signal` (the agent's), as applied.
    pub signal: Option<i32>,
    /// How long a launched process's requests in flight are waited for (`[proxy] drain_timeout_s`).
    pub drain: Duration,
    pending: Option<Pending>,
}

/// What the recycler asks of the sampler about a process.
pub(crate) struct Lookup<'a> {
    /// Under `monitor run`: whether the launcher started `pid` (it restarts it after the SIGTERM).
    pub launched: &'a dyn Fn(u32) -> bool,
    /// Under `monitor run`: how many requests the front door has in flight on `pid`.
    pub in_flight: &'a dyn Fn(u32) -> usize,
    pub role: ProcessRole,
}

impl Recycler {
    /// A recycle is ordered and waits for its process's requests in flight.
    pub(crate) fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Takes `d`'s recycle order, if any, and goes on with the one pending: the record of a recycle sent (or
    /// decided in shadow mode, or impossible) on this sample, recorded in `book` too.
    pub(crate) fn step(
        &mut self,
        d: &Decision,
        snap: &Snapshot,
        look: &Lookup<'_>,
        book: &KillBook,
    ) -> Option<RecycleRecord> {
        if let Some(order) = d.recycle.filter(|_| self.pending.is_none()) {
            let p = crate::decision::policy::find(snap, order.target)?;
            let rec = RecycleRecord {
                pid: p.pid,
                start_ticks: p.start_ticks,
                name: p.name.clone(),
                role: look.role,
                anon_bytes: p.anon_bytes,
                ratio: snap.group.ratio(),
                reason: order.describe(),
                signal: None,
                drained_ms: 0,
                unix_ms: snap.unix_ms,
                enforced: !d.shadow,
                error: None,
            };
            if d.shadow {
                tracing::warn!(pid = rec.pid, name = %rec.name, "shadow: would recycle (not enforced): {}", rec.reason);
                book.record_recycle(rec.clone());
                return Some(rec);
            }
            if !(look.launched)(rec.pid) && self.signal.is_none() {
                let mut rec = rec;
                rec.error = Some(
                    "no [actions] recycle_signal is set, so nothing tells it to restart: the group keeps refusing \
                     until its runtime gives the memory back"
                        .into(),
                );
                let why = rec.error.as_deref().unwrap_or("");
                tracing::warn!(pid = rec.pid, name = %rec.name, "cannot recycle: {}; {why}", rec.reason);
                book.record_recycle(rec.clone());
                return Some(rec);
            }
            tracing::info!(pid = rec.pid, name = %rec.name, "recycling: {}", rec.reason);
            self.pending = Some(Pending { order, rec, since: Instant::now() });
        }
        let pending = self.pending.as_ref()?;
        let pid = pending.rec.pid;
        if crate::decision::policy::find(snap, pending.order.target).is_none() {
            // Gone before it was told: nothing to send.
            self.pending = None;
            return None;
        }
        let launched = (look.launched)(pid);
        let waited = pending.since.elapsed();
        if launched && (look.in_flight)(pid) > 0 && waited < self.drain {
            return None;
        }
        let pending = self.pending.take()?;
        let signal = if launched { Some(libc::SIGTERM) } else { self.signal };
        let target = pending.order.target;
        let mut rec = pending.rec;
        rec.drained_ms = waited.as_millis() as u64;
        rec.signal = Some(crate::guard::signal_name(signal).to_string());
        let sig = signal?;
        match crate::guard::signal(target, sig) {
            Ok(()) => tracing::warn!(
                pid,
                name = %rec.name,
                signal = rec.signal.as_deref().unwrap_or("-"),
                drained_ms = rec.drained_ms,
                "recycled: {}",
                rec.reason
            ),
            Err(e) => {
                tracing::error!(pid, name = %rec.name, "recycle not sent: {e}");
                rec.error = Some(e.to_string());
            }
        }
        book.record_recycle(rec.clone());
        Some(rec)
    }
}
