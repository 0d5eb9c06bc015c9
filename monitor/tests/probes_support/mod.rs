//! Shared by the `probes_*` integration tests: the root/CI rule, loading the probes, real servers in their own
//! process groups (killed on drop), free loopback ports, curl and wrk drivers, and waiting for exact counts.
#![allow(dead_code)] // each test binary uses a different part

use monitor::probes::{Hooks, Probes};
use monitor::snapshot::Traffic;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The root/CI rule and free ports, shared with the workspace's other integration tests.
pub use monitor_tests::agent::free_port;
pub use monitor_tests::{in_ci, require_root};

/// True when `program` is on PATH; otherwise skips (or panics in CI) like [`require_root`].
pub fn require_program(test: &str, program: &str) -> bool {
    if monitor_tests::on_path(program) {
        return true;
    }
    if in_ci() {
        panic!("{test}: needs {program} on PATH");
    }
    eprintln!("skipping {test}: needs {program}");
    false
}

/// Loads and attaches the probes, panicking with the reason (the object must be built for these tests).
/// `PROBES_HOOKS=sock` (or `raw`, or `tracepoints`) forces one set of hooks, so the exact-count tests cover all.
pub fn load_probes() -> Probes {
    let p = match std::env::var("PROBES_HOOKS").as_deref() {
        Ok("tracepoints") => return load_probes_with(Hooks::Tracepoints),
        Ok("raw") => return load_probes_with(Hooks::RawSysExit),
        Ok("sock") => return load_probes_with(Hooks::Sock),
        Ok(other) => panic!("PROBES_HOOKS={other}: expected `sock`, `raw` or `tracepoints`"),
        Err(_) => Probes::load(),
    };
    match p {
        Ok(p) => {
            eprintln!("probes attached with {:?}", p.hooks());
            p
        }
        Err(e) => panic!("Probes::load: {e} (build the object with `cargo xtask setup`)"),
    }
}

/// Accepts counted for one connection opened while the probes ran but accepted before its process was traced:
/// the socket programs learn of the connection when it opens and count the accept at the process's first traced
/// read or write on it (1); the syscall hooks count at `accept`, which ran untraced (0).
pub fn late_accepts(probes: &Probes) -> u64 {
    u64::from(probes.hooks() == Hooks::Sock)
}

/// Loads and attaches the probes on the given hooks (no fallback), panicking with the reason.
pub fn load_probes_with(hooks: Hooks) -> Probes {
    match Probes::load_with(hooks) {
        Ok(p) => p,
        Err(e) => panic!("Probes::load_with({hooks:?}): {e} (build the object with `cargo xtask setup`)"),
    }
}

/// A server started in its own process group; the whole group is SIGKILLed and the leader reaped on drop.
pub struct Server {
    child: Child,
    pub port: u16,
    pub dir: Option<TempDir>,
}

impl Server {
    /// Spawns `cmd` in a new process group and waits (bounded) until `port` accepts connections.
    pub fn start(cmd: &mut Command, port: u16) -> Server {
        cmd.process_group(0).stdin(Stdio::null());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        };
        let mut s = Server { child, port, dir: None };
        s.wait_listening(Duration::from_secs(15));
        s
    }

    /// Like [`Server::start`] for a server on the Unix domain socket `path` (`port` 0): waits until the process
    /// holds a listening socket bound to `path` (from /proc/net/unix, without connecting).
    pub fn start_unix(cmd: &mut Command, path: &Path) -> Server {
        cmd.process_group(0).stdin(Stdio::null());
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        };
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server pid {} exited before listening: {status}", child.id());
            }
            if unix_listener(path).is_some_and(|inode| holds_socket(child.id(), &inode)) {
                return Server { child, port: 0, dir: None };
            }
            if Instant::now() >= deadline {
                let pid = child.id();
                drop(Server { child, port: 0, dir: None });
                panic!("server pid {pid} did not listen on {} within 15 s", path.display());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the port is in LISTEN state (read from /proc/net/tcp: connecting would be an accept of its own).
    fn wait_listening(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("server pid {} exited before listening: {status}", self.child.id());
            }
            if listening(self.port) && owns_listener(self.child.id(), self.port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("server pid {} did not listen on {} within {timeout:?}", self.child.id(), self.port);
    }

    /// Child processes of the server (nginx workers), from /proc.
    pub fn children(&self) -> Vec<u32> {
        let pid = self.child.id();
        let path = format!("/proc/{pid}/task/{pid}/children");
        std::fs::read_to_string(path).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }
}

/// Starts nginx on the config text `conf` (written into `dir`, errors to `dir/error.log`) listening on `port`, and
/// waits (bounded) for its `workers` worker processes. Returns the master and the workers' pids.
pub fn start_nginx(dir: &TempDir, conf: &str, port: u16, workers: usize) -> (Server, Vec<u32>) {
    start_nginx_in(dir, conf, port, workers, None)
}

/// [`start_nginx`], the master started inside the cgroup `cgroup` (it joins before it runs nginx), so its sockets
/// belong to that group from the start.
pub fn start_nginx_in(
    dir: &TempDir,
    conf: &str,
    port: u16,
    workers: usize,
    cgroup: Option<&Path>,
) -> (Server, Vec<u32>) {
    let conf = dir.write("nginx.conf", conf.as_bytes());
    let mut cmd = Command::new("nginx");
    cmd.arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(dir.path())
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(group) = cgroup {
        monitor_tests::join_cgroup_at_exec(&mut cmd, group);
    }
    let server = Server::start(&mut cmd, port);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = server.children();
        if pids.len() == workers {
            return (server, pids);
        }
        assert!(Instant::now() < deadline, "nginx workers did not start: {pids:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Listening sockets on the loopback `port`, IPv4 (127.0.0.1, /proc/net/tcp) and IPv6 (::1, /proc/net/tcp6), as
/// the `socket:[inode]` names their fds link to.
fn loopback_listeners(port: u16) -> Vec<String> {
    let wanted = [
        ("/proc/net/tcp", format!("0100007F:{port:04X}")),
        ("/proc/net/tcp6", format!("{:0>32}:{port:04X}", "01000000")),
    ];
    wanted
        .iter()
        .flat_map(|(file, want)| {
            std::fs::read_to_string(file)
                .map(|t| {
                    t.lines()
                        .skip(1)
                        .filter_map(|l| {
                            let f: Vec<&str> = l.split_whitespace().collect();
                            (f.len() > 9 && f[1] == want && f[3] == "0A").then(|| format!("socket:[{}]", f[9]))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// True when some socket listens on 127.0.0.1:`port` or [::1]:`port` (state 0A).
pub fn listening(port: u16) -> bool {
    !loopback_listeners(port).is_empty()
}

/// True when `pid` holds the socket listening on the loopback `port` (its inode is one of the process's fds), so a
/// readiness check can never be fooled by another server on the same port.
pub fn owns_listener(pid: u32, port: u16) -> bool {
    let inodes = loopback_listeners(port);
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| inodes.iter().any(|i| target.as_os_str() == i.as_str()))
    })
}

/// The inode of the socket listening on the Unix domain socket `path` (`/proc/net/unix`: flags `00010000`,
/// `__SO_ACCEPTCON`), as `socket:[N]`.
pub fn unix_listener(path: &Path) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/unix").ok()?;
    let want = path.to_str()?;
    table.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.len() >= 8 && f[3] == "00010000" && f[7] == want).then(|| format!("socket:[{}]", f[6]))
    })
}

/// True when one of `pid`'s fds is the socket `inode` (`socket:[N]`).
fn holds_socket(pid: u32, inode: &str) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == inode))
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the group is the one we created for this child.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let p = std::env::temp_dir().join(format!("monitor-probes-{tag}-{}-{nanos}", std::process::id()));
        if let Err(e) = std::fs::create_dir_all(&p) {
            panic!("mkdir {}: {e}", p.display());
        }
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn write(&self, name: &str, body: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        if let Err(e) = std::fs::write(&p, body) {
            panic!("write {}: {e}", p.display());
        }
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What one curl invocation did: the status of every transfer and how many connections it opened.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CurlRun {
    pub statuses: Vec<u16>,
    pub connects: u64,
}

/// Runs curl once with `args` (URLs and options; several URLs share one keep-alive connection when the server
/// allows). Reports each transfer's status and the number of new connections (`%{num_connects}`).
pub fn curl(args: &[&str]) -> CurlRun {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "%{stderr}%{http_code} %{num_connects}\\n"])
        .args(args)
        .stdout(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => panic!("curl {args:?}: {e}"),
    };
    // Bodies go to /dev/null (stdout); the write-out lines, one per transfer, to stderr.
    let text = String::from_utf8_lossy(&out.stderr);
    let mut run = CurlRun::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(code), Some(conns)) = (it.next(), it.next()) else {
            panic!("curl {args:?}: unexpected output {text:?}");
        };
        run.statuses
            .push(code.parse().unwrap_or_else(|e| panic!("curl {args:?}: status {code:?}: {e}; output {text:?}")));
        run.connects += conns.parse::<u64>().unwrap_or_else(|e| panic!("curl num_connects {conns:?}: {e}"));
    }
    run
}

/// What a set of curl runs amounts to: requests, responses by class, connections.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Sent {
    pub requests: u64,
    pub by_class: [u64; 5],
    pub connects: u64,
}

impl Sent {
    pub fn add(&mut self, run: &CurlRun) {
        self.connects += run.connects;
        for &s in &run.statuses {
            assert!((100..600).contains(&s), "transfer failed (status {s})");
            self.requests += 1;
            self.by_class[(s / 100 - 1) as usize] += 1;
        }
    }

    pub fn add_wrk(&mut self, w: &WrkRun) {
        self.requests += w.requests;
        self.connects += w.connects;
        self.by_class[1] += w.requests;
    }

    pub fn responses(&self) -> u64 {
        self.by_class[1..].iter().sum()
    }
}

/// Sums the traffic of several tgids (nginx workers).
pub fn total(m: &HashMap<u32, Traffic>, pids: &[u32]) -> Traffic {
    let mut t = Traffic::default();
    for p in pids {
        if let Some(x) = m.get(p) {
            t.accepts_total += x.accepts_total;
            t.requests_total += x.requests_total;
            t.responses_total += x.responses_total;
            for i in 0..5 {
                t.responses_by_class[i] += x.responses_by_class[i];
            }
            t.inflight += x.inflight;
            t.bytes_in += x.bytes_in;
            t.bytes_out += x.bytes_out;
            t.latency_hist_us.resize(x.latency_hist_us.len().max(t.latency_hist_us.len()), 0);
            for (a, b) in t.latency_hist_us.iter_mut().zip(&x.latency_hist_us) {
                *a += b;
            }
        }
    }
    if let Ok(h) = <[u64; monitor_common::stats::HIST_BUCKETS]>::try_from(t.latency_hist_us.as_slice()) {
        t.latency_p50_us = monitor::probes::percentile(&h, 0.5);
        t.latency_p99_us = monitor::probes::percentile(&h, 0.99);
    }
    t
}

/// The counts the test compares: (accepts, requests, responses, by class).
pub fn counts(t: &Traffic) -> (u64, u64, u64, [u64; 5]) {
    (t.accepts_total, t.requests_total, t.responses_total, t.responses_by_class)
}

/// Reads the probes until the summed counts of `pids` equal `want` (bounded: the server's exit tracepoint may
/// run just after the client saw the response), then once more after a pause to be sure nothing more arrives.
/// Returns the final summed traffic; panics with both sides when they differ.
pub fn assert_counts(probes: &mut Probes, pids: &[u32], want: &Sent, what: &str) -> Traffic {
    let want = (want.connects, want.requests, want.responses(), want.by_class);
    poll_total(probes, pids, |t| counts(t) == want);
    std::thread::sleep(Duration::from_millis(300));
    let got = total(&read(probes), pids);
    assert_eq!(counts(&got), want, "{what}: (accepts, requests, responses, by class) counted vs sent");
    // Every final response here answers a request read on its socket: one latency each.
    let latencies: u64 = got.latency_hist_us.iter().sum();
    assert_eq!(latencies, got.responses_total, "{what}: latencies recorded vs final responses");
    eprintln!(
        "{what}: counted {:?} as sent; in-flight {}, latencies {} (p50 {:?} µs, p99 {:?} µs)",
        counts(&got),
        got.inflight,
        got.latency_hist_us.iter().sum::<u64>(),
        got.latency_p50_us,
        got.latency_p99_us
    );
    got
}

/// The summed traffic of `pids`, read every 20 ms until `done` holds of it or 5 s have passed; the last read.
pub fn poll_total(probes: &mut Probes, pids: &[u32], done: impl Fn(&Traffic) -> bool) -> Traffic {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = total(&read(probes), pids);
        if done(&got) || Instant::now() >= deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Like [`poll_total`], but panics with `what` when `done` does not hold within the 5 s.
pub fn wait_total(probes: &mut Probes, pids: &[u32], what: &str, done: impl Fn(&Traffic) -> bool) -> Traffic {
    let got = poll_total(probes, pids, &done);
    assert!(done(&got), "{what}: not within 5 s: {got:?}");
    got
}

pub fn read(probes: &mut Probes) -> HashMap<u32, Traffic> {
    match probes.read() {
        Ok(m) => m,
        Err(e) => panic!("probes.read: {e}"),
    }
}

pub fn sync(probes: &mut Probes, pids: &[u32]) {
    if let Err(e) = probes.sync_pids(pids) {
        panic!("sync_pids({pids:?}): {e}");
    }
}

/// What a bounded wrk run did.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct WrkRun {
    /// Responses wrk completed (each to one request it sent).
    pub requests: u64,
    /// Connections wrk opened.
    pub connects: u64,
}

/// Runs `wrk -t1 -c1` with a script that stops its thread after exactly `n` responses on its one keep-alive
/// connection, so exactly `n` requests reach the server; then SIGINTs wrk so it reports at once (its `-d30s`
/// bounds the run otherwise). Connections: wrk's `script_resolve` first opens and closes one connection to
/// check the address (no request on it), then the run's one.
pub fn wrk_exact(url: &str, n: u64, dir: &TempDir) -> WrkRun {
    let script = dir.write(
        "exact.lua",
        format!(
            "local left = {n}\n\
             response = function(status, headers, body)\n\
               left = left - 1\n\
               if left == 0 then\n\
                 io.write(\"DONE\\n\")\n\
                 io.flush()\n\
                 wrk.thread:stop()\n\
               end\n\
             end\n\
             done = function(summary, latency, requests)\n\
               io.write(string.format(\"RESULT %d\\n\", summary.requests))\n\
             end\n"
        )
        .as_bytes(),
    );
    let mut child = match Command::new("wrk")
        .args(["-t1", "-c1", "-d30s", "--timeout", "5s", "-s"])
        .arg(&script)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("wrk: {e}"),
    };
    let Some(stdout) = child.stdout.take() else { panic!("wrk: no stdout") };
    let mut text = String::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line == "DONE" {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
        text.push_str(&line);
        text.push('\n');
    }
    let _ = child.wait();
    let Some(line) = text.lines().find(|l| l.starts_with("RESULT ")) else {
        panic!("wrk printed no RESULT: {text}");
    };
    let requests = line[7..].trim().parse::<u64>().unwrap_or(u64::MAX);
    assert_eq!(requests, n, "wrk completed {requests} responses, wanted {n}: {text}");
    WrkRun { requests, connects: 2 }
}

/// One keep-alive HTTP/1.1 connection driven by hand (std `TcpStream`): sends GET requests and reads each whole
/// response (`Content-Length` or chunked body), so a test controls exactly which requests go on which connection.
pub struct KeepAlive {
    stream: BufReader<std::net::TcpStream>,
    port: u16,
}

impl KeepAlive {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> KeepAlive {
        let stream = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(e) => panic!("connect 127.0.0.1:{port}: {e}"),
        };
        if let Err(e) = stream.set_read_timeout(Some(Duration::from_secs(10))) {
            panic!("set_read_timeout: {e}");
        }
        KeepAlive { stream: BufReader::new(stream), port }
    }

    /// Sends `GET path` and returns the response's status after reading its body.
    pub fn get(&mut self, path: &str) -> u16 {
        self.pipeline(&[path])[0]
    }

    /// Sends `GET` for every path in one write (HTTP/1.1 pipelining), then reads the responses in order and
    /// returns their statuses.
    pub fn pipeline(&mut self, paths: &[&str]) -> Vec<u16> {
        use std::io::Write;
        let port = self.port;
        let reqs: String = paths
            .iter()
            .map(|p| format!("GET {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n\r\n"))
            .collect();
        if let Err(e) = self.stream.get_mut().write_all(reqs.as_bytes()) {
            panic!("send GET {paths:?}: {e}");
        }
        paths.iter().map(|p| self.response(p)).collect()
    }

    /// Reads one response to `GET path` (head and body) and returns its status.
    fn response(&mut self, path: &str) -> u16 {
        use std::io::Read;
        let status_line = self.line();
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse::<u16>().ok());
        let Some(status) = status else { panic!("GET {path}: status line {status_line:?}") };
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let h = self.line();
            if h.is_empty() {
                break;
            }
            let Some((name, value)) = h.split_once(':') else { continue };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or_else(|e| panic!("GET {path}: content-length {value:?}: {e}"));
            } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
        let skip = |n: usize, stream: &mut BufReader<std::net::TcpStream>| {
            let mut body = vec![0u8; n];
            if let Err(e) = stream.read_exact(&mut body) {
                panic!("GET {path}: body of {n} bytes: {e}");
            }
        };
        if !chunked {
            skip(length, &mut self.stream);
            return status;
        }
        loop {
            let size_line = self.line();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16);
            let size = size.unwrap_or_else(|e| panic!("GET {path}: chunk size {size_line:?}: {e}"));
            skip(size + 2, &mut self.stream);
            if size == 0 {
                return status;
            }
        }
    }

    /// One CRLF-terminated line, without the CRLF.
    fn line(&mut self) -> String {
        let mut s = String::new();
        match self.stream.read_line(&mut s) {
            Ok(0) => panic!("connection to port {} closed by the server", self.port),
            Ok(_) => s.trim_end_matches(['\r', '\n']).to_string(),
            Err(e) => panic!("reading from port {}: {e}", self.port),
        }
    }
}
