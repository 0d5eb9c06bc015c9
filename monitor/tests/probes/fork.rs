//! eBPF request counting against servers that fork a child per connection: busybox httpd (the child serves the
//! connection on stdin/stdout) and python's `socketserver.ForkingTCPServer` (the child serves the inherited fd).
//! The children are traced from their fork by the kernel and, once exited, their counts fold into the server's
//! pid: exactly N requests and N responses for N connections, whether or not a sync saw the children alive.

use crate::counts::{assert_counts, load_probes, read, sync};
use monitor_tests::agent::free_port;
use monitor_tests::clients::{curl, Sent};
use monitor_tests::servers::{busybox_httpd, python_forking, Server};
use monitor_tests::{require_program, require_root, TempDir};
use std::time::{Duration, Instant};

/// busybox httpd serving `dir` on a free port, listening.
fn busybox_server(dir: &TempDir) -> Server {
    let port = free_port();
    Server::start(&mut busybox_httpd(dir.path(), port), port)
}

/// python's ForkingTCPServer serving `dir` on a free port, listening; `delay_ms` makes each GET wait that long
/// before answering, so a child is alive across a sync.
fn forking_server(dir: &TempDir, delay_ms: u64) -> Server {
    let port = free_port();
    Server::start(&mut python_forking(dir.path(), port, delay_ms), port)
}

/// Sends `n` GETs of `path`, one per connection, and what they amount to.
fn one_per_connection(port: u16, path: &str, n: usize) -> Sent {
    let mut sent = Sent::default();
    for _ in 0..n {
        sent.add(&curl(&[&format!("http://127.0.0.1:{port}{path}")]));
    }
    sent
}

#[test]
fn busybox_httpd_children_fold_into_the_server() {
    let test = "busybox_httpd_children_fold_into_the_server";
    if !require_root(test) || !require_program(test, "curl") || !require_program(test, "busybox") {
        return;
    }
    let dir = TempDir::new("bbx");
    dir.write("index.html", b"hello from busybox\n");
    let server = busybox_server(&dir);
    let mut probes = load_probes();
    if let Some(why) = probes.forks_off() {
        panic!("forks are not followed: {why}");
    }
    sync(&mut probes, &[server.pid()]);
    let mut sent = one_per_connection(server.port, "/index.html", 10);
    let missing = one_per_connection(server.port, "/missing", 3);
    assert_eq!((sent.by_class[1], missing.by_class[3]), (10, 3), "{sent:?} {missing:?}");
    sent.requests += missing.requests;
    sent.connects += missing.connects;
    sent.by_class[3] += missing.by_class[3];
    // The parent accepts, the children (exited by now) read and answer: all of it under the server's pid.
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "busybox httpd (fork per connection)");
    assert_eq!(t.inflight, 0, "{t:?}");
    assert!(t.bytes_in > 0 && t.bytes_out > 0, "{t:?}");
    let all = read(&mut probes);
    assert_eq!(all.keys().copied().collect::<Vec<_>>(), vec![server.pid()], "exited children still listed");
}

#[test]
fn python_forking_server_children_fold_into_the_server() {
    let test = "python_forking_server_children_fold_into_the_server";
    if !require_root(test) || !require_program(test, "curl") {
        return;
    }
    let dir = TempDir::new("pyfork");
    dir.write("hello.txt", b"hello from a forked child\n");
    let server = forking_server(&dir, 0);
    let mut probes = load_probes();
    sync(&mut probes, &[server.pid()]);
    let sent = one_per_connection(server.port, "/hello.txt", 10);
    assert_eq!(sent.by_class[1], 10, "{sent:?}");
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "python ForkingTCPServer");
    assert_eq!(t.inflight, 0, "{t:?}");
}

/// As the agent does: the children are in the synced pids while they serve, then leave; their counts move to the
/// server when they exit, so the server ends with exactly what was sent and nothing is counted twice.
#[test]
fn children_synced_while_alive_fold_when_they_exit() {
    let test = "children_synced_while_alive_fold_when_they_exit";
    if !require_root(test) || !require_program(test, "curl") {
        return;
    }
    let dir = TempDir::new("pyfork-slow");
    dir.write("hello.txt", b"slow hello\n");
    let server = forking_server(&dir, 600);
    let mut probes = load_probes();
    sync(&mut probes, &[server.pid()]);
    let port = server.port;
    let clients: Vec<_> =
        (0..4).map(|_| std::thread::spawn(move || curl(&[&format!("http://127.0.0.1:{port}/hello.txt")]))).collect();
    // Sync with the children while they sleep in their handler, as the sampler would.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut children = server.children();
    while children.len() < 4 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        children = server.children();
    }
    assert_eq!(children.len(), 4, "children serving: {children:?}");
    let mut pids = vec![server.pid()];
    pids.extend(&children);
    sync(&mut probes, &pids);
    let mut sent = Sent::default();
    for c in clients {
        match c.join() {
            Ok(run) => sent.add(&run),
            Err(_) => panic!("a curl thread panicked"),
        }
    }
    // The children served their request while synced: their own pids counted it.
    let during = read(&mut probes);
    let by_children: u64 = children.iter().filter_map(|c| during.get(c)).map(|t| t.requests_total).sum();
    let by_server = during.get(&server.pid()).map_or(0, |t| t.requests_total);
    assert_eq!(by_children + by_server, 4, "children {by_children} + server {by_server}: {during:?}");
    // They exit; the next sync (the agent's next sample) no longer lists them and their counts fold up.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !server.children().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    sync(&mut probes, &[server.pid()]);
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "python ForkingTCPServer, children synced");
    assert_eq!(t.inflight, 0, "{t:?}");
}
