//! The demo's running system: a temp config, `monitor run` over a master and two workers of `fixture-backend` in a
//! limited memory cgroup it creates (v1, or v2 on a unified-only host), free loopback ports, a watchdog that cleans up
//! if xtask itself dies, and the checks that nothing is left behind.

use anyhow::{bail, Context, Result};
use monitor_tests::http;
use serde_json::Value;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

pub const V1_MEMORY: &str = "/sys/fs/cgroup/memory";
/// The cgroup v2 root, used when there is no v1 memory hierarchy (a unified-only host).
pub const V2_ROOT: &str = "/sys/fs/cgroup";

/// Where the demo's group goes: under the v1 memory hierarchy when there is one, else under the cgroup v2 root when
/// its children get the memory controller. Returns that parent and the version's name, or why neither works.
pub fn group_parent() -> Result<(&'static Path, &'static str), String> {
    if Path::new(V1_MEMORY).join("memory.limit_in_bytes").exists() {
        return Ok((Path::new(V1_MEMORY), "v1"));
    }
    let v2 = Path::new(V2_ROOT);
    let controllers = std::fs::read_to_string(v2.join("cgroup.subtree_control")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "memory") {
        return Ok((v2, "v2"));
    }
    Err(format!(
        "neither a cgroup v1 memory hierarchy at {V1_MEMORY} nor a cgroup v2 root at {V2_ROOT} whose \
         cgroup.subtree_control enables memory (echo +memory > {V2_ROOT}/cgroup.subtree_control)"
    ))
}
pub const MIB: u64 = 1024 * 1024;
/// The processes `monitor run` starts: name, role.
pub const PROCESSES: [(&str, &str); 3] = [("m0", "master"), ("tx1", "worker"), ("tx2", "worker")];

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Ctrl-C (and SIGTERM/SIGHUP) only set a flag: the demo then drains `monitor run` and cleans up.
pub fn catch_signals() {
    let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(sig, handler) };
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sleeps up to `d`, in small steps; false when interrupted.
pub fn pause(d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if interrupted() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(end - Instant::now()));
    }
    !interrupted()
}

/// `n` distinct free loopback ports (all bound at once, then released).
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let held: Vec<TcpListener> =
        (0..n).map(|_| TcpListener::bind("127.0.0.1:0")).collect::<Result<_, _>>().context("finding free ports")?;
    held.iter().map(|l| Ok(l.local_addr()?.port())).collect()
}

fn toml_list(v: &[String]) -> String {
    let items: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", items.join(", "))
}

/// What one `monitor run` of the demo is: its name (in its cgroup's and folder's names), the address its front
/// door and API listen on, its processes (name, role), and more config text (a `[cluster]` table).
pub struct Spec {
    pub name: String,
    pub ip: std::net::Ipv4Addr,
    pub processes: Vec<(String, &'static str)>,
    pub more: String,
}

impl Spec {
    /// The demo's main system: m0, tx1 and tx2 on 127.0.0.1.
    pub fn main() -> Spec {
        Spec {
            name: String::new(),
            ip: std::net::Ipv4Addr::LOCALHOST,
            processes: PROCESSES.iter().map(|(n, r)| (n.to_string(), *r)).collect(),
            more: String::new(),
        }
    }
}

/// The running system; dropped = stopped and removed (the normal path calls [`System::stop`] first).
pub struct System {
    pub cgroup: PathBuf,
    pub limit: u64,
    pub proxy: SocketAddr,
    pub web: SocketAddr,
    /// Its processes (name, role) and their ports, in the same order.
    pub processes: Vec<(String, &'static str)>,
    pub ports: Vec<u16>,
    pub dir: PathBuf,
    pub log: PathBuf,
    monitor_bin: PathBuf,
    child: Option<Child>,
    watchdog: Option<Child>,
}

impl System {
    /// Writes the config and starts `monitor run` (and the watchdog); waits until every process is ready.
    pub fn start(bin: &Path, parent: &Path, limit_mib: u64, spec: Spec) -> Result<System> {
        let id = std::process::id();
        let name = match spec.name.as_str() {
            "" => format!("monitor-demo-{id}"),
            n => format!("monitor-demo-{id}-{n}"),
        };
        let cgroup = parent.join(&name);
        if cgroup.exists() {
            bail!("{} exists already", cgroup.display());
        }
        let dir = std::env::temp_dir().join(&name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let ports = free_ports(2 + spec.processes.len())?;
        let at = |p: u16| SocketAddr::from((spec.ip, p));
        let mut sys = System {
            cgroup,
            limit: limit_mib * MIB,
            proxy: at(ports[0]),
            web: at(ports[1]),
            processes: spec.processes,
            ports: ports[2..].to_vec(),
            log: dir.join("monitor.log"),
            dir,
            monitor_bin: bin.join("monitor"),
            child: None,
            watchdog: None,
        };
        let config = sys.dir.join("monitor.toml");
        std::fs::write(&config, sys.config_text(&bin.join("fixture-backend"), &spec.more))
            .with_context(|| format!("writing {}", config.display()))?;
        sys.watchdog = Some(watchdog(&sys.cgroup)?);
        let log = std::fs::File::create(&sys.log).with_context(|| format!("creating {}", sys.log.display()))?;
        let child = Command::new(&sys.monitor_bin)
            .arg("run")
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Its own process group: Ctrl-C reaches only xtask, which then drains it.
            .process_group(0)
            .spawn()
            .context("starting monitor run")?;
        let pid = child.id();
        sys.child = Some(child);
        if let Some(stdin) = sys.watchdog.as_mut().and_then(|w| w.stdin.as_mut()) {
            writeln!(stdin, "{pid}").context("telling the watchdog monitor's pid")?;
        }
        sys.wait_ready(Duration::from_secs(20))?;
        Ok(sys)
    }

    fn config_text(&self, fixture: &Path, more: &str) -> String {
        let mut t = format!(
            "# written by `cargo xtask demo`\n[group]\ncgroup = {:?}\ncreate = true\nlimit_bytes = {}\n\n\
             [web]\nlisten = \"{}\"\n\n[stats]\npath = {:?}\n\n[probes]\nenabled = true\n\n\
             [proxy]\nlisten = \"{}\"\ndrain_timeout_s = 10\nstop_grace_s = 3\n",
            self.cgroup.display().to_string(),
            self.limit,
            self.web,
            self.dir.join("stats.sqlite").display().to_string(),
            self.proxy,
        );
        for ((name, role), port) in self.processes.iter().zip(&self.ports) {
            let argv: Vec<String> = vec![
                fixture.display().to_string(),
                "--instance-code".into(),
                name.to_string(),
                "--port".into(),
                port.to_string(),
            ];
            t.push_str(&format!(
                "\n[[process]]\nname = \"{name}\"\nrole = \"{role}\"\ncommand = {}\nport = {port}\n",
                toml_list(&argv)
            ));
        }
        t.push_str(more);
        t
    }

    fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                bail!("monitor run exited at start-up ({st}); its log:\n{}", self.log_tail(20));
            }
            if let Ok(s) = self.status() {
                let launcher = s["launcher"].as_array().cloned().unwrap_or_default();
                if launcher.len() == self.processes.len() && launcher.iter().all(|p| p["state"] == "ready") {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline || interrupted() {
                bail!("monitor run not ready within {timeout:?}; its log:\n{}", self.log_tail(20));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `GET /api/v1/status` as JSON.
    pub fn status(&self) -> Result<Value> {
        let r = http::get(self.web, "/api/v1/status", Duration::from_secs(5)).map_err(anyhow::Error::msg)?;
        if r.status != 200 {
            bail!("/api/v1/status: {} {}", r.status, r.text());
        }
        Ok(serde_json::from_slice(&r.body)?)
    }

    /// Polls the status (every 20 ms) until `pred` holds; the matching status, or None after `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&Value) -> bool) -> Option<Value> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline && !interrupted() {
            if let Some(s) = self.status().ok().filter(&pred) {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Prints the `monitor status --url …` table.
    pub fn print_table(&self) -> Result<()> {
        let url = format!("http://{}", self.web);
        let st = Command::new(&self.monitor_bin).args(["status", "--url", &url]).status();
        if !st.as_ref().is_ok_and(|s| s.success()) {
            bail!("monitor status --url {url} failed: {st:?}");
        }
        Ok(())
    }

    /// The last `n` lines of monitor's log, timestamps cut, indented.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(n);
        lines[from..].iter().map(|l| format!("    {}\n", untimed(l))).collect()
    }

    /// The log from the first line containing `mark` on, timestamps cut, indented.
    pub fn log_from(&self, mark: &str) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().skip_while(|l| !l.contains(mark)).map(|l| format!("    {}\n", untimed(l))).collect()
    }

    /// The pids of the processes `monitor run` launched, as its status lists them.
    pub fn launched_pids(&self) -> Vec<u32> {
        let s = self.status().ok().and_then(|s| s["launcher"].as_array().cloned()).unwrap_or_default();
        s.iter().filter_map(|p| p["pid"].as_u64().and_then(|p| u32::try_from(p).ok())).collect()
    }

    /// The `monitor` binary it runs.
    pub fn monitor_bin(&self) -> &Path {
        &self.monitor_bin
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends SIGTERM to `monitor run`.
    pub fn sigterm(&self) {
        if let Some(pid) = self.pid().and_then(|p| libc::pid_t::try_from(p).ok()) {
            // SAFETY: kill has no memory-safety preconditions; the pid is our un-reaped child.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }

    /// Waits for `monitor run` to exit; None after `timeout` (then it is killed).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = child.try_wait() {
                self.child = None;
                return Some(st);
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                self.child = None;
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// After `monitor run` exited: what is left of the system (empty = nothing). Removes what it finds.
    pub fn leftovers(&self, pids: &[u32]) -> Vec<String> {
        let mut left = Vec::new();
        if self.cgroup.exists() {
            left.push(format!("{} (removed now)", self.cgroup.display()));
            remove_cgroup(&self.cgroup);
        }
        for &pid in pids {
            if Path::new(&format!("/proc/{pid}")).exists() {
                left.push(format!("process {pid}"));
            }
        }
        for addr in [self.proxy, self.web] {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                left.push(format!("a listener on {addr}"));
            }
        }
        left
    }
}

/// Cuts the leading RFC 3339 timestamp tracing puts on each line.
fn untimed(line: &str) -> &str {
    match line.split_once(' ') {
        Some((ts, rest)) if ts.ends_with('Z') && ts.contains('T') => rest.trim_start(),
        _ => line,
    }
}

/// Kills what is left in the group and removes it (retrying while the kernel reaps).
fn remove_cgroup(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while dir.exists() && Instant::now() < deadline {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace().filter_map(|p| p.parse::<libc::pid_t>().ok()) {
            // SAFETY: kill has no memory-safety preconditions.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        if std::fs::remove_dir(dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A shell that outlives xtask: it reads monitor's pid, then waits for `reaped` or for its stdin to close (xtask
/// gone, however it ended). If monitor was not reaped it is sent SIGTERM (it drains and removes the cgroup it
/// created), then SIGKILL after 15 s; whatever is still in the cgroup is killed and the cgroup removed.
fn watchdog(cgroup: &Path) -> Result<Child> {
    let script = r#"trap '' INT TERM HUP
read -r pid; read -r done
if [ -n "$pid" ] && [ "$done" != reaped ]; then
  kill -TERM "$pid" 2>/dev/null
  i=0; while kill -0 "$pid" 2>/dev/null && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
  kill -KILL "$pid" 2>/dev/null
fi
[ -d "$1" ] || exit 0
i=0; while [ $i -lt 50 ]; do
  for p in $(cat "$1/cgroup.procs" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
  rmdir "$1" 2>/dev/null && exit 0; sleep 0.1; i=$((i+1))
done"#;
    Command::new("sh")
        .args(["-c", script, "sh"])
        .arg(cgroup)
        .stdin(Stdio::piped())
        .process_group(0)
        .spawn()
        .context("starting the cleanup watchdog")
}

impl Drop for System {
    fn drop(&mut self) {
        if self.child.is_some() {
            self.sigterm();
            if self.wait_exit(Duration::from_secs(15)).is_none() {
                eprintln!("demo: monitor run did not stop within 15 s of SIGTERM: killed it");
            }
        }
        if self.cgroup.exists() {
            remove_cgroup(&self.cgroup);
        }
        if let Some(mut w) = self.watchdog.take() {
            if let Some(mut stdin) = w.stdin.take() {
                let _ = writeln!(stdin, "reaped");
            }
            let _ = w.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        if self.cgroup.exists() {
            eprintln!("demo: warning: could not remove {}", self.cgroup.display());
        }
    }
}
