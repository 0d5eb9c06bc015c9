//! The agent's HTTP API: `GET /api/v1/status`, `GET /api/v1/decision?pid=N`, `GET /healthz` (the sampler's
//! health: 503 with the reason while the group cannot be read or no sample came for a while), `GET /livez` (the
//! process answers). Reads only the latest published sample; never calls back into the sampler. [`serve`] bounds
//! the connections a client can hold, so a crowd of idle ones never locks out a probe; the status document is built
//! on a thread of its own, a bounded number at a time, so a crowd asking for it never delays a probe either.

mod serve;

pub use serve::{serve, HEADER_TIMEOUT, MAX_PER_IP};

use crate::base::reply::{busy, error, method_not_allowed};
use crate::config::live::Reloads;
use crate::decision::policy::{self, Action, ProcId};
use crate::feed::Published;
use crate::guard::KillBook;
use crate::view::{kernel_oom_cost, status_view, FrontDoorView, KillView, StatusView};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use web::pool::{Gate, PoolError};

/// What the routes read.
#[derive(Clone)]
pub(crate) struct ApiState {
    /// The latest sample, with the policy's lines it was decided with and the interval it was taken at (after
    /// [`STALE_INTERVALS`] of which without a sample `/healthz` calls the sampler stale).
    pub latest: watch::Receiver<Arc<Published>>,
    /// The config's reloads, shown as the status's `config` object (None: left out).
    pub reloads: Option<Arc<Reloads>>,
    /// Under `monitor run`: the launched processes (role from the config, state, restarts) and the front door's
    /// counts. None for `agent`.
    pub door: Option<crate::feed::Door>,
    /// The last resort's kills: the recent ones and the counts by name (None: no kills shown).
    pub kills: Option<Arc<KillBook>>,
}

/// Intervals without a sample after which `/healthz` calls the sampler stale (pacing only ever samples sooner
/// than the configured interval, so a healthy sampler is never this late).
pub(crate) const STALE_INTERVALS: u32 = 10;
/// The staleness bound's floor, whatever the interval: a scheduling hiccup of a loaded host is not an outage.
pub(crate) const STALE_FLOOR: Duration = Duration::from_secs(2);

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
    let interval = Duration::from_millis(p.interval_ms);
    match health(&p, p.wake.at.elapsed(), interval) {
        Ok(()) => "ok\n".into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")).into_response(),
    }
}

/// Threads that build `/api/v1/status` (hundreds of processes make it milliseconds of work), at nice 10.
pub(crate) const STATUS_THREADS: usize = 1;
/// Status requests waiting or being built past which the answer is 503 with `Retry-After`.
pub(crate) const STATUS_QUEUED: usize = 16;

/// The agent's routes.
pub(crate) fn router(state: ApiState) -> Router {
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

/// Whether the agent runs as a systemd service (systemd sets `INVOCATION_ID` for each).
fn under_systemd() -> bool {
    std::env::var_os("INVOCATION_ID").is_some()
}

/// The status document with the launcher's view of its processes merged in.
fn full_status(st: &ApiState) -> StatusView {
    let p = st.latest.borrow().clone();
    let mut view = status_view(&p, &p.thresholds);
    view.config = st.reloads.as_ref().map(|r| r.status());
    view.group.kernel_oom_cost =
        Some(kernel_oom_cost(p.snapshot.group.oom_group, &p.snapshot.group.cgroup, under_systemd()));
    if let Some(launched) = st.door.as_ref().map(|d| d.launched()) {
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
    view.front_door =
        st.door.as_ref().map(|d| FrontDoorView { shed_total: d.shed_total(), forwarded_total: d.forwarded_total() });
    if let Some(book) = &st.kills {
        let counts = book.counts();
        for proc in &mut view.processes {
            // Kills are counted by the configured name under `monitor run`, by the process's own name otherwise.
            proc.kills = counts.by_name.get(&proc.name).copied().unwrap_or(0);
        }
        view.kills = book.recent().iter().map(KillView::from).collect();
        view.recycles = book.recent_recycles();
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
pub(crate) struct DecisionView {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Role;
    use crate::decision::policy::{State as PolicyState, Thresholds};
    use crate::decision::snapshot::ProcSample;
    use crate::decision::snapshot::{infer_roles, CgroupVersion, LimitSource, ProcessRole};
    use crate::feed::ProbeStatus;
    use crate::guard::KillRecord;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    fn app() -> Router {
        let (_tx, latest) = watch::channel(Arc::new(Published::test(PolicyState::Normal)));
        router(ApiState { latest, reloads: None, door: None, kills: None })
    }

    async fn call(method: &str, uri: &str) -> (StatusCode, String) {
        let req = axum::http::Request::builder().method(method).uri(uri).body(axum::body::Body::empty());
        let resp = app().oneshot(req.expect("a request")).await.expect("infallible");
        let code = resp.status();
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        (code, String::from_utf8_lossy(&body).into_owned())
    }

    /// The enums of the status document serialize to the names the contract gives (docs/api.md), and the
    /// launcher's view of a process replaces the inferred role.
    #[test]
    fn the_status_names_states_roles_and_sources_as_before() {
        use crate::decision::snapshot::Traffic;
        use crate::feed::{LauncherInfo, Phase};
        let proc = |pid: u32, ppid: u32| ProcSample {
            pid,
            name: format!("p{pid}"),
            comm: format!("p{pid}"),
            start_ticks: u64::from(pid),
            ppid,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Traffic::default(),
        };
        let mut p = Published::test(PolicyState::Aborting);
        p.snapshot.group.version = CgroupVersion::V2;
        p.snapshot.group.limit_source = LimitSource::Host;
        p.snapshot.processes = vec![proc(10, 1), proc(11, 10), proc(20, 1)].into();
        p.decision.largest_pid = Some(11);
        p.decision.victim = Some(ProcId { pid: 11, start_ticks: 11 });
        p.probes =
            ProbeStatus::on(crate::config::Hooks::RawSysExit, Some(crate::sources::probes::CloseHook::RawSysEnter));
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
            reloads: Some(Arc::new(Reloads::new(Some("/etc/monitor/run.toml".into())))),
            door: Some(crate::feed::Door::new(move || vec![launched.clone()], {
                let counts = crate::feed::DoorCounts::default();
                counts.shed.store(7, std::sync::atomic::Ordering::Relaxed);
                counts.forwarded.store(2, std::sync::atomic::Ordering::Relaxed);
                Arc::new(counts)
            })),
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
    fn the_status_shows_the_last_resort_and_its_kills() {
        use crate::decision::snapshot::Traffic;
        let mut p = Published::test(PolicyState::Aborting);
        p.snapshot.group.shmem_bytes = 8192;
        p.decision.kills_halted = true;
        let proc = |pid: u32, name: &str| ProcSample {
            pid,
            name: name.into(),
            comm: name.into(),
            start_ticks: u64::from(pid),
            ppid: 1,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Traffic::default(),
        };
        p.snapshot.processes = vec![proc(10, "node"), proc(11, "php")].into();
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
        let st = ApiState { latest, reloads: None, door: None, kills: Some(book) };
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

    /// The status shows the lines the sample was decided with, and /healthz judges it by the interval it was taken
    /// at: a reload that the sampler has not applied yet changes neither.
    #[test]
    fn the_status_and_health_read_the_lines_and_interval_of_the_sample() {
        let mut p = Published::test(PolicyState::Refusing);
        p.thresholds = Arc::new(Thresholds { refuse_at: 0.6, abort_at: 0.7, ..Thresholds::default() });
        p.interval_ms = 2_000;
        let (_tx, latest) = watch::channel(Arc::new(p));
        let st = ApiState { latest, reloads: None, door: None, kills: None };
        let v = serde_json::to_value(full_status(&st)).expect("json");
        assert_eq!((v["policy"]["refuse_at"].as_f64(), v["policy"]["abort_at"].as_f64()), (Some(0.6), Some(0.7)));
        let p = st.latest.borrow().clone();
        let interval = Duration::from_millis(p.interval_ms);
        assert_eq!(health(&p, Duration::from_secs(19), interval), Ok(()), "ten intervals of 2 s are 20 s");
        assert!(health(&p, Duration::from_secs(21), interval).is_err());
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
        assert_eq!(v.policy.state, crate::decision::policy::State::Normal);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn healthz_says_why_and_livez_stays_alive() {
        let (code, body) = call("GET", "/livez").await;
        assert_eq!((code, body.as_str()), (StatusCode::OK, "the process is alive\n"));
        let mut p = Published::test(PolicyState::Normal);
        p.error = Some("gone".into());
        let (_tx, latest) = watch::channel(Arc::new(p));
        let app = router(ApiState { latest, reloads: None, door: None, kills: None });
        let req = axum::http::Request::builder().uri("/healthz").body(axum::body::Body::empty()).expect("a request");
        let resp = app.oneshot(req).await.expect("infallible");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = resp.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&body), "degraded: the group cannot be read: gone\n");
    }
}
