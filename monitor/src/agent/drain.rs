//! The one shutdown signal: the first SIGTERM or SIGINT starts the drain, and every part that must stop watches it
//! (the front door stops accepting and finishes what is in flight, the web server closes, a start-up in progress
//! is abandoned). What follows the drain (the launcher's stop, the sampler's, the history's last minute) runs in
//! order after it, in [`super::Agent::run`].

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// Starts the drain when a signal comes.
pub struct Drain {
    tx: watch::Sender<bool>,
}

/// A part's view of the drain: clone it for each part.
#[derive(Clone)]
pub struct DrainWatch {
    rx: watch::Receiver<bool>,
}

impl Drain {
    pub fn new() -> (Drain, DrainWatch) {
        let (tx, rx) = watch::channel(false);
        (Drain { tx }, DrainWatch { rx })
    }

    /// Starts the drain on the first SIGTERM or SIGINT that `signals` caught (on the runtime this is called in).
    pub(crate) fn on_signals(self, signals: Signals) {
        tokio::spawn(async move {
            signals.first().await;
            crate::base::notify::stopping();
            self.start();
        });
    }

    /// Starts the drain now.
    pub fn start(&self) {
        let _ = self.tx.send(true);
    }
}

impl DrainWatch {
    /// Resolves once the drain has started (at once if it has).
    pub async fn started(mut self) {
        let _ = self.rx.wait_for(|d| *d).await;
    }

    /// The channel itself, for parts that poll it.
    pub fn receiver(&self) -> watch::Receiver<bool> {
        self.rx.clone()
    }
}

/// SIGTERM and SIGINT, caught from the start of the agent: one that comes while it starts is kept for the drain,
/// not lost. (As a container's PID 1 the kernel drops a signal nobody has a handler for, so without this a
/// `podman stop` during the start would wait out its whole grace.)
pub(crate) struct Signals {
    caught: Option<(Signal, Signal)>,
}

impl Signals {
    /// Starts catching (on the runtime this is called in).
    pub(crate) fn catch() -> Signals {
        let caught = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
            (Ok(term), Ok(int)) => Some((term, int)),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!("cannot watch SIGTERM/SIGINT: {e}");
                None
            }
        };
        Signals { caught }
    }

    /// Resolves on the first SIGTERM or SIGINT (never, when they could not be watched).
    async fn first(self) {
        match self.caught {
            Some((mut term, mut int)) => {
                tokio::select! {
                    _ = term.recv() => tracing::info!("SIGTERM: draining"),
                    _ = int.recv() => tracing::info!("SIGINT: draining"),
                }
            }
            None => std::future::pending::<()>().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_watcher_sees_the_drain_even_one_that_looks_after_it_started() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
        rt.block_on(async {
            let (drain, watch) = Drain::new();
            let early = tokio::spawn(watch.clone().started());
            tokio::task::yield_now().await;
            assert!(!early.is_finished(), "nothing drains before the signal");
            drain.start();
            tokio::time::timeout(std::time::Duration::from_secs(1), early)
                .await
                .expect("the early watcher wakes")
                .expect("its task ends");
            tokio::time::timeout(std::time::Duration::from_secs(1), watch.started())
                .await
                .expect("a late watcher sees it at once");
        });
    }
}
