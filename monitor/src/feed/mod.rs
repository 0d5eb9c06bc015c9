//! The feed: what the sampler publishes and every consumer reads. Each sample ([`Published`]: the snapshot, the
//! decision taken on it, and the state of the parts that produced it) goes out on a [`Feed`]: the latest for readers
//! of the present (the API, the front door's shedding), and every sample in order for those that must not miss a
//! state that lasted one sample (alerts, actions, history). It depends only on [`crate::decision::snapshot`],
//! [`crate::decision::policy`] and the config's typed values: the producers (the sampler, the wake-ups, the brake) and
//! the consumers both import it, and it imports none of them.

mod door;
pub mod growth;

pub use door::{Door, DoorCounts, LauncherInfo, Phase, Retry};

use crate::decision::policy::{Decision, Thresholds};
use crate::decision::snapshot::Snapshot;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::{broadcast, watch};

/// What woke the sampler for a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeSource {
    /// The sampler's own timer (at the paced interval).
    Timer,
    /// A cgroup v1 memory threshold fired.
    Thresholds,
    /// cgroup v2 `memory.events` changed.
    Events,
    /// The cgroup v2 PSI trigger fired.
    Pressure,
}

impl WakeSource {
    pub fn as_str(self) -> &'static str {
        match self {
            WakeSource::Timer => "timer",
            WakeSource::Thresholds => "thresholds",
            WakeSource::Events => "events",
            WakeSource::Pressure => "pressure",
        }
    }
}

/// The wake-up a sample was taken for: its source and the instant the sampler woke, from which every consumer
/// times its reaction (signal sent, POST sent, first 503).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Wake {
    pub source: WakeSource,
    #[serde(skip)]
    pub at: Instant,
}

impl Wake {
    /// A timer wake-up now.
    pub fn timer() -> Wake {
        Wake { source: WakeSource::Timer, at: Instant::now() }
    }
}

/// Which wake-up sources are armed, and why the others are not (`group.wakeups` in `/api/v1/status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, serde::Deserialize)]
pub struct WakeupStatus {
    /// The sources armed now (`thresholds`, `events`, `pressure`), in that order.
    pub armed: Vec<String>,
    /// Each configured source that is not armed, with the reason (not offered by this cgroup version, refused by
    /// the kernel, off in the config).
    pub off: Vec<WakeupOff>,
    /// Whether pacing adapts the interval (`[policy] pacing`).
    pub pacing: bool,
}

/// A wake-up source that is not armed.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct WakeupOff {
    pub source: String,
    pub reason: String,
}

/// The brake as the API and the home page show it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct BrakeStatus {
    /// `[policy] brake_at`: the fraction of the limit `memory.high` is set at.
    pub at: f64,
    /// The `memory.high` the agent has set, in bytes (None while it could not be set).
    pub high_bytes: Option<u64>,
    /// The group's `memory.high` before the agent set it (`max` or bytes), put back on exit.
    pub previous: String,
    /// Why the brake is not set, when it is not.
    pub error: Option<String>,
    /// Why `memory.high` was left as it is, when the group's own value is at or below the brake.
    #[serde(default)]
    pub note: Option<String>,
    /// Set when the record cannot be kept (extended attributes refused): the brake works, but a value left behind by
    /// a SIGKILLed agent would not be put back at the next start.
    #[serde(default)]
    pub warning: Option<String>,
}

/// Whether request counting runs, and why not.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ProbeStatus {
    pub enabled: bool,
    pub reason: Option<String>,
    /// The kernel hooks counting while enabled (`sock`, `raw_sys_exit` or `tracepoints`, see
    /// [`crate::config::Hooks`]): anything but `sock` slows every syscall on the host.
    #[serde(default)]
    pub hooks: Option<crate::config::Hooks>,
    /// Where the syscall sets see `close` (`tracepoint`, or `raw_sys_enter` where the kernel refuses this process
    /// the tracepoint: Debian's `kernel.perf_event_paranoid = 3`); null for the socket set and while off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub close: Option<crate::config::CloseHook>,
}

impl ProbeStatus {
    /// Counting, with `hooks` and the `close` hook of the syscall sets.
    pub fn on(hooks: crate::config::Hooks, close: Option<crate::config::CloseHook>) -> ProbeStatus {
        ProbeStatus { enabled: true, reason: None, hooks: Some(hooks), close }
    }

    /// Not counting, and why.
    pub fn off(reason: String) -> ProbeStatus {
        ProbeStatus { enabled: false, reason: Some(reason), hooks: None, close: None }
    }
}

/// What every consumer reads: the latest sample and the decision taken on it.
#[derive(Debug, Clone, Serialize)]
pub struct Published {
    pub snapshot: Snapshot,
    pub decision: Decision,
    pub probes: ProbeStatus,
    /// Set when the latest sample failed (the group vanished, a file became unreadable); the snapshot is the last
    /// good one.
    pub error: Option<String>,
    /// What woke the sampler for this sample, and when: consumers time their reaction from `wake.at`.
    pub wake: Wake,
    /// The kernel wake-up sources armed, and why the others are not.
    pub wakeups: Arc<WakeupStatus>,
    /// The memory brake, when `[policy] brake_at` is set.
    pub brake: Option<BrakeStatus>,
    /// The interval until the next timed sample, in milliseconds, as pacing chose it.
    pub next_sample_ms: u64,
    /// The last resort's kill carried out (or, in shadow mode, decided) on this sample.
    pub kill: Option<crate::decision::policy::kill::KillRecord>,
    /// The recycle sent (or decided in shadow mode, or found impossible) on this sample.
    pub recycle: Option<crate::decision::policy::recycle::RecycleRecord>,
    /// The process the sampler sent `[actions] abort_signal` to on this sample (the actions task does not send it
    /// again).
    pub abort_signalled: Option<crate::decision::policy::ProcId>,
    /// Under `monitor run`: the abort victim's requests in flight when it was chosen, on every sample while the
    /// abort of it lasts.
    pub victim_requests: Option<Arc<crate::decision::snapshot::VictimRequests>>,
    /// The policy's lines this sample was decided with: what the status, the page and `/metrics` show beside it,
    /// so a reload between two samples never pairs a decision with lines it was not taken against.
    pub thresholds: Arc<Thresholds>,
    /// `[policy] interval_ms` as applied for this sample: `/healthz` calls the sampler stale after
    /// [`STALE_INTERVALS`](crate::consumers::api) of them.
    pub interval_ms: u64,
}

/// Samples a slow consumer may fall behind by before it loses some (at the default 100 ms interval, 6.4 s). The
/// channel keeps that many samples alive, so it stays small.
const FEED_BACKLOG: usize = 64;

/// Where the sampler publishes. Not `Clone`: the readers see the end of the samples when the sampler drops it.
pub struct Feed {
    latest: watch::Sender<Arc<Published>>,
    every: broadcast::Sender<Arc<Published>>,
}

impl Feed {
    /// A feed whose present value is `first`, and a reader of the present (for the API).
    pub fn new(first: Published) -> (Feed, watch::Receiver<Arc<Published>>) {
        let (latest, rx) = watch::channel(Arc::new(first));
        let (every, _) = broadcast::channel(FEED_BACKLOG);
        (Feed { latest, every }, rx)
    }

    /// Every sample from the present one on, in order; `who` names the reader in the warning it logs if it ever
    /// falls more than [`FEED_BACKLOG`] samples behind.
    pub fn subscribe(&self, who: &'static str) -> Samples {
        // Subscribed before the present is read: a sample published in between comes both ways, and is dropped
        // the second time (see `Samples::next`).
        let rx = self.every.subscribe();
        let current = self.current();
        Samples { rx, latest: current.clone(), first: Some(current), who }
    }

    /// Publishes a new sample (the sampler thread's job; public for benchmarks that feed a history).
    pub fn publish(&self, p: Arc<Published>) {
        // Nobody listening (no alerts, actions or history) is not an error.
        let _ = self.every.send(p.clone());
        self.latest.send_replace(p);
    }

    /// The present sample.
    pub(crate) fn current(&self) -> Arc<Published> {
        self.latest.borrow().clone()
    }
}

/// One reader's view of the [`Feed`]: every sample in order.
pub struct Samples {
    rx: broadcast::Receiver<Arc<Published>>,
    latest: Arc<Published>,
    first: Option<Arc<Published>>,
    who: &'static str,
}

impl Samples {
    /// The next sample (the present one first); None once the sampler has stopped. A reader that fell behind
    /// logs how many samples it lost and goes on with the oldest one still kept.
    pub async fn next(&mut self) -> Option<Arc<Published>> {
        if let Some(p) = self.first.take() {
            return Some(p);
        }
        loop {
            match self.rx.recv().await {
                Ok(p) if Arc::ptr_eq(&p, &self.latest) => continue,
                Ok(p) => {
                    self.latest = p.clone();
                    return Some(p);
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(reader = self.who, samples = n, "fell behind the sampler: samples skipped");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// The last sample [`next`](Self::next) returned (the present one before the first call).
    pub fn latest(&self) -> &Arc<Published> {
        &self.latest
    }
}

#[cfg(test)]
impl Published {
    /// For unit tests: sample 0 of an empty v1 group `/g` (limit 1 byte, nothing used) with a decision in `state`
    /// that just changed, no victim, probes off.
    pub(crate) fn test(state: crate::decision::policy::State) -> Published {
        Published {
            snapshot: Snapshot {
                seq: 0,
                unix_ms: 0,
                mono_ms: 0,
                counted_unix_ms: 0,
                group: crate::decision::snapshot::GroupSample {
                    cgroup: "/g".into(),
                    version: crate::decision::snapshot::CgroupVersion::V1,
                    usage_bytes: 0,
                    shmem_bytes: 0,
                    kernel_bytes: 0,
                    oom_group: None,
                    limit_bytes: 1,
                    limit_source: crate::decision::snapshot::LimitSource::Cgroup,
                    oom_kills: None,
                    processes_listed: 0,
                    processes_sampled: 0,
                    unattributed_bytes: 0,
                    pressure: None,
                },
                processes: Default::default(),
                agent_pid: 0,
                protected: Vec::new(),
            },
            decision: Decision {
                state,
                ratio: 0.0,
                largest_pid: None,
                victim: None,
                abort_round: 0,
                shadow: false,
                changed: true,
                kill: None,
                kills_halted: false,
                unseen: false,
                victim_growth: None,
                kill_line: 0.97,
                recycle: None,
            },
            probes: ProbeStatus { enabled: false, reason: None, hooks: None, close: None },
            error: None,
            wake: Wake::timer(),
            wakeups: Arc::new(WakeupStatus::default()),
            brake: None,
            next_sample_ms: 100,
            kill: None,
            recycle: None,
            abort_signalled: None,
            victim_requests: None,
            thresholds: Arc::new(Thresholds::default()),
            interval_ms: 100,
        }
    }

    /// For unit tests: this sample with `oom_kills` counted, the wake-ups `armed` and one `off` (source, reason),
    /// the brake set at `high_bytes` (at 0.96, over `max`) and a paced interval of `next_ms`.
    pub(crate) fn reacting(
        mut self,
        oom_kills: u64,
        armed: &[&str],
        off: (&str, &str),
        high_bytes: u64,
        next_ms: u64,
    ) -> Published {
        self.snapshot.group.oom_kills = Some(oom_kills);
        self.wakeups = Arc::new(WakeupStatus {
            armed: armed.iter().map(|s| s.to_string()).collect(),
            off: vec![crate::feed::WakeupOff { source: off.0.into(), reason: off.1.into() }],
            pacing: true,
        });
        self.brake = Some(BrakeStatus {
            at: 0.96,
            high_bytes: Some(high_bytes),
            previous: "max".into(),
            error: None,
            note: None,
            warning: None,
        });
        self.next_sample_ms = next_ms;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;

    fn published(seq: u64, state: State) -> Published {
        let mut p = Published::test(state);
        p.snapshot.seq = seq;
        p
    }

    fn seqs(got: &[Arc<Published>]) -> Vec<u64> {
        got.iter().map(|p| p.snapshot.seq).collect()
    }

    /// Everything `samples` delivers until the feed is dropped.
    fn drain(samples: &mut Samples) -> Vec<Arc<Published>> {
        let rt = tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime");
        rt.block_on(async {
            let mut got = Vec::new();
            while let Some(p) = samples.next().await {
                got.push(p);
            }
            got
        })
    }

    #[test]
    fn a_reader_gets_every_sample_in_order_even_one_published_while_it_was_not_looking() {
        let (feed, latest) = Feed::new(published(0, State::Normal));
        let mut samples = feed.subscribe("test");
        // Three samples before the reader looks: a refusal that lasted one sample sits between two normal ones.
        feed.publish(Arc::new(published(1, State::Normal)));
        feed.publish(Arc::new(published(2, State::Refusing)));
        feed.publish(Arc::new(published(3, State::Normal)));
        assert_eq!(latest.borrow().snapshot.seq, 3, "the API reads the present");
        drop(feed);
        let got = drain(&mut samples);
        assert_eq!(seqs(&got), [0, 1, 2, 3], "the present first, then each sample once, and None at the end");
        assert_eq!(got[2].decision.state, State::Refusing);
        assert_eq!(samples.latest().snapshot.seq, 3);
    }

    #[test]
    fn a_sample_published_while_subscribing_comes_once() {
        let (feed, _latest) = Feed::new(published(0, State::Normal));
        // What `subscribe` sees when the sampler publishes between its two steps: the new sample both as the
        // present and on the channel.
        let rx = feed.every.subscribe();
        feed.publish(Arc::new(published(1, State::Refusing)));
        let current = feed.current();
        let mut samples = Samples { rx, latest: current.clone(), first: Some(current), who: "test" };
        feed.publish(Arc::new(published(2, State::Normal)));
        drop(feed);
        let got = drain(&mut samples);
        assert_eq!(seqs(&got), [1, 2]);
    }

    #[test]
    fn a_reader_that_fell_too_far_behind_goes_on_with_the_oldest_kept() {
        let (feed, _latest) = Feed::new(published(0, State::Normal));
        let mut samples = feed.subscribe("test");
        let n = FEED_BACKLOG as u64 + 10;
        for seq in 1..=n {
            feed.publish(Arc::new(published(seq, State::Normal)));
        }
        drop(feed);
        let got = drain(&mut samples);
        let expected: Vec<u64> = std::iter::once(0).chain(n - FEED_BACKLOG as u64 + 1..=n).collect();
        assert_eq!(seqs(&got), expected);
    }
}
