//! The agent's HTTP API: `GET /api/v1/status`, `GET /api/v1/decision?pid=N`, `GET /healthz` (the sampler's
//! health: 503 with the reason while the group cannot be read or no sample came for a while), `GET /livez` (the
//! process answers). Reads only the latest published sample; never calls back into the sampler. [`serve`] bounds
//! the connections a client can hold, so a crowd of idle ones never locks out a probe; the status document is built
//! on a thread of its own, a bounded number at a time, so a crowd asking for it never delays a probe either.

use crate::config::Role;
use crate::feed::{BrakeStatus, ProbeStatus, Published, WakeupOff};
use crate::guard::{KillBook, KillRecord};
use crate::launcher::LauncherInfo;
use crate::live::{ConfigStatus, Live, Reloads};
use crate::policy::{self, Action, ProcId, Thresholds};
use crate::reply::{busy, error, method_not_allowed};
use crate::snapshot::{infer_roles, CgroupVersion, LimitSource, ProcessRole};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;
use web::pool::{Gate, PoolError};

/// What the routes read.
#[derive(Clone)]
pub struct ApiState {
    pub latest: watch::Receiver<Arc<Published>>,
    /// The applied config: the policy's lines, and the sampling interval (`[policy] interval_ms`) after
    /// [`STALE_INTERVALS`] of which without a sample `/healthz` calls the sampler stale.
    pub config: Live,
    /// The config's reloads, shown as the status's `config` object (None: left out).
    pub reloads: Option<Arc<Reloads>>,
    /// Under `monitor run`: the launched processes (role from the config, state, restarts). None for `agent`.
    pub launcher: Option<Arc<dyn Fn() -> Vec<LauncherInfo> + Send + Sync>>,
    /// Under `monitor run`: the front door's counts. None for `agent`.
    pub front_door: Option<Arc<dyn Fn() -> FrontDoorView + Send + Sync>>,
    /// The last resort's kills: the recent ones and the counts by name (None: no kills shown).
    pub kills: Option<Arc<KillBook>>,
}

/// Intervals without a sample after which `/healthz` calls the sampler stale (pacing only ever samples sooner
/// than the configured interval, so a healthy sampler is never this late).
pub const STALE_INTERVALS: u32 = 10;
/// The staleness bound's floor, whatever the interval: a scheduling hiccup of a loaded host is not an outage.
pub const STALE_FLOOR: Duration = Duration::from_secs(2);

/// The sampler's health from the latest published sample, `age` after the sampler woke for it: `Err(reason)`
/// while the group cannot be read or the sampler is stale.
pub fn health(p: &Published, age: Duration, interval: Duration) -> Result<(), String> {
    if let Some(e) = &p.error {
        return Err(format!("degraded: the group cannot be read: {e}"));
    }
    let bound = (interval * STALE_INTERVALS).max(STALE_FLOOR);
    if age > bound {
        return Err(format!(
            "degraded: the sampler is stale: no sample for {} ms (the interval is {} ms, stale after {} ms)",
            age.as_millis(),
            interval.as_millis(),
            bound.as_millis()
        ));
    }
    Ok(())
}

/// `GET /healthz`: 200 `ok` while the group is read on time, else 503 with the reason.
async fn healthz(State(st): State<ApiState>) -> Response {
    let p = st.latest.borrow().clone();
    let interval = Duration::from_millis(st.config.now().policy.interval_ms);
    match health(&p, p.wake.at.elapsed(), interval) {
        Ok(()) => "ok\n".into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

/// Threads that build `/api/v1/status` (hundreds of processes make it milliseconds of work), at nice 10.
pub const STATUS_THREADS: usize = 1;
/// Status requests waiting or being built past which the answer is 503 with `Retry-After`.
pub const STATUS_QUEUED: usize = 16;

/// The agent's routes.
pub fn router(state: ApiState) -> Router {
    let gate = Arc::new(Gate::new(STATUS_THREADS, STATUS_QUEUED));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/livez", get(|| async { "the process is alive\n" }))
        .route("/api/v1/status", get(move |State(st): State<ApiState>| status(st, gate.clone())))
        .route("/api/v1/decision", get(decision))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Any path no route serves (also under the routers merged into this one): 404 with a JSON body naming it.
async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no such path: {}", uri.path()))
}

#[derive(Debug, Serialize, Deserialize)]
pub struct StatusView {
    pub group: GroupView,
    pub policy: PolicyView,
    pub processes: Vec<ProcessView>,
    pub probes: ProbeStatus,
    pub sample: SampleView,
    /// Under `monitor run`: every launched process, running or backing off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher: Option<Vec<LauncherInfo>>,
    /// Where the config came from and how its last reload (SIGHUP) went.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<ConfigStatus>,
    /// Under `monitor run`: what the front door counted since start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub front_door: Option<FrontDoorView>,
    /// The last resort's recent kills (sent, failed, or decided in shadow mode), oldest first.
    #[serde(default)]
    pub kills: Vec<KillView>,
}

/// One kill of the last resort as the status shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillView {
    pub pid: u32,
    /// The configured name under `monitor run`, else the command name.
    pub name: String,
    pub role: ProcessRole,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// The group's ratio when the kill was decided.
    pub ratio: f64,
    /// `over_kill_at` or `abort_not_obeyed`.
    pub why: String,
    /// In words.
    pub reason: String,
    /// 1..=3: the kills since the group was last below `abort_at`.
    pub round: u32,
    pub unix_ms: u64,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why the SIGKILL was not sent, when it was not.
    #[serde(default)]
    pub error: Option<String>,
    /// When the SIGKILL was sent, `CLOCK_MONOTONIC` nanoseconds of this host.
    #[serde(default)]
    pub sent_mono_ns: Option<u64>,
}

impl From<&KillRecord> for KillView {
    fn from(r: &KillRecord) -> KillView {
        KillView {
            pid: r.pid,
            name: r.name.clone(),
            role: r.role,
            rss_bytes: r.rss_bytes,
            anon_bytes: r.anon_bytes,
            ratio: r.ratio,
            why: r.why.to_string(),
            reason: r.reason.clone(),
            round: r.round,
            unix_ms: r.unix_ms,
            enforced: r.enforced,
            error: r.error.clone(),
            sent_mono_ns: r.sent_mono_ns,
        }
    }
}

/// The front door's counts since start, as `/metrics` has them (`monitor_shed_requests_total`,
/// `monitor_cluster_forwarded_total`), in the status document so one request gives a peer the whole picture.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrontDoorView {
    /// Requests answered 503 because the group was refusing.
    pub shed_total: u64,
    /// Requests sent on to the node that owns their cache (0 outside a cluster).
    pub forwarded_total: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GroupView {
    pub cgroup: PathBuf,
    pub version: CgroupVersion,
    pub usage_bytes: u64,
    /// The shmem part of the usage (tmpfs, shared memory).
    #[serde(default)]
    pub shmem_bytes: u64,
    pub limit_bytes: u64,
    pub limit_source: LimitSource,
    pub ratio: f64,
    /// Why the latest sample failed (the values are from the last good one).
    pub error: Option<String>,
    /// Processes of the group the kernel's OOM killer has killed since the group was created (null where the
    /// kernel does not count them).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// The kernel wake-up sources armed besides the timer (`thresholds`, `events`, `pressure`).
    #[serde(default)]
    pub wakeups: Vec<String>,
    /// Each configured wake-up source that is not armed, and why.
    #[serde(default)]
    pub wakeups_off: Vec<WakeupOff>,
    /// The memory brake (`[policy] brake_at`), null when it is off.
    #[serde(default)]
    pub brake: Option<BrakeStatus>,
    /// The interval until the next timed sample, in milliseconds, as pacing chose it.
    #[serde(default)]
    pub next_sample_ms: u64,
    /// How many processes the group's `cgroup.procs` listed, and how many of them were sampled.
    #[serde(default)]
    pub processes_listed: usize,
    #[serde(default)]
    pub processes_sampled: usize,
    /// Listed processes that could not be sampled (`processes_listed - processes_sampled`).
    #[serde(default)]
    pub processes_unsampled: usize,
    /// What the group holds beyond the sampled processes: its usage less their anon (shmem no process maps, and
    /// the memory of processes that could not be sampled; a lower bound, as pages shared after a fork count once in
    /// the group and in each process).
    #[serde(default)]
    pub unattributed_bytes: u64,
    /// cgroup v2 `memory.oom.group` (true: a kernel OOM kill takes the whole group); null on v1 or unknown.
    #[serde(default)]
    pub oom_group: Option<bool>,
    /// What a kernel OOM kill would cost, in words ([`kernel_oom_cost`]).
    #[serde(default)]
    pub kernel_oom_cost: Option<String>,
}

/// What a kernel OOM kill in the group `cgroup` costs: the whole systemd unit when the agent runs under systemd and
/// the group is (or is inside) a `.service` unit's cgroup (systemd's default `OOMPolicy=stop` stops the unit on any
/// kernel OOM kill in it), the whole group with `memory.oom.group` 1, else one process.
pub fn kernel_oom_cost(oom_group: Option<bool>, cgroup: &std::path::Path, systemd: bool) -> String {
    let unit = cgroup.components().any(|c| c.as_os_str().to_string_lossy().ends_with(".service"));
    match (systemd && unit, oom_group) {
        (true, _) => "whole unit (systemd OOMPolicy=stop unless the unit sets otherwise)".to_string(),
        (false, Some(true)) => "whole group".to_string(),
        (false, _) => "one process".to_string(),
    }
}

/// Whether the agent runs as a systemd service (systemd sets `INVOCATION_ID` for each).
fn under_systemd() -> bool {
    std::env::var_os("INVOCATION_ID").is_some()
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PolicyView {
    pub state: policy::State,
    pub refuse_at: f64,
    pub abort_at: f64,
    pub hysteresis: f64,
    pub largest_pid: Option<u32>,
    pub victim_pid: Option<u32>,
    pub abort_round: u32,
    pub shadow: bool,
    /// The last resort (`[policy] kill`): on, its line, how long an abort may go unobeyed.
    #[serde(default)]
    pub kill: bool,
    #[serde(default)]
    pub kill_at: f64,
    #[serde(default)]
    pub kill_after_ms: u64,
    /// The last resort has halted: three kills did not bring the group below `abort_at`.
    #[serde(default)]
    pub kills_halted: bool,
    /// While aborting: the memory over `abort_at` is held beyond the sampled processes while some listed processes
    /// could not be sampled; the last resort holds off (`group.unattributed_bytes`, `group.processes_unsampled`).
    #[serde(default)]
    pub unseen: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessView {
    pub pid: u32,
    /// Under `monitor run`, the `[[process]]` name of a launched process; else its command name.
    pub name: String,
    /// The command name (`/proc/<pid>/comm`).
    #[serde(default)]
    pub comm: String,
    pub role: ProcessRole,
    pub ppid: u32,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// What the process should do now (`serve` in shadow mode).
    pub action: Action,
    /// What the policy decided, enforced or not.
    pub decided: Action,
    pub requests_total: u64,
    pub responses_total: u64,
    pub responses_by_class: [u64; 5],
    pub accepts_total: u64,
    pub inflight: u64,
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
    pub restarts: u32,
    /// Kills the last resort sent to processes of this name (as `name` shows it) since the agent started.
    #[serde(default)]
    pub kills: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SampleView {
    pub seq: u64,
    pub unix_ms: u64,
}

impl From<Role> for ProcessRole {
    fn from(r: Role) -> ProcessRole {
        match r {
            Role::Master => ProcessRole::Master,
            Role::Worker => ProcessRole::Worker,
        }
    }
}

/// The status document of design.md, from one published sample.
pub fn status_view(p: &Published, t: &Thresholds) -> StatusView {
    let s = &p.snapshot;
    let d = &p.decision;
    let roles = infer_roles(&s.processes);
    StatusView {
        group: GroupView {
            cgroup: s.group.cgroup.clone(),
            version: s.group.version,
            usage_bytes: s.group.usage_bytes,
            shmem_bytes: s.group.shmem_bytes,
            limit_bytes: s.group.limit_bytes,
            limit_source: s.group.limit_source,
            ratio: d.ratio,
            error: p.error.clone(),
            oom_kills: s.group.oom_kills,
            wakeups: p.wakeups.armed.clone(),
            wakeups_off: p.wakeups.off.clone(),
            brake: p.brake.clone(),
            next_sample_ms: p.next_sample_ms,
            processes_listed: s.group.processes_listed,
            processes_sampled: s.group.processes_sampled,
            processes_unsampled: s.group.processes_unsampled(),
            unattributed_bytes: s.group.unattributed_bytes,
            oom_group: s.group.oom_group,
            kernel_oom_cost: Some(kernel_oom_cost(s.group.oom_group, &s.group.cgroup, false)),
        },
        policy: PolicyView {
            state: d.state,
            refuse_at: t.refuse_at,
            abort_at: t.abort_at,
            hysteresis: t.hysteresis,
            largest_pid: d.largest_pid,
            victim_pid: d.victim.map(|v| v.pid),
            abort_round: d.abort_round,
            shadow: d.shadow,
            kill: t.kill,
            kill_at: t.kill_at,
            kill_after_ms: t.kill_after_ms,
            kills_halted: d.kills_halted,
            unseen: d.unseen,
        },
        processes: s
            .processes
            .iter()
            .zip(roles)
            .map(|(proc, role)| {
                let id = ProcId { pid: proc.pid, start_ticks: proc.start_ticks };
                let t = &proc.traffic;
                ProcessView {
                    pid: proc.pid,
                    name: proc.name.clone(),
                    comm: proc.name.clone(),
                    role,
                    ppid: proc.ppid,
                    rss_bytes: proc.rss_bytes,
                    anon_bytes: proc.anon_bytes,
                    action: d.action_for(id),
                    decided: d.decided_for(id),
                    requests_total: t.requests_total,
                    responses_total: t.responses_total,
                    responses_by_class: t.responses_by_class,
                    accepts_total: t.accepts_total,
                    inflight: t.inflight,
                    latency_p50_us: t.latency_p50_us,
                    latency_p99_us: t.latency_p99_us,
                    restarts: 0,
                    kills: 0,
                }
            })
            .collect(),
        probes: p.probes.clone(),
        sample: SampleView { seq: s.seq, unix_ms: s.unix_ms },
        launcher: None,
        config: None,
        front_door: None,
        kills: Vec::new(),
    }
}

/// The status document with the launcher's view of its processes merged in.
fn full_status(st: &ApiState) -> StatusView {
    let p = st.latest.borrow().clone();
    let mut view = status_view(&p, &st.config.thresholds());
    view.config = st.reloads.as_ref().map(|r| r.status());
    view.group.kernel_oom_cost =
        Some(kernel_oom_cost(p.snapshot.group.oom_group, &p.snapshot.group.cgroup, under_systemd()));
    if let Some(launched) = st.launcher.as_ref().map(|f| f()) {
        // A launched process's name, role and restarts come from the launcher, not the process tree.
        for proc in &mut view.processes {
            if let Some(info) = launched.iter().find(|i| i.pid == Some(proc.pid)) {
                proc.name.clone_from(&info.name);
                proc.role = info.role.into();
                proc.restarts = info.restarts;
            }
        }
        view.launcher = Some(launched);
    }
    view.front_door = st.front_door.as_ref().map(|f| f());
    if let Some(book) = &st.kills {
        let counts = book.counts();
        for proc in &mut view.processes {
            // Kills are counted by the configured name under `monitor run`, by the process's own name otherwise.
            proc.kills = counts.by_name.get(&proc.name).copied().unwrap_or(0);
        }
        view.kills = book.recent().iter().map(KillView::from).collect();
    }
    view
}

/// Built on the status gate's thread, off the runtime that answers the probes.
async fn status(st: ApiState, gate: Arc<Gate>) -> Response {
    match gate.run(move || serde_json::to_vec(&full_status(&st))).await {
        Ok(Ok(body)) => ([(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("serializing the status: {e}")),
        Err(e @ PoolError::Busy(_)) => busy(&e),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

#[derive(Deserialize)]
struct DecisionQuery {
    pid: Option<String>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct DecisionView {
    pub pid: u32,
    pub action: Action,
    pub decided: Action,
    pub state: policy::State,
    pub shadow: bool,
}

async fn decision(State(st): State<ApiState>, Query(q): Query<DecisionQuery>) -> Response {
    let Some(raw) = q.pid else { return error(StatusCode::BAD_REQUEST, "missing ?pid=N".into()) };
    let Ok(pid) = raw.parse::<u32>() else {
        return error(StatusCode::BAD_REQUEST, format!("pid is not a number: {raw:?}"));
    };
    let p = st.latest.borrow().clone();
    let Some(proc) = p.snapshot.processes.iter().find(|x| x.pid == pid) else {
        return error(StatusCode::NOT_FOUND, format!("pid {pid} is not in the group"));
    };
    let id = ProcId { pid, start_ticks: proc.start_ticks };
    Json(DecisionView {
        pid,
        action: p.decision.action_for(id),
        decided: p.decision.decided_for(id),
        state: p.decision.state,
        shadow: p.decision.shadow,
    })
    .into_response()
}

/// How long a client has to send a request's head, counted from when the connection opens or falls idle between
/// requests: an idle or slow client (or a port scanner) holds no socket of the agent for longer.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections one client address may hold at once (loopback clients, the host's own admin and probes, are held
/// only to `[web] max_connections`).
pub const MAX_PER_IP: usize = 64;

/// What to do with a new connection, given those open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// There is room.
    Admit,
    /// There is room once this idle connection (the longest idle in the scope that is full) is closed.
    Evict(u64),
    /// Every connection in the full scope is in the middle of a request: the new one is closed.
    Refuse,
}

/// One open connection as [`admit`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct OpenConn {
    pub id: u64,
    pub ip: IpAddr,
    /// A request is being answered on it.
    pub busy: bool,
    /// When it last became idle (opened, or finished a request), in ms on any monotonic clock.
    pub idle_since_ms: u64,
}

/// Admission of a connection from `ip`: within `max_per_ip` for its address (unless it is a loopback address)
/// and `max_total` in all.
/// When a limit is reached, the longest-idle connection in that scope (one between requests, or that never sent
/// one) is closed to make room, as a server under connection pressure closes its idle keep-alive connections:
/// a crowd of idle clients can never keep a probe out, and a client at its own limit only displaces itself.
pub fn admit(open: &[OpenConn], ip: IpAddr, max_total: usize, max_per_ip: usize) -> Admission {
    let oldest_idle = |same_ip: bool| {
        open.iter()
            .filter(|c| !c.busy && (!same_ip || c.ip == ip))
            .min_by_key(|c| (c.idle_since_ms, c.id))
            .map_or(Admission::Refuse, |c| Admission::Evict(c.id))
    };
    if !ip.is_loopback() && open.iter().filter(|c| c.ip == ip).count() >= max_per_ip {
        oldest_idle(true)
    } else if open.len() >= max_total {
        oldest_idle(false)
    } else {
        Admission::Admit
    }
}

/// A connection's activity, shared between its task and the accept loop.
#[derive(Default)]
struct Activity {
    /// Requests being answered.
    busy: AtomicUsize,
    idle_since_ms: AtomicU64,
}

struct Registered {
    ip: IpAddr,
    activity: Arc<Activity>,
    close: Arc<tokio::sync::Notify>,
}

/// The open connections, by id.
#[derive(Default)]
struct Registry {
    conns: std::sync::Mutex<HashMap<u64, Registered>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Registered>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Marks a connection busy while a request is answered (also when the connection is dropped mid-request).
struct Busy {
    activity: Arc<Activity>,
    clock: Instant,
}

impl Busy {
    fn start(activity: Arc<Activity>, clock: Instant) -> Busy {
        activity.busy.fetch_add(1, Ordering::Relaxed);
        Busy { activity, clock }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.activity.idle_since_ms.store(self.clock.elapsed().as_millis() as u64, Ordering::Relaxed);
        self.activity.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Serves `app` on `listener` (HTTP/1.1) until `shutdown` resolves, then lets the open connections finish their
/// requests (5 s at most). Unlike `axum::serve`, a connection that sends no complete request head within
/// [`HEADER_TIMEOUT`] is closed, and connections are admitted by [`admit`]: at most [`MAX_PER_IP`] per client
/// address and `limits.max_connections` in all, the longest-idle one closed to make room for a new one. No more of
/// a connection's input is buffered than `limits.max_header_bytes` (hyper's default is 400 KiB a connection).
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: crate::config::WebConfig,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let registry = Arc::new(Registry::default());
    let clock = Instant::now();
    // Each connection's task holds a sender: the receiver ends when every task has.
    let (alive, mut all_done) = tokio::sync::mpsc::channel::<()>(1);
    let (stop, stopping) = watch::channel(false);
    let mut full = false;
    let mut next_id = 0u64;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size(limits.max_header_bytes);
    let max_connections = limits.max_connections;
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors or memory: wait for some to be freed rather than spin.
                    tracing::debug!("accepting an API connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let ip = peer.ip();
        next_id += 1;
        let id = next_id;
        let activity = Arc::new(Activity::default());
        activity.idle_since_ms.store(clock.elapsed().as_millis() as u64, Ordering::Relaxed);
        let close = Arc::new(tokio::sync::Notify::new());
        {
            let mut conns = registry.lock();
            let open: Vec<OpenConn> = conns
                .iter()
                .map(|(&id, c)| OpenConn {
                    id,
                    ip: c.ip,
                    busy: c.activity.busy.load(Ordering::Relaxed) > 0,
                    idle_since_ms: c.activity.idle_since_ms.load(Ordering::Relaxed),
                })
                .collect();
            match admit(&open, ip, max_connections, MAX_PER_IP) {
                Admission::Admit => full = false,
                Admission::Evict(old) => {
                    if let Some(c) = conns.remove(&old) {
                        c.close.notify_one();
                    }
                    tracing::debug!(%ip, "API connections at their limit: closed the longest-idle one");
                }
                Admission::Refuse => {
                    if !full {
                        tracing::warn!(%ip, "every API connection is answering a request: closing new ones");
                        full = true;
                    }
                    continue; // the stream is dropped: closed
                }
            }
            conns.insert(id, Registered { ip, activity: activity.clone(), close: close.clone() });
        }
        let (app, builder, mut stopping) = (app.clone(), builder.clone(), stopping.clone());
        let (registry, alive) = (registry.clone(), alive.clone());
        tokio::spawn(async move {
            let _alive = alive;
            let svc = hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
                let busy = Busy::start(activity.clone(), clock);
                let answer = app.clone().oneshot(req.map(axum::body::Body::new));
                async move {
                    let r = answer.await;
                    drop(busy);
                    r
                }
            });
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = close.notified() => {} // evicted: dropping the connection closes it
                _ = stopping.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            registry.lock().remove(&id);
        });
    }
    drop(listener);
    drop(alive);
    let _ = stop.send(true);
    if tokio::time::timeout(Duration::from_secs(5), all_done.recv()).await.is_err() {
        tracing::warn!("API connections still open 5 s after the shutdown: closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::State as PolicyState;
    use crate::snapshot::ProcSample;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn app() -> Router {
        let (_tx, latest) = watch::channel(Arc::new(Published::test(PolicyState::Normal)));
        router(ApiState {
            latest,
            config: Live::fixed(Default::default()),
            reloads: None,
            launcher: None,
            front_door: None,
            kills: None,
        })
    }

    async fn call(method: &str, uri: &str) -> (StatusCode, String) {
        let req = axum::http::Request::builder().method(method).uri(uri).body(axum::body::Body::empty());
        let resp = app().oneshot(req.expect("a request")).await.expect("infallible");
        let code = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    #[test]
    fn the_group_shows_oom_kills_wakeups_brake_and_interval() {
        let mut p = Published::test(PolicyState::Normal);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert_eq!(v["group"]["oom_kills"], serde_json::Value::Null, "not counted: null");
        assert_eq!(v["group"]["wakeups"], serde_json::json!([]));
        assert_eq!(v["group"]["brake"], serde_json::Value::Null);
        p = p.reacting(2, &["thresholds"], ("pressure", "cgroup v2 only"), 1_030_792_151, 25);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        let g = &v["group"];
        assert_eq!(g["oom_kills"], 2);
        assert_eq!(g["wakeups"], serde_json::json!(["thresholds"]));
        assert_eq!(g["wakeups_off"], serde_json::json!([{"source": "pressure", "reason": "cgroup v2 only"}]));
        assert_eq!((g["brake"]["at"].as_f64(), g["brake"]["high_bytes"].as_u64()), (Some(0.96), Some(1_030_792_151)));
        assert_eq!(g["next_sample_ms"], 25);
        // `monitor status` reads the document back, and reads one from an agent that has none of these fields.
        let back: StatusView = serde_json::from_value(v.clone()).expect("read back");
        assert_eq!(back.group.oom_kills, Some(2));
        let mut old = v;
        for k in ["oom_kills", "wakeups", "wakeups_off", "brake", "next_sample_ms"] {
            old["group"].as_object_mut().map(|g| g.remove(k));
        }
        let old: StatusView = serde_json::from_value(old).expect("an older agent's document");
        assert_eq!((old.group.oom_kills, old.group.wakeups.len(), old.group.brake.is_none()), (None, 0, true));
    }

    /// The enums of the status document serialize to the names the contract gives (design.md), and the
    /// launcher's view of a process replaces the inferred role.
    #[test]
    fn the_status_names_states_roles_and_sources_as_before() {
        use crate::launcher::{LauncherInfo, Phase};
        use crate::snapshot::Traffic;
        let proc = |pid: u32, ppid: u32| ProcSample {
            pid,
            name: format!("p{pid}"),
            start_ticks: u64::from(pid),
            ppid,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Traffic::default(),
        };
        let mut p = Published::test(PolicyState::Aborting);
        p.snapshot.group.version = CgroupVersion::V2;
        p.snapshot.group.limit_source = LimitSource::Host;
        p.snapshot.processes = vec![proc(10, 1), proc(11, 10), proc(20, 1)];
        p.decision.largest_pid = Some(11);
        p.decision.victim = Some(ProcId { pid: 11, start_ticks: 11 });
        p.probes = ProbeStatus::on(crate::config::Hooks::RawSysExit, Some(crate::probes::CloseHook::RawSysEnter));
        let launched = LauncherInfo {
            name: "tx1".into(),
            role: Role::Worker,
            port: 3002,
            pid: Some(20),
            state: Phase::BackingOff,
            next_retry_unix_ms: None,
            restarts: 3,
        };
        let (_tx, latest) = watch::channel(Arc::new(p));
        let st = ApiState {
            latest,
            config: Live::fixed(Default::default()),
            reloads: Some(Arc::new(Reloads::new(Some("/etc/monitor/run.toml".into())))),
            launcher: Some(Arc::new(move || vec![launched.clone()])),
            front_door: Some(Arc::new(|| FrontDoorView { shed_total: 7, forwarded_total: 2 })),
            kills: None,
        };
        let v = serde_json::to_value(full_status(&st)).expect("json");
        assert_eq!((v["group"]["version"].as_str(), v["group"]["limit_source"].as_str()), (Some("v2"), Some("host")));
        assert_eq!(v["front_door"], serde_json::json!({"shed_total": 7, "forwarded_total": 2}));
        assert_eq!(v["policy"]["state"], "aborting");
        let procs = v["processes"].as_array().expect("processes");
        let field = |k: &str| procs.iter().map(|p| p[k].as_str().unwrap_or("?").to_string()).collect::<Vec<_>>();
        assert_eq!(field("role"), ["master", "worker", "worker"]);
        // The launched process is named as configured; every process keeps its command name in `comm`.
        assert_eq!(
            field("name"),
            [procs[0]["comm"].as_str().unwrap_or("-"), procs[1]["comm"].as_str().unwrap_or("-"), "tx1"]
        );
        assert_ne!(procs[2]["comm"], "tx1");
        assert_eq!(field("action"), ["refuse", "abort", "refuse"]);
        assert_eq!(field("decided"), ["refuse", "abort", "refuse"]);
        assert_eq!((&v["probes"]["hooks"], &v["probes"]["close"]), (&"raw_sys_exit".into(), &"raw_sys_enter".into()));
        assert_eq!(
            (v["launcher"][0]["role"].as_str(), v["launcher"][0]["state"].as_str()),
            (Some("worker"), Some("backing-off"))
        );
        assert_eq!(v["config"]["file"], "/etc/monitor/run.toml");
        assert!(v["config"]["loaded_at"].as_u64().is_some_and(|t| t > 0), "{}", v["config"]);
        assert!(v["config"]["last_reload"].is_null() && v["config"]["error"].is_null(), "no reload yet");
        let back: StatusView = serde_json::from_value(v).expect("read back");
        assert_eq!(back.processes[2].role, ProcessRole::Worker);
        let inferred = infer_roles(&[proc(10, 1), proc(11, 10), proc(20, 1)]);
        assert_eq!(inferred, [ProcessRole::Master, ProcessRole::Worker, ProcessRole::Process]);
    }

    #[test]
    fn the_cost_of_a_kernel_oom_kill_in_words() {
        use std::path::Path;
        let unit = Path::new("/system.slice/app.service");
        assert_eq!(kernel_oom_cost(Some(false), unit, false), "one process");
        assert_eq!(kernel_oom_cost(None, unit, false), "one process", "v1: the kernel kills one");
        assert_eq!(kernel_oom_cost(Some(true), unit, false), "whole group");
        let whole_unit = "whole unit (systemd OOMPolicy=stop unless the unit sets otherwise)";
        assert_eq!(kernel_oom_cost(Some(false), unit, true), whole_unit);
        assert_eq!(kernel_oom_cost(Some(false), &unit.join("workers"), true), whole_unit, "inside the unit too");
        assert_eq!(kernel_oom_cost(Some(true), Path::new("/user.slice/x.scope"), true), "whole group");
        let mut p = Published::test(PolicyState::Normal);
        p.snapshot.group.oom_group = Some(true);
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert_eq!(
            (v["group"]["oom_group"].as_bool(), v["group"]["kernel_oom_cost"].as_str()),
            (Some(true), Some("whole group"))
        );
        p.snapshot.group.oom_group = None;
        let v = serde_json::to_value(status_view(&p, &Thresholds::default())).expect("json");
        assert!(v["group"]["oom_group"].is_null(), "v1: null");
    }

    #[test]
    fn the_status_shows_the_last_resort_and_its_kills() {
        use crate::snapshot::Traffic;
        let mut p = Published::test(PolicyState::Aborting);
        p.snapshot.group.shmem_bytes = 8192;
        p.decision.kills_halted = true;
        let proc = |pid: u32, name: &str| ProcSample {
            pid,
            name: name.into(),
            start_ticks: u64::from(pid),
            ppid: 1,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Traffic::default(),
        };
        p.snapshot.processes = vec![proc(10, "node"), proc(11, "php")];
        let book = Arc::new(KillBook::default());
        let rec = |pid: u32, enforced: bool| KillRecord {
            rss_bytes: 300,
            anon_bytes: 280,
            ratio: 0.97,
            ..KillRecord::example(pid, "node", enforced)
        };
        book.record(rec(20, true));
        book.record(rec(21, true));
        book.record(rec(22, false));
        let (_tx, latest) = watch::channel(Arc::new(p));
        let st = ApiState {
            latest,
            config: Live::fixed(Default::default()),
            reloads: None,
            launcher: None,
            front_door: None,
            kills: Some(book),
        };
        let v = serde_json::to_value(full_status(&st)).expect("json");
        assert_eq!(v["group"]["shmem_bytes"], 8192);
        let pol = &v["policy"];
        assert_eq!((pol["kill"].as_bool(), pol["kill_at"].as_f64()), (Some(true), Some(0.97)));
        assert_eq!((pol["kill_after_ms"].as_u64(), pol["kills_halted"].as_bool()), (Some(2000), Some(true)));
        let kills: Vec<u64> =
            v["processes"].as_array().into_iter().flatten().filter_map(|p| p["kills"].as_u64()).collect();
        assert_eq!(kills, [2, 0], "sent kills by command name; the shadow one is not sent");
        assert_eq!(v["kills"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            (v["kills"][0]["why"].as_str(), v["kills"][2]["enforced"].as_bool()),
            (Some("over_kill_at"), Some(false))
        );
        let back: StatusView = serde_json::from_value(v.clone()).expect("read back");
        assert_eq!(back.kills[1].pid, 21);
        // An older agent's document has none of these: read with defaults.
        let mut old = v;
        old.as_object_mut().map(|o| o.remove("kills"));
        for k in ["kill", "kill_at", "kill_after_ms", "kills_halted"] {
            old["policy"].as_object_mut().map(|o| o.remove(k));
        }
        old["group"].as_object_mut().map(|o| o.remove("shmem_bytes"));
        let old: StatusView = serde_json::from_value(old).expect("an older agent's document");
        assert!(old.kills.is_empty() && !old.policy.kill && !old.policy.kills_halted);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn unknown_paths_and_methods_get_a_json_reason() {
        let (code, body) = call("GET", "/api/v1/nope?x=1").await;
        assert_eq!((code, body.as_str()), (StatusCode::NOT_FOUND, r#"{"error":"no such path: /api/v1/nope"}"#));
        let (code, body) = call("POST", "/api/v1/status").await;
        assert_eq!(code, StatusCode::METHOD_NOT_ALLOWED);
        assert!(body.contains("POST is not served on /api/v1/status"), "{body}");
        let (code, body) = call("GET", "/api/v1/decision?pid=-1").await;
        assert_eq!((code, body.as_str()), (StatusCode::BAD_REQUEST, r#"{"error":"pid is not a number: \"-1\""}"#));
    }

    #[test]
    fn health_is_degraded_while_the_group_is_unreadable_or_the_sampler_stale() {
        let mut p = Published::test(PolicyState::Normal);
        let every = Duration::from_millis(100);
        assert_eq!(health(&p, Duration::from_millis(150), every), Ok(()));
        assert_eq!(health(&p, STALE_FLOOR, every), Ok(()), "the floor holds for short intervals");
        let stale = health(&p, Duration::from_millis(2_500), every).expect_err("stale");
        assert!(stale.contains("stale") && stale.contains("2500 ms"), "{stale}");
        let slow = Duration::from_secs(60);
        assert_eq!(health(&p, Duration::from_secs(300), slow), Ok(()), "ten intervals of a slow sampler");
        assert!(health(&p, Duration::from_secs(601), slow).is_err());
        p.error = Some("the cgroup /sys/fs/cgroup/memory/g does not exist".into());
        let gone = health(&p, Duration::ZERO, every).expect_err("unreadable");
        assert!(gone.starts_with("degraded: the group cannot be read:") && gone.contains("does not exist"), "{gone}");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_status_is_built_off_the_runtime_and_read_back() {
        let (code, body) = call("GET", "/api/v1/status").await;
        assert_eq!(code, StatusCode::OK, "{body}");
        let v: StatusView = serde_json::from_str(&body).expect("a status document");
        assert_eq!(v.policy.state, crate::policy::State::Normal);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn healthz_says_why_and_livez_stays_alive() {
        let (code, body) = call("GET", "/livez").await;
        assert_eq!((code, body.as_str()), (StatusCode::OK, "the process is alive\n"));
        let mut p = Published::test(PolicyState::Normal);
        p.error = Some("gone".into());
        let (_tx, latest) = watch::channel(Arc::new(p));
        let app = router(ApiState {
            latest,
            config: Live::fixed(Default::default()),
            reloads: None,
            launcher: None,
            front_door: None,
            kills: None,
        });
        let req = axum::http::Request::builder().uri("/healthz").body(axum::body::Body::empty()).expect("a request");
        let resp = app.oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&body), "degraded: the group cannot be read: gone\n");
    }

    fn conn(id: u64, ip: [u8; 4], busy: bool, idle_since_ms: u64) -> OpenConn {
        OpenConn { id, ip: IpAddr::from(ip), busy, idle_since_ms }
    }

    #[test]
    fn a_full_scope_gives_up_its_longest_idle_connection() {
        let me = IpAddr::from([10, 0, 0, 1]);
        assert_eq!(admit(&[], me, 3, 2), Admission::Admit);
        // At the per-address limit: the address's own longest-idle connection, never another client's.
        let open =
            [conn(1, [10, 0, 0, 2], false, 0), conn(2, [10, 0, 0, 1], false, 50), conn(3, [10, 0, 0, 1], false, 20)];
        assert_eq!(admit(&open, me, 10, 2), Admission::Evict(3));
        // At the total limit: the longest idle of all; busy ones are never closed.
        let open =
            [conn(1, [10, 0, 0, 2], true, 0), conn(2, [10, 0, 0, 3], false, 50), conn(3, [10, 0, 0, 4], false, 20)];
        assert_eq!(admit(&open, me, 3, 2), Admission::Evict(3));
        let busy = [conn(1, [10, 0, 0, 2], true, 0), conn(2, [10, 0, 0, 3], true, 0)];
        assert_eq!(admit(&busy, me, 2, 2), Admission::Refuse);
        let mine_busy =
            [conn(1, [10, 0, 0, 1], true, 0), conn(2, [10, 0, 0, 1], true, 0), conn(3, [10, 0, 0, 2], false, 0)];
        assert_eq!(admit(&mine_busy, me, 10, 2), Admission::Refuse, "a client busy at its limit waits its turn");
        // The host's own clients are held to the total only.
        let local = [conn(1, [127, 0, 0, 1], false, 0), conn(2, [127, 0, 0, 1], false, 0)];
        assert_eq!(admit(&local, IpAddr::from([127, 0, 0, 1]), 10, 2), Admission::Admit);
        assert_eq!(admit(&local, IpAddr::from([127, 0, 0, 1]), 2, 2), Admission::Evict(1));
        // Ties on the idle time go to the oldest connection.
        let ties = [conn(7, [10, 0, 0, 1], false, 5), conn(4, [10, 0, 0, 1], false, 5)];
        assert_eq!(admit(&ties, me, 10, 2), Admission::Evict(4));
    }
}
