//! SIGHUP reloads the config: the file the agent started with is read and checked again as at start
//! (`load -> parse -> validate`, with the command line's values over it). A good one is published on the applied
//! config's watch channel ([`Live`]), which the sampler, the API, the history, the alerts and the actions read;
//! keys only a restart applies keep their running values, each named once in a warning. A bad one is logged with
//! its file, line and key, and the running config is kept. Either way the outcome is counted
//! (`monitor_config_reloads_total`) and shown (`/api/v1/status` `config`), and systemd hears `RELOADING=1` at the
//! start and `READY=1` at the end. The signal never stops the agent; the drain ([`super::drain`]) ends the task.

use super::drain::DrainWatch;
use crate::config::{self, Source};
use crate::feed::Published;
use crate::live::{Publisher, Reloads};
use std::sync::Arc;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// Catches SIGHUP from now on (its default action would end the process). Call on the runtime, as early as
/// possible; a signal caught before [`Reloader::spawn`] is served then.
pub fn catch() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("cannot catch SIGHUP: {e} (a reload signal would stop the agent)");
            None
        }
    }
}

/// What a reload reads, and where it publishes and counts.
pub struct Reloader {
    pub source: Source,
    pub publisher: Publisher,
    pub reloads: Arc<Reloads>,
    /// The command running: `monitor agent` does not read `[proxy]` and `[[process]]`.
    pub mode: config::Mode,
    /// The latest sample, for the status line systemd shows after a reload.
    pub latest: watch::Receiver<Arc<Published>>,
}

impl Reloader {
    /// Reloads on each SIGHUP until the drain starts.
    pub fn spawn(self, hangups: Option<Signal>, drained: DrainWatch) {
        let Some(mut hangups) = hangups else { return };
        tokio::spawn(async move {
            let drain = drained.started();
            tokio::pin!(drain);
            loop {
                tokio::select! {
                    _ = &mut drain => break,
                    got = hangups.recv() => match got {
                        Some(()) => self.reload(),
                        None => break,
                    },
                }
            }
        });
    }

    /// One reload, from `RELOADING=1` to `READY=1`.
    pub fn reload(&self) {
        crate::notify::reloading();
        let outcome = self.apply();
        let line = {
            let now = self.latest.borrow();
            crate::sampler::status_line(&now.snapshot, &now.decision)
        };
        crate::notify::ready(&format!("{line}; {outcome}"));
    }

    /// Reads, checks and applies the config; says how it went in a few words.
    fn apply(&self) -> String {
        let file = self.source.file.as_ref().map(|f| f.display().to_string());
        let new = match self.source.load() {
            None => {
                tracing::info!(
                    "SIGHUP: no config file to read again (started without one): the running config is kept"
                );
                return "no config file to reload".into();
            }
            Some(Err(e)) => return self.refuse(e.to_string()),
            Some(Ok(new)) => new,
        };
        let running = self.publisher.current();
        let r = config::reload(&running, &new, self.mode);
        let restart: Vec<String> = r.restart().into_iter().map(String::from).collect();
        // A live value checked against one kept until a restart (abort_at against brake_at).
        if let Some(p) = r.config.validate().into_iter().next() {
            let kept = restart.join(", ");
            return self.refuse(format!(
                "{}: {}: {} (with the running values of {kept}, which need a restart)",
                file.as_deref().unwrap_or_default(),
                config::key_name(&p.key),
                p.msg
            ));
        }
        for key in &restart {
            tracing::warn!(
                key = %key,
                file = file.as_deref().unwrap_or_default(),
                "config reload: {key} changed in the file but needs a restart: the running value is kept"
            );
        }
        let live = r.live();
        tracing::info!(
            file = file.as_deref().unwrap_or_default(),
            applied = %live.join(", "),
            restart_needed = %restart.join(", "),
            "config reloaded"
        );
        self.publisher.publish(r.config);
        self.reloads.succeeded(restart.clone());
        match (live.len(), restart.len()) {
            (0, 0) => "config reloaded, unchanged".into(),
            (n, 0) => format!("config reloaded, {n} changes applied"),
            (n, k) => format!("config reloaded, {n} changes applied, {k} need a restart"),
        }
    }

    /// A reload refused: the running config stays.
    fn refuse(&self, error: String) -> String {
        tracing::error!("config reload failed, the running config is kept: {error}");
        self.reloads.failed(error);
        "config reload failed, the running config is kept".into()
    }
}
