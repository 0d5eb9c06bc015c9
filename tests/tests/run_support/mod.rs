//! Shared by the `proxy_*` and `run_*` tests: a real `monitor run` over a master and N workers of the
//! `fixture-backend`, in a v1 memory cgroup the test owns, on free loopback ports; killed and cleaned up on drop.

#![allow(dead_code)]

use monitor_tests::agent::free_port;
use monitor_tests::http::{self, Response};
use monitor_tests::{monitor_bin, spawn_in_cgroup, CgroupV1, ChildGuard, MIB};
use serde_json::Value;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FIXTURE: &str = env!("CARGO_BIN_EXE_fixture-backend");
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// What to run.
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
    /// Whole sections (`[alerts]` …) added before the processes.
    pub extra: String,
    /// The master's port, when the test holds a listener there already (see proxy_edge's raw backend).
    pub master_port: Option<u16>,
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
            extra: String::new(),
            master_port: None,
        }
    }
}

/// A running `monitor run`.
pub struct Run {
    child: ChildGuard,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// The thread copying monitor's stderr into `stderr`; done at the pipe's end.
    reader: Option<std::thread::JoinHandle<()>>,
    pub proxy: SocketAddr,
    pub web: SocketAddr,
    /// Ports of m0, tx1, tx2 …
    pub ports: Vec<u16>,
    pub config: PathBuf,
    pub cg: CgroupV1,
}

fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// Root and a v1 memory controller, or a printed reason to skip (a failure in CI).
pub use monitor_tests::require_v1 as ready;

/// Writes the config and starts `monitor run` without waiting for it.
pub fn launch(name: &str, spec: &Spec) -> Run {
    let cg = CgroupV1::create(name, Some(spec.limit_mib * MIB));
    let (proxy, web) = (free_port(), free_port());
    let ports: Vec<u16> = (0..=spec.workers)
        .map(|i| if i == 0 { spec.master_port.unwrap_or_else(free_port) } else { free_port() })
        .collect();
    let mut text = format!(
        "[group]\ncgroup = {:?}\n[policy]\n{}{}\n[probes]\nenabled = {}\n[web]\nlisten = \
         \"127.0.0.1:{web}\"\n[proxy]\nlisten = \"127.0.0.1:{proxy}\"\n{}\n{}\n",
        if spec.own_group { "auto".to_string() } else { cg.path().display().to_string() },
        if spec.policy.contains("interval_ms") { "" } else { "interval_ms = 50\n" },
        spec.policy,
        spec.probes,
        spec.proxy,
        spec.extra
    );
    for (i, port) in ports.iter().enumerate() {
        let (pname, role) = if i == 0 { ("m0".to_string(), "master") } else { (format!("tx{i}"), "worker") };
        let mut cmd = vec![FIXTURE.to_string(), "--name".into(), pname.clone(), "--port".into(), port.to_string()];
        cmd.extend(spec.fixture_args.iter().cloned());
        if i == 0 {
            if let Some(c) = &spec.master_command {
                cmd.clone_from(c);
            }
        }
        text.push_str(&format!(
            "[[process]]\nname = \"{pname}\"\nrole = \"{role}\"\ncommand = {}\nport = {port}\nstart_timeout_s = {}\n{}\n",
            toml_list(&cmd),
            spec.start_timeout_s,
            spec.process
        ));
    }
    let config = std::env::temp_dir().join(format!("{}.toml", cg.relative()));
    if let Err(e) = std::fs::write(&config, text) {
        panic!("writing {}: {e}", config.display());
    }
    let mut cmd = Command::new(monitor_bin());
    cmd.arg("run").arg("--config").arg(&config).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = if spec.own_group { spawn_in_cgroup(&mut cmd, cg.path()) } else { ChildGuard::spawn(&mut cmd) };
    let stderr = Arc::new(Mutex::new(Vec::new()));
    let mut reader = None;
    if let Some(mut err) = child.stderr.take() {
        let into = stderr.clone();
        reader = Some(std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut v) = into.lock() {
                    v.extend_from_slice(&buf[..n]);
                }
            }
        }));
    }
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    Run { child, stderr, reader, proxy: at(proxy), web: at(web), ports, config, cg }
}

impl Run {
    /// Starts and waits until every process is ready.
    pub fn start(name: &str, spec: &Spec) -> Run {
        let run = launch(name, spec);
        run.wait_for("every process ready", |s| launcher(s).iter().all(|p| p["state"] == "ready"), TIMEOUT);
        run
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default()
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// A request through the front door.
    pub fn get(&self, path: &str, headers: &[(&str, &str)]) -> Response {
        match http::request(self.proxy, "GET", path, headers, TIMEOUT) {
            Ok(r) => r,
            Err(e) => panic!("GET {path} via the proxy: {e}\nmonitor stderr:\n{}", self.stderr()),
        }
    }

    /// A request straight to process `i` (0 = m0).
    pub fn direct(&self, i: usize, path: &str) -> Response {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.ports[i]));
        match http::get(addr, path, TIMEOUT) {
            Ok(r) => r,
            Err(e) => panic!("GET {path} from process {i}: {e}"),
        }
    }

    /// `/stats` of process `i` as JSON.
    pub fn stats(&self, i: usize) -> Value {
        json(&self.direct(i, "/stats"))
    }

    pub fn status(&self) -> Value {
        match http::get(self.web, "/api/v1/status", TIMEOUT) {
            Ok(r) if r.status == 200 => json(&r),
            other => panic!("GET /api/v1/status: {other:?}\nmonitor stderr:\n{}", self.stderr()),
        }
    }

    /// Polls the agent's status until `pred` holds (returns it), or panics after `timeout`.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(r) = http::get(self.web, "/api/v1/status", TIMEOUT) {
                if r.status == 200 {
                    let s = json(&r);
                    if pred(&s) {
                        return s;
                    }
                    if Instant::now() >= deadline {
                        panic!("{what}: not within {timeout:?}; status:\n{s:#}\nstderr:\n{}", self.stderr());
                    }
                }
            }
            if Instant::now() >= deadline {
                panic!("{what}: no status within {timeout:?}; stderr:\n{}", self.stderr());
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

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        self.sigterm();
        match self.child.wait_timeout(timeout) {
            Some(s) => self.exited(s),
            None => panic!("monitor run still running {timeout:?} after SIGTERM; stderr:\n{}", self.stderr()),
        }
    }

    /// Waits for `monitor run` to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        match self.child.wait_timeout(timeout) {
            Some(s) => self.exited(s),
            None => panic!("monitor run still running after {timeout:?}; stderr:\n{}", self.stderr()),
        }
    }

    /// After the exit: lets the stderr copy reach the pipe's end (bounded: a process monitor started could still
    /// hold the pipe), so [`Run::stderr`] has monitor's last words.
    fn exited(&mut self, status: ExitStatus) -> ExitStatus {
        if let Some(reader) = self.reader.take() {
            let deadline = Instant::now() + Duration::from_secs(5);
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

impl Drop for Run {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_file(&self.config);
        if std::thread::panicking() {
            eprintln!("--- monitor run stderr ---\n{}--- end ---", self.stderr());
        }
    }
}

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
