//! The checks the types cannot make when the file is parsed: values against each other (`abort_at` above
//! `refuse_at`, one master, names and ports used once) and the ranges of plain numbers and strings. One function
//! per section; [`Config::validate`] returns every problem, in file order of sections.

use super::{
    ActionsConfig, AlertsConfig, ClusterConfig, Config, GroupConfig, PolicyConfig, ProcessConfig, ProxyConfig,
    StatsConfig, WebConfig,
};
use std::net::SocketAddr;

/// A bad value: its key path (`policy.refuse_at`, `process[1].port`) and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub key: Vec<KeyPart>,
    pub msg: String,
    /// The other key the value is checked against (`refuse_at` for `abort_at`), if any: named instead when `key`
    /// is not in the file (its default is what the file's value makes wrong).
    pub with: Vec<KeyPart>,
}

/// One step of a key path.
#[derive(Debug, Clone, PartialEq)]
pub enum KeyPart {
    Key(&'static str),
    Index(usize),
}

use KeyPart::{Index, Key};

fn problem(key: &[KeyPart], msg: impl Into<String>) -> Problem {
    Problem { key: key.to_vec(), msg: msg.into(), with: Vec::new() }
}

/// A [`problem`] of `key` against the value of `with`.
fn problem_with(key: &[KeyPart], with: &[KeyPart], msg: impl Into<String>) -> Problem {
    Problem { with: with.to_vec(), ..problem(key, msg) }
}

impl Config {
    /// Every value that is not allowed, in file order of sections.
    pub fn validate(&self) -> Vec<Problem> {
        let mut out = Vec::new();
        group(&self.group, &mut out);
        policy(&self.policy, &mut out);
        web(&self.web, &mut out);
        stats(&self.stats, &mut out);
        proxy(&self.proxy, &mut out);
        processes(&self.processes, &mut out);
        alerts(&self.alerts, &mut out);
        actions(&self.actions, &mut out);
        if let Some(c) = &self.cluster {
            cluster(c, &self.proxy, &mut out);
        }
        out
    }
}

fn group(g: &GroupConfig, out: &mut Vec<Problem>) {
    if g.cgroup.trim().is_empty() {
        out.push(problem(&[Key("group"), Key("cgroup")], "must not be empty (use \"auto\")"));
    }
    if g.limit_bytes == Some(0) {
        out.push(problem(&[Key("group"), Key("limit_bytes")], "must be above 0"));
    }
}

fn policy(p: &PolicyConfig, out: &mut Vec<Problem>) {
    let at = |k: &'static str| [Key("policy"), Key(k)];
    if !(p.refuse_at > 0.0 && p.refuse_at <= 1.0) {
        out.push(problem(&at("refuse_at"), format!("{} is not in (0, 1]", p.refuse_at)));
    }
    if !(p.abort_at > 0.0 && p.abort_at <= 1.0) {
        out.push(problem(&at("abort_at"), format!("{} is not in (0, 1]", p.abort_at)));
    } else if p.abort_at <= p.refuse_at {
        out.push(problem_with(
            &at("abort_at"),
            &at("refuse_at"),
            format!("{} must be above refuse_at ({})", p.abort_at, p.refuse_at),
        ));
    }
    if !(p.hysteresis >= 0.0 && p.hysteresis < p.refuse_at) {
        out.push(problem_with(
            &at("hysteresis"),
            &at("refuse_at"),
            format!("{} must be >= 0 and below refuse_at ({})", p.hysteresis, p.refuse_at),
        ));
    }
    if !(10..=60_000).contains(&p.interval_ms) {
        out.push(problem(&at("interval_ms"), format!("{} is not in 10..=60000", p.interval_ms)));
    }
    if p.limit_bytes == Some(0) {
        out.push(problem(&at("limit_bytes"), "must be above 0"));
    }
    if p.abort_repeat_ms < p.interval_ms {
        out.push(problem_with(
            &at("abort_repeat_ms"),
            &at("interval_ms"),
            format!("{} is below interval_ms ({})", p.abort_repeat_ms, p.interval_ms),
        ));
    }
    if !(1..=p.interval_ms).contains(&p.min_interval_ms) {
        out.push(problem_with(
            &at("min_interval_ms"),
            &at("interval_ms"),
            format!("{} is not in 1..=interval_ms ({})", p.min_interval_ms, p.interval_ms),
        ));
    }
    if p.fill_rate_mib_s == 0 {
        out.push(problem(&at("fill_rate_mib_s"), "must be at least 1"));
    }
    let abort_valid = p.abort_at > 0.0 && p.abort_at <= 1.0;
    if abort_valid && !(p.kill_at > p.abort_at && p.kill_at < 1.0) {
        out.push(problem_with(
            &at("kill_at"),
            &at("abort_at"),
            format!("{} must be above abort_at ({}) and below 1", p.kill_at, p.abort_at),
        ));
    }
    if let Some(b) = p.brake_at {
        if !(b > p.abort_at && b < 1.0) {
            out.push(problem_with(
                &at("brake_at"),
                &at("abort_at"),
                format!("{b} must be above abort_at ({}) and below 1", p.abort_at),
            ));
        }
    }
}

fn web(w: &WebConfig, out: &mut Vec<Problem>) {
    if let Err(e) = w.listen.parse::<SocketAddr>() {
        out.push(problem(&[Key("web"), Key("listen")], format!("{:?} is not an address: {e}", w.listen)));
    }
    let linkable = |u: &str| {
        let rest = u.strip_prefix("http://").or_else(|| u.strip_prefix("https://")).unwrap_or("");
        !rest.is_empty() && !rest.starts_with('/') && !u.chars().any(char::is_whitespace)
    };
    if let Some(u) = w.external_url.as_deref().filter(|u| !linkable(u)) {
        out.push(problem(&[Key("web"), Key("external_url")], format!("{u:?} is not an http:// or https:// URL")));
    }
    if !(1..=MAX_CONNECTIONS).contains(&w.max_connections) {
        out.push(problem(
            &[Key("web"), Key("max_connections")],
            format!("{} is not in 1..={MAX_CONNECTIONS}", w.max_connections),
        ));
    }
    if !(8192..=MAX_HEAD_BYTES).contains(&w.max_header_bytes) {
        out.push(problem(
            &[Key("web"), Key("max_header_bytes")],
            format!("{} is not in 8192..={MAX_HEAD_BYTES}", w.max_header_bytes),
        ));
    }
}

/// The most connections a server may be configured to hold (each costs the agent memory and a file descriptor).
const MAX_CONNECTIONS: usize = 1 << 20;
/// The largest request head a server may be configured to take.
const MAX_HEAD_BYTES: usize = 1 << 20;

fn stats(s: &StatsConfig, out: &mut Vec<Problem>) {
    if s.retention_days == 0 {
        out.push(problem(&[Key("stats"), Key("retention_days")], "must be at least 1"));
    }
}

fn proxy(px: &ProxyConfig, out: &mut Vec<Problem>) {
    let at = |k: &'static str| [Key("proxy"), Key(k)];
    if let Err(e) = px.listen.parse::<SocketAddr>() {
        out.push(problem(&at("listen"), format!("{:?} is not an address: {e}", px.listen)));
    }
    if !is_header_name(&px.cache_id_header) {
        out.push(problem(&at("cache_id_header"), "is not a valid header name"));
    }
    for (k, list) in [("tx_paths", &px.tx_paths), ("master_paths", &px.master_paths), ("admin_paths", &px.admin_paths)]
    {
        if let Some(e) = list.iter().find_map(|r| regex::Regex::new(r).err()) {
            let msg = e.to_string().lines().last().unwrap_or_default().trim().to_string();
            out.push(problem(&at(k), format!("bad regex: {msg}")));
        }
    }
    for (k, v) in [
        ("upstream_timeout_s", px.upstream_timeout_s),
        ("idle_timeout_ms", px.idle_timeout_ms),
        ("drain_timeout_s", px.drain_timeout_s),
        ("backoff_reset_s", px.backoff_reset_s),
        ("token_ttl_s", px.token_ttl_s),
    ] {
        if v == 0 {
            out.push(problem(&at(k), "must be above 0"));
        }
    }
    if px.max_header_bytes < 8192 {
        out.push(problem(&at("max_header_bytes"), format!("{} is below 8192", px.max_header_bytes)));
    }
    if px.threads > 256 {
        out.push(problem(&at("threads"), format!("{} is above 256", px.threads)));
    }
    if !(1..=MAX_CONNECTIONS).contains(&px.max_connections) {
        out.push(problem(&at("max_connections"), format!("{} is not in 1..={MAX_CONNECTIONS}", px.max_connections)));
    }
    if !(1..=3600).contains(&px.header_read_timeout_s) {
        out.push(problem(&at("header_read_timeout_s"), format!("{} is not in 1..=3600", px.header_read_timeout_s)));
    }
    if px.body_buffer_bytes > px.body_buffer_total_bytes {
        out.push(problem_with(
            &at("body_buffer_bytes"),
            &at("body_buffer_total_bytes"),
            format!("{} is above body_buffer_total_bytes ({})", px.body_buffer_bytes, px.body_buffer_total_bytes),
        ));
    }
    let min = super::cluster::MIN_SECRET_BYTES;
    if px.token_secret.as_ref().is_some_and(|s| s.len() < min) {
        // One rule for every secret: the cluster's needs as many bytes.
        out.push(problem(&at("token_secret"), format!("must be at least {min} bytes")));
    }
}

/// Each `[[process]]` on its own, then the group of them: names and ports used once, exactly one master.
fn processes(procs: &[ProcessConfig], out: &mut Vec<Problem>) {
    // Names and ports seen so far: each process is checked against them in constant time, so a file of many
    // processes validates in time linear in their number.
    let mut names = std::collections::HashSet::with_capacity(procs.len());
    let mut ports = std::collections::HashSet::with_capacity(procs.len());
    for (i, proc) in procs.iter().enumerate() {
        let at = |k: &'static str| [Key("process"), Index(i), Key(k)];
        if proc.name.is_empty() || !proc.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            out.push(problem(&at("name"), format!("{:?} must be letters, digits, - or _", proc.name)));
        } else if !names.insert(proc.name.as_str()) {
            out.push(problem(&at("name"), format!("{:?} is used twice", proc.name)));
        }
        if proc.command.first().is_none_or(String::is_empty) {
            out.push(problem(&at("command"), "must name a program"));
        }
        if proc.port == 0 {
            out.push(problem(&at("port"), "must be 1..=65535"));
        } else if !ports.insert(proc.port) {
            out.push(problem(&at("port"), format!("{} is used twice", proc.port)));
        }
        if !proc.health.starts_with('/') {
            out.push(problem(&at("health"), format!("{:?} must be a path starting with /", proc.health)));
        }
        if proc.start_timeout_s == 0 {
            out.push(problem(&at("start_timeout_s"), "must be above 0"));
        }
        if proc.health_interval_ms != 0 && proc.health_interval_ms < 50 {
            out.push(problem(&at("health_interval_ms"), "must be 0 (off) or at least 50"));
        }
        if proc.admin_path.as_deref().is_some_and(|p| !p.starts_with('/')) {
            out.push(problem(&at("admin_path"), "must start with /"));
        }
        if proc.env.contains_key(crate::base::proof::SECRET_ENV) {
            out.push(problem(
                &at("env"),
                format!(
                    "{} is monitor's to set (the actions' secret): use [actions] secret_file",
                    crate::base::proof::SECRET_ENV
                ),
            ));
        }
        if proc.health_failures == 0 {
            out.push(problem(&at("health_failures"), "must be above 0"));
        }
        if let Err(e) = crate::base::accounts::resolve(proc.user.as_ref(), proc.group.as_ref()) {
            out.push(problem(&at(e.key()), e.to_string()));
        }
    }
    let masters = procs.iter().filter(|p| p.role == super::Role::Master).count();
    if !procs.is_empty() && masters != 1 {
        out.push(problem(&[Key("process")], format!("needs exactly one master, has {masters}")));
    }
}

fn alerts(a: &AlertsConfig, out: &mut Vec<Problem>) {
    if a.command_timeout_s == 0 {
        out.push(problem(&[Key("alerts"), Key("command_timeout_s")], "must be at least 1"));
    }
    if a.resend_s == 0 {
        out.push(problem(&[Key("alerts"), Key("resend_s")], "must be at least 1"));
    }
    if a.command.as_ref().is_some_and(|cmd| cmd.first().is_none_or(String::is_empty)) {
        out.push(problem(&[Key("alerts"), Key("command")], "must name a program"));
    }
    if a.bearer_token_file.is_some() && a.basic_auth.is_some() {
        out.push(problem(&[Key("alerts"), Key("basic_auth")], "give bearer_token_file or basic_auth, not both"));
    }
    if let Some(Err(e)) = a.ca_file.as_ref().map(std::fs::File::open) {
        let f = a.ca_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        out.push(problem(&[Key("alerts"), Key("ca_file")], format!("{f}: {e}")));
    }
    let password = a.basic_auth.as_ref().map(|b| b.password_file.as_path());
    for (k, f) in [("bearer_token_file", a.bearer_token_file.as_deref()), ("basic_auth", password)] {
        if let Some(Err(e)) = f.map(super::secret::read) {
            out.push(problem(&[Key("alerts"), Key(k)], e));
        }
    }
    // The command's user, looked up as a root agent does at start (a user named in the file always: it must exist).
    if a.command_user.is_some() || (a.command.is_some() && crate::base::nocaps::is_root()) {
        if let Err(e) = a.command_ids() {
            // Unset, its default is what fails: named at `command`, which needs it.
            let (user, command) = ([Key("alerts"), Key("command_user")], [Key("alerts"), Key("command")]);
            out.push(problem_with(&user, &command, e.to_string()));
        }
    }
    // Prometheus' label names: [a-zA-Z_][a-zA-Z0-9_]*, the __ prefix reserved; alertname is the agent's.
    let label_name = |k: &str| {
        let mut c = k.chars();
        c.next().is_some_and(|f| f.is_ascii_alphabetic() || f == '_')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
            && !k.starts_with("__")
    };
    for k in a.labels.keys() {
        if !label_name(k) {
            out.push(problem(
                &[Key("alerts"), Key("labels")],
                format!("{k:?} is not a label name ([a-zA-Z_][a-zA-Z0-9_]*, not __…)"),
            ));
        } else if k == "alertname" {
            out.push(problem(&[Key("alerts"), Key("labels")], "alertname is the alert's own label"));
        }
    }
}

fn actions(a: &ActionsConfig, out: &mut Vec<Problem>) {
    if a.admin_path.as_deref().is_some_and(|p| !p.starts_with('/')) {
        out.push(problem(&[Key("actions"), Key("admin_path")], "must start with /"));
    }
    let min = crate::base::proof::MIN_SECRET_BYTES;
    match a.secret() {
        Ok(Some(b)) if b.len() < min => out.push(problem(
            &[Key("actions"), Key("secret_file")],
            format!("is {} bytes, must be at least {min}", b.len()),
        )),
        Ok(_) => {}
        Err(e) => out.push(problem(&[Key("actions"), Key("secret_file")], e)),
    }
}

fn cluster(c: &ClusterConfig, px: &ProxyConfig, out: &mut Vec<Problem>) {
    use super::cluster::{is_host_port, is_node_name, MIN_SECRET_BYTES};
    let at = |k: &'static str| [Key("cluster"), Key(k)];
    if let Some(n) = c.node.as_deref().filter(|n| !is_node_name(n)) {
        out.push(problem(&at("node"), format!("{n:?} must be 1 to 64 letters, digits, - or _")));
    }
    let gossip = c.gossip_addr();
    if gossip.ip().is_unspecified() || gossip.port() == 0 {
        let key = if c.advertise.is_some() { "advertise" } else { "listen" };
        out.push(problem(
            &at(key),
            format!("{gossip} is not an address peers can reach: set advertise to this node's IP and gossip port"),
        ));
    } else if let Ok(front) = px.listen.parse::<std::net::SocketAddr>() {
        // Peers forward to the advertised IP on the front door's port: the front door must listen there.
        if !front.ip().is_unspecified() && front.ip() != gossip.ip() {
            out.push(problem_with(
                &[Key("proxy"), Key("listen")],
                &at(if c.advertise.is_some() { "advertise" } else { "listen" }),
                format!("peers forward to {}, but the front door listens on {front}", c.front_addr(front)),
            ));
        }
    }
    if let Some(s) = c.seeds.iter().find(|s| !is_host_port(s)) {
        out.push(problem(&at("seeds"), format!("{s:?} is not host:port")));
    }
    match (&c.secret, &c.secret_file) {
        (None, None) => out.push(problem(&[Key("cluster")], "needs secret or secret_file")),
        (Some(_), Some(_)) => out.push(problem(&at("secret_file"), "give secret or secret_file, not both")),
        (Some(_), None) | (None, Some(_)) => match c.secret_bytes() {
            Ok(b) if b.len() < MIN_SECRET_BYTES => {
                let key = if c.secret.is_some() { "secret" } else { "secret_file" };
                out.push(problem(&at(key), format!("is {} bytes, must be at least {MIN_SECRET_BYTES}", b.len())));
            }
            Ok(_) => {}
            Err(e) => out.push(problem(&at("secret_file"), e)),
        },
    }
    if c.token_secret.is_some() && px.token_secret.is_some() {
        out.push(problem(
            &[Key("proxy"), Key("token_secret")],
            "with [cluster] token_secret, node-bound tokens sign the cache ids: remove proxy.token_secret",
        ));
    }
    if c.token_secret.as_ref().is_some_and(|s| s.len() < MIN_SECRET_BYTES) {
        out.push(problem(&at("token_secret"), format!("must be at least {MIN_SECRET_BYTES} bytes")));
    }
    if c.suspect_timeout_ms < 100 {
        out.push(problem(&at("suspect_timeout_ms"), format!("{} is below 100", c.suspect_timeout_ms)));
    }
    if c.dead_timeout_ms < c.suspect_timeout_ms {
        out.push(problem_with(
            &at("dead_timeout_ms"),
            &at("suspect_timeout_ms"),
            format!("{} is below suspect_timeout_ms ({})", c.dead_timeout_ms, c.suspect_timeout_ms),
        ));
    }
}

/// Header-name syntax (RFC 9110 token), without pulling in a crate for it.
fn is_header_name(s: &str) -> bool {
    let tchar = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    !s.is_empty() && s.chars().all(tchar)
}

/// `policy.refuse_at`, `process[1].port`.
pub fn key_name(key: &[KeyPart]) -> String {
    let mut s = String::new();
    for part in key {
        match part {
            Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}
