//! A future polled only when it asked to be: [`OnWake`].
//!
//! `tokio::select!` polls every branch each time its task wakes. A connection's task wakes several times per request
//! for its I/O, and a branch that waits on a rare event (the drain, an eviction) is then polled each time: a
//! `Notify` or `watch` wait takes its waiter list's lock on every poll. Wrapped in [`OnWake`], such a branch is
//! polled on the first poll and afterwards only once its own waker was called; otherwise a poll is a pointer
//! compare and one atomic swap.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// `F`, polled only when its waker was called since its last poll (or when the task polling it changed).
pub(crate) struct OnWake<F> {
    fut: Pin<Box<F>>,
    shared: Arc<Shared>,
    /// The waker `fut` is polled with: it sets `shared.woken` and wakes the task.
    waker: Waker,
    /// The task's waker last stored in `shared.task`: stored again only when the task's changes.
    task: Option<Waker>,
}

struct Shared {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Shared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        if let Some(w) = self.task.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            w.wake_by_ref();
        }
    }
}

impl<F: Future> OnWake<F> {
    /// Boxes `fut` once (so that the wrapper moves freely) and polls it on the first poll.
    pub(crate) fn new(fut: F) -> OnWake<F> {
        let shared = Arc::new(Shared { woken: AtomicBool::new(true), task: Mutex::new(None) });
        OnWake { fut: Box::pin(fut), waker: Waker::from(shared.clone()), shared, task: None }
    }
}

impl<F: Future> Future for OnWake<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        if !this.task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
            // A new task (or the first poll): it is the one to wake from now on, and the future is polled so that
            // nothing that happened meanwhile is missed.
            *this.shared.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(cx.waker().clone());
            this.task = Some(cx.waker().clone());
            this.shared.woken.store(true, Ordering::Release);
        }
        // Cleared before the poll: a wake during it is kept for the next one.
        if !this.shared.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.fut.as_mut().poll(&mut Context::from_waker(&this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_wrapped_future_is_polled_only_when_woken_and_still_hears_its_event() {
        let notify = Arc::new(tokio::sync::Notify::new());
        let polls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (counted, event) = (polls.clone(), notify.clone());
        // Counts its polls; ready once the event came.
        let waited = OnWake::new(async move {
            let notified = event.notified();
            tokio::pin!(notified);
            std::future::poll_fn(|cx| {
                counted.fetch_add(1, Ordering::Relaxed);
                notified.as_mut().poll(cx)
            })
            .await
        });
        tokio::pin!(waited);
        // The task wakes often for something else (a ticking interval): the wrapped future is not polled for it.
        let mut tick = tokio::time::interval(Duration::from_millis(1));
        for _ in 0..20 {
            tokio::select! {
                biased;
                _ = waited.as_mut() => panic!("ready before its event"),
                _ = tick.tick() => {}
            }
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "polled once, on the first poll, not on each of the 20 wakes");
        // Its event, from another thread, wakes and completes it.
        let n = notify.clone();
        std::thread::spawn(move || n.notify_one());
        tokio::time::timeout(Duration::from_secs(5), waited.as_mut()).await.expect("the event completes it");
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }
}
