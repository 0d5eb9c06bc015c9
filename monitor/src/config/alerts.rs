//! `[alerts]`: where the alerts go (a command, a webhook, Alertmanager), with what labels, and how often.

use super::HttpUrl;
use serde::Deserialize;
use std::path::PathBuf;

/// `[alerts]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AlertsConfig {
    /// argv of a hook run (without a shell) on every alert, the alert as JSON on stdin and in `MONITOR_*`
    /// variables. Default none.
    pub command: Option<Vec<String>>,
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
    /// The `Authorization` header the HTTP sinks send, read from the token or password file.
    pub fn authorization(&self) -> Result<Option<String>, String> {
        let read = |f: &PathBuf| {
            std::fs::read_to_string(f)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|e| format!("{}: {e}", f.display()))
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

impl Default for AlertsConfig {
    fn default() -> Self {
        AlertsConfig {
            command: None,
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
