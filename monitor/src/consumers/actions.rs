//! Per-transition actions (`[actions]`): for processes that are not behind `monitor run`'s front door, the agent
//! can tell each process of the group when its action changes, instead of (or besides) the process polling
//! `GET /api/v1/decision?pid=N`. A process that starts refusing gets `refuse_signal`, the one told to abort gets
//! `abort_signal`, and one that may serve again gets `serve_signal` (each optional); and every change is POSTed
//! as JSON to `post_url` when set (`{"pid", "name", "comm", "action", "state", "ratio", "cgroup"}`: `name` is a
//! launched process's configured name under `monitor run`, else its `comm`), for a master that relays it. Each process can also get its own changes POSTed to its admin endpoint: under `monitor run` at
//! `http://127.0.0.1:<its port><admin_path>` (`[[process]] admin_path`, else `[actions] admin_path`); for the agent
//! at `[actions] admin_path` on the lowest TCP port the process listens on.
//!
//! A signal goes only to a process of the group as sampled, never to the agent itself. It is sent through a pidfd
//! opened on the pid and checked against the sampled start time, so a pid reused by another process since the sample
//! is never signalled. In shadow mode nothing is sent or posted: the changes are logged.
//!
//! The task reads every published sample in order ([`Samples`]), so a state that lasted a single sample is told
//! too. It subscribes before the processes start, so decisions taken while they start are told as well.
//!
//! The abort signal is sent by the sampler's thread itself, on the wake-up that chose the victim
//! ([`crate::sampler`]), as the last resort's kill is; this task, a scheduling round later, sends the others (and
//! the abort when the sampler could not). Each refuse or abort signal sent, and each such change POSTed (once
//! answered with 2xx), is timed from the wake-up of the sample that decided it into [`Reactions`]
//! (`monitor_reaction_seconds`).
//!
//! Every POST carries the proof of [`crate::base::proof`] (`X-Monitor-Proof`), made with the group's secret
//! ([`Signing`]): `monitor run`'s, handed to its processes at start, or the agent's `[actions] secret_file`, read
//! again on each reload. An agent without one POSTs unsigned, and says so. The proof is made for the one receiver
//! the POST goes to: the authority of its URL (`host:port`, the host in lower case), sent as its `Host` as well.

use crate::base::ordered;
use crate::base::proof::Key;
use crate::base::reaction::{Kind, Reactions};
use crate::config::live::Live;
use crate::config::{ActionsConfig, HttpUrl, Signal};
use crate::decision::policy::{Action, ProcId, State};
use crate::feed::{Published, Samples};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::{JoinHandle, JoinSet};

/// The configured signal numbers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Signals {
    pub refuse: Option<i32>,
    pub abort: Option<i32>,
    pub serve: Option<i32>,
}

impl Signals {
    pub(crate) fn from_config(cfg: &ActionsConfig) -> Signals {
        let num = |s: Option<Signal>| s.map(Signal::number);
        Signals { refuse: num(cfg.refuse_signal), abort: num(cfg.abort_signal), serve: num(cfg.serve_signal) }
    }

    fn for_action(&self, a: Action) -> Option<i32> {
        match a {
            Action::Serve => self.serve,
            Action::Refuse => self.refuse,
            Action::Abort => self.abort,
        }
    }
}

/// One process whose action changed, and the signal configured for its new action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub to: ProcId,
    /// The process's name ([`crate::decision::snapshot::ProcSample::name`]: under `monitor run` its configured name).
    pub name: String,
    /// Its `/proc/<pid>/comm`.
    pub comm: String,
    pub action: Action,
    pub signal: Option<i32>,
}

/// What each process was last told, to send a signal only when its action changes.
#[derive(Debug, Default)]
pub struct Plan {
    /// The processes last told something other than `serve` (a process not here was last told to serve).
    last: HashMap<ProcId, Action>,
}

impl Plan {
    /// The changes one published sample makes: each process of the group but the agent whose decided action differs
    /// from the last one seen (a process first seen serving is no change), with the configured signal, if any.
    /// Processes gone from the group are forgotten.
    pub fn next(&mut self, p: &Published, signals: &Signals) -> Vec<Change> {
        let d = &p.decision;
        // Far from the lines every process serves, as each was last told: nothing to look at per process.
        if d.state == State::Normal && self.last.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        let mut told = HashMap::new();
        for proc in p.snapshot.processes.iter().filter(|q| q.pid != p.snapshot.agent_pid) {
            let id = ProcId { pid: proc.pid, start_ticks: proc.start_ticks };
            let now = d.decided_for(id);
            let before = self.last.get(&id).copied().unwrap_or(Action::Serve);
            if now != before {
                out.push(Change {
                    to: id,
                    name: proc.name.clone(),
                    comm: proc.comm.clone(),
                    action: now,
                    signal: signals.for_action(now),
                });
            }
            if now != Action::Serve {
                told.insert(id, now);
            }
        }
        self.last = told;
        out
    }
}

/// The JSON POSTed to `post_url` for one change.
pub(crate) fn post_body(c: &Change, p: &Published) -> String {
    serde_json::json!({
        "pid": c.to.pid,
        "name": c.name,
        "comm": c.comm,
        "action": c.action.as_str(),
        "state": p.decision.state.as_str(),
        "ratio": p.decision.ratio,
        "cgroup": p.snapshot.group.cgroup.display().to_string(),
    })
    .to_string()
}

/// The admin URL of the process with this pid, if it has one (`monitor run`'s `[[process]] admin_path`, or
/// `[actions] admin_path` on its port).
pub(crate) type AdminUrl = Arc<dyn Fn(u32) -> Option<String> + Send + Sync>;

/// For the agent: `[actions] admin_path` on the lowest TCP port the process listens on (found when a change is
/// told, not per sample). A process that listens on nothing is told nothing there.
pub(crate) fn admin_url_by_port(path: String) -> AdminUrl {
    Arc::new(move |pid: u32| {
        let addr = crate::sources::sockets::listening_addrs(pid).into_iter().min_by_key(|a| a.port())?;
        Some(format!("http://{addr}{path}"))
    })
}

/// The signals and the URL `[actions]` tells the changes with.
fn told(cfg: &ActionsConfig) -> (Signals, Option<HttpUrl>) {
    (Signals::from_config(cfg), cfg.post_url.clone())
}

/// The secret the POSTs are signed with.
#[derive(Debug, Clone)]
pub(crate) enum Signing {
    /// `monitor run`'s, made or read at start and handed to the processes it starts: kept until a restart.
    Fixed(Key),
    /// `monitor agent`'s: `[actions] secret_file`, read at start and again on each reload; none: unsigned.
    FromConfig,
}

impl Signing {
    /// `monitor run`'s: the secret of `[actions] secret_file`, else 32 random bytes made now; with the variable
    /// that hands it to the processes (`MONITOR_ACTION_SECRET`, hex).
    pub(crate) fn for_run(cfg: &ActionsConfig) -> Result<(Signing, (String, String)), String> {
        let secret = match cfg.secret()? {
            Some(s) => s,
            None => crate::base::proof::random_secret().map_err(|e| e.to_string())?,
        };
        let key = Key::new(&secret).map_err(|e| format!("secret_file: {e}"))?;
        Ok((Signing::Fixed(key), (crate::base::proof::SECRET_ENV.to_string(), crate::base::token::hex(&secret))))
    }

    /// The key after the applied config `cfg` (at start or after a reload), `running` the one signing until now. A
    /// file that cannot be read, or is too short, keeps the running key (the reload's checks name the problem).
    fn key(&self, cfg: &ActionsConfig, running: Option<&Key>) -> Option<Key> {
        match self {
            Signing::Fixed(k) => Some(k.clone()),
            Signing::FromConfig => {
                match cfg.secret().and_then(|s| s.map(|b| Key::new(&b).map_err(|e| e.to_string())).transpose()) {
                    Ok(Some(k)) => Some(k),
                    Ok(None) => {
                        if cfg.posts_unsigned() {
                            tracing::warn!(
                                "[actions] secret_file is unset: the action POSTs to post_url and admin_path go \
                                 unsigned, and a process cannot tell them from forged ones (see docs/deploy.md)"
                            );
                        }
                        None
                    }
                    Err(e) => {
                        tracing::warn!("[actions] secret_file: {e}: the running secret is kept");
                        running.cloned()
                    }
                }
            }
        }
    }
}

/// Whether a change to `a` is a reaction to memory pressure (refuse or abort), timed in [`Reactions`].
fn is_reaction(a: Action) -> bool {
    matches!(a, Action::Refuse | Action::Abort)
}

/// One change to POST: to `url`, signed with `key` when there is one, and timed into the reactions from the
/// wake-up when it is a refuse or an abort.
struct Post {
    url: HttpUrl,
    body: String,
    pid: u32,
    key: Option<Key>,
    timed: Option<(Arc<Reactions>, Instant)>,
}

/// Changes waiting for one receiver at most; past that (a receiver that stopped answering) the oldest is dropped,
/// said once until it catches up: the newest carries the process's present action.
const QUEUED: usize = 64;
/// A receiver's queue idle this long ends (the next change starts another), so receivers that come and go (the
/// ports of processes long gone) leave nothing behind.
const QUEUE_IDLE: Duration = Duration::from_secs(60);

/// One ordered queue ([`crate::base::ordered`]), and one task posting from it, per receiver: the changes POSTed to one
/// URL arrive in the order they were decided (a receiver told `refuse`, `abort`, `serve` never hears them in
/// another order), while a slow receiver delays only its own changes, and nobody's signal.
#[derive(Default)]
struct Posters {
    queues: HashMap<String, ordered::Sender<Post>>,
    tasks: JoinSet<()>,
}

impl Posters {
    fn post(&mut self, job: Post) {
        self.queues.retain(|_, q| !q.is_ended());
        while self.tasks.try_join_next().is_some() {}
        let url = job.url.to_string();
        // Given back when that receiver's task has just ended (idle): a new one takes it.
        let job = match self.queues.get(&url) {
            Some(queue) => match queue.push(job) {
                Ok(()) => return,
                Err(job) => job,
            },
            None => job,
        };
        let (queue, changes) = ordered::channel(format!("action receiver {url}"), QUEUED);
        self.tasks.spawn(async move {
            while let Some(job) = changes.next_within(QUEUE_IDLE).await {
                deliver(job).await;
            }
        });
        let _ = queue.push(job);
        self.queues.insert(url, queue);
    }

    /// Waits until every receiver has been sent what was queued for it.
    async fn finish(mut self) {
        self.queues.clear();
        while self.tasks.join_next().await.is_some() {}
    }
}

/// `url` with its host in lower case: the authority its proof signs and its `Host` header carries, one text, which
/// the receiver compares with its own.
fn lower_host(url: HttpUrl) -> HttpUrl {
    if !url.authority().bytes().any(|b| b.is_ascii_uppercase()) {
        return url;
    }
    let scheme = if url.tls() { "https" } else { "http" };
    format!("{scheme}://{}{}", url.authority().to_ascii_lowercase(), url.path()).parse().unwrap_or(url)
}

/// POSTs one change, with its proof made now for its receiver (a change that waited behind a slow receiver is not
/// stale when it goes).
async fn deliver(job: Post) {
    let Post { url, body, pid, key, timed } = job;
    let url = lower_host(url);
    let proof = match key.map(|k| k.sign("POST", url.authority(), url.path(), body.as_bytes())).transpose() {
        Ok(p) => p,
        Err(e) => {
            // Sent unsigned, it would be refused, or taken by a process that should not take it.
            tracing::warn!(pid, "the action change is not posted: {e}");
            return;
        }
    };
    let headers: Vec<(&str, &str)> = proof.iter().map(|p| (crate::base::proof::HEADER, p.as_str())).collect();
    match crate::config::client::post_json_with(&url, &body, &headers).await {
        Ok(()) => {
            if let Some((reactions, wake)) = timed {
                reactions.record_since(Kind::Post, wake);
            }
        }
        Err(e) => tracing::warn!(pid, "posting the action change: {e}"),
    }
}

/// Starts the task that follows the published decisions, signals the processes and posts the changes as the
/// applied config's `[actions]` says (a reload changes the signals, `post_url` and the agent's secret from the next
/// sample), signed as `signing` says, timing each refuse or abort into `reactions`. It follows the decisions even
/// while nothing is configured, so a signal configured later is sent on the next change, not on the state the
/// group was already in. The task ends when the samples do, once every change has been posted.
pub fn spawn(
    mut config: Live,
    mut samples: Samples,
    admin_url: Option<AdminUrl>,
    signing: Signing,
    reactions: Arc<Reactions>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let (mut signals, mut post_url) = told(&config.now().actions);
        let mut key = signing.key(&config.now().actions, None);
        let mut plan = Plan::default();
        let mut posters = Posters::default();
        while let Some(p) = samples.next().await {
            if let Some(cfg) = config.changed() {
                (signals, post_url) = told(&cfg.actions);
                key = signing.key(&cfg.actions, key.as_ref());
            }
            for c in plan.next(&p, &signals) {
                tracing::debug!(pid = c.to.pid, action = c.action.as_str(), seq = p.snapshot.seq, "action changed");
                let name = crate::guard::signal_name(c.signal);
                if p.decision.shadow {
                    tracing::info!(pid = c.to.pid, action = c.action.as_str(), signal = name, "shadow: not told");
                    continue;
                }
                let timed = is_reaction(c.action);
                // The sampler sent the abort itself, on the wake-up that chose the victim.
                let sent = c.action == Action::Abort && p.abort_signalled == Some(c.to);
                if let Some(signal) = c.signal.filter(|_| !sent) {
                    match crate::guard::signal(c.to, signal) {
                        Ok(()) => {
                            if timed {
                                reactions.record_since(Kind::Signal, p.wake.at);
                            }
                            tracing::info!(pid = c.to.pid, action = c.action.as_str(), "sent SIG{name}")
                        }
                        Err(e) => tracing::warn!(action = c.action.as_str(), "SIG{name} not sent: {e}"),
                    }
                }
                // Built from an address and a path the config checked; one that is not a URL anyway is logged.
                let own = admin_url.as_ref().and_then(|f| f(c.to.pid)).and_then(|u| {
                    u.parse::<HttpUrl>().map_err(|e| tracing::warn!(pid = c.to.pid, "admin URL: {e}")).ok()
                });
                if post_url.is_some() || own.is_some() {
                    let body = post_body(&c, &p);
                    for url in post_url.iter().cloned().chain(own) {
                        let t = timed.then(|| (reactions.clone(), p.wake.at));
                        posters.post(Post { url, body: body.clone(), pid: c.to.pid, key: key.clone(), timed: t });
                    }
                }
            }
        }
        posters.finish().await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;
    use crate::decision::snapshot::ProcSample;

    /// A receiver whose first answer takes 300 ms hears the next change only after it answered, and every change
    /// in the order it was posted; a second receiver is not held up by the first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_receiver_hears_its_changes_in_order_and_a_slow_one_holds_up_no_other() {
        use axum::routing::post;
        use std::sync::Mutex;
        type Heard = Arc<Mutex<Vec<(String, Instant, Instant)>>>;
        async fn receiver(delay_first: Duration) -> (std::net::SocketAddr, Heard) {
            let heard: Heard = Arc::default();
            let h = heard.clone();
            let app = axum::Router::new().route(
                "/x",
                post(move |body: String| {
                    let h = h.clone();
                    async move {
                        let read = Instant::now();
                        let first = h.lock().map(|v| v.is_empty()).unwrap_or(false);
                        if first {
                            tokio::time::sleep(delay_first).await;
                        }
                        if let Ok(mut v) = h.lock() {
                            v.push((body, read, Instant::now()));
                        }
                        axum::http::StatusCode::NO_CONTENT
                    }
                }),
            );
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
            let addr = l.local_addr().expect("addr");
            tokio::spawn(async move { axum::serve(l, app).await });
            (addr, heard)
        }
        let (slow, slow_heard) = receiver(Duration::from_millis(300)).await;
        let (fast, fast_heard) = receiver(Duration::ZERO).await;
        let mut posters = Posters::default();
        let job = |addr: std::net::SocketAddr, body: &str| Post {
            url: format!("http://{addr}/x").parse().expect("url"),
            body: body.to_string(),
            pid: 1,
            key: None,
            timed: None,
        };
        let sent = Instant::now();
        for body in ["refuse", "abort", "serve"] {
            posters.post(job(slow, body));
        }
        posters.post(job(fast, "refuse"));
        let deadline = Instant::now() + Duration::from_secs(5);
        while slow_heard.lock().map(|v| v.len()).unwrap_or(0) < 3 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let heard = slow_heard.lock().expect("heard").clone();
        let bodies: Vec<&str> = heard.iter().map(|(b, _, _)| b.as_str()).collect();
        assert_eq!(bodies, ["refuse", "abort", "serve"]);
        assert!(heard[1].1 >= heard[0].2, "the second change was sent before the first was answered");
        let fast = fast_heard.lock().expect("heard").clone();
        assert_eq!(fast.len(), 1, "the other receiver heard its change");
        assert!(fast[0].1 < heard[0].2, "the other receiver waited for the slow one");
        assert!(fast[0].1 < sent + Duration::from_millis(250), "the other receiver waited");
    }

    /// Each POST's proof is made for the receiver it goes to, whose `Host` header names the same authority: good
    /// there, refused by a receiver at any other address.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_post_is_proven_for_its_own_receiver() {
        use axum::http::HeaderMap;
        use axum::routing::post;
        use std::sync::Mutex;
        type Got = Arc<Mutex<Vec<(Option<String>, Option<String>, String)>>>;
        let got: Got = Arc::default();
        let g = got.clone();
        let app = axum::Router::new().route(
            "/admin/memory",
            post(move |headers: HeaderMap, body: String| {
                let g = g.clone();
                async move {
                    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
                    if let Ok(mut v) = g.lock() {
                        v.push((h("host"), h(crate::base::proof::HEADER), body));
                    }
                    axum::http::StatusCode::NO_CONTENT
                }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = l.local_addr().expect("addr");
        tokio::spawn(async move { axum::serve(l, app).await });
        let key = Key::new(&[7; 32]).expect("32 bytes");
        let body = r#"{"pid":42,"action":"refuse"}"#;
        let url = format!("http://{addr}/admin/memory").parse().expect("url");
        deliver(Post { url, body: body.into(), pid: 42, key: Some(key.clone()), timed: None }).await;
        let got = got.lock().expect("got").clone();
        assert_eq!(got.len(), 1, "the receiver got no POST");
        let (host, proof, received) = &got[0];
        let own = addr.to_string();
        assert_eq!(host.as_deref(), Some(own.as_str()), "the Host header is not the authority signed");
        let check = |authority: &str| {
            crate::base::proof::Verifier::new(key.clone(), authority).verify(
                proof.as_deref(),
                "POST",
                "/admin/memory",
                received.as_bytes(),
            )
        };
        assert_eq!(check(&own), Ok(()));
        let sibling = format!("127.0.0.1:{}", addr.port().wrapping_add(1));
        assert_eq!(check(&sibling), Err(crate::base::proof::ProofError::BadMac), "good at another receiver");
    }

    #[test]
    fn the_host_posted_to_is_in_lower_case_and_nothing_else_changes() {
        let lowered = |u: &str| {
            let u = lower_host(u.parse().expect("url"));
            (u.tls(), u.authority().to_string(), u.path().to_string())
        };
        assert_eq!(lowered("http://Relay.Example/x?y=Z"), (false, "relay.example:80".into(), "/x?y=Z".into()));
        assert_eq!(lowered("HTTPS://RELAY:8443/A"), (true, "relay:8443".into(), "/A".into()));
        assert_eq!(lowered("http://127.0.0.1:9/Admin"), (false, "127.0.0.1:9".into(), "/Admin".into()));
        let same: HttpUrl = "http://[::1]:9/x".parse().expect("url");
        assert_eq!(lower_host(same.clone()), same, "a URL in lower case already is posted to as written");
    }

    fn proc(pid: u32) -> ProcSample {
        ProcSample::test(pid)
    }

    fn published(state: State, victim: Option<u32>, pids: &[u32], agent_pid: u32) -> Published {
        let mut p = Published::test(state);
        p.snapshot.processes = pids.iter().map(|&p| proc(p)).collect::<Vec<_>>().into();
        p.snapshot.agent_pid = agent_pid;
        p.decision.largest_pid = victim;
        p.decision.victim = victim.map(|pid| ProcId { pid, start_ticks: u64::from(pid) * 10 });
        p
    }

    fn sent(v: &[Change]) -> Vec<(u32, i32)> {
        v.iter().filter_map(|c| Some((c.to.pid, c.signal?))).collect()
    }

    #[test]
    fn signals_follow_each_process_action_changes() {
        let sig = Signals { refuse: Some(10), abort: Some(12), serve: Some(1) };
        let mut plan = Plan::default();
        // First sight while serving: nothing.
        assert_eq!(sent(&plan.next(&published(State::Normal, None, &[1, 2, 3], 0), &sig)), []);
        assert_eq!(
            sent(&plan.next(&published(State::Refusing, None, &[1, 2, 3], 0), &sig)),
            [(1, 10), (2, 10), (3, 10)]
        );
        // Still refusing: nothing new.
        assert_eq!(sent(&plan.next(&published(State::Refusing, None, &[1, 2, 3], 0), &sig)), []);
        // Aborting: only the victim changes.
        assert_eq!(sent(&plan.next(&published(State::Aborting, Some(3), &[1, 2, 3], 0), &sig)), [(3, 12)]);
        // The victim is gone; a new process appears while refusing: it is told to refuse.
        assert_eq!(sent(&plan.next(&published(State::Refusing, None, &[1, 2, 4], 0), &sig)), [(4, 10)]);
        assert_eq!(sent(&plan.next(&published(State::Normal, None, &[1, 2, 4], 0), &sig)), [(1, 1), (2, 1), (4, 1)]);
    }

    #[test]
    fn every_change_is_reported_with_or_without_a_signal() {
        let mut plan = Plan::default();
        let none = Signals::default();
        let c = plan.next(&published(State::Refusing, None, &[1, 2], 2), &none);
        assert_eq!(c.iter().map(|c| (c.to.pid, c.action, c.signal)).collect::<Vec<_>>(), [(1, Action::Refuse, None)]);
        let p = published(State::Refusing, None, &[1], 0);
        let body: serde_json::Value = serde_json::from_str(&post_body(&c[0], &p)).expect("json");
        assert_eq!(
            (body["pid"].as_u64(), body["action"].as_str(), body["state"].as_str()),
            (Some(1), Some("refuse"), Some("refusing"))
        );
    }

    #[test]
    fn the_agent_is_never_signalled_and_unset_signals_are_not_sent() {
        let sig = Signals { refuse: Some(10), abort: None, serve: None };
        let mut plan = Plan::default();
        assert_eq!(sent(&plan.next(&published(State::Refusing, None, &[1, 2], 2), &sig)), [(1, 10)]);
        assert_eq!(sent(&plan.next(&published(State::Aborting, Some(1), &[1, 2], 2), &sig)), []);
        assert_eq!(sent(&plan.next(&published(State::Normal, None, &[1, 2], 2), &sig)), []);
    }

    #[test]
    fn signals_from_the_config() {
        let cfg = ActionsConfig {
            refuse_signal: Signal::from_name("SIGUSR1"),
            serve_signal: Signal::from_name("HUP"),
            ..Default::default()
        };
        let sig = Signals::from_config(&cfg);
        assert_eq!(sig, Signals { refuse: Some(libc::SIGUSR1), abort: None, serve: Some(libc::SIGHUP) });
        assert_eq!((crate::guard::signal_name(sig.refuse), crate::guard::signal_name(sig.abort)), ("USR1", "-"));
    }

    #[test]
    fn the_agent_reads_its_secret_again_on_each_reload_and_keeps_it_through_a_bad_file() {
        let dir = std::env::temp_dir().join(format!("monitor-actions-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let (file, short) = (dir.join("secret"), dir.join("short"));
        std::fs::write(&file, "a".repeat(32)).expect("write");
        std::fs::write(&short, "s".repeat(31)).expect("write");
        for f in [&file, &short] {
            // A secret file that others can read is refused: these are kept secret.
            std::fs::set_permissions(f, std::os::unix::fs::PermissionsExt::from_mode(0o600)).expect("chmod");
        }
        let cfg = |f: Option<&std::path::Path>| ActionsConfig {
            admin_path: Some("/a".into()),
            secret_file: f.map(Into::into),
            ..Default::default()
        };
        // Keys compared by a proof each makes of the same request.
        let proof = |k: Option<&Key>| k.map(|k| k.sign_at("POST", "127.0.0.1:1", "/a", b"{}", 1, &[0; 16]));
        let of = |s: &str| Key::new(s.as_bytes()).expect("32 bytes");
        let (a, b) = (of(&"a".repeat(32)), of(&"b".repeat(32)));
        let agent = Signing::FromConfig;
        let started = agent.key(&cfg(Some(&file)), None);
        assert_eq!(proof(started.as_ref()), proof(Some(&a)));
        // Rotated in place: the next reload reads it again.
        std::fs::write(&file, format!("{}\n", "b".repeat(32))).expect("write");
        let rotated = agent.key(&cfg(Some(&file)), started.as_ref());
        assert_eq!(proof(rotated.as_ref()), proof(Some(&b)));
        // A file gone or too short keeps the running key; no file at all is no key (unsigned).
        assert_eq!(proof(agent.key(&cfg(Some(&dir.join("gone"))), rotated.as_ref()).as_ref()), proof(Some(&b)));
        assert_eq!(proof(agent.key(&cfg(Some(&short)), rotated.as_ref()).as_ref()), proof(Some(&b)));
        assert!(agent.key(&cfg(None), rotated.as_ref()).is_none());
        // monitor run keeps the one it started its processes with, whatever the config says.
        let run = Signing::Fixed(a.clone());
        assert_eq!(proof(run.key(&cfg(None), None).as_ref()), proof(Some(&a)));
        // Its own secret: the file's, handed to the processes as hex; else a random one.
        let (signing, (var, value)) = Signing::for_run(&cfg(Some(&file))).expect("the file's secret");
        assert_eq!(
            (var.as_str(), value),
            ("MONITOR_ACTION_SECRET", crate::base::token::hex("b".repeat(32).as_bytes()))
        );
        assert_eq!(proof(signing.key(&cfg(None), None).as_ref()), proof(Some(&b)));
        let (_, (_, random)) = Signing::for_run(&cfg(None)).expect("a random secret");
        assert_eq!(random.len(), 64, "32 bytes in hex");
        assert!(Signing::for_run(&cfg(Some(&short))).is_err_and(|e| e.contains("31 bytes")));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
