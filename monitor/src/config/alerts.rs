//! `[alerts]`: where the alerts go (a command, a webhook, Alertmanager), with what labels, and how often.

use super::HttpUrl;
use crate::base::accounts::{self, Account, AccountError, User};
use crate::base::nocaps::Ids;
use serde::Deserialize;
use std::io;
use std::path::PathBuf;

/// `[alerts]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// argv of a hook run (without a shell) on every alert, the alert as JSON on stdin and in `MONITOR_*`
    /// variables (with `PATH=/usr/bin:/bin`, and nothing else of the agent's environment). Default none.
    pub command: Option<Vec<String>>,
    /// The user (a name or a uid) the command runs as when the agent runs as root, with that user's primary group and
    /// no supplementary groups; an agent run as another user runs it as itself. Either way it gets no capability.
    /// Default the package's `monitor` user when the host has one, else `nobody`.
    pub command_user: Option<Account>,
    /// A run of the command is killed after this many seconds. Default 10.
    pub command_timeout_s: u64,
    /// `http://` or `https://` URL receiving the Alertmanager webhook JSON (version 4). Default none.
    pub webhook: Option<HttpUrl>,
    /// `http://` or `https://` base URL of an Alertmanager (alerts go to `/api/v2/alerts`). Default none.
    pub alertmanager: Option<HttpUrl>,
    /// More Alertmanagers, each sent every alert (an HA pair de-duplicates them, as with Prometheus). Default none.
    pub alertmanagers: Vec<HttpUrl>,
    /// A PEM file of CA certificates trusted besides the host's store, for `https://` sinks behind a private CA.
    pub ca_file: Option<PathBuf>,
    /// A file holding a token sent as `Authorization: Bearer <token>` to the webhook and the Alertmanagers.
    pub bearer_token_file: Option<PathBuf>,
    /// HTTP basic auth for the webhook and the Alertmanagers: `{ username = "…", password_file = "…" }`.
    pub basic_auth: Option<BasicAuth>,
    /// The page of runbooks (docs/alerts.md): each alert's `runbook_url` annotation is this with `#<alertname in
    /// lower case>` after it. Default the page the package installs, `file:///usr/share/doc/monitor/alerts.md`.
    pub runbook_url: String,
    /// Labels added to every alert, as Prometheus' `external_labels` (`{ team = "storage", env = "prod" }`).
    /// `instance` defaults to the host's name, so the same group on two hosts makes two alerts.
    pub labels: std::collections::BTreeMap<String, String>,
    /// An alert that resolves and fires again within this many seconds is one incident (its resolution is sent
    /// only once it has stayed clear this long). Default 30.
    pub quiet_s: u64,
    /// Firing alerts are re-sent to Alertmanager this often, in seconds. Default 30.
    pub resend_s: u64,
}

/// `[alerts] basic_auth`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BasicAuth {
    pub username: String,
    /// The password is read from this file (kept out of the config, which may be world-readable).
    pub password_file: PathBuf,
}

impl AlertsConfig {
    /// The `Authorization` header the HTTP sinks send, read from the token or password file (each kept secret:
    /// [`super::secret::read`]).
    pub fn authorization(&self) -> Result<Option<String>, String> {
        let read = |f: &PathBuf| {
            let b = super::secret::read(f)?;
            String::from_utf8(b).map_err(|_| format!("{} is not UTF-8 text", f.display()))
        };
        match (&self.bearer_token_file, &self.basic_auth) {
            (Some(f), _) => Ok(Some(format!("Bearer {}", read(f)?))),
            (None, Some(b)) => {
                use base64::Engine;
                let pair = format!("{}:{}", b.username, read(&b.password_file)?);
                Ok(Some(format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair))))
            }
            (None, None) => Ok(None),
        }
    }

    /// The uid and gid the command runs as under a root agent: `command_user`, or its default, looked up now.
    pub(crate) fn command_ids(&self) -> Result<Ids, AccountError> {
        command_ids_of(self.command_user.as_ref(), |a| match a {
            Account::Name(n) => accounts::user_by_name(n),
            Account::Id(id) => accounts::user_by_id(*id),
        })
    }

    /// Every Alertmanager to send to: `alertmanager` and `alertmanagers`, each once.
    pub(crate) fn all_alertmanagers(&self) -> Vec<HttpUrl> {
        let mut all: Vec<HttpUrl> = Vec::new();
        for u in self.alertmanager.iter().chain(&self.alertmanagers) {
            if !all.iter().any(|a| a.to_string() == u.to_string()) {
                all.push(u.clone());
            }
        }
        all
    }
}

/// The users tried, in order, when `command_user` is unset: the package's own, then the traditional unprivileged one.
const DEFAULT_COMMAND_USERS: [&str; 2] = ["monitor", "nobody"];

/// The ids of `configured` (or of the first of [`DEFAULT_COMMAND_USERS`] that exists), found with `find`. A user
/// must have an entry (its primary group is the gid), a numeric one too.
fn command_ids_of(
    configured: Option<&Account>,
    find: impl Fn(&Account) -> io::Result<Option<User>>,
) -> Result<Ids, AccountError> {
    let ids = |u: User| Ids { uid: u.uid, gid: u.gid };
    let lookup = |a: &Account| find(a).map_err(|source| AccountError::Lookup { what: format!("user {a}"), source });
    if let Some(a) = configured {
        return lookup(a)?.map(ids).ok_or_else(|| AccountError::NoUser(a.clone()));
    }
    for name in DEFAULT_COMMAND_USERS {
        if let Some(u) = lookup(&Account::Name(name.into()))? {
            return Ok(ids(u));
        }
    }
    Err(AccountError::NoUser(Account::Name(DEFAULT_COMMAND_USERS[1].into())))
}

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            command: None,
            command_user: None,
            command_timeout_s: 10,
            webhook: None,
            alertmanager: None,
            alertmanagers: Vec::new(),
            ca_file: None,
            bearer_token_file: None,
            basic_auth: None,
            runbook_url: "file:///usr/share/doc/monitor/alerts.md".into(),
            labels: std::collections::BTreeMap::new(),
            quiet_s: 30,
            resend_s: 30,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A user database of `monitor` (uid 998) and `nobody` (65534), without `monitor` when `with_monitor` is false.
    fn db(with_monitor: bool) -> impl Fn(&Account) -> io::Result<Option<User>> {
        move |a| {
            let users = [("monitor", 998, 997), ("nobody", 65534, 65534)];
            let found = users.iter().filter(|u| with_monitor || u.0 != "monitor").find(|u| match a {
                Account::Name(n) => n == u.0,
                Account::Id(id) => *id == u.1,
            });
            Ok(found.map(|&(name, uid, gid)| User { name: name.into(), uid, gid, home: "/nonexistent".into() }))
        }
    }

    #[test]
    fn the_command_user_defaults_to_monitor_then_nobody() {
        let ids = |uid, gid| Ok(Ids { uid, gid });
        let got = |configured: Option<Account>, with_monitor| {
            command_ids_of(configured.as_ref(), db(with_monitor)).map_err(|e| e.to_string())
        };
        assert_eq!(got(None, true), ids(998, 997), "the package's user");
        assert_eq!(got(None, false), ids(65534, 65534), "nobody, without the package's user");
        assert_eq!(got(Some(Account::Name("nobody".into())), true), ids(65534, 65534));
        assert_eq!(got(Some(Account::Id(998)), true), ids(998, 997), "a uid takes its user's group");
        let none = command_ids_of(None, |_| Ok(None)).map_err(|e| e.to_string());
        assert_eq!(none, Err("no user \"nobody\" on this host".to_string()));
    }

    #[test]
    fn a_command_user_that_does_not_exist_is_an_error() {
        let got = |a: Account| command_ids_of(Some(&a), db(true)).map_err(|e| e.to_string());
        assert_eq!(got(Account::Name("ghost".into())), Err("no user \"ghost\" on this host".to_string()));
        assert_eq!(got(Account::Id(4_000_000)), Err("no user 4000000 on this host".to_string()));
        let failing = command_ids_of(None, |_| Err(io::Error::other("nss down"))).map_err(|e| e.to_string());
        assert_eq!(failing, Err("reading the user database for user \"monitor\": nss down".to_string()));
    }

    #[test]
    fn the_host_resolves_nobody() {
        // The real database (root's own and nobody exist on every host this runs on).
        let c = AlertsConfig { command_user: Some(Account::Name("nobody".into())), ..AlertsConfig::default() };
        let ids = c.command_ids().map_err(|e| e.to_string());
        assert!(ids.as_ref().is_ok_and(|i| i.uid != 0 && i.gid != 0), "{ids:?}");
        let d = AlertsConfig::default().command_ids().map_err(|e| e.to_string());
        assert!(d.as_ref().is_ok_and(|i| i.uid != 0), "{d:?}");
    }
}
