//! Shared by `run_readiness` and `run_stop`: `monitor run` over processes given one by one (any command, any port,
//! shells included), with a `[group]` section of the test's choosing; killed on drop, its stderr kept.

#![allow(dead_code)]

use monitor_tests::agent::free_port;
use monitor_tests::{http, monitor_bin, ChildGuard};
use serde_json::Value;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FIXTURE: &str = env!("CARGO_BIN_EXE_fixture-backend");

/// One `[[process]]`.
pub struct Proc {
    pub name: String,
    pub role: &'static str,
    pub command: Vec<String>,
    pub port: u16,
    /// More lines of its `[[process]]`.
    pub extra: String,
}

impl Proc {
    /// The fixture backend as `name` on a free port.
    pub fn fixture(name: &str, role: &'static str) -> Proc {
        let port = free_port();
        let command = vec![FIXTURE.into(), "--name".into(), name.into(), "--port".into(), port.to_string()];
        Proc { name: name.into(), role, command, port, extra: String::new() }
    }

    /// `sh -c <script>` as `name` on `port`.
    pub fn shell(name: &str, script: &str, port: u16) -> Proc {
        let command = vec!["sh".into(), "-c".into(), script.into()];
        Proc { name: name.into(), role: "worker", command, port, extra: String::new() }
    }
}

/// A running `monitor run`.
pub struct Launched {
    child: ChildGuard,
    stderr: Arc<Mutex<Vec<u8>>>,
    pub proxy: SocketAddr,
    pub web: SocketAddr,
    config: PathBuf,
}

/// Writes the config (`group`: the lines of `[group]`) and starts `monitor run`.
pub fn launch(test: &str, group: &str, procs: &[Proc]) -> Launched {
    launch_in(test, group, procs, None)
}

/// [`launch`], monitor itself started inside the cgroup `inside` (as a service manager starts it in its unit's).
pub fn launch_in(test: &str, group: &str, procs: &[Proc], inside: Option<&std::path::Path>) -> Launched {
    let (proxy, web) = (free_port(), free_port());
    let mut text = format!(
        "[group]\n{group}\n[policy]\ninterval_ms = 50\n[probes]\nenabled = false\n[web]\nlisten = \
         \"127.0.0.1:{web}\"\n[proxy]\nlisten = \"127.0.0.1:{proxy}\"\nstop_grace_s = 2\ndrain_timeout_s = 5\n"
    );
    for p in procs {
        let cmd: Vec<String> = p.command.iter().map(|s| format!("{s:?}")).collect();
        text.push_str(&format!(
            "[[process]]\nname = {:?}\nrole = {:?}\ncommand = [{}]\nport = {}\n{}\n",
            p.name,
            p.role,
            cmd.join(", "),
            p.port,
            p.extra
        ));
    }
    let config = std::env::temp_dir().join(format!("monitor-{test}-{}.toml", std::process::id()));
    std::fs::write(&config, text).unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
    let mut cmd = Command::new(monitor_bin());
    cmd.arg("run").arg("--config").arg(&config).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = match inside {
        Some(cg) => monitor_tests::spawn_in_cgroup(&mut cmd, cg),
        None => ChildGuard::spawn(&mut cmd),
    };
    let stderr = Arc::new(Mutex::new(Vec::new()));
    if let Some(mut err) = child.stderr.take() {
        let into = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut v) = into.lock() {
                    v.extend_from_slice(&buf[..n]);
                }
            }
        });
    }
    let at = |p: u16| SocketAddr::from(([127, 0, 0, 1], p));
    Launched { child, stderr, proxy: at(proxy), web: at(web), config }
}

impl Launched {
    pub fn stderr(&self) -> String {
        self.stderr.lock().map(|v| String::from_utf8_lossy(&v).into_owned()).unwrap_or_default()
    }

    /// Polls `/api/v1/status` until `pred` holds (returns it); panics after `timeout`.
    pub fn wait_for(&self, what: &str, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut last = Value::Null;
        while Instant::now() < deadline {
            if let Some(s) = self.try_status() {
                if pred(&s) {
                    return s;
                }
                last = s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("{what}: not within {timeout:?}; status:\n{last:#}\nstderr:\n{}", self.stderr());
    }

    pub fn try_status(&self) -> Option<Value> {
        let r = http::get(self.web, "/api/v1/status", Duration::from_secs(5)).ok()?;
        (r.status == 200).then(|| serde_json::from_slice(&r.body).ok()).flatten()
    }

    pub fn status(&self) -> Value {
        self.try_status().unwrap_or_else(|| panic!("no status; stderr:\n{}", self.stderr()))
    }

    /// SIGTERM, then the exit within `timeout`.
    pub fn terminate(&mut self, timeout: Duration) -> ExitStatus {
        if let Ok(pid) = libc::pid_t::try_from(self.child.pid()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is our un-reaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        match self.child.wait_timeout(timeout) {
            Some(s) => s,
            None => panic!("monitor run still running {timeout:?} after SIGTERM; stderr:\n{}", self.stderr()),
        }
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

/// The launcher entry named `name`.
pub fn member(s: &Value, name: &str) -> Value {
    let list = s.get("launcher").and_then(Value::as_array).cloned().unwrap_or_default();
    list.into_iter().find(|p| p["name"] == name).unwrap_or_else(|| panic!("no process {name} in:\n{s:#}"))
}

/// True when `pid` is gone or a zombie (dead, waiting for a parent that does not reap).
pub fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(text) => text.rsplit_once(") ").is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}
