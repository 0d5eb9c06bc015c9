//! `[proxy]` and `[[process]]`: the front door of `monitor run` and the processes its launcher starts.

use super::Role;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[proxy]`: the front door of `monitor run`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ProxyConfig {
    /// Address the front door listens on. Default `127.0.0.1:8080`.
    pub listen: String,
    /// Path regexes served by tx processes (the rest goes to the master). Default `["^/"]` (every path).
    pub tx_paths: Vec<String>,
    /// Path regexes only the master serves. Default `$closure`/`%24closure` anywhere, `^/syndication`, `^/info/`.
    pub master_paths: Vec<String>,
    /// Path regexes of admin endpoints, which the memory guard never refuses (like the health paths; each
    /// `[[process]] admin_path` is one too). Default: none.
    pub admin_paths: Vec<String>,
    /// Header whose prefix (text before the first `.`) names the owning process. Default `X-Cache-Id`.
    pub cache_id_header: String,
    /// The master is in the least-loaded pool of tx processes. Default true.
    pub master_serves_tx: bool,
    /// `Retry-After` seconds on a shed request. Default 5.
    pub retry_after_s: u64,
    /// A process that has not sent a response head this long after the request gets a 504, and a response body it
    /// leaves this long without a byte is cut (as nginx's `proxy_read_timeout`: streams with longer pauses, such as
    /// server-sent events, need a larger value). Default 60.
    pub upstream_timeout_s: u64,
    /// Idle upstream keep-alive connections are closed after this, below the backends' own (Node: 5 s). Default 4000.
    pub idle_timeout_ms: u64,
    /// On SIGTERM/SIGINT, in-flight requests get this long to finish. Default 30.
    pub drain_timeout_s: u64,
    /// After SIGTERM, children get this long to exit before SIGKILL. Default 10.
    pub stop_grace_s: u64,
    /// A restarted process's backoff goes back to 1 s once it has been healthy this long. Default 30.
    pub backoff_reset_s: u64,
    /// Largest request head (request line + headers) in bytes; larger gets 431. Default 65536 (at least 8192).
    pub max_header_bytes: usize,
    /// HMAC-SHA256 key for signed cache ids (`<prefix>.<id>.<hmac>`, at least 32 bytes). Default: none (cache ids
    /// are passed through unsigned).
    pub token_secret: Option<String>,
    /// Lifetime of a signed cache id in seconds. Default 3600.
    pub token_ttl_s: u64,
    /// Front-door threads (each a current-thread runtime accepting on the same socket). Default 0: one per core
    /// the process may run on.
    pub threads: usize,
    /// Client connections served at once. At the cap, a connection waiting on its client is closed to admit a new
    /// one: the one that has waited longest owing a request (it sent nothing yet, or part of a request's head or
    /// held body), else the one idle longest between requests; when every one has a request at a process, new
    /// ones wait in the kernel's accept backlog. Default 256.
    pub max_connections: usize,
    /// A client has this long to send a request's head, counted from when its connection opens or falls idle
    /// between requests: then it is closed. Default 30.
    pub header_read_timeout_s: u64,
    /// The most of one request's body read before the request goes on (as nginx's `client_body_buffer_size`,
    /// held in memory): a body that ends within it reaches the process whole or not at all; the rest of a longer
    /// one is streamed. 0 streams every body at once. Default 65536.
    pub body_buffer_bytes: usize,
    /// The most request-body bytes held at once across all connections: a body read while they are taken is
    /// streamed from there on, held no further. Default 8388608 (8 MiB).
    pub body_buffer_total_bytes: usize,
    /// The front door keeps each request in flight (method, path, cache id, start, bytes), so that the guard names
    /// the victim's work when it aborts or kills a process. Default true.
    pub track_requests: bool,
    /// The tracked path keeps its query (which may hold what a log should not). Default false.
    pub track_query: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            listen: "127.0.0.1:8080".into(),
            tx_paths: vec!["^/".into()],
            master_paths: vec![r"(\$|%24)closure".into(), "^/syndication".into(), "^/info/".into()],
            admin_paths: Vec::new(),
            cache_id_header: "X-Cache-Id".into(),
            master_serves_tx: true,
            retry_after_s: 5,
            upstream_timeout_s: 60,
            idle_timeout_ms: 4000,
            drain_timeout_s: 30,
            stop_grace_s: 10,
            backoff_reset_s: 30,
            max_header_bytes: 65536,
            token_secret: None,
            token_ttl_s: 3600,
            threads: 0,
            max_connections: 256,
            header_read_timeout_s: 30,
            body_buffer_bytes: 64 * 1024,
            body_buffer_total_bytes: 8 << 20,
            track_requests: true,
            track_query: false,
        }
    }
}

/// `[[process]]`: one process the launcher starts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// Unique name, also the cache-id prefix it issues (e.g. `m0`, `tx1`). Required.
    pub name: String,
    /// `master` or `worker`. Required.
    pub role: Role,
    /// argv, run without a shell. Required.
    pub command: Vec<String>,
    /// Loopback port the process listens on. Required.
    pub port: u16,
    /// Health path. Default `/health`.
    #[serde(default = "default_health")]
    pub health: String,
    /// Extra environment. Default none.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Seconds the launcher waits for the health path to answer 200 at start-up (the master's start fails
    /// after it). Default 60.
    #[serde(default = "default_start_timeout_s")]
    pub start_timeout_s: u64,
    /// Once ready, the health path is asked this often, in milliseconds; a check fails without a 2xx answer
    /// within the interval (at most 1 s). 0: only at start-up. Default 2000.
    #[serde(default = "default_health_interval_ms")]
    pub health_interval_ms: u64,
    /// A ready process that fails this many checks in a row leaves the front door's pool (state `unhealthy`) until a
    /// check passes again. Default 3.
    #[serde(default = "default_health_failures")]
    pub health_failures: u32,
    /// `monitor run`: each change of this process's action (serve, refuse, abort) is POSTed as JSON to
    /// `http://127.0.0.1:<port><admin_path>` (see [`crate::consumers::actions`]). Unset by default.
    #[serde(default)]
    pub admin_path: Option<String>,
    /// The user the process runs as: a name (`"www-data"`) or a numeric uid. Its primary group and supplementary
    /// groups come with it (unless `group` is set), and `HOME`, `USER` and `LOGNAME` are its own. Another user than
    /// monitor's own needs monitor to run as root. Default: monitor's own user.
    #[serde(default)]
    pub user: Option<crate::base::accounts::Account>,
    /// The group the process runs as: a name or a numeric gid (the only supplementary group when `user` is unset).
    /// Default: the user's primary group, else monitor's own.
    #[serde(default)]
    pub group: Option<crate::base::accounts::Account>,
    /// The guard's last resort spares this process while another process's death would relieve the group, as it
    /// spares every master. Default false.
    #[serde(default)]
    pub protect: bool,
}

fn default_health_interval_ms() -> u64 {
    2000
}

fn default_health_failures() -> u32 {
    3
}

fn default_start_timeout_s() -> u64 {
    60
}

fn default_health() -> String {
    "/health".into()
}
