//! The parts `monitor run` adds to the agent: the processes it launches (known before the first starts, so every
//! consumer of the samples knows them), the front door before them, and where each one's admin endpoint is.

use crate::base::reaction::Reactions;
use crate::config::Config;
use crate::consumers::actions::AdminUrl;
use crate::front::launcher::{Launcher, Member};
use crate::front::proxy::{Proxy, ProxyError};
use crate::guard::{KillBook, LaunchedProc, Roster};
use std::sync::Arc;

/// The launched processes and the front door, before anything starts.
pub(crate) struct FrontDoor {
    pub members: Arc<[Member]>,
    pub proxy: Arc<Proxy>,
    /// What its readers (the API, the history, the alerts, the fleet) see of it: the launched processes and the
    /// proxy's counts.
    pub door: crate::feed::Door,
    /// Each process's admin endpoint (`[[process]] admin_path`, else `[actions] admin_path`), by its index.
    admins: Vec<(usize, String)>,
}

impl FrontDoor {
    pub fn new(cfg: &Config, reactions: Arc<Reactions>, kills: Arc<KillBook>) -> Result<FrontDoor, ProxyError> {
        let members = Launcher::members_of(&cfg.processes);
        let admins: Vec<(usize, String)> = cfg
            .processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.admin_path.clone().or_else(|| cfg.actions.admin_path.clone())?)))
            .collect();
        // The admin endpoints are never refused by the front door: they are where the action changes are POSTed.
        // So is `post_url` when it points at a process of the group (the channel's, from the config it starts with).
        let ports: Vec<u16> = cfg.processes.iter().map(|p| p.port).collect();
        let post_url =
            cfg.actions.post_url.as_ref().and_then(|u| crate::front::proxy::channel::post_url_path(u, &ports));
        let own_admin: Vec<String> = admins.iter().map(|(_, path)| path.clone()).chain(post_url).collect();
        let counts = Arc::new(crate::feed::DoorCounts::default());
        let proxy = Arc::new(Proxy::new(&cfg.proxy, members.clone(), &own_admin, reactions, kills, counts.clone())?);
        let view_of = members.clone();
        let door = crate::feed::Door::new(move || view_of.iter().map(|m| m.info()).collect(), counts);
        Ok(FrontDoor { members, proxy, door, admins })
    }

    /// The launched processes as the guard's last resort sees them: pid, name, role and `[[process]] protect`.
    pub(crate) fn roster(&self, cfg: &Config) -> Roster {
        let members = self.members.clone();
        let protect: Vec<bool> = cfg.processes.iter().map(|p| p.protect).collect();
        Arc::new(move || {
            members
                .iter()
                .zip(&protect)
                .filter(|(m, _)| m.pid() != 0)
                .map(|(m, &protect)| LaunchedProc { pid: m.pid(), name: m.name.clone(), role: m.role.into(), protect })
                .collect()
        })
    }

    /// The requests the front door has in flight on a process, by its pid: what the guard names when it acts.
    pub(crate) fn in_flight(&self) -> crate::guard::InFlightOf {
        let proxy = self.proxy.clone();
        Arc::new(move |pid: u32| proxy.in_flight(pid))
    }

    /// The URL of a launched process's own admin endpoint, found by its pid (None when no process has one).
    pub(crate) fn admin_url(&self) -> Option<AdminUrl> {
        if self.admins.is_empty() {
            return None;
        }
        let members = self.members.clone();
        let admins = self.admins.clone();
        let f: AdminUrl = Arc::new(move |pid: u32| {
            admins.iter().find_map(|(i, path)| {
                let m = members.get(*i)?;
                (m.pid() == pid).then(|| format!("http://127.0.0.1:{}{path}", m.port))
            })
        });
        Some(f)
    }
}
