//! SIGHUP reloads the config: the file the agent started with is read and checked again as at start
//! (`load -> parse -> validate`, with the command line's values over it). A good one is published on the applied
//! config's watch channel ([`Live`]), which the sampler, the alerts, the actions and the stats database read;
//! keys only a restart applies keep their running values, each named once in a warning. A bad one is logged with
//! its file, line and key, and the running config is kept. Either way the outcome is counted
//! (`monitor_config_reloads_total`) and shown (`/api/v1/status` `config`), and systemd hears `RELOADING=1` at the
//! start and `READY=1` at the end. The signal never stops the agent; the drain ([`super::drain`]) ends the task.

use super::drain::DrainWatch;
use crate::config::live::{Publisher, Reloads};
use crate::config::{self, Source};
use crate::feed::Published;
use std::sync::Arc;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

/// Catches SIGHUP from now on (its default action would end the process). Call on the runtime, as early as
/// possible; a signal caught before [`Reloader::spawn`] is served then.
pub(crate) fn catch() -> Option<Signal> {
    match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::error!("cannot catch SIGHUP: {e} (a reload signal would stop the agent)");
            None
        }
    }
}

/// What a reload reads, and where it publishes and counts.
pub(crate) struct Reloader {
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
        crate::base::notify::reloading();
        let outcome = self.apply();
        let line = {
            let now = self.latest.borrow();
            crate::sampler::status_line(&now.snapshot, &now.decision)
        };
        crate::base::notify::ready(&format!("{line}; {outcome}"));
    }

    /// Reads, checks and applies the config; says how it went in a few words.
    fn apply(&self) -> String {
        let (Some(path), Some(loaded)) = (self.source.file.as_deref(), self.source.load()) else {
            tracing::info!("SIGHUP: no config file to read again (started without one): the running config is kept");
            return "no config file to reload".into();
        };
        let file = path.display().to_string();
        let new = match loaded {
            Err(e) => return self.refuse(e.to_string()),
            Ok(new) => new,
        };
        let running = self.publisher.current();
        let r = config::reload(&running, &new, self.mode);
        let restart: Vec<String> = r.restart().into_iter().map(String::from).collect();
        // A live value checked against one kept until a restart (abort_at against brake_at), placed at its line.
        if !r.config.validate().is_empty() {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            if let Some(e) = r.config.problems(&text, path).into_iter().next() {
                let kept = restart.join(", ");
                return self.refuse(format!("{e} (kept as running until a restart: {kept})"));
            }
        }
        for key in &restart {
            tracing::warn!(
                key = %key,
                file = %file,
                "config reload: {key} changed in the file but needs a restart: the running value is kept"
            );
        }
        let live = r.live();
        tracing::info!(
            file = %file,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::live::{Live, ReloadResult};
    use crate::config::{Config, Mode};
    use crate::decision::policy::State;

    /// A reloader of the file `text` is written to, running `running`.
    fn reloader(name: &str, running: &str) -> (Reloader, Live, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("monitor-reload-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("m.toml");
        std::fs::write(&path, running).expect("write");
        let cfg = match Config::load(&path) {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        };
        let (publisher, live) = Live::new(cfg);
        let (_tx, latest) = watch::channel(Arc::new(Published::test(State::Normal)));
        let reloads = Arc::new(Reloads::new(Some(path.clone())));
        let r = Reloader { source: Source::file(&path), publisher, reloads, mode: Mode::Run, latest };
        (r, live, path)
    }

    #[test]
    fn a_good_file_is_applied_and_a_bad_one_kept_out() {
        let (r, live, path) = reloader("good-bad", "[policy]\nrefuse_at = 0.85\n");
        std::fs::write(&path, "[policy]\nrefuse_at = 0.7\n[web]\nlisten = \"127.0.0.1:1\"\n").expect("write");
        assert_eq!(r.apply(), "config reloaded, 1 changes applied, 1 need a restart");
        assert_eq!(live.thresholds().refuse_at, 0.7);
        assert_eq!(live.now().web.listen, "127.0.0.1:9464", "kept until a restart");
        std::fs::write(&path, "[policy]\nrefuse_at = 0.6\n\nrefuse_att = 0.5\n").expect("write");
        assert_eq!(r.apply(), "config reload failed, the running config is kept");
        assert_eq!(live.thresholds().refuse_at, 0.7);
        let s = r.reloads.status();
        assert_eq!((s.last_reload, s.reloads_ok, s.reloads_failed), (Some(ReloadResult::Failed), 1, 1));
        let e = s.error.unwrap_or_default();
        assert!(e.starts_with(&format!("{}:4:", path.display())) && e.contains("refuse_att"), "{e}");
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn a_live_value_against_a_kept_one_is_refused_at_its_line() {
        let (r, live, path) = reloader("clash", "[policy]\nabort_at = 0.9\nbrake_at = 0.95\n");
        std::fs::write(&path, "[policy]\nabort_at = 0.97\nbrake_at = 0.98\nkill_at = 0.99\n").expect("write");
        assert_eq!(r.apply(), "config reload failed, the running config is kept");
        let e = r.reloads.status().error.unwrap_or_default();
        let want = format!("{}:3: policy.brake_at: 0.95 must be above abort_at (0.97) and below 1", path.display());
        assert!(e.starts_with(&want), "{e}");
        assert!(e.ends_with("(kept as running until a restart: policy.brake_at)"), "{e}");
        assert_eq!(live.now().policy.abort_at, 0.9);
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }

    #[test]
    fn without_a_file_nothing_is_read_or_counted() {
        let (mut r, live, path) = reloader("none", "");
        r.source = Source::default();
        assert_eq!(r.apply(), "no config file to reload");
        assert_eq!((r.reloads.counts(), live.now().as_ref()), ((0, 0), &Config::default()));
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(&path));
    }
}
