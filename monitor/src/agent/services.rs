//! The agent's running parts, by name. A part that reads the feed ends when the feed does (the sampler stopped),
//! once it has delivered what it holds; a watcher runs until the stop. The agent keeps every task here and, at the
//! stop, waits for them within a bound and names any that did not end.

use std::future::Future;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The tasks of the agent's parts, and the stop the watchers wait for.
pub(super) struct Services {
    tasks: Vec<(&'static str, JoinHandle<()>)>,
    stop: watch::Sender<bool>,
}

impl Services {
    pub fn new() -> Services {
        Services { tasks: Vec::new(), stop: watch::channel(false).0 }
    }

    /// A part that ends on its own, when what it reads ends.
    pub fn add(&mut self, name: &'static str, task: JoinHandle<()>) {
        self.tasks.push((name, task));
    }

    /// A part that runs until the stop: `part` is dropped then.
    pub(crate) fn until_stop(&mut self, name: &'static str, part: impl Future<Output = ()> + Send + 'static) {
        let mut stop = self.stop.subscribe();
        let task = tokio::spawn(async move {
            tokio::select! {
                () = part => {}
                _ = stop.wait_for(|s| *s) => {}
            }
        });
        self.add(name, task);
    }

    /// Stops the watchers and waits for every part, in the order they were added, `within` in all; those still
    /// running then are ended and named.
    pub async fn stop(self, within: Duration) {
        let _ = self.stop.send(true);
        let deadline = tokio::time::Instant::now() + within;
        for (name, mut task) in self.tasks {
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                tracing::warn!(part = name, "still running {} ms after the stop: ended", within.as_millis());
                task.abort();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_stop_waits_for_readers_ends_watchers_and_bounds_the_rest() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let mut s = Services::new();
        // A reader that finishes its work after its input ends.
        s.add(
            "reader",
            tokio::spawn(async move {
                while rx.recv().await.is_some() {}
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = done_tx.send(());
            }),
        );
        s.until_stop("watcher", std::future::pending());
        let stuck = tokio::spawn(std::future::pending::<()>());
        let stuck_abort = stuck.abort_handle();
        s.add("stuck", stuck);
        drop(tx);
        let t0 = tokio::time::Instant::now();
        s.stop(Duration::from_millis(400)).await;
        let took = t0.elapsed();
        assert!(done_rx.await.is_ok(), "the reader finished before the stop returned");
        assert!(took >= Duration::from_millis(400), "the stuck part was waited for until the bound: {took:?}");
        assert!(took < Duration::from_secs(2), "and no longer: {took:?}");
        tokio::task::yield_now().await;
        assert!(stuck_abort.is_finished(), "the stuck part was ended");
    }
}
