//! The parts `monitor run` adds to the agent: the processes it launches (known before the first starts, so every
//! consumer of the samples knows them), the front door before them, and where each one's admin endpoint is.

use crate::actions::AdminUrl;
use crate::config::Config;
use crate::history::LauncherFn;
use crate::launcher::{Launcher, Member};
use crate::proxy::{Proxy, ProxyError};
use crate::reaction::Reactions;
use std::sync::Arc;

/// The launched processes and the front door, before anything starts.
pub struct FrontDoor {
    pub members: Arc<[Member]>,
    pub proxy: Arc<Proxy>,
    /// Each launched process's state, for the API, the history and the alerts.
    pub view: LauncherFn,
    /// Each process's admin endpoint (`[[process]] admin_path`, else `[actions] admin_path`), by its index.
    admins: Vec<(usize, String)>,
}

impl FrontDoor {
    pub fn new(cfg: &Config, reactions: Arc<Reactions>) -> Result<FrontDoor, ProxyError> {
        let members = Launcher::members_of(&cfg.processes);
        let admins: Vec<(usize, String)> = cfg
            .processes
            .iter()
            .enumerate()
            .filter_map(|(i, p)| Some((i, p.admin_path.clone().or_else(|| cfg.actions.admin_path.clone())?)))
            .collect();
        // The admin endpoints are never refused by the front door: they are where the action changes are POSTed.
        let own_admin: Vec<String> = admins.iter().map(|(_, path)| path.clone()).collect();
        let proxy = Arc::new(Proxy::new(&cfg.proxy, members.clone(), &own_admin, reactions)?);
        let view_of = members.clone();
        let view: LauncherFn = Arc::new(move || view_of.iter().map(|m| m.info()).collect());
        Ok(FrontDoor { members, proxy, view, admins })
    }

    /// The URL of a launched process's own admin endpoint, found by its pid (None when no process has one).
    pub fn admin_url(&self) -> Option<AdminUrl> {
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
