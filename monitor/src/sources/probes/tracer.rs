//! A request to trace a process at once, ahead of the sampler's next sample: the launcher of `monitor run` asks
//! it for each process it starts; the sampler's thread serves it.

use std::os::fd::OwnedFd;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// A pid to trace at once, and who to tell when it is.
pub type TraceRequest = (u32, tokio::sync::oneshot::Sender<()>);

/// Asks the sampler thread to trace a process at once, ahead of its next sample (see [`Probes::trace_now`]):
/// `monitor run`'s launcher uses it for each process it starts, before its first health check, so that the kernel
/// counts everything the process serves. Does nothing without probes.
#[derive(Clone, Debug)]
pub struct Tracer(Option<(mpsc::Sender<TraceRequest>, Arc<OwnedFd>)>);

impl Tracer {
    /// A tracer served by the thread that reads `requests` when `efd` rings.
    pub fn new(requests: mpsc::Sender<TraceRequest>, efd: Arc<OwnedFd>) -> Tracer {
        Tracer(Some((requests, efd)))
    }

    /// A tracer that does nothing (probes off, or no sampler).
    pub fn none() -> Tracer {
        Tracer(None)
    }

    /// Traces `pid` now; returns once the sampler thread has done it, or after a second at most.
    pub async fn trace(&self, pid: u32) {
        let Some((tx, efd)) = &self.0 else { return };
        let (ack, done) = tokio::sync::oneshot::channel();
        if tx.send((pid, ack)).is_err() {
            return;
        }
        crate::sources::wakeup::eventfd::ring(efd);
        let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
    }
}
