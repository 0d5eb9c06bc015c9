//! The applied config as the running parts read it: one watch channel, published at start and after each good
//! reload (SIGHUP), that the sampler, the alerts, the actions and the stats database's writer each read; the config
//! never calls them. The other readers take the policy's lines from the sample decided with them. Beside it,
//! [`Reloads`]: what the last reload did, for `/api/v1/status` and `/metrics`.

use crate::base::units::unix_ms as now_ms;
use crate::config::Config;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::watch;

/// A reader of the applied config. Cheap to clone; each clone sees each new config once through
/// [`Live::changed`] or [`Live::next`].
#[derive(Clone, Debug)]
pub struct Live {
    rx: watch::Receiver<Arc<Config>>,
}

/// Publishes the applied config (the reload's end of [`Live`]).
pub struct Publisher {
    tx: watch::Sender<Arc<Config>>,
}

impl Live {
    /// The channel of the applied config, `cfg` first.
    pub fn new(cfg: Config) -> (Publisher, Live) {
        let (tx, rx) = watch::channel(Arc::new(cfg));
        (Publisher { tx }, Live { rx })
    }

    /// A config that never changes (no reload: benchmarks, and the parts tested on their own).
    pub fn fixed(cfg: Config) -> Live {
        Live::new(cfg).1
    }

    /// The applied config now.
    pub fn now(&self) -> Arc<Config> {
        self.rx.borrow().clone()
    }

    /// The policy's lines now (the readers take the lines each sample was decided with, from the sample).
    #[cfg(test)]
    pub fn thresholds(&self) -> crate::decision::policy::Thresholds {
        self.rx.borrow().policy.thresholds()
    }

    /// The new config when one was applied since this reader last looked, without waiting (for threads).
    pub fn changed(&mut self) -> Option<Arc<Config>> {
        match self.rx.has_changed() {
            Ok(true) => Some(self.rx.borrow_and_update().clone()),
            _ => None,
        }
    }

    /// Waits for the next config applied; never resolves once the publisher is gone (nothing will change).
    pub async fn next(&mut self) -> Arc<Config> {
        if self.rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
        self.rx.borrow_and_update().clone()
    }
}

impl Publisher {
    /// The applied config now.
    pub fn current(&self) -> Arc<Config> {
        self.tx.borrow().clone()
    }

    /// Applies `cfg`: every reader sees it.
    pub fn publish(&self, cfg: Config) {
        self.tx.send_replace(Arc::new(cfg));
    }
}

/// How the last reload ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReloadResult {
    Ok,
    Failed,
}

/// `/api/v1/status` `config`: where the applied config came from and how the last reload went.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigStatus {
    /// The file read at start and on reload (null: the built-in defaults, nothing to read again).
    pub file: Option<PathBuf>,
    /// When the applied config was read: at start, or by the last good reload (Unix time, milliseconds).
    pub loaded_at: u64,
    /// `ok` or `failed`; null before the first reload.
    pub last_reload: Option<ReloadResult>,
    /// Why the last reload failed (file, line, key), null after a good one.
    pub error: Option<String>,
    /// Keys the file changes that only a restart applies (the running values are kept).
    #[serde(default)]
    pub restart_needed: Vec<String>,
    /// Reloads since start, by result (also `monitor_config_reloads_total`).
    #[serde(default)]
    pub reloads_ok: u64,
    #[serde(default)]
    pub reloads_failed: u64,
}

/// What the reloads did, shared by the reload task (which writes it), the API and `/metrics`.
#[derive(Debug)]
pub struct Reloads {
    status: Mutex<ConfigStatus>,
    ok: AtomicU64,
    failed: AtomicU64,
}

impl Reloads {
    /// The config `file` was read just now, at start.
    pub fn new(file: Option<PathBuf>) -> Reloads {
        let status = ConfigStatus {
            file,
            loaded_at: now_ms(),
            last_reload: None,
            error: None,
            restart_needed: Vec::new(),
            reloads_ok: 0,
            reloads_failed: 0,
        };
        Reloads { status: Mutex::new(status), ok: AtomicU64::new(0), failed: AtomicU64::new(0) }
    }

    fn lock(&self) -> MutexGuard<'_, ConfigStatus> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A good reload, which left `restart_needed` keys as running.
    pub fn succeeded(&self, restart_needed: Vec<String>) {
        self.ok.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock();
        s.loaded_at = now_ms();
        s.last_reload = Some(ReloadResult::Ok);
        s.error = None;
        s.restart_needed = restart_needed;
    }

    /// A reload refused: the running config is kept.
    pub fn failed(&self, error: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut s = self.lock();
        s.last_reload = Some(ReloadResult::Failed);
        s.error = Some(error);
    }

    /// (good, failed) reloads since start.
    pub fn counts(&self) -> (u64, u64) {
        (self.ok.load(Ordering::Relaxed), self.failed.load(Ordering::Relaxed))
    }

    /// The status document's `config` object.
    pub fn status(&self) -> ConfigStatus {
        let (ok, failed) = self.counts();
        ConfigStatus { reloads_ok: ok, reloads_failed: failed, ..self.lock().clone() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reader_sees_a_new_config_once() {
        let (publisher, mut a) = Live::new(Config::default());
        let mut b = a.clone();
        assert!(a.changed().is_none(), "the first config is no change");
        let mut cfg = Config::default();
        cfg.policy.refuse_at = 0.7;
        publisher.publish(cfg);
        assert_eq!(a.changed().map(|c| c.policy.refuse_at), Some(0.7));
        assert!(a.changed().is_none(), "seen once");
        assert_eq!(b.thresholds().refuse_at, 0.7, "a reader that did not look still reads the present");
        assert!(b.changed().is_some());
    }

    #[test]
    fn a_failed_reload_keeps_the_time_of_the_config_in_use() {
        let r = Reloads::new(None);
        let at = r.status().loaded_at;
        r.failed("m.toml:3: unknown field `refuse_att`".into());
        let s = r.status();
        assert_eq!((s.last_reload, s.loaded_at, s.reloads_failed), (Some(ReloadResult::Failed), at, 1));
        assert!(s.error.as_deref().is_some_and(|e| e.contains("refuse_att")));
        r.succeeded(vec!["web.listen".into()]);
        let s = r.status();
        assert_eq!((s.last_reload, s.error, s.reloads_ok), (Some(ReloadResult::Ok), None, 1));
        assert_eq!(s.restart_needed, ["web.listen"]);
        assert_eq!(r.counts(), (1, 1));
    }
}
