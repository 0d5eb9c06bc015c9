//! The agent's HTTP API: `GET /api/v1/status`, `GET /api/v1/decision?pid=N`, `GET /healthz`. Reads only the
//! latest published sample; never calls back into the sampler.

use crate::brake::BrakeStatus;
use crate::launcher::LauncherInfo;
use crate::policy::{Action, ProcId, Thresholds};
use crate::sampler::{ProbeStatus, Published};
use crate::snapshot::{CgroupVersion, LimitSource, ProcSample};
use crate::wakeup::WakeupOff;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the routes read.
#[derive(Clone)]
pub struct ApiState {
    pub latest: watch::Receiver<Arc<Published>>,
    pub thresholds: Thresholds,
    /// Under `monitor run`: the launched processes (role from the config, state, restarts). None for `agent`.
    pub launcher: Option<Arc<dyn Fn() -> Vec<LauncherInfo> + Send + Sync>>,
}

/// The agent's routes.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/v1/status", get(status))
        .route("/api/v1/decision", get(decision))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Any path no route serves (also under the routers merged into this one): 404 with a JSON body naming it.
async fn not_found(uri: axum::http::Uri) -> Response {
    error(StatusCode::NOT_FOUND, format!("no such path: {}", uri.path()))
}

/// A known path asked with a method it does not take: 405 with a JSON body (GET and HEAD are what it serves).
pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(StatusCode::METHOD_NOT_ALLOWED, format!("{method} is not served on {}: use GET", uri.path()))
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
}

#[derive(Debug, Serialize, Deserialize)]
pub struct GroupView {
    pub cgroup: PathBuf,
    pub version: String,
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    pub limit_source: String,
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
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PolicyView {
    pub state: String,
    pub refuse_at: f64,
    pub abort_at: f64,
    pub hysteresis: f64,
    pub largest_pid: Option<u32>,
    pub victim_pid: Option<u32>,
    pub abort_round: u32,
    pub shadow: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct ProcessView {
    pub pid: u32,
    pub name: String,
    pub role: String,
    pub ppid: u32,
    pub rss_bytes: u64,
    pub anon_bytes: u64,
    /// What the process should do now (`serve` in shadow mode).
    pub action: String,
    /// What the policy decided, enforced or not.
    pub decided: String,
    pub requests_total: u64,
    pub responses_total: u64,
    pub responses_by_class: [u64; 5],
    pub accepts_total: u64,
    pub inflight: u64,
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
    pub restarts: u32,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct SampleView {
    pub seq: u64,
    pub unix_ms: u64,
}

/// Roles inferred from the process tree: a process whose parent is outside the group and that has children in
/// it is the `master`; a process whose parent is in the group is a `worker`; any other is a `process`.
pub fn infer_roles(procs: &[ProcSample]) -> Vec<&'static str> {
    let in_group = |pid: u32| procs.iter().any(|p| p.pid == pid);
    procs
        .iter()
        .map(|p| {
            if in_group(p.ppid) {
                "worker"
            } else if procs.iter().any(|c| c.ppid == p.pid) {
                "master"
            } else {
                "process"
            }
        })
        .collect()
}

fn version(v: CgroupVersion) -> &'static str {
    match v {
        CgroupVersion::V1 => "v1",
        CgroupVersion::V2 => "v2",
    }
}

fn source(s: LimitSource) -> &'static str {
    match s {
        LimitSource::Cgroup => "cgroup",
        LimitSource::Host => "host",
        LimitSource::Config => "config",
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
            version: version(s.group.version).into(),
            usage_bytes: s.group.usage_bytes,
            limit_bytes: s.group.limit_bytes,
            limit_source: source(s.group.limit_source).into(),
            ratio: d.ratio,
            error: p.error.clone(),
            oom_kills: s.group.oom_kills,
            wakeups: p.wakeups.armed.clone(),
            wakeups_off: p.wakeups.off.clone(),
            brake: p.brake.clone(),
            next_sample_ms: p.next_sample_ms,
            processes_listed: s.group.processes_listed,
            processes_sampled: s.group.processes_sampled,
        },
        policy: PolicyView {
            state: d.state.as_str().into(),
            refuse_at: t.refuse_at,
            abort_at: t.abort_at,
            hysteresis: t.hysteresis,
            largest_pid: d.largest_pid,
            victim_pid: d.victim.map(|v| v.pid),
            abort_round: d.abort_round,
            shadow: d.shadow,
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
                    role: role.into(),
                    ppid: proc.ppid,
                    rss_bytes: proc.rss_bytes,
                    anon_bytes: proc.anon_bytes,
                    action: d.action_for(id).as_str().into(),
                    decided: d.decided_for(id).as_str().into(),
                    requests_total: t.requests_total,
                    responses_total: t.responses_total,
                    responses_by_class: t.responses_by_class,
                    accepts_total: t.accepts_total,
                    inflight: t.inflight,
                    latency_p50_us: t.latency_p50_us,
                    latency_p99_us: t.latency_p99_us,
                    restarts: 0,
                }
            })
            .collect(),
        probes: p.probes.clone(),
        sample: SampleView { seq: s.seq, unix_ms: s.unix_ms },
        launcher: None,
    }
}

async fn status(State(st): State<ApiState>) -> Json<StatusView> {
    let p = st.latest.borrow().clone();
    let mut view = status_view(&p, &st.thresholds);
    if let Some(launched) = st.launcher.as_ref().map(|f| f()) {
        // A launched process's role and restarts come from the launcher, not the process tree.
        for proc in &mut view.processes {
            if let Some(info) = launched.iter().find(|i| i.pid == Some(proc.pid)) {
                proc.role.clone_from(&info.role);
                proc.restarts = info.restarts;
            }
        }
        view.launcher = Some(launched);
    }
    Json(view)
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
    pub state: String,
    pub shadow: bool,
}

fn error(code: StatusCode, msg: String) -> Response {
    (code, Json(serde_json::json!({ "error": msg }))).into_response()
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
        state: p.decision.state.as_str().into(),
        shadow: p.decision.shadow,
    })
    .into_response()
}

/// How long a client has to send a request's head, counted from when the connection opens or falls idle between
/// requests: an idle or slow client (or a port scanner) holds no socket of the agent for longer.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; past it new ones are closed at once (said once until there is room again), so that
/// clients can never take the file descriptors the sampler needs.
pub const MAX_CONNECTIONS: usize = 256;

/// Serves `app` on `listener` (HTTP/1.1) until `shutdown` resolves, then lets the open connections finish their
/// requests (5 s at most). Unlike `axum::serve`, a connection that sends no complete request head within
/// [`HEADER_TIMEOUT`] is closed, and at most [`MAX_CONNECTIONS`] are open at once.
pub async fn serve(listener: tokio::net::TcpListener, app: Router, shutdown: impl std::future::Future<Output = ()>) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use tower::ServiceExt;
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let (stop, stopping) = watch::channel(false);
    let mut full = false;
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(HEADER_TIMEOUT);
    let builder = Arc::new(builder);
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors or memory: wait for some to be freed rather than spin.
                    tracing::debug!("accepting an API connection: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if !full {
                tracing::warn!("the API has {MAX_CONNECTIONS} connections open: closing new ones until one ends");
                full = true;
            }
            continue; // the stream is dropped: closed
        };
        full = false;
        let (app, builder, mut stopping) = (app.clone(), builder.clone(), stopping.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let svc = hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
                app.clone().oneshot(req.map(axum::body::Body::new))
            });
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stopping.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
        });
    }
    drop(listener);
    let _ = stop.send(true);
    let all = MAX_CONNECTIONS as u32;
    if tokio::time::timeout(Duration::from_secs(5), slots.acquire_many(all)).await.is_err() {
        tracing::warn!("API connections still open 5 s after the shutdown: closed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::State as PolicyState;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn app() -> Router {
        let (_tx, latest) = watch::channel(Arc::new(Published::test(PolicyState::Normal)));
        router(ApiState { latest, thresholds: Thresholds::default(), launcher: None })
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
}
