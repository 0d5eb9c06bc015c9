//! Real HTTP servers for the tests, far from our own: busybox httpd (a child per connection), python's
//! http.server (threads) and ForkingTCPServer, Node's `http`, nginx (master and workers). Each is a `Command` to
//! start as the test needs (in a cgroup with [`crate::spawn_in_cgroup`], or as a [`Server`]); [`Server`] runs one
//! in its own process group, waits until it owns its listening socket, and SIGKILLs the whole group on drop.

use crate::temp::TempDir;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `busybox httpd` in the foreground on 127.0.0.1:`port`, serving `dir` (an `index.html` of `hi\n` written into it
/// when it has none), output discarded: a server far smaller than ours, that forks a child per connection.
pub fn busybox_httpd(dir: &Path, port: u16) -> Command {
    let index = dir.join("index.html");
    if !index.exists() {
        std::fs::write(&index, "hi\n").unwrap_or_else(|e| panic!("{}: {e}", index.display()));
    }
    let mut cmd = Command::new("busybox");
    cmd.args(["httpd", "-f", "-p", &format!("127.0.0.1:{port}"), "-h"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// python's `http.server` (HTTP/1.1, keep-alive) serving `dir` on `bind` (127.0.0.1 or ::1) port `port`.
pub fn python_http(dir: &Path, bind: &str, port: u16) -> Command {
    let mut cmd = Command::new("python3");
    cmd.args(["-m", "http.server", "--protocol", "HTTP/1.1", "--bind", bind, "--directory"])
        .arg(dir)
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// python's `ForkingTCPServer` with `SimpleHTTPRequestHandler` (HTTP/1.0: one request per connection) serving `dir`
/// on 127.0.0.1:`port`; each GET waits `delay_ms` before answering, so a child can be alive across a sample.
pub fn python_forking(dir: &Path, port: u16, delay_ms: u64) -> Command {
    let script = "import http.server as h, socketserver as s, sys, os, time\n\
        d = float(sys.argv[3]) / 1000\n\
        class H(h.SimpleHTTPRequestHandler):\n    \
            def do_GET(self):\n        \
                time.sleep(d)\n        \
                super().do_GET()\n    \
            def log_message(self, *a):\n        \
                pass\n\
        os.chdir(sys.argv[2])\n\
        s.ForkingTCPServer.allow_reuse_address = True\n\
        s.ForkingTCPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", script, &port.to_string()])
        .arg(dir)
        .arg(delay_ms.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// A plain Node `http` server: /ok answers 200 (echoing a POST body), /fail 500, /hang never, anything else 404.
pub const NODE_SERVER: &str = r#"
const http = require('http');
const port = Number(process.argv[1]);
const srv = http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.url === '/ok') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end(req.method === 'POST' ? Buffer.concat(chunks) : 'ok\n');
    } else if (req.url === '/hang') {
      // never answered
    } else if (req.url === '/fail') {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end('failed\n');
    } else {
      res.writeHead(404, { 'content-type': 'text/plain' });
      res.end('missing\n');
    }
  });
});
srv.keepAliveTimeout = 60000;
srv.listen(port, '127.0.0.1');
"#;

/// [`NODE_SERVER`] under Node on 127.0.0.1:`port`.
pub fn node_http(port: u16) -> Command {
    let mut cmd = Command::new("node");
    cmd.args(["-e", NODE_SERVER, &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null());
    cmd
}

/// A server started in its own process group; the whole group is SIGKILLed and the leader reaped on drop.
pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Spawns `cmd` in a new process group and waits (bounded) until it owns the socket listening on `port`.
    pub fn start(cmd: &mut Command, port: u16) -> Server {
        cmd.process_group(0).stdin(Stdio::null());
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => panic!("cannot start {cmd:?}: {e}"),
        };
        let mut s = Server { child, port };
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
        let deadline = Instant::now() + crate::pace::scaled(Duration::from_secs(15));
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                panic!("server pid {} exited before listening: {status}", child.id());
            }
            if unix_listener(path).is_some_and(|inode| holds_socket(child.id(), &inode)) {
                return Server { child, port: 0 };
            }
            if Instant::now() >= deadline {
                let pid = child.id();
                drop(Server { child, port: 0 });
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
        let deadline = Instant::now() + crate::pace::scaled(timeout);
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

    /// Child processes of the server (nginx workers, forked handlers), from /proc.
    pub fn children(&self) -> Vec<u32> {
        let pid = self.child.id();
        let path = format!("/proc/{pid}/task/{pid}/children");
        std::fs::read_to_string(path).unwrap_or_default().split_whitespace().filter_map(|p| p.parse().ok()).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the group is the one we created for this child.
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
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
        crate::join_cgroup_at_exec(&mut cmd, group);
    }
    let server = Server::start(&mut cmd, port);
    let deadline = Instant::now() + crate::pace::scaled(Duration::from_secs(10));
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
            let table = std::fs::read_to_string(file).unwrap_or_default();
            table
                .lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.len() > 9 && f[1] == want && f[3] == "0A").then(|| format!("socket:[{}]", f[9]))
                })
                .collect::<Vec<_>>()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_python_server_is_found_listening_and_killed_with_its_group() {
        if !crate::require_program("a_python_server_is_found_listening_and_killed_with_its_group", "python3") {
            return;
        }
        let dir = TempDir::new("servers");
        let port = crate::agent::free_port();
        let server = Server::start(&mut python_http(dir.path(), "127.0.0.1", port), port);
        assert!(owns_listener(server.pid(), port));
        let pid = server.pid();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        assert!(!listening(port));
    }
}
