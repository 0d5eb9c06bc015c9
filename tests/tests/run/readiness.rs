//! Readiness comes only from the process monitor started: another program listening on a worker's port (and
//! answering its health path) while the worker cannot bind it never makes the worker ready; it is named in the log
//! as the holder, it is never sent a health probe, and the front door routes nothing to it. A ready worker whose
//! port another program joins (SO_REUSEPORT) leaves the pool at the next check.

use monitor_tests::agent::free_port;
use monitor_tests::bins::fixture_backend;
use monitor_tests::config::Process;
use monitor_tests::run::{member, processes, Launched};
use monitor_tests::{http, on_path, require, require_group, Group, MIB};
use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A program that is not ours on `127.0.0.1:<port>`: answers every request 200 `x-served-by: foreign` and counts
/// the connections it accepts.
struct Foreign {
    port: u16,
    accepted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Foreign {
    fn listen() -> Foreign {
        let port = free_port();
        let l = TcpListener::bind(("127.0.0.1", port)).unwrap_or_else(|e| panic!("binding {port}: {e}"));
        l.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
        let (accepted, stop) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicBool::new(false)));
        let (n, done) = (accepted.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((mut s, _)) => {
                        n.fetch_add(1, Ordering::Relaxed);
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
                        let mut buf = [0u8; 2048];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(
                            b"HTTP/1.1 200 OK\r\nx-served-by: foreign\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Foreign { port, accepted, stop, thread: Some(thread) }
    }
}

impl Drop for Foreign {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The group (a memory cgroup the test owns) and a master, tx1 given as `tx1`, and tx2.
fn start(test: &str, tx1: Process) -> (Group, Launched) {
    let cg = Group::here(test, Some(512 * MIB));
    let procs = [Process::fixture("m0", "master"), tx1, Process::fixture("tx2", "worker")];
    let run = Launched::start(test, processes(procs).cgroup(cg.path()), None, &[]);
    (cg, run)
}

/// Which process served a fixture answer.
fn served_by(r: &http::Response) -> String {
    r.header("x-served-by").unwrap_or("<none>").to_string()
}

#[test]
fn a_foreign_listener_on_a_workers_port_never_makes_it_ready() {
    let name = "a_foreign_listener_on_a_workers_port_never_makes_it_ready";
    if !require_group(name) {
        return;
    }
    let foreign = Foreign::listen();
    // tx1 binds late and fails (its port is taken), as a server that takes a moment to start would.
    let fixture = fixture_backend().display().to_string();
    let tx1 =
        Process::shell("tx1", &format!("sleep 2; exec {fixture} --name tx1 --port {}", foreign.port), foreign.port);
    let (_cg, run) = start("readiness-foreign", tx1);
    run.wait_for(
        "m0 and tx2 ready",
        |s| ["m0", "tx2"].iter().all(|n| member(s, n)["state"] == "ready"),
        Duration::from_secs(15),
    );
    // Six seconds: tx1 starts, fails to bind, is restarted; it is never ready, and nothing reaches the foreign port.
    let until = Instant::now() + Duration::from_secs(6);
    let mut served = Vec::new();
    while Instant::now() < until {
        let s = run.status();
        assert_ne!(member(&s, "tx1")["state"], "ready", "tx1 made ready by another program's answer: {s:#}");
        for i in 0..4 {
            let r = http::get(run.proxy, &format!("/r4/CodeSystem/{i}"), Duration::from_secs(5))
                .unwrap_or_else(|e| panic!("GET via the front door: {e}\nstderr:\n{}", run.stderr()));
            assert_eq!(r.status, 200, "{}", r.text());
            served.push(served_by(&r));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(served.iter().all(|s| s == "m0" || s == "tx2"), "{served:?}");
    assert_eq!(foreign.accepted.load(Ordering::Relaxed), 0, "the foreign listener was reached");
    let log = run.stderr();
    let holder = format!("port {} is held by pid {}", foreign.port, std::process::id());
    assert!(log.contains(&holder), "the log should name the holder ({holder}):\n{log}");
    eprintln!("{name}: {} requests through the front door, none to the foreign listener", served.len());
}

#[test]
fn a_worker_whose_child_holds_its_port_is_ready() {
    let name = "a_worker_whose_child_holds_its_port_is_ready";
    if !require_group(name) {
        return;
    }
    // A shell that runs the server as its child (no exec): a descendant's socket is the worker's own.
    let port = free_port();
    let fixture = fixture_backend().display().to_string();
    let tx1 = Process::shell("tx1", &format!("{fixture} --name tx1 --port {port}; exit 0"), port);
    let (_cg, run) = start("readiness-child", tx1);
    run.wait_for("tx1 ready", |s| member(s, "tx1")["state"] == "ready", Duration::from_secs(15));
    let r = http::request(run.proxy, "GET", "/r4/CodeSystem/x", &[("x-cache-id", "tx1.abc")], Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET via the front door: {e}\nstderr:\n{}", run.stderr()));
    // The fixture answers an unknown cache id itself (404 naming itself): the request reached tx1.
    assert!(served_by(&r) == "tx1" || r.text().contains("\"name\":\"tx1\""), "{} {}", r.status, r.text());
}

/// A worker that listens with SO_REUSEPORT and answers 200 to everything.
const REUSEPORT_SERVER: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    c.recv(4096)
    c.sendall(b"HTTP/1.1 200 OK\r\nx-served-by: tx1\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n")
    c.close()
"#;

/// Another program joining a port with SO_REUSEPORT: a listener on `127.0.0.1:<port>` beside the worker's.
fn reuseport_listener(port: u16) -> TcpListener {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket calls on a new fd that we own from here on; the address struct lives on the stack.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let one: libc::c_int = 1;
        let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, (&one as *const libc::c_int).cast(), len);
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes([127, 0, 0, 1]) },
            sin_zero: [0; 8],
        };
        let alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let r = libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), alen);
        assert_eq!(r, 0, "bind {port} with SO_REUSEPORT: {}", std::io::Error::last_os_error());
        assert_eq!(libc::listen(fd, 64), 0, "listen: {}", std::io::Error::last_os_error());
        TcpListener::from_raw_fd(fd)
    }
}

#[test]
fn a_ready_worker_whose_port_another_program_joins_leaves_the_pool_at_once() {
    let name = "a_ready_worker_whose_port_another_program_joins_leaves_the_pool_at_once";
    if !require_group(name) || !require(on_path("python3"), name, "needs python3") {
        return;
    }
    let port = free_port();
    // Checks every 200 ms; a check that merely fails takes it out of the pool after 50 of them (10 s).
    let tx1 = Process::new("tx1", "worker", ["python3", "-c", REUSEPORT_SERVER, &port.to_string()], port)
        .set("health_interval_ms", 200)
        .set("health_failures", 50);
    let (_cg, run) = start("readiness-joined", tx1);
    run.wait_for("tx1 ready", |s| member(s, "tx1")["state"] == "ready", Duration::from_secs(15));
    let joined = Instant::now();
    let _foreign = reuseport_listener(port);
    let s = run.wait_for("tx1 out of the pool", |s| member(s, "tx1")["state"] == "unhealthy", Duration::from_secs(3));
    assert!(joined.elapsed() < monitor_tests::pace::scaled(Duration::from_secs(3)), "{s:#}");
    // Nothing goes to tx1's port any more: the other program's listener is never reached through the front door.
    for i in 0..20 {
        let r = http::get(run.proxy, &format!("/r4/CodeSystem/{i}"), Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("GET via the front door: {e}\nstderr:\n{}", run.stderr()));
        assert!(r.status == 200 && served_by(&r) != "tx1", "{} {}", r.status, served_by(&r));
    }
    let log = run.stderr();
    assert!(log.contains(&format!("port {port} is held by pid {}", std::process::id())), "{log}");
}
