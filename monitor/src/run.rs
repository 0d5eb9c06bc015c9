//! `monitor run --config FILE`: the agent, the launcher and the front door in one process. Config -> the group's
//! cgroup (created with its limit when asked) -> sampler -> launcher (master, health, workers) -> proxy on
//! `[proxy] listen` + agent API on `[web] listen`; SIGTERM/SIGINT drains and stops it all, exit 0.

use crate::api::{self, ApiState};
use crate::cgroup::{self, CgroupError, Mounts};
use crate::config::{Config, ConfigError};
use crate::launcher::{self, LaunchError, Launcher};
use crate::proxy::{self, Proxy, ProxyError};
use crate::sampler;
use crate::snapshot::CgroupVersion;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Why `monitor run` could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{0}: no [[process]] to run")]
    NoProcesses(PathBuf),
    #[error(transparent)]
    Cgroup(#[from] CgroupError),
    #[error("{what} {path}: {source}")]
    CgroupSetup { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Launch(#[from] LaunchError),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// How long the end of the group waits for its last processes to die, and for its removal.
const GROUP_END: Duration = Duration::from_secs(10);

/// The end of the group, when dropped (after a drain, or on an error once started): when the processes were
/// launched into a cgroup of their own (not `auto`), every process still in it (a server's own children, a
/// shell's, whatever joined) is killed, then the cgroup `monitor run` created is removed, both bounded by
/// [`GROUP_END`]. With `auto` the group is the cgroup monitor itself runs in: only what its processes left behind
/// is ended (`Descendants`, in `run`), the rest is its service manager's.
struct GroupEnd {
    /// The group the processes are launched into (not `auto`).
    group: Option<PathBuf>,
    /// Set once the first process is started: a `monitor run` that stops before that (a port already taken by
    /// another instance) leaves a group it did not create alone.
    launched: Arc<AtomicBool>,
    /// The group's cgroup, when `monitor run` created it.
    created: Option<PathBuf>,
}

impl Drop for GroupEnd {
    fn drop(&mut self) {
        let ours = self.launched.load(Ordering::Relaxed) || self.created.is_some();
        if let Some(dir) = self.group.take().filter(|_| ours) {
            match cgroup::kill::kill_all(&dir, GROUP_END) {
                Ok(k) if k.left.is_empty() => {
                    if k.signalled > 0 || k.cgroup_kill {
                        tracing::info!(cgroup = %dir.display(), killed = k.signalled, cgroup_kill = k.cgroup_kill,
                            "ended the processes left in the group");
                    }
                }
                Ok(k) => tracing::error!(cgroup = %dir.display(), left = ?k.left,
                    "processes still in the group {} s after SIGKILL", GROUP_END.as_secs()),
                Err(e) => tracing::error!("cannot end the processes left in the group: {e}"),
            }
        }
        if let Some(dir) = self.created.take() {
            match cgroup::kill::remove_tree(&dir, GROUP_END) {
                Ok(()) => tracing::info!(cgroup = %dir.display(), "removed the group's cgroup"),
                Err(e) => tracing::error!("could not remove the group's cgroup: {e}"),
            }
        }
    }
}

/// Finds (and when asked creates and limits) the group's cgroup.
fn prepare_group(cfg: &Config) -> Result<(cgroup::Group, GroupEnd), RunError> {
    let mounts = Mounts::read().map_err(io("reading /proc/self/mountinfo"))?;
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let spec = &cfg.group.cgroup;
    let mut created = GroupEnd { group: None, launched: Arc::new(AtomicBool::new(false)), created: None };
    if cfg.group.create && spec != "auto" {
        let g = cgroup::locate(spec, &mounts, &own)?;
        if !g.dir.exists() {
            std::fs::create_dir(&g.dir).map_err(|source| RunError::CgroupSetup {
                what: "creating",
                path: g.dir.clone(),
                source,
            })?;
            tracing::info!(cgroup = %g.dir.display(), "created the group's cgroup");
            created.created = Some(g.dir.clone());
        }
    }
    let group = cgroup::resolve(spec, &mounts, &own)?;
    if let Some(limit) = cfg.group.limit_bytes {
        let file = match group.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        };
        let path = group.dir.join(file);
        std::fs::write(&path, limit.to_string()).map_err(|source| RunError::CgroupSetup {
            what: "setting the limit in",
            path,
            source,
        })?;
    }
    Ok((group, created))
}

/// Resolves on the first SIGTERM or SIGINT.
async fn signalled() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: draining"),
                _ = int.recv() => tracing::info!("SIGINT: draining"),
            }
        }
        _ => {
            tracing::error!("cannot watch SIGTERM/SIGINT");
            std::future::pending::<()>().await
        }
    }
}

/// Stops the sampler thread and waits for it, then for the history to write its last minute.
async fn stop_sampling(
    stop: &AtomicBool,
    sampler: std::thread::JoinHandle<()>,
    history: crate::history::HistoryHandle,
) {
    stop.store(true, Ordering::Relaxed);
    let _ = tokio::task::spawn_blocking(move || sampler.join()).await;
    history.close(Duration::from_secs(3)).await;
}

/// Runs everything until a signal, then drains. Ok after a clean drain.
pub fn run(config: &Path) -> Result<(), RunError> {
    let cfg = Config::load(config)?;
    if cfg.processes.is_empty() {
        return Err(RunError::NoProcesses(config.to_path_buf()));
    }
    let (group, mut created) = prepare_group(&cfg)?;
    let children_cgroup = (cfg.group.cgroup != "auto").then(|| group.dir.clone());
    created.group.clone_from(&children_cgroup);
    let launched = created.launched.clone();
    let group_dir = group.dir.clone();
    let sampler::Started { mut sampler, thresholds, state, first } = sampler::start(group, &cfg)?;
    let tracer = sampler.tracer();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io("starting the runtime"))?;
    let result = rt.block_on(async move {
        let web: SocketAddr = cfg.web.listen.parse().map_err(|e| RunError::Io {
            what: "web.listen".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        let web_addr = web;
        let web = tokio::net::TcpListener::bind(web).await.map_err(io(format!("listening on {web} (web.listen)")))?;
        let front = &cfg.proxy.listen;
        let front = tokio::net::TcpListener::bind(front.as_str())
            .await
            .map_err(|source| ProxyError::Bind { addr: front.clone(), source })?;
        let (feed, rx) = crate::feed::Feed::new(first);
        // Everything that follows the group knows its processes, and reads the samples, from before the first of
        // them starts: a decision taken while they start is alerted, told and kept like any other.
        let members = Launcher::members_of(&cfg.processes);
        // Each process's admin endpoint (`[[process]] admin_path`, else `[actions] admin_path`), by its index: never
        // refused by the front door, and where its own action changes are POSTed.
        let admins: Vec<(usize, String)> = cfg
            .processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.admin_path.clone().or_else(|| cfg.actions.admin_path.clone())?)))
            .collect();
        let own_admin: Vec<String> = admins.iter().map(|(_, path)| path.clone()).collect();
        let reactions = Arc::new(crate::reaction::Reactions::new());
        let proxy = Arc::new(Proxy::new(&cfg.proxy, members.clone(), &own_admin, reactions.clone())?);
        tokio::spawn(proxy::shed::follow(proxy.clone(), rx.clone()));
        let view = members.clone();
        let launcher_view: crate::history::LauncherFn = Arc::new(move || view.iter().map(|m| m.info()).collect());
        let shed = proxy.clone();
        let history = crate::history::spawn(
            rx.clone(),
            feed.subscribe("history"),
            &cfg.stats,
            thresholds.clone(),
            crate::history::Inputs {
                launcher: Some(launcher_view.clone()),
                shed_total: Some(Arc::new(move || shed.shed_total())),
                reactions: Some(reactions.clone()),
            },
        );
        let alerts = crate::alerts::task::spawn(
            &cfg.alerts,
            feed.subscribe("alerts"),
            cfg.probes.enabled,
            format!("http://{web_addr}/"),
        );
        if let Some(raiser) = alerts {
            tokio::spawn(crate::alerts::watch::launcher(launcher_view.clone(), raiser.clone()));
            let h = history.history.clone();
            tokio::spawn(crate::alerts::watch::stats(Arc::new(move || h.note()), raiser));
        }
        // The URL of a launched process's own admin endpoint, found by its pid.
        let admin_url: Option<crate::actions::AdminUrl> = (!admins.is_empty()).then(|| {
            let members = members.clone();
            let f: crate::actions::AdminUrl = Arc::new(move |pid: u32| {
                admins.iter().find_map(|(i, path)| {
                    let m = members.get(*i)?;
                    (m.pid() == pid).then(|| format!("http://127.0.0.1:{}{path}", m.port))
                })
            });
            f
        });
        crate::actions::spawn(&cfg.actions, feed.subscribe("actions"), admin_url, reactions);
        let stop = Arc::new(AtomicBool::new(false));
        let interval = Duration::from_millis(cfg.policy.interval_ms);
        let sampler = sampler::spawn(sampler, thresholds.clone(), interval, state, feed, stop.clone())
            .map_err(io("starting the sampler thread"))?;
        let (drain_tx, drain_rx) = watch::channel(false);
        tokio::spawn(async move {
            signalled().await;
            let _ = drain_tx.send(true);
        });
        let opts = launcher::Options {
            cgroup: children_cgroup,
            backoff_reset: Duration::from_secs(cfg.proxy.backoff_reset_s),
            stop_grace: Duration::from_secs(cfg.proxy.stop_grace_s),
            tracer,
        };
        let mut cancel = drain_rx.clone();
        launched.store(true, Ordering::Relaxed);
        let started = Launcher::start(&cfg.processes, members, opts, async move {
            let _ = cancel.wait_for(|d| *d).await;
        })
        .await;
        let launcher = match started {
            Ok(l) => l,
            Err(e) => {
                // The samples taken while the processes started are history too: keep them.
                stop_sampling(&stop, sampler, history).await;
                return Err(e.into());
            }
        };
        let app = api::router(ApiState { latest: rx, thresholds, launcher: Some(launcher_view), interval })
            .merge(history.router())
            .merge(crate::metrics::router(history.history.clone()))
            .method_not_allowed_fallback(crate::reply::method_not_allowed);
        let mut web_drain = drain_rx.clone();
        let api = tokio::spawn(async move {
            api::serve(web, app, async move {
                let _ = web_drain.wait_for(|d| *d).await;
            })
            .await;
        });
        tracing::info!(proxy = %cfg.proxy.listen, web = %cfg.web.listen, "serving");
        let deadline = Duration::from_secs(cfg.proxy.drain_timeout_s);
        let drained = proxy::server::serve(proxy, front, &cfg.proxy, drain_rx, deadline).await;
        if drained.left > 0 {
            tracing::warn!(connections = drained.left, "drain deadline passed with requests in flight");
        } else {
            tracing::info!("every in-flight request finished");
        }
        // With `auto` the group is monitor's own cgroup, not all of it ours: what the processes leave behind (a
        // shell's child) is held while it still descends from monitor, and ended after the grace.
        let leftovers = if cfg.group.cgroup == "auto" {
            cgroup::kill::Descendants::in_group(&group_dir)
                .map_err(|e| tracing::warn!("cannot list the processes monitor started: {e}"))
                .ok()
        } else {
            None
        };
        launcher.stop().await;
        if let Some(n) = leftovers.map(cgroup::kill::Descendants::kill).filter(|&n| n > 0) {
            tracing::info!(killed = n, "ended what the processes left behind");
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), api).await;
        stop_sampling(&stop, sampler, history).await;
        tracing::info!("stopped");
        Ok(())
    });
    rt.shutdown_timeout(Duration::from_secs(1));
    drop(created);
    result
}
