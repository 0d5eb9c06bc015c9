//! Runs the real `monitor` binary: `Agent` (a `monitor agent` on a free loopback port, killed on drop, its stderr
//! kept for failure messages) and `run_monitor` (a one-shot command with a time limit).

use crate::child::ChildGuard;
use crate::http;
use serde_json::Value;
use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an agent may take to answer `/healthz` after it starts.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);
/// The time limit of one HTTP request to the agent.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long [`Agent::get`] asks again for a page whose render outlasts the agent's own wait (under emulation only).
pub const RENDER_PATIENCE: Duration = Duration::from_secs(10);

pub use crate::bins::{monitor_bin, workspace_root};

/// A free loopback port (bound and released; the small race with other binders is accepted).
/// Never the same port twice in one test binary: tests run in parallel, and two servers handed one port would see
/// one fail to bind while the other answers in its place.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let port = match TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
            Ok(a) => a.port(),
            Err(e) => panic!("cannot find a free port: {e}"),
        };
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Collects a child's output stream on a thread.
pub(crate) fn collect(mut r: impl Read + Send + 'static, into: Arc<Mutex<Vec<u8>>>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = r.read(&mut buf) {
            if n == 0 {
                break;
            }
            if let Ok(mut v) = into.lock() {
                v.extend_from_slice(&buf[..n]);
            }
        }
    })
}

pub(crate) fn text(buf: &Arc<Mutex<Vec<u8>>>) -> String {
    buf.lock().map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default()
}

/// A running `monitor agent`, killed (and its stderr printed if the test is failing) on drop.
pub struct Agent {
    child: ChildGuard,
    addr: SocketAddr,
    args: Vec<String>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

/// The entry of a status's `processes` for `pid`.
pub fn process(status: &Value, pid: u32) -> Option<&Value> {
    status
        .pointer("/processes")?
        .as_array()?
        .iter()
        .find(|p| p.get("pid").and_then(Value::as_u64) == Some(u64::from(pid)))
}

impl Agent {
    /// Starts `monitor agent --cgroup <cgroup> --listen 127.0.0.1:<free port> --interval-ms 50 <extra…>` and
    /// waits until `/healthz` answers 200.
    pub fn start(cgroup: &str, extra: &[&str]) -> Agent {
        let port = free_port();
        let mut args: Vec<String> = vec!["agent".into(), "--cgroup".into(), cgroup.into()];
        args.extend(["--listen".into(), format!("127.0.0.1:{port}"), "--interval-ms".into(), "50".into()]);
        args.extend(extra.iter().map(|s| s.to_string()));
        Self::start_args(args, port)
    }

    /// Writes `config` to `<dir>/monitor.toml` and starts the agent on `cgroup` with it, as [`Agent::start`] does.
    pub fn with_config(cgroup: &str, config: &crate::config::Config, dir: &std::path::Path) -> Agent {
        let path = config.write(dir.join("monitor.toml"));
        Self::start(cgroup, &["--config", &path.display().to_string()])
    }

    /// Writes `config` to `<dir>/agent.toml` and starts `monitor agent` on `cgroup` with it and no other setting:
    /// the config's own interval and wake-ups, which the reaction tests time.
    pub fn with_config_only(cgroup: &std::path::Path, config: &crate::config::Config, dir: &std::path::Path) -> Agent {
        let path = config.write(dir.join("agent.toml"));
        let port = free_port();
        let args = vec![
            "agent".to_string(),
            "--config".into(),
            path.display().to_string(),
            "--cgroup".into(),
            cgroup.display().to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
        ];
        Self::start_args(args, port)
    }

    /// Starts `monitor <args…>` (which must make it listen on `127.0.0.1:<port>`) and waits for `/healthz`.
    pub fn start_args(args: Vec<String>, port: u16) -> Agent {
        Self::start_args_in(args, port, None)
    }

    /// Like [`Agent::start_args`], the agent placed in `cgroup` (a v1 memory cgroup directory) from its first
    /// instruction, as a service manager would start it in its unit's group.
    pub fn start_args_in(args: Vec<String>, port: u16, cgroup: Option<&std::path::Path>) -> Agent {
        Self::launch(args, port, cgroup, &[])
    }

    /// Like [`Agent::start_args`], with `env` set for the agent (systemd's `NOTIFY_SOCKET`, `WATCHDOG_USEC`…).
    pub fn start_args_env(args: Vec<String>, port: u16, env: &[(&str, &str)]) -> Agent {
        Self::launch(args, port, None, env)
    }

    /// Like [`Agent::start_args`], run through `wrapper` (`setpriv --reuid …`, which then execs the agent: the
    /// pid is the agent's).
    pub fn start_wrapped(wrapper: &[&str], args: Vec<String>, port: u16) -> Agent {
        let mut full: Vec<String> = wrapper[1..].iter().map(|s| s.to_string()).collect();
        full.push(monitor_bin().display().to_string());
        full.extend(args);
        Self::spawn_and_wait(Command::new(wrapper[0]), full, port, None, &[])
    }

    fn launch(args: Vec<String>, port: u16, cgroup: Option<&std::path::Path>, env: &[(&str, &str)]) -> Agent {
        Self::spawn_and_wait(Command::new(monitor_bin()), args, port, cgroup, env)
    }

    fn spawn_and_wait(
        mut cmd: Command,
        args: Vec<String>,
        port: u16,
        cgroup: Option<&std::path::Path>,
        env: &[(&str, &str)],
    ) -> Agent {
        cmd.args(&args).envs(env.iter().copied()).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
        let mut child = match cgroup {
            Some(cg) => crate::spawn_in_cgroup(&mut cmd, cg),
            None => ChildGuard::spawn(&mut cmd),
        };
        let stderr = Arc::new(Mutex::new(Vec::new()));
        if let Some(err) = child.stderr.take() {
            collect(err, stderr.clone());
        }
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let mut agent = Agent { child, addr, args, stderr };
        agent.wait_healthy();
        agent
    }

    fn wait_healthy(&mut self) {
        let start_timeout = crate::pace::scaled(START_TIMEOUT);
        let deadline = Instant::now() + start_timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            if let Some(status) = self.child.wait_timeout(Duration::ZERO) {
                panic!(
                    "monitor {:?} exited ({status}) before answering /healthz; stderr:\n{}",
                    self.args,
                    self.stderr()
                );
            }
            match http::get(self.addr, "/healthz", REQUEST_TIMEOUT) {
                Ok(r) if r.status == 200 => return,
                Ok(r) => last = format!("status {}: {}", r.status, r.text()),
                Err(e) => last = e,
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "monitor {:?}: no /healthz within {start_timeout:?} (last: {last}); stderr:\n{}",
            self.args,
            self.stderr()
        );
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The agent's pid.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// What the agent has written to stderr so far.
    pub fn stderr(&self) -> String {
        text(&self.stderr)
    }

    /// `GET path`: (status code, body). Panics if the agent does not answer. Under emulation
    /// ([`crate::pace::slowdown`] above 1) a page render can outlast the agent's own wait for it: its 503 `busy: no
    /// render within` is asked again a second later (the render goes on into the agent's cache), for as long as the
    /// stretched [`RENDER_PATIENCE`] allows. Natively that 503 is the answer.
    pub fn get(&self, path: &str) -> (u16, String) {
        let deadline = Instant::now() + crate::pace::scaled(RENDER_PATIENCE);
        loop {
            let (code, body) = match http::get(self.addr, path, REQUEST_TIMEOUT) {
                Ok(r) => (r.status, r.text()),
                Err(e) => panic!("GET {path} from the agent: {e}; agent stderr:\n{}", self.stderr()),
            };
            let slow_render = code == 503 && body.starts_with("busy: no render within");
            if !slow_render || crate::pace::slowdown() == 1 || Instant::now() >= deadline {
                return (code, body);
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// `GET /api/v1/status` as JSON. Panics on a non-200 answer or bad JSON.
    pub fn status(&self) -> Value {
        let (code, body) = self.get("/api/v1/status");
        if code != 200 {
            panic!("GET /api/v1/status: {code}: {body}; agent stderr:\n{}", self.stderr());
        }
        match serde_json::from_str(&body) {
            Ok(v) => v,
            Err(e) => panic!("GET /api/v1/status: bad JSON ({e}): {body}"),
        }
    }

    /// Polls `/api/v1/status` every 50 ms until `pred` holds, returning that status; panics after `timeout` with
    /// the last status and the agent's stderr.
    pub fn wait_for(&self, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        let timeout = crate::pace::scaled(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.status();
            if pred(&s) {
                return s;
            }
            if Instant::now() >= deadline {
                let pretty = serde_json::to_string_pretty(&s).unwrap_or_default();
                panic!(
                    "condition not met within {timeout:?}; last status:\n{pretty}\nagent stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.child.kill();
        if std::thread::panicking() {
            eprintln!("--- monitor {:?} stderr ---\n{}--- end ---", self.args, self.stderr());
        }
    }
}

/// What a finished one-shot `monitor` command did.
#[derive(Debug)]
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

/// Runs `monitor <args…>` with no stdin, killing it and panicking if it runs longer than `timeout`.
pub fn run_monitor(args: &[&str], timeout: Duration) -> Finished {
    let mut cmd = Command::new(monitor_bin());
    cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = ChildGuard::spawn(&mut cmd);
    let (out, err) = (Arc::new(Mutex::new(Vec::new())), Arc::new(Mutex::new(Vec::new())));
    let mut readers = Vec::new();
    if let Some(s) = child.stdout.take() {
        readers.push(collect(s, out.clone()));
    }
    if let Some(s) = child.stderr.take() {
        readers.push(collect(s, err.clone()));
    }
    let status = child.wait_timeout(timeout);
    let elapsed = started.elapsed();
    let Some(status) = status else {
        child.kill();
        panic!("monitor {args:?} still running after {timeout:?}; stderr so far:\n{}", text(&err));
    };
    for r in readers {
        let _ = r.join();
    }
    Finished { status, stdout: text(&out), stderr: text(&err), elapsed }
}
