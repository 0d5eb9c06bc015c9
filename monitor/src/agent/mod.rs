//! The agent: one wiring for both commands. `monitor agent` guards a group that runs on its own; `monitor run`
//! also creates its cgroup, launches its processes and puts a front door before them. Either way:
//!
//! ```text
//! group's cgroup -> sampler thread -> Feed -> actions, alerts, history (home page, /metrics), API, front door
//!                                                   one Drain (SIGTERM/SIGINT) -> every part stops, in order
//! config file -> SIGHUP reload -> applied config (watch) -> sampler, API, history, alerts, actions
//! ```
//!
//! The stop, in order: the drain starts (the front door stops accepting and finishes what is in flight, the web
//! server closes), the launched processes are stopped and what they left behind is ended, then the sampler, then
//! the history writes its last minute, and last the group `monitor run` created is removed.

pub mod drain;
mod front;
pub mod group;
pub mod reload;

use crate::cgroup::{self, CgroupError};
use crate::config::{Config, ConfigError, Source};
use crate::feed::Feed;
use crate::launcher::{self, LaunchError, Launcher};
use crate::live::{Live, Reloads};
use crate::proxy::{self, ProxyError};
use crate::{actions, alerts, api, history, metrics, reaction, reply, sampler};
use drain::{Drain, DrainWatch};
use front::FrontDoor;
use group::GroupEnd;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Why the agent could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
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
    #[error("{0}")]
    Alerts(String),
    #[error(transparent)]
    Cluster(#[from] crate::cluster::ClusterError),
    /// The actions' secret could not be read or made.
    #[error("[actions] {0}")]
    Actions(String),
}

impl AgentError {
    fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> AgentError {
        let what = what.into();
        move |source| AgentError::Io { what, source }
    }
}

/// A group to guard, and whether the agent launches its processes.
pub struct Agent {
    cfg: Config,
    group: cgroup::Group,
    end: GroupEnd,
    launching: bool,
    /// Where a reload reads the config again.
    source: Source,
}

impl Agent {
    /// `monitor agent`: guards the group `[group] cgroup` names, as it is.
    pub fn guard(cfg: Config) -> Result<Agent, AgentError> {
        let (group, end) = group::prepare(&cfg, false)?;
        Ok(Agent { cfg, group, end, launching: false, source: Source::default() })
    }

    /// Where SIGHUP reads the config again (by default nowhere: the agent keeps its config).
    pub fn reading(self, source: Source) -> Agent {
        Agent { source, ..self }
    }

    /// `monitor run`: creates and limits the group when the config asks, to launch `[[process]]` into it.
    pub fn launch(cfg: Config, config_file: &Path) -> Result<Agent, AgentError> {
        if cfg.processes.is_empty() {
            return Err(AgentError::NoProcesses(config_file.to_path_buf()));
        }
        let (group, end) = group::prepare(&cfg, true)?;
        Ok(Agent { cfg, group, end, launching: true, source: Source::file(config_file) })
    }

    /// Runs until SIGTERM or SIGINT, then stops every part. Ok after a clean stop.
    pub fn run(self) -> Result<(), AgentError> {
        let Agent { cfg, group, mut end, launching, source } = self;
        // With `auto` the group is the cgroup monitor itself runs in: the children stay where they are started.
        let children_cgroup = (launching && cfg.group.cgroup != "auto").then(|| group.dir.clone());
        end.group.clone_from(&children_cgroup);
        let launched = end.launched.clone();
        let group_dir = group.dir.clone();
        // Two workers: a probe is answered by one while the other is busy with a crowd of clients (the renders run
        // on threads of their own).
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(AgentError::io("starting the runtime"))?;
        // Caught before the slow part of the start (the probes load, the first sample): from here on a reload
        // signal never stops the agent.
        let hangups = {
            let _on = rt.enter();
            reload::catch()
        };
        let started = sampler::start(group, &cfg)?;
        let parts = Parts { cfg: &cfg, launching, children_cgroup, launched, group_dir, source };
        let result = rt.block_on(parts.serve(started, hangups));
        rt.shutdown_timeout(Duration::from_secs(1));
        drop(end);
        result
    }
}

/// Joins the cluster `[cluster]` describes, with this node's front door and process names.
async fn cluster_join(
    c: &crate::config::ClusterConfig,
    cfg: &Config,
) -> Result<crate::cluster::Membership, AgentError> {
    let listen: SocketAddr = cfg.proxy.listen.parse().map_err(|e| AgentError::Io {
        what: "proxy.listen".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    let web: SocketAddr = cfg.web.listen.parse().map_err(|e| AgentError::Io {
        what: "web.listen".into(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
    })?;
    let names = cfg.processes.iter().map(|p| p.name.clone()).collect();
    let settings = crate::cluster::Settings::new(c, listen, web, names)?;
    Ok(crate::cluster::Membership::start(settings).await?)
}

/// Hands every sample's memory ratio and policy state to the membership, which gossips them.
async fn gossip_load(
    m: Arc<crate::cluster::Membership>,
    mut rx: tokio::sync::watch::Receiver<Arc<crate::feed::Published>>,
) {
    loop {
        let load = {
            let p = rx.borrow_and_update();
            crate::cluster::Load { memory_ratio: p.decision.ratio, policy: p.decision.state.as_str().to_string() }
        };
        m.set_load(load);
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// The front door's drain under `[cluster]`: it starts once the node has left the cluster and the forwards peers
/// chose before they heard it have had [`LEAVE_LINGER`](crate::cluster::membership::LEAVE_LINGER) to connect, so
/// peers stop forwarding to it before it stops accepting.
fn leave_then_drain(m: Arc<crate::cluster::Membership>, drained: DrainWatch) -> DrainWatch {
    let (door, door_drained) = Drain::new();
    tokio::spawn(async move {
        drained.started().await;
        m.leave().await;
        tokio::time::sleep(crate::cluster::membership::LEAVE_LINGER).await;
        door.start();
    });
    door_drained
}

/// What [`Agent::run`] hands to the runtime.
struct Parts<'a> {
    cfg: &'a Config,
    launching: bool,
    children_cgroup: Option<PathBuf>,
    launched: Arc<AtomicBool>,
    group_dir: PathBuf,
    source: Source,
}

/// The running sampler, and how to stop it.
struct Sampling {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    history: history::HistoryHandle,
}

impl Sampling {
    /// Stops the sampler thread and waits for it, then for the history to write its last minute.
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        self.history.close(Duration::from_secs(3)).await;
    }
}

impl Parts<'_> {
    async fn serve(
        self,
        started: sampler::Started,
        hangups: Option<tokio::signal::unix::Signal>,
    ) -> Result<(), AgentError> {
        let cfg = self.cfg;
        // The config as applied: this one until a reload applies another.
        let (publisher, live) = Live::new(cfg.clone());
        let reloads = Arc::new(Reloads::new(self.source.file.clone()));
        let sampler::Started { mut sampler, state, first, .. } = started;
        // Only launched processes are traced from their start; a guarded group's are found by the sampler.
        let tracer = match self.launching {
            true => sampler.tracer(),
            false => crate::probes::Tracer::none(),
        };
        let web_addr: SocketAddr = cfg.web.listen.parse().map_err(|e| AgentError::Io {
            what: "web.listen".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        let web = tokio::net::TcpListener::bind(web_addr)
            .await
            .map_err(AgentError::io(format!("listening on {web_addr} (web.listen)")))?;
        let front = match self.launching {
            true => {
                let addr = &cfg.proxy.listen;
                let l = tokio::net::TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|source| ProxyError::Bind { addr: addr.clone(), source })?;
                Some(l)
            }
            false => None,
        };
        // Joined before the processes start: a node whose names clash with a member's stops here.
        let cluster = match (&cfg.cluster, self.launching) {
            (Some(c), true) => Some(Arc::new(cluster_join(c, cfg).await?)),
            _ => None,
        };
        let (feed, rx) = Feed::new(first);
        if let Some(m) = &cluster {
            tokio::spawn(gossip_load(m.clone(), rx.clone()));
        }
        // Everything that follows the group knows its processes, and reads the samples, from before the first of
        // them starts: a decision taken while they start is alerted, told and kept like any other.
        let reactions = Arc::new(reaction::Reactions::new());
        // The last resort kills on the sampler thread: its time goes into the same reactions, and its kills into
        // a book the launcher and the front door read (a guard's kill is not a crash, nor a process's 502).
        sampler.set_reactions(reactions.clone());
        let kills = sampler.kill_book();
        let door = match self.launching {
            true => Some(FrontDoor::new(cfg, reactions.clone(), kills.clone())?),
            false => None,
        };
        if let Some(d) = &door {
            sampler.set_roster(d.roster(cfg));
        }
        if let Some(d) = &door {
            tokio::spawn(proxy::shed::follow(d.proxy.clone(), rx.clone()));
        }
        if let (Some(m), Some(d), Some(c)) = (&cluster, &door, &cfg.cluster) {
            let routes = crate::cluster::door::Door::new(c, m.clone(), &cfg.proxy)?;
            d.proxy.join_cluster(Arc::new(routes));
        }
        let fleet = cluster.clone().map(|m| {
            let local = crate::cluster::fleet::Local {
                latest: rx.clone(),
                launcher: door.as_ref().map(|d| d.view.clone()),
                shed: door.as_ref().map(|d| {
                    let p = d.proxy.clone();
                    let f: Arc<dyn Fn() -> u64 + Send + Sync> = Arc::new(move || p.shed_total());
                    f
                }),
            };
            crate::cluster::fleet::Fleet::spawn(m, local)
        });
        let history = history::spawn(
            rx.clone(),
            feed.subscribe("history"),
            live.clone(),
            history::Inputs {
                launcher: door.as_ref().map(|d| d.view.clone()),
                shed_total: door.as_ref().map(|d| {
                    let shed = d.proxy.clone();
                    let f: history::ShedFn = Arc::new(move || shed.shed_total());
                    f
                }),
                reactions: Some(reactions.clone()),
                reloads: Some(reloads.clone()),
                peers: fleet.clone().map(|fl| {
                    let f: history::PeersFn = Arc::new(move || fl.peers());
                    f
                }),
                cluster_events: cluster.as_ref().map(|m| m.watch()),
                kills: Some(kills.clone()),
            },
        );
        // Alerts, actions and history read every sample from the first on; the Raiser is for other parts (the
        // launcher, the stats database) to raise conditions.
        let client = alerts::task::client(&cfg.alerts).map_err(AgentError::Alerts)?;
        let raiser = alerts::task::spawn(live.clone(), client, feed.subscribe("alerts"));
        if let Some(d) = &door {
            tokio::spawn(alerts::watch::launcher(d.view.clone(), raiser.clone()));
        }
        let h = history.history.clone();
        if let Some(m) = &cluster {
            tokio::spawn(alerts::watch::cluster(m.watch(), raiser.clone()));
        }
        tokio::spawn(alerts::watch::stats(Arc::new(move || h.note()), raiser));
        let admin_url = match &door {
            Some(d) => d.admin_url(),
            None => cfg.actions.admin_path.clone().map(actions::admin_url_by_port),
        };
        // `monitor run` signs with a secret it hands the processes it starts; the agent with `[actions] secret_file`.
        let (signing, secret_env) = match self.launching {
            true => {
                actions::Signing::for_run(&cfg.actions).map(|(s, env)| (s, vec![env])).map_err(AgentError::Actions)?
            }
            false => (actions::Signing::FromConfig, Vec::new()),
        };
        actions::spawn(live.clone(), feed.subscribe("actions"), admin_url, signing, reactions);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = sampler::spawn(sampler, live.clone(), state, feed, stop.clone())
            .map_err(AgentError::io("starting the sampler thread"))?;
        let sampling = Sampling { stop, thread, history };
        let (drain, drained) = Drain::new();
        drain.on_signals();
        let mode = if self.launching { crate::config::Mode::Run } else { crate::config::Mode::Agent };
        let reloader = reload::Reloader {
            source: self.source.clone(),
            publisher,
            reloads: reloads.clone(),
            mode,
            latest: rx.clone(),
        };
        reloader.spawn(hangups, drained.clone());
        let launcher = match &door {
            Some(d) => {
                let opts = launcher::Options {
                    cgroup: self.children_cgroup.clone(),
                    backoff_reset: Duration::from_secs(cfg.proxy.backoff_reset_s),
                    stop_grace: Duration::from_secs(cfg.proxy.stop_grace_s),
                    tracer,
                    kills: kills.clone(),
                    env: secret_env,
                };
                self.launched.store(true, Ordering::Relaxed);
                match Launcher::start(&cfg.processes, d.members.clone(), opts, drained.clone().started()).await {
                    Ok(l) => Some(l),
                    Err(e) => {
                        // The samples taken while the processes started are history too: keep them.
                        sampling.stop().await;
                        return Err(e.into());
                    }
                }
            }
            None => None,
        };
        let ready = {
            let now = rx.borrow();
            sampler::status_line(&now.snapshot, &now.decision)
        };
        let view = door.as_ref().map(|d| d.view.clone());
        let front_door = door.as_ref().map(|d| {
            let p = d.proxy.clone();
            let f: Arc<dyn Fn() -> crate::view::FrontDoorView + Send + Sync> = Arc::new(move || {
                crate::view::FrontDoorView { shed_total: p.shed_total(), forwarded_total: p.forwarded_total() }
            });
            f
        });
        let state = api::ApiState {
            latest: rx,
            config: live,
            reloads: Some(reloads),
            launcher: view,
            front_door,
            kills: Some(kills.clone()),
        };
        let forwarded = door.as_ref().map(|d| d.proxy.clone());
        let more = cluster.clone().map(|m| {
            let f: metrics::MoreFn = Arc::new(move || {
                let forwarded = forwarded.as_ref().map_or(0, |p| p.forwarded_total());
                crate::cluster::api::metrics_text(&m.members(), m.rejected(), forwarded, m.gossip_bytes())
            });
            f
        });
        let mut app = api::router(state).merge(sampling.history.router()).merge(metrics::router_with(
            sampling.history.history.clone(),
            more,
            cluster.as_ref().map(|m| m.members().this().name.clone()),
        ));
        if let (Some(m), Some(d)) = (&cluster, &door) {
            app = app.merge(crate::cluster::api::router(m.clone(), d.view.clone()));
        }
        if let Some(f) = &fleet {
            app = app.merge(crate::cluster::fleet::router(f.clone()));
        }
        let app = app.method_not_allowed_fallback(reply::method_not_allowed);
        let api = tokio::spawn(api::serve(web, app, cfg.web.clone(), drained.clone().started()));
        // Ready for systemd: the API answers, and under `monitor run` the master and the workers are healthy.
        crate::notify::ready(&ready);
        match (door, front, launcher) {
            (Some(d), Some(front), Some(launcher)) => {
                tracing::info!(proxy = %cfg.proxy.listen, web = %cfg.web.listen, "serving");
                let door_drain = match cluster {
                    Some(m) => leave_then_drain(m, drained),
                    None => drained,
                };
                self.front_door(d, front, launcher, door_drain).await;
            }
            _ => {
                tracing::info!(listen = %web_addr, "serving the API");
                drained.started().await;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), api).await;
        sampling.stop().await;
        tracing::info!("stopped");
        Ok(())
    }

    /// Serves the front door until the drain has finished, then stops the launched processes and ends what they
    /// left behind.
    async fn front_door(&self, d: FrontDoor, front: tokio::net::TcpListener, launcher: Launcher, drained: DrainWatch) {
        let cfg = self.cfg;
        let deadline = Duration::from_secs(cfg.proxy.drain_timeout_s);
        let done = proxy::server::serve(d.proxy, front, &cfg.proxy, drained.receiver(), deadline).await;
        if done.left > 0 {
            tracing::warn!(connections = done.left, "drain deadline passed with requests in flight");
        } else {
            tracing::info!("every in-flight request finished");
        }
        // With `auto` the group is monitor's own cgroup, not all of it ours: what the processes leave behind (a
        // shell's child) is held while it still descends from monitor, and ended after the grace.
        let leftovers = match cfg.group.cgroup == "auto" {
            true => cgroup::kill::Descendants::in_group(&self.group_dir)
                .map_err(|e| tracing::warn!("cannot list the processes monitor started: {e}"))
                .ok(),
            false => None,
        };
        launcher.stop().await;
        if let Some(n) = leftovers.map(cgroup::kill::Descendants::kill).filter(|&n| n > 0) {
            tracing::info!(killed = n, "ended what the processes left behind");
        }
    }
}
