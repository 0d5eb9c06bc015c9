//! The timer hyper uses for `header_read_timeout`, one tokio timer per connection.
//!
//! hyper asks its timer for a new sleep each time a connection starts to wait for a request head, and drops it once
//! the head came. hyper-util's `TokioTimer` makes each of those a tokio timer of its own: registered with the
//! runtime's timer driver when first polled and cancelled when dropped, the driver's lock taken both times, for every
//! request. Here the sleeps of one connection share one tokio timer: a new head's deadline moves it, which tokio
//! does with one atomic store while the timer has not fired and the deadline is later (as each new head's is). The
//! timer stays registered between heads and may wake its connection once at an old deadline; the connection then
//! polls and finds nothing to do.
//! `BENCH_REQUESTS=1000 cargo xtask bench proxy-instructions` counts what a request costs with it.

use hyper::rt::{Sleep as HyperSleep, Timer};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tokio::time::Sleep;

/// A connection's one tokio timer: made at the first sleep that is polled, kept for the connection's life.
type Shared = Arc<Mutex<Option<Pin<Box<Sleep>>>>>;

/// One connection's timer for hyper.
#[derive(Clone, Default)]
pub(crate) struct HeadTimer {
    shared: Shared,
}

/// One of hyper's sleeps: ready at `deadline`, on its connection's timer.
struct HeadSleep {
    shared: Shared,
    deadline: tokio::time::Instant,
}

impl Timer for HeadTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn HyperSleep>> {
        self.sleep_until(self.now() + duration)
    }

    /// tokio's clock, which the sleeps run on.
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn HyperSleep>> {
        Box::pin(HeadSleep { shared: self.shared.clone(), deadline: deadline.into() })
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn HyperSleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HeadSleep>() {
            Some(s) => s.get_mut().deadline = new_deadline.into(),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }
}

impl HyperSleep for HeadSleep {}

impl Future for HeadSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let me = self.get_mut();
        let mut shared = me.shared.lock().unwrap_or_else(PoisonError::into_inner);
        let timer = shared.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(me.deadline)));
        if timer.deadline() != me.deadline {
            // Another sleep of this connection moved it (hyper has one at a time, so only an earlier one did).
            timer.as_mut().reset(me.deadline);
        }
        timer.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll_once(f: &mut Pin<Box<dyn HyperSleep>>) -> Poll<()> {
        f.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop()))
    }

    #[tokio::test]
    async fn each_sleep_ends_at_its_own_deadline_on_the_shared_timer() {
        let timer = HeadTimer::default();
        let ms = Duration::from_millis;
        // A first head waited for, then came: its sleep is dropped before its deadline.
        let start = tokio::time::Instant::now();
        let mut first = timer.sleep(ms(300));
        assert!(poll_once(&mut first).is_pending());
        drop(first);
        tokio::time::sleep(ms(100)).await;
        // The next head's sleep ends 300 ms after it began, not at the first one's deadline (a timer never fires
        // early, so this cannot pass by luck).
        timer.sleep(ms(300)).await;
        assert!(start.elapsed() >= ms(400), "ended after {:?}", start.elapsed());
        // A deadline earlier than the timer's last one is kept too.
        let mut far = timer.sleep(Duration::from_secs(60));
        assert!(poll_once(&mut far).is_pending());
        drop(far);
        let before = tokio::time::Instant::now();
        timer.sleep(ms(100)).await;
        assert!(before.elapsed() < Duration::from_secs(10), "an earlier deadline waited {:?}", before.elapsed());
        // hyper's reset moves a sleep it holds.
        let mut held = timer.sleep(Duration::from_secs(60));
        timer.reset(&mut held, timer.now() + ms(100));
        let before = tokio::time::Instant::now();
        held.await;
        assert!(before.elapsed() < Duration::from_secs(10), "the reset was ignored: {:?}", before.elapsed());
    }
}
