//! The parts [`super::Parts::serve`] starts, each built from what it reads: the listeners, what every part shares
//! (the applied config, the latest sample, the reaction times, the kill book), the cluster's services, the readers
//! of the feed, and the web server's routes.

use super::front::FrontDoor;
use super::reload::Reloader;
use super::services::Services;
use super::AgentError;
use crate::base::reaction::Reactions;
use crate::cluster::{fleet, Membership};
use crate::config::live::{Live, Publisher, Reloads};
use crate::config::{Config, Mode};
use crate::feed::{Feed, Published};
use crate::front::proxy::ProxyError;
use crate::guard::KillBook;
use crate::{base::reply, consumers::actions, consumers::alerts, consumers::api, consumers::metrics, history, sampler};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The web server's socket and, under `monitor run`, the front door's: bound before anything starts, so a port in
/// use stops the agent at once.
pub(super) struct Listeners {
    pub web: TcpListener,
    pub web_addr: SocketAddr,
    pub front: Option<TcpListener>,
}

impl Listeners {
    pub async fn bind(cfg: &Config, launching: bool) -> Result<Listeners, AgentError> {
        let web_addr: SocketAddr = cfg.web.listen.parse().map_err(|e| AgentError::Io {
            what: "web.listen".into(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
        })?;
        let web = TcpListener::bind(web_addr)
            .await
            .map_err(AgentError::io(format!("listening on {web_addr} (web.listen)")))?;
        let front = match launching {
            true => {
                let addr = &cfg.proxy.listen;
                let l = TcpListener::bind(addr.as_str())
                    .await
                    .map_err(|source| ProxyError::Bind { addr: addr.clone(), source })?;
                Some(l)
            }
            false => None,
        };
        Ok(Listeners { web, web_addr, front })
    }
}

/// What every part reads: the applied config and its reloads, the latest sample, the reaction times and the last
/// resort's kills (both written on the sampler's thread, read by the front door, the launcher and `/metrics`).
pub(super) struct Shared {
    pub live: Live,
    pub reloads: Arc<Reloads>,
    pub latest: watch::Receiver<Arc<Published>>,
    pub reactions: Arc<Reactions>,
    pub kills: Arc<KillBook>,
}

impl Shared {
    pub fn new(
        sampler: &mut sampler::Sampler,
        latest: watch::Receiver<Arc<Published>>,
        live: Live,
        file: Option<PathBuf>,
    ) -> Shared {
        let reactions = Arc::new(Reactions::new());
        // The last resort kills on the sampler thread: its time goes into the same reactions, and its kills into
        // a book the launcher and the front door read (a guard's kill is not a crash, nor a process's 502).
        sampler.set_reactions(reactions.clone());
        let kills = sampler.kill_book();
        Shared { live, reloads: Arc::new(Reloads::new(file)), latest, reactions, kills }
    }

    /// The reload (SIGHUP) of the config `source`, published to every part.
    pub(crate) fn reloader(&self, publisher: Publisher, source: crate::config::Source, launching: bool) -> Reloader {
        Reloader {
            source,
            publisher,
            reloads: self.reloads.clone(),
            mode: if launching { Mode::Run } else { Mode::Agent },
            latest: self.latest.clone(),
        }
    }

    /// The line systemd shows once the agent is ready.
    pub fn status_line(&self) -> String {
        let now = self.latest.borrow();
        sampler::status_line(&now.snapshot, &now.decision)
    }
}

/// Under `[cluster]`: the membership, gossiping this node's load, with the front door routing through it and the
/// fleet asking every member for its figures.
pub(super) struct Net {
    pub membership: Arc<Membership>,
    pub fleet: Arc<fleet::Fleet>,
}

impl Net {
    pub fn start(
        membership: Arc<Membership>,
        cfg: &Config,
        shared: &Shared,
        door: Option<&FrontDoor>,
        services: &mut Services,
    ) -> Result<Net, AgentError> {
        services.add("gossip", tokio::spawn(gossip_load(membership.clone(), shared.latest.clone())));
        if let (Some(d), Some(c)) = (door, &cfg.cluster) {
            let routes = crate::cluster::door::Door::new(c, membership.clone(), &cfg.proxy)?;
            d.proxy.join_cluster(Arc::new(routes));
        }
        let local = fleet::Local { latest: shared.latest.clone(), door: door.map(|d| d.door.clone()) };
        let fleet = fleet::Fleet::spawn(membership.clone(), local);
        Ok(Net { membership, fleet })
    }
}

/// Hands every sample's memory ratio and policy state to the membership, which gossips them.
async fn gossip_load(m: Arc<Membership>, mut rx: watch::Receiver<Arc<Published>>) {
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

/// The readers of every sample in order: the history, the alerts (with their watchers of the launcher, the
/// cluster and the stats database) and the actions. They end when the feed does.
pub(super) struct Readers {
    pub history: history::HistoryHandle,
    /// What the launched processes are given to check the actions' proofs with.
    pub secret_env: Vec<(String, String)>,
}

impl Readers {
    pub fn start(
        cfg: &Config,
        shared: &Shared,
        feed: &Feed,
        door: Option<&FrontDoor>,
        net: Option<&Net>,
        services: &mut Services,
    ) -> Result<Readers, AgentError> {
        let inputs = history::Inputs {
            door: door.map(|d| d.door.clone()),
            reactions: Some(shared.reactions.clone()),
            reloads: Some(shared.reloads.clone()),
            peers: net.map(|n| {
                let fleet = n.fleet.clone();
                let f: history::PeersFn = Arc::new(move || fleet.peers());
                f
            }),
            cluster_events: net.map(|n| n.membership.watch()),
            kills: Some(shared.kills.clone()),
        };
        let history = history::spawn(shared.latest.clone(), feed.subscribe("history"), shared.live.clone(), inputs);
        // The Raiser is for other parts (the launcher, the cluster, the stats database) to raise conditions.
        let client = alerts::task::client(&cfg.alerts).map_err(AgentError::Alerts)?;
        let (raiser, alerting) = alerts::task::spawn(shared.live.clone(), client, feed.subscribe("alerts"));
        services.add("alerts", alerting);
        if let Some(d) = door {
            services.until_stop("launcher watch", alerts::watch::launcher(d.door.clone(), raiser.clone()));
        }
        if let Some(n) = net {
            services.until_stop("cluster watch", alerts::watch::cluster(n.membership.watch(), raiser.clone()));
        }
        let h = history.history.clone();
        services.until_stop("stats watch", alerts::watch::stats(Arc::new(move || h.note()), raiser));
        // Under `monitor run` (a front door): each process's own admin URL, signed with a secret handed to the
        // processes at start. The agent: the lowest port each process listens on, signed with `[actions]
        // secret_file`.
        let (admin_url, signing, secret_env) = match door {
            Some(d) => {
                let (signing, env) = actions::Signing::for_run(&cfg.actions).map_err(AgentError::Actions)?;
                (d.admin_url(), signing, vec![env])
            }
            None => {
                let by_port = cfg.actions.admin_path.clone().map(actions::admin_url_by_port);
                (by_port, actions::Signing::FromConfig, Vec::new())
            }
        };
        let reactions = shared.reactions.clone();
        services.add(
            "actions",
            actions::spawn(shared.live.clone(), feed.subscribe("actions"), admin_url, signing, reactions),
        );
        Ok(Readers { history, secret_env })
    }
}

/// The web server's routes: the API, the home page and its data, `/metrics`, and in a cluster its own.
pub(super) fn web_app(
    shared: &Shared,
    history: &history::HistoryHandle,
    door: Option<&FrontDoor>,
    net: Option<&Net>,
) -> axum::Router {
    let state = api::ApiState {
        latest: shared.latest.clone(),
        reloads: Some(shared.reloads.clone()),
        door: door.map(|d| d.door.clone()),
        kills: Some(shared.kills.clone()),
    };
    let more = net.map(|n| {
        let families =
            crate::cluster::api::Families { membership: n.membership.clone(), door: door.map(|d| d.door.clone()) };
        Box::new(families) as Box<dyn prometheus_client::collector::Collector>
    });
    let node = net.map(|n| n.membership.members().this().name.clone());
    let mut app =
        api::router(state).merge(history.router()).merge(metrics::router(history.history.clone(), more, node));
    if let (Some(n), Some(d)) = (net, door) {
        app = app.merge(crate::cluster::api::router(n.membership.clone(), d.door.clone()));
    }
    if let Some(n) = net {
        app = app.merge(fleet::router(n.fleet.clone()));
    }
    app.method_not_allowed_fallback(reply::method_not_allowed)
}
