//! `monitor run` as a child of the test. [`Launched`] runs it on any [`Config`] (killed on drop, its stderr kept for
//! failure messages and log checks); [`Run`] starts it over a master and N workers of the `fixture-backend` in a memory
//! cgroup the test owns (v1 or v2, whichever the host offers), on free loopback ports, as most front-door and launcher
//! tests want it.

use crate::agent::{collect, free_port, text};
use crate::config::{strings, Config, Process};
use crate::http::{self, Response};
use crate::{monitor_bin, spawn_in_cgroup, ChildGuard, Group, MIB};
use serde_json::Value;
use std::net::SocketAddr;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The time limit of one request and of the waits for a state, both stretched by [`crate::pace::slowdown`].
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// A running `monitor run`, killed on drop (its stderr printed if the test is failing, its config removed).
pub struct Launched {
    child: ChildGuard,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread copying monitor's stderr into `stderr`; done at the pipe's end.
    reader: Option<JoinHandle<()>>,
    pub proxy: SocketAddr,
    pub web: SocketAddr,
    pub config: PathBuf,
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

impl Launched {
    /// Writes `config` with `[web] listen` and `[proxy] listen` on free ports (unless it names them), starts
    /// `monitor run --config` without waiting for it, in the cgroup `inside` when given (as a service manager starts
    /// it in its unit's group), with `env` added to its environment.
    pub fn start(test: &str, config: Config, inside: Option<&Path>, env: &[(&str, &str)]) -> Launched {
        Self::start_wrapped(test, config, &[], inside, env)
    }

    /// [`Launched::start`], with `monitor` run by `wrapper` (e.g. `ip netns exec <ns>`, which execs it: the pid is
    /// still monitor's; or `unshare --fork`, whose child runs it: the pid is unshare's).
    pub fn start_wrapped(
        test: &str,
        config: Config,
        wrapper: &[String],
        inside: Option<&Path>,
        env: &[(&str, &str)],
    ) -> Launched {
        let (proxy, web) = (loopback(free_port()), loopback(free_port()));
        let mut config = config;
        if !config.has("web", "listen") {
            config = config.web(web);
        }
        if !config.has("proxy", "listen") {
            config = config.proxy(proxy);
        }
        let path = config.write(std::env::temp_dir().join(format!("monitor-{test}-{}.toml", std::process::id())));
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg(monitor_bin());
                c
            }
            None => Command::new(monitor_bin()),
        };
        cmd.arg("run").arg("--config").arg(&path).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        cmd.envs(env.iter().copied());
        let mut child = match inside {
            Some(cg) => spawn_in_cgroup(&mut cmd, cg),
            None => ChildGuard::spawn(&mut cmd),
        };
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let reader = child.stderr.take().map(|err| collect(err, stderr.clone()));
        Launched { child, stderr, reader, proxy, web, config: path }
    }

    /// What monitor has written to stderr so far.
    pub fn stderr(&self) -> String {
        text(&self.stderr)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// A request through the front door; panics if there is no answer.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        match http::request(self.proxy, "GET", path, headers, TIMEOUT) {
            Ok(r) => r,
            Err(e) => panic!("GET {path} via the proxy: {e}\nmonitor stderr:\n{}", self.stderr()),
        }
    }

    /// `/api/v1/status`, when it answers 200 with JSON.
    pub fn try_status(&self) -> Option<Value> {
        let r = http::get(self.web, "/api/v1/status", TIMEOUT).ok()?;
        (r.status == 200).then(|| serde_json::from_slice(&r.body).ok()).flatten()
    }

    /// `/api/v1/status`; panics when it does not answer.
    pub fn status(&self) -> Value {
        self.try_status().unwrap_or_else(|| panic!("GET /api/v1/status: no status; stderr:\n{}", self.stderr()))
    }

    /// Polls the status every 50 ms until `pred` holds (returns it); panics after `timeout`.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        let timeout = crate::pace::scaled(timeout);
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Some(s) = self.try_status() {
                if pred(&s) {
                    return s;
                }
                last = Some(s);
            }
            if Instant::now() >= deadline {
                match last {
                    Some(s) => panic!("{what}: not within {timeout:?}; status:\n{s:#}\nstderr:\n{}", self.stderr()),
                    None => panic!("{what}: no status within {timeout:?}; stderr:\n{}", self.stderr()),
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        if let Ok(pid) = libc::pid_t::try_from(self.child.pid()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is our un-reaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    /// Sends SIGTERM and waits for the exit (up to `timeout`, [`crate::pace::scaled`]).
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        let timeout = crate::pace::scaled(timeout);
        self.sigterm();
        match self.child.wait_timeout(timeout) {
            Some(s) => self.exited(s),
            None => panic!("monitor run still running {timeout:?} after SIGTERM; stderr:\n{}", self.stderr()),
        }
    }

    /// Waits for `monitor run` to exit by itself (up to `timeout`, [`crate::pace::scaled`]).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let timeout = crate::pace::scaled(timeout);
        match self.child.wait_timeout(timeout) {
            Some(s) => self.exited(s),
            None => panic!("monitor run still running after {timeout:?}; stderr:\n{}", self.stderr()),
        }
    }

    /// After the exit: lets the stderr copy reach the pipe's end (bounded: a process monitor started could still
    /// hold the pipe), so [`Launched::stderr`] has monitor's last words.
    fn exited(&mut self, status: ExitStatus) -> ExitStatus {
        if let Some(reader) = self.reader.take() {
            let deadline = Instant::now() + crate::pace::scaled(Duration::from_secs(5));
            while !reader.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            if reader.is_finished() {
                let _ = reader.join();
            }
        }
        status
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_file(&self.config);
        if std::thread::panicking() {
            eprintln!("--- monitor run stderr ---\n{}--- end ---", self.stderr());
        }
    }
}

/// What [`Run`] starts: the fixture fleet and the lines of config around it.
pub struct Spec {
    pub workers: usize,
    /// Extra lines of `[proxy]`.
    pub proxy: String,
    /// Extra lines of `[policy]` (interval_ms is 50 unless set here).
    pub policy: String,
    /// Extra arguments of every fixture process.
    pub fixture_args: Vec<String>,
    /// The group's memory limit.
    pub limit_mib: u64,
    /// Replace the master's command (for start-up failures).
    pub master_command: Option<Vec<String>>,
    pub start_timeout_s: u64,
    /// Extra lines of every `[[process]]`.
    pub process: String,
    /// Count requests with the eBPF probes (needs root; off by default).
    pub probes: bool,
    /// `monitor run` itself starts in the test cgroup with `cgroup = "auto"`, as a systemd unit runs it
    /// (deploy/monitor-run.service); otherwise it starts outside and is given the cgroup's path.
    pub own_group: bool,
    /// More settings (`[alerts]`, `[stats]` …) on top of the ones above.
    pub extra: Config,
    /// The master's port, when the test holds a listener there already (see the proxy tests' raw backend).
    pub master_port: Option<u16>,
    /// More environment of `monitor run` (e.g. `MONITOR_LOG`).
    pub env: Vec<(String, String)>,
    /// A command that runs `monitor run` (see [`Launched::start_wrapped`]), e.g. `unshare` making a container.
    pub wrapper: Vec<String>,
    /// Every process's command instead of the fixture backend's, `{name}` and `{port}` replaced in each word (e.g. a
    /// Node server: [`node_worker`]).
    pub command: Vec<String>,
    /// The test runs on the host only: its group is not listed for the VM's run on v2 ([`Group::here_unlisted`]).
    pub host_only: bool,
}

/// The Node worker of tests/fixtures/node/worker.js, as a [`Spec::command`].
pub fn node_worker() -> Vec<String> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/node/worker.js");
    vec!["node".into(), script.display().to_string(), "--name={name}".into(), "--port={port}".into()]
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            workers: 2,
            proxy: String::new(),
            policy: String::new(),
            fixture_args: Vec::new(),
            limit_mib: 512,
            master_command: None,
            start_timeout_s: 20,
            process: String::new(),
            probes: false,
            own_group: false,
            extra: Config::new(),
            master_port: None,
            env: Vec::new(),
            wrapper: Vec::new(),
            command: Vec::new(),
            host_only: false,
        }
    }
}

/// A running `monitor run` over the fixture fleet m0 (master), tx1, tx2 … in a memory group of its own; the
/// group is removed on drop. Derefs to its [`Launched`].
pub struct Run {
    launched: Launched,
    /// Ports of m0, tx1, tx2 …
    pub ports: Vec<u16>,
    pub cg: Group,
}

impl Deref for Run {
    type Target = Launched;
    fn deref(&self) -> &Launched {
        &self.launched
    }
}

impl DerefMut for Run {
    fn deref_mut(&mut self) -> &mut Launched {
        &mut self.launched
    }
}

/// The config of a fleet: `spec` over the group `cg`, the processes on `ports`.
fn fleet_config(spec: &Spec, cg: &Group, ports: &[u16]) -> Config {
    let cgroup = if spec.own_group { PathBuf::from("auto") } else { cg.path().to_path_buf() };
    let mut config =
        spec.extra.clone().cgroup(cgroup).lines("policy", &spec.policy).probes(spec.probes).lines("proxy", &spec.proxy);
    for (i, &port) in ports.iter().enumerate() {
        let (name, role) = if i == 0 { ("m0".to_string(), "master") } else { (format!("tx{i}"), "worker") };
        let mut p = Process::fixture_on(&name, role, port);
        p.command.extend(spec.fixture_args.iter().cloned());
        if !spec.command.is_empty() {
            let word = |w: &String| w.replace("{name}", &name).replace("{port}", &port.to_string());
            p.command = spec.command.iter().map(word).collect();
        }
        if let (0, Some(c)) = (i, &spec.master_command) {
            p.command.clone_from(c);
        }
        let start_timeout = i64::try_from(spec.start_timeout_s).unwrap_or(i64::MAX);
        config = config.process(p.set("start_timeout_s", start_timeout).lines(&spec.process));
    }
    quick_samples(config)
}

/// `[policy] interval_ms = 50` unless the config sets it: the tests wait for samples.
fn quick_samples(config: Config) -> Config {
    if config.has("policy", "interval_ms") {
        config
    } else {
        config.set("policy", "interval_ms", 50)
    }
}

impl Run {
    /// Writes the config and starts `monitor run` without waiting for it.
    pub fn launch(name: &str, spec: &Spec) -> Run {
        let cg = if spec.host_only {
            Group::here_unlisted(name, Some(spec.limit_mib * MIB))
        } else {
            Group::here(name, Some(spec.limit_mib * MIB))
        };
        let ports: Vec<u16> = (0..=spec.workers)
            .map(|i| if i == 0 { spec.master_port.unwrap_or_else(free_port) } else { free_port() })
            .collect();
        let config = fleet_config(spec, &cg, &ports);
        let env: Vec<(&str, &str)> = spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let inside = spec.own_group.then(|| cg.path());
        let launched = Launched::start_wrapped(&cg.relative(), config, &spec.wrapper, inside, &env);
        Run { launched, ports, cg }
    }

    /// Starts and waits until every process is ready.
    pub fn start(name: &str, spec: &Spec) -> Run {
        let run = Run::launch(name, spec);
        run.wait_for("every process ready", |s| launcher(s).iter().all(|p| p["state"] == "ready"), TIMEOUT);
        run
    }

    /// A request straight to process `i` (0 = m0).
    pub fn direct(&self, i: usize, path: &str) -> Response {
        match http::get(loopback(self.ports[i]), path, TIMEOUT) {
            Ok(r) => r,
            Err(e) => panic!("GET {path} from process {i}: {e}"),
        }
    }

    /// `/stats` of process `i` as JSON.
    pub fn stats(&self, i: usize) -> Value {
        json(&self.direct(i, "/stats"))
    }

    /// A cache id issued by the worker named `name` through the front door (asked until that worker answers).
    pub fn cache_id_of(&self, name: &str) -> String {
        for _ in 0..40 {
            let r = self.get("/r4/x?cache=start", &[]);
            if served_by(&r) == name {
                return r.header("x-cache-id").unwrap_or_else(|| panic!("no cache id from {name}")).to_string();
            }
        }
        panic!("{name} never issued a cache id");
    }

    /// Asks process `i` to crash (`/crash`), not waiting for an answer.
    pub fn crash(&self, i: usize) {
        let _ = http::get(loopback(self.ports[i]), "/crash", Duration::from_secs(2));
    }
}

/// A config of the given processes, samples every 50 ms, the probes off, and a quick stop (`stop_grace_s = 2`,
/// `drain_timeout_s = 5`): add the `[group]` the test wants and start it with [`Launched::start`].
pub fn processes(procs: impl IntoIterator<Item = Process>) -> Config {
    let config = Config::new().probes(false).set("proxy", "stop_grace_s", 2).set("proxy", "drain_timeout_s", 5);
    quick_samples(procs.into_iter().fold(config, Config::process))
}

/// A `[alerts] command` hook: `python3 <script> <out>`.
pub fn python_hook(script: &Path, out: &Path) -> Config {
    Config::new().set("alerts", "command", strings(["python3", &path_str(script), &path_str(out)]))
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

/// A response body as JSON; panics with the body when it is not.
pub fn json(r: &Response) -> Value {
    match serde_json::from_slice(&r.body) {
        Ok(v) => v,
        Err(e) => panic!("not JSON ({e}): {} {}", r.status, r.text()),
    }
}

/// The `launcher` list of a status.
pub fn launcher(s: &Value) -> Vec<Value> {
    s.get("launcher").and_then(Value::as_array).cloned().unwrap_or_default()
}

/// The launcher entry named `name`.
pub fn member(s: &Value, name: &str) -> Value {
    launcher(s).into_iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no process {name} in:\n{s:#}"))
}

/// Which process served a fixture answer.
pub fn served_by(r: &Response) -> String {
    r.header("x-served-by").unwrap_or("<none>").to_string()
}

/// True when `pid` is gone or a zombie (dead, waiting for a parent that does not reap).
pub fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(text) => text.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fleet_config_names_every_process() {
        if !crate::require_group("a_fleet_config_names_every_process") {
            return;
        }
        let cg = Group::here("fleet-config", Some(64 * MIB));
        let spec = Spec {
            proxy: "master_serves_tx = false".into(),
            process: "admin_path = \"/admin/memory\"".into(),
            master_command: Some(vec!["sleep".into(), "600".into()]),
            ..Spec::default()
        };
        let text = fleet_config(&spec, &cg, &[8000, 8001, 8002]).render();
        let doc: toml::Table = toml::from_str(&text).expect("parses");
        let procs = doc["process"].as_array().expect("processes");
        assert_eq!(procs.len(), 3);
        assert_eq!(procs[0]["command"].as_array().map(Vec::len), Some(2), "{text}");
        assert_eq!(procs[2]["name"].as_str(), Some("tx2"));
        assert_eq!(procs[2]["admin_path"].as_str(), Some("/admin/memory"));
        assert_eq!(doc["proxy"]["master_serves_tx"].as_bool(), Some(false));
    }
}

/// What the clients of one process saw ([`Busy`]): its 200s, the memory guard's 503s that `shed` accepts, and
/// anything else.
#[derive(Debug, Default)]
pub struct Seen {
    pub ok: u64,
    pub shed: u64,
    pub failed: Vec<String>,
}

/// Clients that keep the process `name` busy through the front door, each with requests for `path` on its cache id,
/// one after another, until [`Busy::stop`] (or 30 s). A 503 whose body `shed` accepts counts as shed (the client
/// then waits 20 ms); any other answer but `name`'s 200 as failed.
pub struct Busy {
    stop: Arc<std::sync::atomic::AtomicBool>,
    clients: Vec<JoinHandle<Seen>>,
}

impl Busy {
    pub fn start(run: &Run, n: usize, cache_id: &str, name: &str, path: &str, shed: fn(&str) -> bool) -> Busy {
        use std::sync::atomic::Ordering;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let clients = (0..n)
            .map(|_| {
                let (proxy, stop) = (run.proxy, stop.clone());
                let (id, name, path) = (cache_id.to_string(), name.to_string(), path.to_string());
                std::thread::spawn(move || {
                    let mut seen = Seen::default();
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                        match http::request(proxy, "GET", &path, &[("X-Cache-Id", &id)], TIMEOUT) {
                            Ok(r) if r.status == 200 && served_by(&r) == name => seen.ok += 1,
                            Ok(r) if r.status == 503 && shed(&r.text()) => {
                                seen.shed += 1;
                                std::thread::sleep(Duration::from_millis(20));
                            }
                            Ok(r) => seen.failed.push(format!("{} from {}: {}", r.status, served_by(&r), r.text())),
                            Err(e) => seen.failed.push(e),
                        }
                    }
                    seen
                })
            })
            .collect();
        Busy { stop, clients }
    }

    /// Stops the clients and sums what they saw.
    pub fn stop(self) -> Seen {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let mut seen = Seen::default();
        for c in self.clients {
            let s = c.join().unwrap_or_else(|_| panic!("a client thread panicked"));
            seen.ok += s.ok;
            seen.shed += s.shed;
            seen.failed.extend(s.failed);
        }
        seen
    }
}
