//! Load shedding from the latest Decision: a task that turns each published decision into a per-process action
//! (read lock-free on the request path) and cancels the in-flight requests of a process told to abort; and the
//! 503 answers that name the memory guard. Each entry into refusing or aborting (enforced, not shadow) arms the
//! timing of the first 503 after it, from the wake-up of the sample that decided it ([`crate::base::reaction`]).

use super::body::ProxyBody;
use super::Proxy;
use crate::base::reaction::Reactions;
use crate::decision::policy::{Action, ProcId, State};
use crate::feed::Published;
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use tokio::sync::watch;

/// The action for the process with this pid now (`serve` in shadow mode, and for a pid not running).
pub(crate) fn action_of(p: &Published, pid: u32) -> Action {
    let d = &p.decision;
    if pid == 0 || d.shadow {
        return Action::Serve;
    }
    match p.snapshot.processes.iter().find(|s| s.pid == pid) {
        Some(s) => d.action_for(ProcId { pid, start_ticks: s.start_ticks }),
        // Not sampled yet (just started): it cannot be the victim, but it refuses with the others.
        None if d.state == State::Normal => Action::Serve,
        None => Action::Refuse,
    }
}

pub(crate) fn encode(a: Action) -> u8 {
    match a {
        Action::Serve => 0,
        Action::Refuse => 1,
        Action::Abort => 2,
    }
}

/// Applies every published decision until the channel closes.
pub async fn follow(proxy: Arc<Proxy>, mut rx: watch::Receiver<Arc<Published>>) {
    let mut rounds = vec![0u32; proxy.backends.len()];
    let mut enforced = State::Normal;
    loop {
        let p = rx.borrow_and_update().clone();
        time_entry(&proxy.reactions, &p, &mut enforced);
        apply(&proxy, &p, &mut rounds);
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Arms the timing of the first 503 when the enforced state enters refusing or aborting (`enforced`: the state
/// enforced before this decision; shadow enforces nothing), and disarms it back to normal.
fn time_entry(reactions: &Reactions, p: &Published, enforced: &mut State) {
    let now = if p.decision.shadow { State::Normal } else { p.decision.state };
    if now != *enforced {
        match now {
            State::Normal => reactions.disarm_shed(),
            State::Refusing | State::Aborting => reactions.arm_shed(p.wake.at),
        }
        *enforced = now;
    }
}

fn apply(proxy: &Proxy, p: &Published, rounds: &mut [u32]) {
    proxy.ratio_bits.store(p.decision.ratio.to_bits(), Ordering::Relaxed);
    for (i, (b, m)) in proxy.backends.iter().zip(proxy.members.iter()).enumerate() {
        let action = action_of(p, m.pid());
        let prev = b.action.swap(encode(action), Ordering::AcqRel);
        if action == Action::Abort && (prev != encode(Action::Abort) || rounds[i] != p.decision.abort_round) {
            rounds[i] = p.decision.abort_round;
            let inflight = b.outstanding();
            tracing::warn!(name = %m.name, pid = m.pid(), inflight, ratio = p.decision.ratio, "memory guard: aborting the process's in-flight requests");
            b.abort();
        }
    }
}

fn guard_response(status: StatusCode, body: String, retry_after: &HeaderValue) -> Response<ProxyBody> {
    let mut r = Response::new(ProxyBody::text(body));
    *r.status_mut() = status;
    r.headers_mut().insert(RETRY_AFTER, retry_after.clone());
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

impl Proxy {
    fn ratio_pct(&self) -> f64 {
        f64::from_bits(self.ratio_bits.load(Ordering::Relaxed)) * 100.0
    }

    /// 503 for a new request refused by the memory guard.
    pub(super) fn refused(&self) -> Response<ProxyBody> {
        self.counts.shed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reactions.shed_sent();
        let body = format!(
            "memory guard: the group is at {:.0}% of its memory limit and refuses new requests; retry after {} s\n",
            self.ratio_pct(),
            self.retry_after_s
        );
        guard_response(StatusCode::SERVICE_UNAVAILABLE, body, &self.retry_after)
    }

    /// 503 for an in-flight request cancelled because its process was told to abort.
    pub(super) fn aborted(&self, name: &str) -> Response<ProxyBody> {
        self.counts.shed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.reactions.shed_sent();
        let body = format!(
            "memory guard: request cancelled: the group is at {:.0}% of its memory limit and process {name}, the \
             largest, was told to abort its work; retry after {} s\n",
            self.ratio_pct(),
            self.retry_after_s
        );
        guard_response(StatusCode::SERVICE_UNAVAILABLE, body, &self.retry_after)
    }

    /// 503 for a request whose process the memory guard killed (its last resort), with the reason.
    pub(super) fn killed(&self, name: &str, reason: &str) -> Response<ProxyBody> {
        self.counts.shed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let body = format!(
            "memory guard: request cancelled: process {name} was killed to keep the group under its memory limit \
             ({reason}); retry after {} s\n",
            self.retry_after_s
        );
        guard_response(StatusCode::SERVICE_UNAVAILABLE, body, &self.retry_after)
    }

    /// 503 when no process can take the request (not the memory guard: nothing is ready).
    pub(super) fn unavailable(&self, what: &str) -> Response<ProxyBody> {
        guard_response(StatusCode::SERVICE_UNAVAILABLE, format!("{what}\n"), &self.retry_after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::reaction::Kind;
    use std::time::{Duration, Instant};

    /// A decision in `state`, taken on a sample whose wake-up was `ago` before now.
    fn decided(state: State, shadow: bool, ago: Duration) -> Published {
        let mut p = Published::test(state);
        p.decision.shadow = shadow;
        p.wake.at = Instant::now() - ago;
        p
    }

    fn timed(r: &Reactions) -> (u64, u64) {
        let c = r.counts(Kind::Shed);
        (c.count(), c.sum_ns)
    }

    #[test]
    fn the_first_503_after_each_entry_is_timed_from_its_wake_up() {
        let r = Reactions::new();
        let mut enforced = State::Normal;
        time_entry(&r, &decided(State::Normal, false, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 0, "normal: nothing awaited");
        // Entering refusing on a sample woken 40 ms ago: the next 503 is timed from then; later ones are not.
        time_entry(&r, &decided(State::Refusing, false, Duration::from_millis(40)), &mut enforced);
        r.shed_sent();
        r.shed_sent();
        let (n, ns) = timed(&r);
        assert_eq!(n, 1);
        assert!(ns >= 40_000_000, "{ns} ns");
        // Still refusing: no new entry. Aborting: an entry.
        time_entry(&r, &decided(State::Refusing, false, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 1);
        time_entry(&r, &decided(State::Aborting, false, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 2);
        // Back to normal, then refusing again: one more.
        time_entry(&r, &decided(State::Normal, false, Duration::ZERO), &mut enforced);
        time_entry(&r, &decided(State::Refusing, false, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 3);
    }

    #[test]
    fn shadow_decisions_arm_nothing() {
        let r = Reactions::new();
        let mut enforced = State::Normal;
        time_entry(&r, &decided(State::Aborting, true, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 0);
        // Shadow turned off while aborting: enforced from now, an entry.
        time_entry(&r, &decided(State::Aborting, false, Duration::ZERO), &mut enforced);
        r.shed_sent();
        assert_eq!(timed(&r).0, 1);
    }
}
