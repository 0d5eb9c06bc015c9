//! eBPF request counting for HTTP served on a Unix domain socket (python's `http.server` handler on a
//! `socketserver.UnixStreamServer`, driven by `curl --unix-socket`): the syscall hooks (`[probes] hooks =
//! "raw_sys_exit"` or `"tracepoints"`) count its accepts, requests and responses exactly; the socket hooks (the
//! default where the kernel has them) adopt TCP sockets only and count nothing there, as docs/probes.md says.

use crate::counts::{assert_counts, counts, load_probes_with, read, sync, total};
use monitor::sources::probes::Hooks;
use monitor_tests::agent::free_port;
use monitor_tests::clients::{curl, Sent};
use monitor_tests::servers::{python_http, Server};
use monitor_tests::{require_program, require_root, TempDir};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The standard library's `SimpleHTTPRequestHandler` (HTTP/1.1, keep-alive) on a Unix stream socket: the glue
/// only binds the socket and quiets the handler's log, which expects an IP client address.
const UNIX_SERVER: &str = r#"
import http.server, os, socketserver, sys
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def address_string(self):
        return "unix"
    def log_message(self, *args):
        pass
os.chdir(sys.argv[2])
with socketserver.UnixStreamServer(sys.argv[1], Handler) as s:
    s.serve_forever()
"#;

/// The server on `dir/http.sock`, serving `dir/www`.
fn unix_server(dir: &TempDir) -> (Server, PathBuf) {
    let www = dir.path().join("www");
    if let Err(e) = std::fs::create_dir_all(&www) {
        panic!("mkdir {}: {e}", www.display());
    }
    if let Err(e) = std::fs::write(www.join("hello.txt"), b"hello over a unix socket\n") {
        panic!("write hello.txt: {e}");
    }
    let sock = dir.path().join("http.sock");
    let mut cmd = Command::new("python3");
    cmd.args(["-c", UNIX_SERVER]).arg(&sock).arg(&www).stdout(Stdio::null()).stderr(Stdio::null());
    (Server::start_unix(&mut cmd, &sock), sock)
}

/// One-per-connection GETs, a keep-alive run, HEADs, 404s and POSTs (501: no do_POST) over the socket.
fn drive(sock: &Path) -> Sent {
    let s = sock.to_str().unwrap_or_else(|| panic!("socket path {} is not UTF-8", sock.display()));
    let ok = "http://localhost/hello.txt";
    let missing = "http://localhost/missing";
    let mut sent = Sent::default();
    for _ in 0..5 {
        sent.add(&curl(&["--unix-socket", s, ok]));
    }
    sent.add(&curl(&["--unix-socket", s, ok, ok, ok, ok, ok, ok, ok, ok]));
    sent.add(&curl(&["--unix-socket", s, "-I", ok, ok, ok]));
    sent.add(&curl(&["--unix-socket", s, missing, ok, missing]));
    for _ in 0..2 {
        sent.add(&curl(&["--unix-socket", s, "--data-binary", "a=1", "http://localhost/form"]));
    }
    sent
}

#[test]
fn unix_socket_http_counts_exactly_with_the_syscall_hooks() {
    let name = "unix_socket_http_counts_exactly_with_the_syscall_hooks";
    if !require_root(name) || !require_program(name, "curl") || !require_program(name, "python3") {
        return;
    }
    for hooks in [Hooks::RawSysExit, Hooks::Tracepoints] {
        let dir = TempDir::new("unix");
        let (server, sock) = unix_server(&dir);
        let mut probes = load_probes_with(hooks);
        sync(&mut probes, &[server.pid()]);
        let sent = drive(&sock);
        assert_eq!(sent.requests, 21, "curl's transfers");
        assert!(sent.by_class[3] >= 2 && sent.by_class[4] >= 2, "404s and 501s were sent: {sent:?}");
        let got = assert_counts(&mut probes, &[server.pid()], &sent, &format!("unix socket, {hooks:?}"));
        assert_eq!(got.inflight, 0, "{hooks:?}: nothing in flight after the last response");
        assert!(got.bytes_in > 0 && got.bytes_out > 0, "{hooks:?}: bytes counted: {got:?}");
    }
}

#[test]
fn the_socket_hooks_do_not_count_a_unix_socket() {
    let name = "the_socket_hooks_do_not_count_a_unix_socket";
    if !require_root(name) || !require_program(name, "curl") || !require_program(name, "python3") {
        return;
    }
    let sock_hooks = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
        .iter()
        .any(|t| Path::new(t).join("events/sock/sock_recv_length").exists());
    let reason = "this kernel has no sock_recv_length tracepoint (the socket hooks need 6.3+)";
    if !monitor_tests::require(sock_hooks, name, reason) {
        return;
    }
    let dir = TempDir::new("unix-sock");
    let (server, sock) = unix_server(&dir);
    // A TCP server traced beside it, so the run proves the socket hooks count (and a zero below is theirs).
    let port = free_port();
    let tcp = Server::start(&mut python_http(&dir.path().join("www"), "127.0.0.1", port), port);
    let mut probes = load_probes_with(Hooks::Sock);
    sync(&mut probes, &[server.pid(), tcp.pid()]);
    let sent = drive(&sock);
    assert_eq!(sent.requests, 21, "curl's transfers");
    let url = format!("http://127.0.0.1:{port}/hello.txt");
    let mut over_tcp = Sent::default();
    over_tcp.add(&curl(&[&url, &url, &url]));
    assert_counts(&mut probes, &[tcp.pid()], &over_tcp, "TCP beside the unix socket, Sock");
    let got = total(&read(&mut probes), &[server.pid()]);
    assert_eq!(counts(&got), (0, 0, 0, [0; 5]), "the socket hooks counted unix-socket traffic: {got:?}");
}
