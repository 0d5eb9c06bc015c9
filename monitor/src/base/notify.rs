//! systemd's notification protocol, for units of `Type=notify` with `WatchdogSec=` (the sd-notify crate speaks it):
//! `READY=1` once the agent serves (under `monitor run`, once the master and the workers are healthy), `STATUS=`
//! with the group's state when it changes, `WATCHDOG=1` from the sampler's loop at half the watchdog's timeout (a
//! hung sampler stops it, and systemd restarts the service), `RELOADING=1` with `MONOTONIC_USEC=` when a reload
//! (SIGHUP) starts and `READY=1` when it ends (the `Type=notify-reload` protocol of systemd 253 and later; older
//! units send the signal with `ExecReload=/bin/kill -HUP $MAINPID`, which works the same without it), and
//! `STOPPING=1` when the drain starts. Outside systemd (`NOTIFY_SOCKET` unset) each call does nothing.

use sd_notify::NotifyState;
use std::time::{Duration, Instant};

/// Sends `states`; a failure is logged once per process (the service manager went away, or the socket is not one).
fn send(states: &[NotifyState]) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = sd_notify::notify(states) {
        if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
        }
    }
}

/// `READY=1` with a status line.
pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

/// `STATUS=` (shown by `systemctl status`).
pub fn status(status: &str) {
    send(&[NotifyState::Status(status)]);
}

/// `RELOADING=1` with the monotonic clock's time (`MONOTONIC_USEC=`), which systemd requires with it.
pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now, NotifyState::Status("reloading the config")]),
        Err(e) => tracing::warn!("cannot read the monotonic clock for RELOADING=1: {e}"),
    }
}

/// `STOPPING=1`.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining")]);
}

/// Keeps systemd's watchdog fed from a loop that runs at least every few hundred milliseconds.
#[derive(Debug)]
pub(crate) struct Watchdog {
    /// Half the watchdog's timeout (`WATCHDOG_USEC`), None when there is no watchdog for this process.
    every: Option<Duration>,
    last: Option<Instant>,
}

impl Watchdog {
    /// The watchdog `WATCHDOG_USEC` (and `WATCHDOG_PID`, when set, naming this process) asks for.
    pub fn from_env() -> Watchdog {
        Watchdog { every: sd_notify::watchdog_enabled().map(|t| t / 2), last: None }
    }

    /// Sends `WATCHDOG=1` when half the timeout has passed since the last one (at once the first time).
    pub fn tick(&mut self, now: Instant) {
        let Some(every) = self.every else { return };
        if self.last.is_some_and(|l| now.duration_since(l) < every) {
            return;
        }
        self.last = Some(now);
        send(&[NotifyState::Watchdog]);
    }

    /// The longest the loop may sleep without missing a ping (None: no watchdog).
    pub fn period(&self) -> Option<Duration> {
        self.every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_timeout() {
        let mut w = Watchdog { every: Some(Duration::from_millis(500)), last: None };
        let t0 = Instant::now();
        w.tick(t0);
        assert_eq!(w.last, Some(t0), "the first tick pings");
        w.tick(t0 + Duration::from_millis(200));
        assert_eq!(w.last, Some(t0), "not again before half the timeout");
        w.tick(t0 + Duration::from_millis(600));
        assert_eq!(w.last, Some(t0 + Duration::from_millis(600)));
        let mut none = Watchdog { every: None, last: None };
        none.tick(t0);
        assert_eq!((none.last, none.period()), (None, None), "no watchdog, no ping");
    }
}
