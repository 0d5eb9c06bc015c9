//! Readiness comes only from the process monitor started: another program listening on a worker's port (and
//! answering its health path) while the worker cannot bind it never makes the worker ready; it is named in the log
//! as the holder, it is never sent a health probe, and the front door routes nothing to it.

mod launch_support;

use launch_support::{launch, member, Launched, Proc, FIXTURE};
use monitor_tests::agent::free_port;
use monitor_tests::{http, require_v1, CgroupV1, MIB};
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

/// The group (a v1 cgroup the test owns) and a master, tx1 given as `tx1`, and tx2.
fn start(test: &str, tx1: Proc) -> (CgroupV1, Launched) {
    let cg = CgroupV1::create(test, Some(512 * MIB));
    let procs = [Proc::fixture("m0", "master"), tx1, Proc::fixture("tx2", "worker")];
    let run = launch(test, &format!("cgroup = {:?}", cg.path().display().to_string()), &procs);
    (cg, run)
}

/// Which process served a fixture answer.
fn served_by(r: &http::Response) -> String {
    r.header("x-served-by").unwrap_or("<none>").to_string()
}

#[test]
fn a_foreign_listener_on_a_workers_port_never_makes_it_ready() {
    let name = "a_foreign_listener_on_a_workers_port_never_makes_it_ready";
    if !require_v1(name) {
        return;
    }
    let foreign = Foreign::listen();
    // tx1 binds late and fails (its port is taken), as a server that takes a moment to start would.
    let tx1 = Proc::shell("tx1", &format!("sleep 2; exec {FIXTURE} --name tx1 --port {}", foreign.port), foreign.port);
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
    if !require_v1(name) {
        return;
    }
    // A shell that runs the server as its child (no exec): a descendant's socket is the worker's own.
    let port = free_port();
    let tx1 = Proc::shell("tx1", &format!("{FIXTURE} --name tx1 --port {port}; exit 0"), port);
    let (_cg, run) = start("readiness-child", tx1);
    run.wait_for("tx1 ready", |s| member(s, "tx1")["state"] == "ready", Duration::from_secs(15));
    let r = http::request(run.proxy, "GET", "/r4/CodeSystem/x", &[("x-cache-id", "tx1.abc")], Duration::from_secs(5))
        .unwrap_or_else(|e| panic!("GET via the front door: {e}\nstderr:\n{}", run.stderr()));
    // The fixture answers an unknown cache id itself (404 naming itself): the request reached tx1.
    assert!(served_by(&r) == "tx1" || r.text().contains("\"name\":\"tx1\""), "{} {}", r.status, r.text());
}
