//! The TOML config: `load -> parse -> validate`. Unknown keys and bad values stop start-up with the key and its
//! line. Every field's default is in its doc comment.
//!
//! Values with a fixed set of forms are typed leaves deserialized from their text ([`Role`], [`HooksChoice`],
//! [`Signal`], [`HttpUrl`]), so a bad one is an error of the TOML parser itself, at its key and line, and the
//! consumers get the parsed value. [`Config::validate`] (validate.rs) checks what is left: values against each
//! other and the ranges of plain numbers and strings. The config names no consumer: they depend on it.
//!
//! Its floor (docs/design.md, "Layers") also holds [`live`] (the applied config and its reloads), [`route`] (the
//! pure routing table) and [`client`] (the HTTP client of the alerts and the actions).

mod alerts;
mod changes;
mod check;
pub mod client;
mod cluster;
mod hooks;
pub mod live;
pub mod paths;
mod position;
mod proxy;
mod role;
pub mod route;
mod secret;
mod signal;
mod url;
mod validate;

pub use alerts::{AlertsConfig, BasicAuth};
pub use changes::{reload, Apply, Change, Reload};
pub use check::{check, Checked, Mode};
pub use cluster::{host_name, ClusterConfig, Fallback};
pub use hooks::{CloseHook, Hooks, HooksChoice};
pub use proxy::{ProcessConfig, ProxyConfig};
pub use role::Role;
pub use signal::Signal;
pub use url::{HttpUrl, UrlError};
pub use validate::{key_name, KeyPart, Problem};

use position::Positions;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A config that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// Bad TOML, an unknown key, or a value of the wrong type.
    #[error("{path}:{line}: {msg}")]
    Syntax { path: PathBuf, line: usize, msg: String },
    /// A value of the right type that is not allowed; `line` is 0 when the key is not in the file.
    #[error("{path}:{line}: {key}: {msg}")]
    Invalid { path: PathBuf, line: usize, key: String, msg: String },
    /// A config the command it is checked for would not start with (`check-config --mode`).
    #[error("{path}: {msg}")]
    Mode { path: PathBuf, msg: String },
}

/// `[group]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct GroupConfig {
    /// The group's cgroup: `auto` (the agent's own memory cgroup), an absolute path under /sys/fs/cgroup, or a path
    /// relative to the memory controller's mount. Default `auto`.
    pub cgroup: String,
    /// `monitor run`: create the cgroup if it does not exist (and remove it on exit if it created it). Default false.
    pub create: bool,
    /// `monitor run`: write this memory limit (bytes) to the group at start (`memory.limit_in_bytes` on v1,
    /// `memory.max` on v2). Default: none (the limit is left as it is).
    pub limit_bytes: Option<u64>,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig { cgroup: "auto".into(), create: false, limit_bytes: None }
    }
}

/// `[policy]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct PolicyConfig {
    /// Every process refuses new requests at or above this fraction of the limit. Default 0.85.
    pub refuse_at: f64,
    /// The largest process aborts its in-flight work at or above this fraction. Default 0.92.
    pub abort_at: f64,
    /// A state is left this far below its threshold. Default 0.02.
    pub hysteresis: f64,
    /// Sampling interval in milliseconds (10..=60000). Default 100.
    pub interval_ms: u64,
    /// Use this limit instead of the cgroup's (bytes). Default: none (the cgroup's, else the host's MemTotal).
    pub limit_bytes: Option<u64>,
    /// Decide and record everything, enforce nothing. Default false.
    pub shadow: bool,
    /// While still at or above abort_at this long after an abort, abort the (new) largest again. Default 5000.
    pub abort_repeat_ms: u64,
    /// The kernel's wake-ups the sampler also listens to, besides its timer, each used where the kernel offers it:
    /// `thresholds` (cgroup v1 memory thresholds on `memory.usage_in_bytes`), `events` (cgroup v2 `memory.events`
    /// changes), `pressure` (a cgroup v2 PSI trigger on `memory.pressure`). Empty: the timer only. Default all three.
    pub wakeups: Vec<WakeupKind>,
    /// Sample faster as the headroom to the next line shrinks and the growth rises, down to `min_interval_ms`;
    /// `interval_ms` when far from the lines. Default true (false: every `interval_ms`).
    pub pacing: bool,
    /// The shortest interval pacing may choose, in milliseconds (1..=interval_ms). Default 5.
    pub min_interval_ms: u64,
    /// The fastest growth pacing assumes, in MiB/s, while no kernel threshold watches the group's usage (cgroup v2,
    /// or `thresholds` off): a grower this fast is sampled before it can cross the next line. Default 2048.
    pub fill_rate_mib_s: u64,
    /// cgroup v2: set the group's `memory.high` at this fraction of the limit, so the kernel throttles a grower there
    /// instead of killing it at the limit, which gives the abort time to land. Above abort_at and below 1. The old
    /// value is put back on exit (and at the next start after a crash); `memory.max` is never touched. Default: off.
    pub brake_at: Option<f64>,
    /// The last resort: the agent SIGKILLs the process told to abort when it cannot obey (see `kill_at` and
    /// `kill_after_ms`), before the kernel's OOM killer acts on the whole group. Default true.
    pub kill: bool,
    /// At or above this fraction of the limit the agent kills the victim at once. Above abort_at and below 1.
    /// Default 0.97.
    pub kill_at: f64,
    /// Still aborting this long after the abort was sent while the victim is still growing (its anon rose by more
    /// than 0.5% of the limit, at least 1 MiB, over the last half of this wait): the agent kills it, wherever the
    /// ratio is, in milliseconds. A victim that stopped growing obeyed, even while its runtime keeps the memory: it
    /// is not killed below kill_at. Default 2000.
    pub kill_after_ms: u64,
    /// The wait for the next kill while the last is not done (its target still listed, or the usage not yet fallen
    /// by half of what it held), in milliseconds; once it is done the next may follow at once. After three kills
    /// that did not bring the ratio below abort_at the agent stops killing and alerts (`MonitorKillIneffective`).
    /// Default 1000.
    pub kill_repeat_ms: u64,
    /// A process told to abort that obeyed (it stopped growing) but still keeps the group at or above refuse_at
    /// this long after it was told is restarted gracefully, never killed: under `monitor run` its requests in flight
    /// finish (up to `[proxy] drain_timeout_s`), then SIGTERM and the launcher's restart; under `monitor agent`
    /// `[actions] recycle_signal` is sent, if set. One at a time. Its runtime may hold what it dropped for long (V8
    /// until its next garbage collection, about 9 s idle; a JVM its committed heap for good). In seconds; 0: never.
    /// Default 20.
    pub recycle_after_s: u64,
}

/// A kernel wake-up source of the sampler (`[policy] wakeups`).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeupKind {
    /// cgroup v1: eventfd thresholds on `memory.usage_in_bytes`, re-armed around the usage after each wake-up.
    Thresholds,
    /// cgroup v2: a change of `memory.events` (`high`, `max`, `oom`, `oom_kill`).
    Events,
    /// cgroup v2: a PSI trigger on the group's `memory.pressure`.
    Pressure,
}

impl WakeupKind {
    pub const ALL: [WakeupKind; 3] = [WakeupKind::Thresholds, WakeupKind::Events, WakeupKind::Pressure];

    pub fn as_str(self) -> &'static str {
        match self {
            WakeupKind::Thresholds => "thresholds",
            WakeupKind::Events => "events",
            WakeupKind::Pressure => "pressure",
        }
    }
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            refuse_at: 0.85,
            abort_at: 0.92,
            hysteresis: 0.02,
            interval_ms: 100,
            limit_bytes: None,
            shadow: false,
            abort_repeat_ms: 5000,
            wakeups: WakeupKind::ALL.to_vec(),
            pacing: true,
            min_interval_ms: 5,
            fill_rate_mib_s: 2048,
            brake_at: None,
            kill: true,
            kill_at: 0.97,
            kill_after_ms: 2000,
            kill_repeat_ms: 1000,
            recycle_after_s: 20,
        }
    }
}

impl PolicyConfig {
    pub fn thresholds(&self) -> crate::decision::policy::Thresholds {
        crate::decision::policy::Thresholds {
            refuse_at: self.refuse_at,
            abort_at: self.abort_at,
            hysteresis: self.hysteresis,
            abort_repeat_ms: self.abort_repeat_ms,
            shadow: self.shadow,
            kill: self.kill,
            kill_at: self.kill_at,
            kill_after_ms: self.kill_after_ms,
            kill_repeat_ms: self.kill_repeat_ms,
            recycle_after_ms: self.recycle_after_s.saturating_mul(1000),
        }
    }
}

/// `[web]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WebConfig {
    /// Address of the API, metrics and home page. Default `127.0.0.1:9464`.
    pub listen: String,
    /// The home page's address as operators reach it (`http://` or `https://`, through a proxy or a DNS name): the
    /// alerts' `generatorURL` links there. Default `http://<listen>/`, useful on the host only.
    pub external_url: Option<String>,
    /// API and home page connections served at once (64 per client address, loopback excepted); at the cap the
    /// longest-idle one is closed to admit a new one, and when every one is answering, new ones are closed.
    /// Default 256.
    pub max_connections: usize,
    /// Largest request head (request line + headers) in bytes, and the most the agent buffers of one connection's
    /// input: larger gets 431. Default 16384 (at least 8192).
    pub max_header_bytes: usize,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig { listen: "127.0.0.1:9464".into(), external_url: None, max_connections: 256, max_header_bytes: 16384 }
    }
}

impl WebConfig {
    /// Where alerts link back to: `external_url`, else the listen address.
    pub(crate) fn generator_url(&self) -> String {
        match &self.external_url {
            Some(u) => u.clone(),
            None => format!("http://{}/", self.listen),
        }
    }
}

/// `[stats]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct StatsConfig {
    /// SQLite file of per-minute history. Default: none (history in memory only).
    pub path: Option<PathBuf>,
    /// Rows older than this many days are deleted. Default 30.
    pub retention_days: u32,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig { path: None, retention_days: 30 }
    }
}

/// `[probes]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProbesConfig {
    /// Count requests per process with eBPF. Default true (the agent runs on without them if they cannot load).
    pub enabled: bool,
    /// Which kernel hooks carry the programs: `auto` (default: the socket tracepoints where the kernel has them,
    /// else raw `sys_exit`, else the per-syscall tracepoints), or one set by name, `sock`, `raw_sys_exit` or
    /// `tracepoints`, with no fallback. The socket set does not see HTTP served on Unix domain sockets: a group
    /// that serves there needs `raw_sys_exit` (docs/probes.md).
    pub hooks: HooksChoice,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        ProbesConfig { enabled: true, hooks: HooksChoice::Auto }
    }
}

impl ProbesConfig {
    /// The hook set `hooks` names, or `None` for `auto`.
    pub(crate) fn chosen_hooks(&self) -> Option<Hooks> {
        self.hooks.only()
    }
}

/// The whole file.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub group: GroupConfig,
    pub policy: PolicyConfig,
    pub web: WebConfig,
    pub stats: StatsConfig,
    pub probes: ProbesConfig,
    pub proxy: ProxyConfig,
    #[serde(rename = "process")]
    pub processes: Vec<ProcessConfig>,
    pub alerts: AlertsConfig,
    pub actions: ActionsConfig,
    /// `monitor run` on several hosts (docs/cluster.md). Default: none, the node is alone.
    pub cluster: Option<ClusterConfig>,
}

/// `[actions]`: a signal to each process of the group when its action changes (for processes not behind the
/// front door; see [`crate::consumers::actions`]). Names such as `"SIGUSR1"`; each unset by default (nothing is sent).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ActionsConfig {
    /// Sent to every process when it starts refusing new requests. Default: none.
    pub refuse_signal: Option<Signal>,
    /// Sent to the process told to abort its in-flight work (the largest). Default: none.
    pub abort_signal: Option<Signal>,
    /// Sent when a process may serve again. Default: none.
    pub serve_signal: Option<Signal>,
    /// `monitor agent`: sent to a process to recycle (`[policy] recycle_after_s`): one that obeyed its abort but keeps
    /// the group over refuse_at; it should finish its work and restart (or exit, for its supervisor to restart it).
    /// Never a SIGKILL. Default: none (the group keeps refusing, and the alert says why). `monitor run` recycles its
    /// processes itself (SIGTERM, then its restart).
    pub recycle_signal: Option<Signal>,
    /// Every change of a process's action is POSTed here as JSON (`http://host[:port]/path`; `https://` is not
    /// supported yet), with the proof of [`crate::base::proof`] when there is a secret. Default: none.
    pub post_url: Option<HttpUrl>,
    /// Each process is POSTed its own changes at this path on the port it listens on (under `monitor run`, its
    /// `[[process]] port`; for the agent, the lowest TCP port the process listens on, found when a change is told).
    /// A `[[process]] admin_path` takes precedence. Default: none.
    pub admin_path: Option<String>,
    /// A file holding the group's secret (at least 32 bytes; its trailing newline is not part of it) that every
    /// action POST is signed with (`X-Monitor-Proof`, see [`crate::base::proof`]). `monitor agent` reads it at start
    /// and on each reload; without it the agent's POSTs are unsigned (it says so at start). `monitor run` reads it at
    /// start and hands it to its processes as hex in `MONITOR_ACTION_SECRET`. Default: none (`monitor run` makes a
    /// random secret of 32 bytes at start).
    pub secret_file: Option<PathBuf>,
}

impl ActionsConfig {
    /// True when `monitor agent` would POST action changes (`post_url` or `admin_path`) without a proof: no
    /// `secret_file`. (`monitor run` always signs: it makes a secret when none is given.)
    pub(crate) fn posts_unsigned(&self) -> bool {
        (self.post_url.is_some() || self.admin_path.is_some()) && self.secret_file.is_none()
    }

    /// The secret of `secret_file`, less a trailing newline (None when unset); an error names the file, and one
    /// that others may read is refused ([`secret::read`]).
    pub fn secret(&self) -> Result<Option<Vec<u8>>, String> {
        self.secret_file.as_deref().map(secret::read).transpose()
    }
}

/// For serde's "unknown field `x`, expected one of `a`, `b`": the known name nearest to `x`, when one is near
/// enough to be a typo (`polcy` -> `policy`).
fn nearest_known(msg: &str) -> Option<&str> {
    let rest = msg.split("unknown field `").nth(1)?;
    let (unknown, rest) = rest.split_once('`')?;
    let known = rest.split_once("expected one of ").or_else(|| rest.split_once("expected "))?.1;
    known
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|k| (strsim::damerau_levenshtein(unknown, k), k))
        .filter(|&(d, k)| d > 0 && d <= (k.len() / 3).max(1))
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::from_toml(&read(path)?, path)
    }

    /// Parses and checks config text; `path` only names the file in errors. The first problem is the error.
    pub fn from_toml(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let cfg = Config::parse(text, path)?;
        match cfg.problems(text, path).into_iter().next() {
            Some(e) => Err(e),
            None => Ok(cfg),
        }
    }

    /// Parses config text without the checks of [`Config::validate`]: bad TOML, an unknown key, a value of the
    /// wrong type or not of its type's forms (a role, a signal, a URL) is an error at its line, naming its key.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
            let (line, msg) = match e.span() {
                Some(span) => {
                    // A value of the wrong type: the span covers the value; name its key.
                    let at = Positions::new(text);
                    let msg = match at.key_at(span.start) {
                        Some(key) if !msg.contains(&key) => format!("{key}: {msg}"),
                        _ => msg,
                    };
                    (at.line_of(span.start), msg)
                }
                None => (0, msg),
            };
            let msg = match nearest_known(&msg) {
                Some(near) => format!("{msg}; did you mean `{near}`?"),
                None => msg,
            };
            ConfigError::Syntax { path: path.to_path_buf(), line, msg }
        })
    }

    /// Every problem [`Config::validate`] finds in a config parsed from `text`, each placed at its key's line.
    pub fn problems(&self, text: &str, path: &Path) -> Vec<ConfigError> {
        let found = self.validate();
        if found.is_empty() {
            return Vec::new();
        }
        let at = Positions::new(text);
        found
            .into_iter()
            .map(|p| {
                let path = path.to_path_buf();
                // The other key is named only when the checked one is not in the file.
                let line = at.locate(&p.key);
                match line.is_none().then(|| at.locate(&p.with)).flatten() {
                    Some(line) => {
                        let msg = format!("with {} at its default, {}", key_name(&p.key), p.msg);
                        ConfigError::Invalid { path, line, key: key_name(&p.with), msg }
                    }
                    None => ConfigError::Invalid { path, line: line.unwrap_or(0), key: key_name(&p.key), msg: p.msg },
                }
            })
            .collect()
    }
}

/// Where a running config comes from, so that a reload reads it the same way: the file (none: the built-in
/// defaults, with nothing to read again) and the command line's overrides, which win over the file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Source {
    pub file: Option<PathBuf>,
    /// `monitor agent --cgroup`.
    pub cgroup: Option<String>,
    /// `monitor agent --listen`.
    pub listen: Option<String>,
    /// `monitor agent --interval-ms`.
    pub interval_ms: Option<u64>,
}

impl Source {
    /// A config file with no overrides (`monitor run --config FILE`).
    pub fn file(path: &Path) -> Source {
        Source { file: Some(path.to_path_buf()), ..Source::default() }
    }

    /// Reads and checks the file as start-up does (`load -> parse -> validate`), with the overrides applied before
    /// the checks. `None` when there is no file to read.
    pub fn load(&self) -> Option<Result<Config, ConfigError>> {
        let path = self.file.as_deref()?;
        Some(read(path).and_then(|text| {
            let mut cfg = Config::parse(&text, path)?;
            self.apply(&mut cfg);
            match cfg.problems(&text, path).into_iter().next() {
                Some(e) => Err(e),
                None => Ok(cfg),
            }
        }))
    }

    /// Puts the command line's values over the file's.
    pub(crate) fn apply(&self, cfg: &mut Config) {
        if let Some(c) = &self.cgroup {
            cfg.group.cgroup.clone_from(c);
        }
        if let Some(l) = &self.listen {
            cfg.web.listen.clone_from(l);
        }
        if let Some(i) = self.interval_ms {
            cfg.policy.interval_ms = i;
        }
    }
}

/// The text of a config file.
fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error `text` is refused with.
    pub(crate) fn err(text: &str) -> String {
        match Config::from_toml(text, Path::new("m.toml")) {
            Ok(c) => panic!("accepted: {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn credentials_are_read_from_their_files() {
        let dir = std::env::temp_dir().join(format!("monitor-cred-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let secret = dir.join("secret");
        let _ = std::fs::write(&secret, "pa:ss\n");
        let _ = std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600));
        let mut a = AlertsConfig { bearer_token_file: Some(secret.clone()), ..AlertsConfig::default() };
        assert_eq!(a.authorization(), Ok(Some("Bearer pa:ss".to_string())));
        a.bearer_token_file = None;
        a.basic_auth = Some(BasicAuth { username: "monitor".into(), password_file: secret.clone() });
        // base64("monitor:pa:ss")
        assert_eq!(a.authorization(), Ok(Some("Basic bW9uaXRvcjpwYTpzcw==".to_string())));
        a.basic_auth = Some(BasicAuth { username: "m".into(), password_file: dir.join("missing") });
        assert!(a.authorization().is_err_and(|e| e.contains("missing")));
        assert_eq!(AlertsConfig::default().authorization(), Ok(None));
        // A token others can read is refused, as every secret file.
        let _ = std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o644));
        a.basic_auth = Some(BasicAuth { username: "m".into(), password_file: secret.clone() });
        assert!(a.authorization().is_err_and(|e| e.contains("is mode 0644 (readable by others): run chmod 600")));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn fleet_labels_external_url_and_several_alertmanagers() {
        let c = Config::from_toml(
            "[web]\nexternal_url = \"https://mon.example/app\"\n[alerts]\nalertmanager = \"http://127.0.0.1:9093\"\n\
             alertmanagers = [\"http://127.0.0.1:9094\", \"http://127.0.0.1:9093\"]\nlabels = { team = \"storage\" }\n",
            Path::new("m.toml"),
        )
        .expect("a good config");
        assert_eq!(c.web.generator_url(), "https://mon.example/app");
        assert_eq!(Config::default().web.generator_url(), "http://127.0.0.1:9464/");
        let ams: Vec<String> = c.alerts.all_alertmanagers().iter().map(|u| u.to_string()).collect();
        assert_eq!(ams.len(), 2, "{ams:?}");
        assert_eq!(c.alerts.labels.get("team").map(String::as_str), Some("storage"));
        let e = err("[alerts]\nlabels = { \"bad-name\" = \"x\" }\n");
        assert!(e.starts_with("m.toml:2: alerts.labels:") && e.contains("not a label name"), "{e}");
        let e = err("[alerts]\nlabels = { alertname = \"x\" }\n");
        assert!(e.contains("alertname is the alert's own label"), "{e}");
        let e = err("[web]\nexternal_url = \"mon.example\"\n");
        assert!(e.starts_with("m.toml:2: web.external_url:"), "{e}");
        let e = err("[alerts]\ncommand = [\"true\"]\ncommand_user = \"no-such-user-for-monitor\"\n");
        assert_eq!(e, "m.toml:3: alerts.command_user: no user \"no-such-user-for-monitor\" on this host");
        let e = err("[alerts]\nbearer_token_file = \"/etc/hostname\"\nbasic_auth = { username = \"u\", password_file = \"/etc/hostname\" }\n");
        assert!(e.contains("not both"), "{e}");
    }

    #[test]
    fn an_unknown_key_names_the_nearest_known_one() {
        let e = err("[polcy]\ninterval_ms = 100\n");
        assert!(e.starts_with("m.toml:1:") && e.ends_with("did you mean `policy`?"), "{e}");
        let e = err("[policy]\ninterval = 100\n");
        assert!(e.contains("unknown field `interval`") && e.ends_with("did you mean `interval_ms`?"), "{e}");
        // Nothing near: no guess.
        let e = err("[zzzzzz]\n");
        assert!(e.contains("unknown field `zzzzzz`") && !e.contains("did you mean"), "{e}");
    }

    #[test]
    fn empty_file_gives_the_defaults() {
        let c = Config::from_toml("", Path::new("m.toml")).expect("empty");
        assert_eq!(c, Config::default());
        assert_eq!(c.policy.thresholds(), crate::decision::policy::Thresholds::default());
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let e = err("[policy]\nrefuse_at = 0.8\nrefuse_att = 0.9\n");
        assert!(e.starts_with("m.toml:3:"), "{e}");
        assert!(e.contains("refuse_att"), "{e}");
        let e = err("[group]\ncgroup = \"auto\"\n[nonsense]\n");
        assert!(e.starts_with("m.toml:3:") && e.contains("nonsense"), "{e}");
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        let e = err("\n[policy]\ninterval_ms = \"fast\"\n");
        assert!(e.starts_with("m.toml:3: policy.interval_ms:"), "{e}");
        let e = err("[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = \"http\"\n");
        assert!(e.starts_with("m.toml:5: process[0].port:"), "{e}");
        let e = err("[proxy]\nlisten = 5\n");
        assert!(e.starts_with("m.toml:2: proxy.listen:"), "{e}");
    }

    #[test]
    fn a_value_that_makes_a_default_wrong_is_the_one_named() {
        // abort_at is not in the file: its default (0.92) is below the refuse_at the file sets.
        let e = err("[policy]\n\nrefuse_at = 0.95\n");
        assert_eq!(
            e,
            "m.toml:3: policy.refuse_at: with policy.abort_at at its default, 0.92 must be above refuse_at (0.95)"
        );
        let e = err("[policy]\nrefuse_at = 0.01\n");
        assert!(e.starts_with("m.toml:2: policy.refuse_at: with policy.hysteresis at its default,"), "{e}");
        let e = err("[policy]\ninterval_ms = 20000\n");
        assert!(e.starts_with("m.toml:2: policy.interval_ms: with policy.abort_repeat_ms at its default,"), "{e}");
        // Both in the file: the checked key is named, as before.
        let e = err("[policy]\nrefuse_at = 0.95\nabort_at = 0.9\n");
        assert!(e.starts_with("m.toml:3: policy.abort_at: 0.9 must be above"), "{e}");
    }

    #[test]
    fn syntax_errors_are_one_line() {
        let e = err("[policy]\nrefuse_at = \n");
        assert!(e.starts_with("m.toml:2:") && !e.contains('\n'), "{e:?}");
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let cases = [
            ("[policy]\nrefuse_at = 0.95\nabort_at = 0.9\n", "m.toml:3: policy.abort_at:"),
            ("[policy]\n\nrefuse_at = 1.5\n", "m.toml:3: policy.refuse_at:"),
            ("[policy]\nhysteresis = -0.1\n", "m.toml:2: policy.hysteresis:"),
            ("[policy]\ninterval_ms = 1\n", "m.toml:2: policy.interval_ms:"),
            ("[web]\nlisten = \"nowhere\"\n", "m.toml:2: web.listen:"),
            ("[stats]\nretention_days = 0\n", "m.toml:2: stats.retention_days:"),
            (
                "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 1\n\
                 [[process]]\nname = \"tx1\"\nrole = \"boss\"\ncommand = [\"x\"]\nport = 2\n",
                "m.toml:8: process[1].role:",
            ),
            ("[alerts]\nwebhook = \"ftp://x\"\n", "m.toml:2: alerts.webhook:"),
            ("[policy]\nabort_repeat_ms = 10\ninterval_ms = 20\n", "m.toml:2: policy.abort_repeat_ms:"),
            ("[proxy]\nmaster_paths = [\"(\"]\n", "m.toml:2: proxy.master_paths: bad regex"),
            ("[proxy]\n\ntoken_secret = \"short\"\n", "m.toml:3: proxy.token_secret:"),
            ("[proxy]\nupstream_timeout_s = 0\n", "m.toml:2: proxy.upstream_timeout_s:"),
            ("[proxy]\nmax_header_bytes = 100\n", "m.toml:2: proxy.max_header_bytes:"),
            ("[proxy]\nmax_connections = 0\n", "m.toml:2: proxy.max_connections:"),
            ("[proxy]\nheader_read_timeout_s = 0\n", "m.toml:2: proxy.header_read_timeout_s:"),
            ("[proxy]\nbody_buffer_bytes = 100\nbody_buffer_total_bytes = 99\n", "m.toml:2: proxy.body_buffer_bytes:"),
            (
                "[proxy]\nbody_buffer_total_bytes = 1000\n",
                "m.toml:2: proxy.body_buffer_total_bytes: with proxy.body_buffer_bytes at its default, 65536 is above",
            ),
            ("[web]\nmax_connections = 0\n", "m.toml:2: web.max_connections:"),
            ("[web]\n\nmax_header_bytes = 4096\n", "m.toml:3: web.max_header_bytes:"),
            ("[group]\nlimit_bytes = 0\n", "m.toml:2: group.limit_bytes:"),
            ("[probes]\nenabled = true\nhooks = \"kprobe\"\n", "m.toml:3: probes.hooks:"),
            ("[actions]\nrefuse_signal = \"SIGUSR1\"\nabort_signal = \"SIGSEGV\"\n", "m.toml:3: actions.abort_signal:"),
            ("[actions]\n\npost_url = \"ftp://x\"\n", "m.toml:3: actions.post_url:"),
            ("[actions]\nadmin_path = \"admin\"\n", "m.toml:2: actions.admin_path:"),
            (
                "[[process]]\nname = \"m0\"\nrole = \"master\"\ncommand = [\"x\"]\nport = 1\nadmin_path = \"admin\"\n",
                "m.toml:6: process[0].admin_path:",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}");
        }
    }

    #[test]
    fn a_full_config_loads() {
        let text = r#"
[group]
cgroup = "/sys/fs/cgroup/memory/app"
[policy]
refuse_at = 0.8
abort_at = 0.9
hysteresis = 0.05
interval_ms = 250
limit_bytes = 1073741824
shadow = true
abort_repeat_ms = 2000
[web]
listen = "127.0.0.1:9000"
[stats]
path = "/var/lib/monitor/stats.db"
retention_days = 7
[probes]
enabled = false
hooks = "raw_sys_exit"
[proxy]
listen = "[::1]:8080"
master_serves_tx = false
[[process]]
name = "m0"
role = "master"
command = ["node", "server.js", "--role=master"]
port = 3001
[[process]]
name = "tx1"
role = "worker"
command = ["node", "server.js", "--role=tx-worker"]
port = 3002
env = { NODE_ENV = "production" }
[alerts]
command = ["/usr/local/bin/page", "--team", "tx"]
alertmanager = "http://127.0.0.1:9093"
"#;
        let c = Config::from_toml(text, Path::new("m.toml")).expect("valid");
        assert_eq!(c.processes.len(), 2);
        assert_eq!(c.processes[1].health, "/health");
        assert_eq!(c.policy.limit_bytes, Some(1 << 30));
        assert!(c.policy.shadow && !c.probes.enabled && !c.proxy.master_serves_tx);
        assert_eq!(c.probes.chosen_hooks(), Some(Hooks::RawSysExit));
        assert_eq!(Config::default().probes.chosen_hooks(), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = Config::from_toml(&s, Path::new("x.toml"));
        }
    }
}
