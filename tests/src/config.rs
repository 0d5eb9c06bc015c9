//! The TOML configs the tests hand to `monitor agent --config` and `monitor run --config`, built as values and
//! rendered by the `toml` crate, so that quoting, lists and `[[process]]` tables are always well formed.
//!
//! ```
//! use monitor_tests::config::{Config, Process};
//! let text = Config::new()
//!     .cgroup("/sys/fs/cgroup/memory/x")
//!     .set("policy", "interval_ms", 50)
//!     .process(Process::new("m0", "master", ["srv", "--port", "8081"], 8081).set("start_timeout_s", 5))
//!     .render();
//! assert!(text.contains("[[process]]") && text.contains("interval_ms = 50"));
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use toml::{Table, Value};

/// A config file: sections of keys, and the `[[process]]` list of `monitor run`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    sections: Table,
    processes: Vec<Process>,
}

/// One `[[process]]` of `monitor run`.
#[derive(Debug, Clone, PartialEq)]
pub struct Process {
    pub name: String,
    pub role: String,
    pub command: Vec<String>,
    pub port: u16,
    /// Its other keys (`start_timeout_s`, `admin_path`, `health_interval_ms`, …).
    pub keys: Table,
}

/// Parses `key = value` lines (TOML) into a table; panics naming the text when they do not parse.
fn parse_lines(lines: &str) -> Table {
    match toml::from_str::<Table>(lines) {
        Ok(t) => t,
        Err(e) => panic!("not TOML key lines ({e}): {lines:?}"),
    }
}

/// A byte count as a TOML integer; panics past `i64::MAX`.
pub fn bytes(n: u64) -> Value {
    match i64::try_from(n) {
        Ok(n) => Value::Integer(n),
        Err(_) => panic!("{n} does not fit a TOML integer"),
    }
}

/// A list of strings (a command line) as a TOML array.
pub fn strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Value {
    Value::Array(items.into_iter().map(|s| Value::String(s.as_ref().to_string())).collect())
}

impl Config {
    pub fn new() -> Config {
        Config::default()
    }

    /// Sets `key` of `[section]` to `value` (replacing it).
    pub fn set(mut self, section: &str, key: &str, value: impl Into<Value>) -> Config {
        self.section_mut(section).insert(key.to_string(), value.into());
        self
    }

    /// Adds `key = value` lines (TOML, e.g. `"master_serves_tx = false\nretry_after_s = 7"`) to `[section]`; an
    /// empty text adds nothing, and the section is written even when it ends up empty.
    pub fn lines(mut self, section: &str, lines: &str) -> Config {
        let table = parse_lines(lines);
        self.section_mut(section).extend(table);
        self
    }

    /// True when `[section]` has `key`.
    pub fn has(&self, section: &str, key: &str) -> bool {
        self.sections.get(section).and_then(Value::as_table).is_some_and(|t| t.contains_key(key))
    }

    fn section_mut(&mut self, section: &str) -> &mut Table {
        let entry = self.sections.entry(section.to_string()).or_insert_with(|| Value::Table(Table::new()));
        match entry {
            Value::Table(t) => t,
            other => panic!("[{section}] is not a section: {other}"),
        }
    }

    /// `[group] cgroup`: a path, or `auto`.
    pub fn cgroup(self, cgroup: impl AsRef<Path>) -> Config {
        self.set("group", "cgroup", cgroup.as_ref().display().to_string())
    }

    /// `[probes] enabled`.
    pub fn probes(self, enabled: bool) -> Config {
        self.set("probes", "enabled", enabled)
    }

    /// `[web] listen`.
    pub fn web(self, addr: SocketAddr) -> Config {
        self.set("web", "listen", addr.to_string())
    }

    /// `[proxy] listen`.
    pub fn proxy(self, addr: SocketAddr) -> Config {
        self.set("proxy", "listen", addr.to_string())
    }

    /// `[alerts] command`: a hook run with each alert on its stdin.
    pub fn alert_command<S: AsRef<str>>(self, command: impl IntoIterator<Item = S>) -> Config {
        self.set("alerts", "command", strings(command))
    }

    /// `[stats] path`.
    pub fn stats(self, db: &Path) -> Config {
        self.set("stats", "path", db.display().to_string())
    }

    /// Appends a `[[process]]`.
    pub fn process(mut self, p: Process) -> Config {
        self.processes.push(p);
        self
    }

    /// The TOML text.
    pub fn render(&self) -> String {
        let mut doc = self.sections.clone();
        if !self.processes.is_empty() {
            let list = self.processes.iter().map(|p| Value::Table(p.table())).collect();
            doc.insert("process".into(), Value::Array(list));
        }
        match toml::to_string(&doc) {
            Ok(s) => s,
            Err(e) => panic!("cannot render the config: {e}"),
        }
    }

    /// Writes the TOML text to `path` and returns it.
    pub fn write(&self, path: impl Into<PathBuf>) -> PathBuf {
        let path = path.into();
        if let Err(e) = std::fs::write(&path, self.render()) {
            panic!("writing {}: {e}", path.display());
        }
        path
    }
}

impl Process {
    /// `name` in `role` (`master` or `worker`), started as `command`, listening on 127.0.0.1:`port`.
    pub fn new<S: AsRef<str>>(name: &str, role: &str, command: impl IntoIterator<Item = S>, port: u16) -> Process {
        let command = command.into_iter().map(|s| s.as_ref().to_string()).collect();
        Process { name: name.into(), role: role.into(), command, port, keys: Table::new() }
    }

    /// The `fixture-backend` as `name` on a free port.
    pub fn fixture(name: &str, role: &str) -> Process {
        Self::fixture_on(name, role, crate::agent::free_port())
    }

    /// The `fixture-backend` as `name` on `port`.
    pub fn fixture_on(name: &str, role: &str, port: u16) -> Process {
        let bin = crate::bins::fixture_backend().display().to_string();
        Process::new(name, role, [bin, "--name".into(), name.into(), "--port".into(), port.to_string()], port)
    }

    /// `sh -c <script>` as the worker `name` on `port`.
    pub fn shell(name: &str, script: &str, port: u16) -> Process {
        Process::new(name, "worker", ["sh", "-c", script], port)
    }

    /// Sets one more key of the `[[process]]`.
    pub fn set(mut self, key: &str, value: impl Into<Value>) -> Process {
        self.keys.insert(key.to_string(), value.into());
        self
    }

    /// Adds `key = value` lines (TOML) to the `[[process]]`.
    pub fn lines(mut self, lines: &str) -> Process {
        self.keys.extend(parse_lines(lines));
        self
    }

    fn table(&self) -> Table {
        let mut t = Table::new();
        t.insert("name".into(), Value::String(self.name.clone()));
        t.insert("role".into(), Value::String(self.role.clone()));
        t.insert("command".into(), strings(&self.command));
        t.insert("port".into(), Value::Integer(i64::from(self.port)));
        t.extend(self.keys.clone());
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_sections_and_processes() {
        let text = Config::new()
            .cgroup("/sys/fs/cgroup/memory/a b")
            .lines("policy", "interval_ms = 50\nshadow = true")
            .set("policy", "brake_at", 0.96)
            .probes(false)
            .process(Process::new("m0", "master", ["srv", "say \"hi\""], 8081).lines("admin_path = \"/admin\""))
            .process(Process::shell("tx1", "sleep 1; exit 1", 8082).set("start_timeout_s", 5))
            .render();
        let back: Table = toml::from_str(&text).expect("the rendered text parses");
        assert_eq!(back["group"]["cgroup"].as_str(), Some("/sys/fs/cgroup/memory/a b"));
        assert_eq!(back["policy"]["interval_ms"].as_integer(), Some(50));
        assert_eq!(back["policy"]["shadow"].as_bool(), Some(true));
        assert_eq!(back["policy"]["brake_at"].as_float(), Some(0.96));
        assert_eq!(back["probes"]["enabled"].as_bool(), Some(false));
        let procs = back["process"].as_array().expect("[[process]]");
        assert_eq!(procs.len(), 2);
        assert_eq!(procs[0]["command"][1].as_str(), Some("say \"hi\""));
        assert_eq!(procs[0]["admin_path"].as_str(), Some("/admin"));
        assert_eq!((procs[1]["role"].as_str(), procs[1]["port"].as_integer()), (Some("worker"), Some(8082)));
        assert_eq!(procs[1]["start_timeout_s"].as_integer(), Some(5));
        assert!(text.contains("[[process]]"), "{text}");
    }

    #[test]
    fn empty_lines_still_write_the_section() {
        let c = Config::new().lines("proxy", "");
        assert_eq!(c.render().trim(), "[proxy]");
        assert!(!c.has("proxy", "listen"));
        assert!(Config::new().set("stats", "path", "/x").has("stats", "path"));
    }

    #[test]
    #[should_panic(expected = "not TOML key lines")]
    fn bad_lines_fail_the_test() {
        let _ = Config::new().lines("policy", "interval_ms 50");
    }
}
