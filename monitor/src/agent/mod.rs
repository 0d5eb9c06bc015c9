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
mod parts;
pub mod reload;
mod services;

use crate::base::reaper;
use crate::config::live::Live;
use crate::config::{Config, ConfigError, Source};
use crate::feed::Feed;
use crate::front::launcher::{self, LaunchError, Launcher};
use crate::front::proxy::{self, ProxyError};
use crate::sources::cgroup::{self, CgroupError};
use crate::{consumers::api, history, sampler};
use drain::{Drain, DrainWatch};
use front::FrontDoor;
use group::GroupEnd;
use parts::{web_app, Listeners, Net, Readers, Shared};
use services::Services;
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
    /// cgroup v2 refused the memory controller to a new group: its parent holds processes (as a container's group
    /// holds its entrypoint).
    #[error(
        "cannot create the group under {}: cgroup v2 gives the memory controller only to the children of a group \
         without processes of its own, and this one has some (inside a container, monitor's own). Use \
         [group] cgroup = \"auto\" to guard the group monitor runs in (the container's)",
        .parent.display()
    )]
    NoChildGroup { parent: PathBuf },
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
        // signal never stops the agent, and a stop signal is kept for the drain. The orphans' reaper starts before
        // any process does.
        let (hangups, signals) = {
            let _on = rt.enter();
            // SAFETY: getpid has no preconditions.
            let pid1 = unsafe { libc::getpid() } == 1;
            if (launching && reaper::adopt()) || pid1 {
                tokio::spawn(reaper::serve());
            }
            (reload::catch(), drain::Signals::catch())
        };
        let started = sampler::start(group, &cfg)?;
        let parts = Parts { cfg: &cfg, launching, children_cgroup, launched, group_dir, source };
        let result = rt.block_on(parts.serve(started, hangups, signals));
        rt.shutdown_timeout(Duration::from_secs(1));
        drop(end);
        result
    }
}

/// The running sampler and the parts that read it, and how to stop them.
struct Sampling {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
    history: history::HistoryHandle,
    services: Services,
}

impl Sampling {
    /// Stops the sampler thread and waits for it, then for the history to write its last minute and for the other
    /// readers to deliver what they hold (the last alerts and action changes), 3 s at most.
    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread;
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        let within = Duration::from_secs(3);
        tokio::join!(self.history.close(within), self.services.stop(within));
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

impl Parts<'_> {
    /// Starts every part, serves until the drain, and stops them in order: the front door and the web server, the
    /// launched processes, the sampler, and last the readers of the feed.
    async fn serve(
        self,
        started: sampler::Started,
        hangups: Option<tokio::signal::unix::Signal>,
        signals: drain::Signals,
    ) -> Result<(), AgentError> {
        let cfg = self.cfg;
        let (publisher, live) = Live::new(cfg.clone());
        let sampler::Started { mut sampler, state, first } = started;
        // Only launched processes are traced from their start; a guarded group's are found by the sampler.
        let tracer = if self.launching { sampler.tracer() } else { crate::sources::probes::Tracer::none() };
        let listeners = Listeners::bind(cfg, self.launching).await?;
        // Joined before the processes start: a node whose names clash with a member's stops here.
        let cluster = match (&cfg.cluster, self.launching) {
            (Some(c), true) => Some(Arc::new(cluster_join(c, cfg).await?)),
            _ => None,
        };
        let (feed, latest) = Feed::new(first);
        let shared = Shared::new(&mut sampler, latest, live, self.source.file.clone());
        let door = if self.launching {
            Some(FrontDoor::new(cfg, shared.reactions.clone(), shared.kills.clone())?)
        } else {
            None
        };
        let mut services = Services::new();
        if let Some(d) = &door {
            sampler.set_roster(d.roster(cfg));
            sampler.set_in_flight(d.in_flight());
            services.add("shedding", tokio::spawn(proxy::shed::follow(d.proxy.clone(), shared.latest.clone())));
            let samples = feed.subscribe("memory per request");
            services.add("memory per request", tokio::spawn(proxy::growth::follow(d.proxy.clone(), samples)));
        }
        let net = cluster.map(|m| Net::start(m, cfg, &shared, door.as_ref(), &mut services)).transpose()?;
        // Every reader of the feed subscribes before the first process starts: a decision taken while they start
        // is alerted, told and kept like any other.
        let readers = Readers::start(cfg, &shared, &feed, door.as_ref(), net.as_ref(), &mut services)?;
        let stop = Arc::new(AtomicBool::new(false));
        let thread = sampler::spawn(sampler, shared.live.clone(), state, feed, stop.clone())
            .map_err(AgentError::io("starting the sampler thread"))?;
        let sampling = Sampling { stop, thread, history: readers.history, services };
        let (drain, drained) = Drain::new();
        drain.on_signals(signals);
        shared.reloader(publisher, self.source.clone(), self.launching).spawn(hangups, drained.clone());
        let launcher = match &door {
            Some(d) => match self.launch(d, tracer, readers.secret_env, &shared, &drained).await {
                Ok(l) => Some(l),
                Err(e) => {
                    // The samples taken while the processes started are history too: keep them.
                    sampling.stop().await;
                    return Err(e);
                }
            },
            None => None,
        };
        let app = web_app(&shared, &sampling.history, door.as_ref(), net.as_ref());
        let api = tokio::spawn(api::serve(listeners.web, app, cfg.web.clone(), drained.clone().started()));
        // Ready for systemd: the API answers, and under `monitor run` the master and the workers are healthy.
        crate::base::notify::ready(&shared.status_line());
        match (door, listeners.front, launcher) {
            (Some(d), Some(front), Some(launcher)) => {
                tracing::info!(proxy = %cfg.proxy.listen, web = %cfg.web.listen, "serving");
                let door_drain = match net {
                    Some(n) => leave_then_drain(n.membership, drained),
                    None => drained,
                };
                self.front_door(d, front, launcher, door_drain).await;
            }
            _ => {
                tracing::info!(listen = %listeners.web_addr, "serving the API");
                drained.started().await;
            }
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), api).await;
        sampling.stop().await;
        tracing::info!("stopped");
        Ok(())
    }

    /// Starts the `[[process]]`es under the front door's members.
    async fn launch(
        &self,
        d: &FrontDoor,
        tracer: crate::sources::probes::Tracer,
        env: Vec<(String, String)>,
        shared: &Shared,
        drained: &DrainWatch,
    ) -> Result<Launcher, AgentError> {
        let cfg = self.cfg;
        let opts = launcher::Options {
            cgroup: self.children_cgroup.clone(),
            backoff_reset: Duration::from_secs(cfg.proxy.backoff_reset_s),
            stop_grace: Duration::from_secs(cfg.proxy.stop_grace_s),
            tracer,
            kills: shared.kills.clone(),
            env,
        };
        self.launched.store(true, Ordering::Relaxed);
        Ok(Launcher::start(&cfg.processes, d.members.clone(), opts, drained.clone().started()).await?)
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
