//! A bounded, ordered queue in front of one receiver that may be slow or dead (an alert sink, a process's admin
//! URL): the sender never waits, and the receiver's task takes the items in the order they were pushed. Past its
//! bound the oldest item is dropped (the newest carry the present state: a resolution, or a `serve`, must not be
//! lost behind stale ones), and that is said once until the receiver has caught up.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// What waits for the receiver.
struct Pending<T> {
    items: VecDeque<T>,
    bound: usize,
    /// Items dropped since the receiver fell behind (0: it is not behind).
    dropped: usize,
    /// No sender is left: the receiver ends once the queue is empty.
    closed: bool,
    /// The receiver has ended: a push is refused.
    ended: bool,
}

impl<T> Pending<T> {
    fn new(bound: usize) -> Pending<T> {
        Pending { items: VecDeque::new(), bound: bound.max(1), dropped: 0, closed: false, ended: false }
    }

    /// Queues an item; returns true when it made the receiver fall behind (the first item dropped since it caught
    /// up).
    fn push(&mut self, item: T) -> bool {
        let mut fell_behind = false;
        if self.items.len() >= self.bound {
            self.items.pop_front();
            fell_behind = self.dropped == 0;
            self.dropped += 1;
        }
        self.items.push_back(item);
        fell_behind
    }

    /// The oldest item, and (once, when the queue is empty again) how many were dropped while it was behind.
    fn pop(&mut self) -> (Option<T>, Option<usize>) {
        let item = self.items.pop_front();
        let caught_up = (self.items.is_empty() && self.dropped > 0).then(|| std::mem::take(&mut self.dropped));
        (item, caught_up)
    }
}

struct Queue<T> {
    /// Names the receiver in the log.
    name: String,
    pending: Mutex<Pending<T>>,
    ready: Notify,
}

impl<T> Queue<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Pending<T>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A queue for the receiver called `name`, holding at most `bound` items.
pub fn channel<T>(name: impl Into<String>, bound: usize) -> (Sender<T>, Receiver<T>) {
    let queue = Arc::new(Queue { name: name.into(), pending: Mutex::new(Pending::new(bound)), ready: Notify::new() });
    let sender = Sender { queue: queue.clone(), _closer: Arc::new(Closer(queue.clone())) };
    (sender, Receiver { queue })
}

/// Marks the queue closed when the last [`Sender`] goes.
struct Closer<T>(Arc<Queue<T>>);

impl<T> Drop for Closer<T> {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.ready.notify_one();
    }
}

/// Fills the queue; clones fill the same one.
pub(crate) struct Sender<T> {
    queue: Arc<Queue<T>>,
    _closer: Arc<Closer<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Sender<T> {
        Sender { queue: self.queue.clone(), _closer: self._closer.clone() }
    }
}

impl<T> Sender<T> {
    /// Queues `item` without waiting (a receiver far behind loses its oldest items, said once); gives it back when
    /// the receiver has ended.
    pub fn push(&self, item: T) -> Result<(), T> {
        let (fell_behind, bound) = {
            let mut p = self.queue.lock();
            if p.ended {
                return Err(item);
            }
            (p.push(item), p.bound)
        };
        if fell_behind {
            tracing::warn!(bound, "{} is behind: dropping its oldest (said once until it catches up)", self.queue.name);
        }
        self.queue.ready.notify_one();
        Ok(())
    }

    /// The receiver has ended: every push from now on is refused.
    pub(crate) fn is_ended(&self) -> bool {
        self.queue.lock().ended
    }
}

/// Takes the items in order, on the receiver's task.
pub struct Receiver<T> {
    queue: Arc<Queue<T>>,
}

impl<T> Receiver<T> {
    /// The next item; None once every sender is gone and the queue is empty.
    pub async fn next(&self) -> Option<T> {
        self.take(None).await
    }

    /// The next item; None once every sender is gone and the queue is empty, or once nothing came for `idle`: the
    /// receiver has then ended, and a push after it is refused (under the queue's lock, so nothing is lost).
    pub(crate) async fn next_within(&self, idle: Duration) -> Option<T> {
        self.take(Some(idle)).await
    }

    async fn take(&self, idle: Option<Duration>) -> Option<T> {
        loop {
            let ready = self.queue.ready.notified();
            let (item, caught_up, closed) = {
                let mut p = self.queue.lock();
                let (item, caught_up) = p.pop();
                (item, caught_up, p.closed)
            };
            if let Some(dropped) = caught_up {
                tracing::info!(dropped, "{} caught up (its oldest were dropped)", self.queue.name);
            }
            match (item, idle) {
                (Some(item), _) => return Some(item),
                (None, _) if closed => return None,
                (None, None) => ready.await,
                (None, Some(idle)) => {
                    if tokio::time::timeout(idle, ready).await.is_err() {
                        let mut p = self.queue.lock();
                        if p.items.is_empty() {
                            p.ended = true;
                            return None;
                        }
                    }
                }
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        self.queue.lock().ended = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_its_oldest_and_says_so_once_until_it_catches_up() {
        const BOUND: usize = 256;
        let mut p = Pending::new(BOUND);
        let behind: Vec<bool> = (0..BOUND + 3).map(|i| p.push(i)).collect();
        assert_eq!(behind.iter().filter(|b| **b).count(), 1, "said once");
        assert!(behind[BOUND], "when the first item is dropped");
        let mut sent = Vec::new();
        let mut caught_up = Vec::new();
        while let (Some(i), c) = p.pop() {
            sent.push(i);
            caught_up.extend(c);
        }
        assert_eq!(sent.len(), BOUND);
        assert_eq!((sent[0], sent[BOUND - 1]), (3, BOUND + 2), "newest kept");
        assert_eq!(caught_up, [3], "how many were lost, once, when it has caught up");
        // Behind again later: said again.
        let again = (0..=BOUND).map(|i| p.push(i)).filter(|b| *b).count();
        assert_eq!(again, 1);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_receiver_takes_what_was_queued_then_ends_with_its_last_sender() {
        let (tx, rx) = channel("test", 8);
        let other = tx.clone();
        assert_eq!(tx.push(1), Ok(()));
        drop(tx);
        assert_eq!(other.push(2), Ok(()));
        drop(other);
        let mut got = Vec::new();
        let all = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(i) = rx.next().await {
                got.push(i);
            }
        });
        assert!(all.await.is_ok(), "the receiver ended");
        assert_eq!(got, [1, 2]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_receiver_ends_and_a_later_push_is_given_back() {
        let (tx, rx) = channel("test", 8);
        let idle = Duration::from_millis(50);
        assert_eq!(tx.push(1), Ok(()));
        assert_eq!(rx.next_within(idle).await, Some(1));
        assert!(!tx.is_ended());
        assert_eq!(rx.next_within(idle).await, None, "nothing for the idle time");
        assert!(tx.is_ended());
        assert_eq!(tx.push(2), Err(2), "given back, not lost");
    }
}
