//! eBPF request counting against Node 20's own `http` server: exact per-pid counts for one request per
//! connection, keep-alive runs with curl and wrk, HEAD, POST with bodies, and 200/404/500 responses.

use crate::counts::{assert_counts, late_accepts, load_probes, poll_total, read, sync, wait_total};
use monitor_tests::agent::free_port;
use monitor_tests::clients::{curl, wrk_exact, KeepAlive, Sent};
use monitor_tests::servers::{node_http, Server};
use monitor_tests::{require_program, require_root, TempDir};

/// Node's `http` server (`monitor_tests::servers::NODE_SERVER`: /ok 200, /fail 500, /hang never, else 404) on a
/// free loopback port, listening.
fn node_server() -> Server {
    let port = free_port();
    Server::start(&mut node_http(port), port)
}

#[test]
fn node_http_server_counts_exactly() {
    let name = "node_http_server_counts_exactly";
    if !require_root(name) || !require_program(name, "node") || !require_program(name, "curl") {
        return;
    }
    let wrk = require_program(name, "wrk");
    let dir = TempDir::new("node");
    let server = node_server();
    let port = server.port;
    let mut probes = load_probes();
    sync(&mut probes, &[server.pid()]);
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");
    let (ok, fail, missing) = (url("/ok"), url("/fail"), url("/missing"));

    let mut sent = Sent::default();
    for _ in 0..6 {
        sent.add(&curl(&[&ok]));
    }
    sent.add(&curl(&[&ok, &missing, &fail, &ok, &ok, &missing, &fail, &ok]));
    sent.add(&curl(&["-I", &ok, &ok, &missing]));
    let body = "x".repeat(3000);
    for _ in 0..4 {
        sent.add(&curl(&["--data-binary", &body, &ok]));
    }
    sent.add(&curl(&["--data-binary", "small", &ok, &ok]));
    sent.add(&curl(&["-X", "DELETE", &missing]));
    assert_eq!(sent.requests, 24);
    assert_eq!(sent.by_class, [0, 18, 0, 4, 2], "{sent:?}");
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "node http (curl)");
    assert_eq!(t.inflight, 0);

    if wrk {
        // Exactly 500 requests on one keep-alive connection.
        sent.add_wrk(&wrk_exact(&ok, 500, &dir));
        assert_counts(&mut probes, &[server.pid()], &sent, "node http (curl + wrk)");
    }
    let all = read(&mut probes);
    let mine = &all[&server.pid()];
    assert!(mine.latency_p99_us.is_some_and(|v| v > 0), "{mine:?}");
}

/// Node reads its sockets with `read(2)`: keep-alive connections accepted before the probes loaded, or before
/// the pid joined the filter, count every request sent on them afterwards (adopted from the request line).
#[test]
fn node_keepalive_opened_before_tracing_counts_exactly() {
    let name = "node_keepalive_opened_before_tracing_counts_exactly";
    if !require_root(name) || !require_program(name, "node") {
        return;
    }
    let server = node_server();
    let port = server.port;
    let mut early = KeepAlive::connect(port);
    assert_eq!(early.get("/ok"), 200);
    let mut probes = load_probes();
    let mut late = KeepAlive::connect(port);
    assert_eq!(late.get("/ok"), 200);
    sync(&mut probes, &[server.pid()]);

    let mut sent = Sent::default();
    sent.connects += late_accepts(&probes);
    for (i, path) in ["/ok", "/missing", "/fail"].iter().cycle().take(30).enumerate() {
        let conn = if i % 2 == 0 { &mut late } else { &mut early };
        let status = conn.get(path);
        sent.requests += 1;
        sent.by_class[(status / 100 - 1) as usize] += 1;
    }
    assert_eq!(sent.by_class, [0, 10, 0, 10, 10], "{sent:?}");
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "node keep-alive opened before tracing");
    assert_eq!(t.inflight, 0);
}

/// Pipelined requests (HTTP/1.1: several sent before the first response) that arrive while a request waits are
/// counted with it, and so are their responses: the counts stay balanced (nothing left in flight), whether Node
/// reads the batch at once or not. Sequential requests on the same connection afterwards count exactly.
#[test]
fn node_pipelined_requests_stay_balanced() {
    let name = "node_pipelined_requests_stay_balanced";
    if !require_root(name) || !require_program(name, "node") {
        return;
    }
    let server = node_server();
    let port = server.port;
    let mut probes = load_probes();
    sync(&mut probes, &[server.pid()]);
    let mut conn = KeepAlive::connect(port);
    for _ in 0..5 {
        assert_eq!(conn.pipeline(&["/ok", "/missing", "/ok"]), [200, 404, 200]);
    }
    let t =
        poll_total(&mut probes, &[server.pid()], |t| t.requests_total >= 5 && t.requests_total == t.responses_total);
    assert!((5..=15).contains(&t.requests_total), "one per batch at least, one per request at most: {t:?}");
    assert_eq!(t.requests_total, t.responses_total, "{t:?}");
    assert_eq!(t.inflight, 0, "{t:?}");
    // Then one at a time: exact again.
    for _ in 0..4 {
        assert_eq!(conn.get("/ok"), 200);
    }
    let mut sent = Sent { connects: 1, requests: t.requests_total + 4, ..Sent::default() };
    sent.by_class = [0, t.responses_by_class[1] + 4, 0, t.responses_by_class[3], 0];
    assert_counts(&mut probes, &[server.pid()], &sent, "node pipelined, then sequential");
}

/// A request the server never answers is in flight until its client goes away; then it counts as unanswered and
/// nothing is left in flight (the socket programs see the connection reach TCP_CLOSE, the syscall hooks its close).
#[test]
fn node_request_abandoned_by_its_client_leaves_nothing_in_flight() {
    let name = "node_request_abandoned_by_its_client_leaves_nothing_in_flight";
    if !require_root(name) || !require_program(name, "node") {
        return;
    }
    let server = node_server();
    let port = server.port;
    let mut probes = load_probes();
    sync(&mut probes, &[server.pid()]);
    let mut conn = KeepAlive::connect(port);
    assert_eq!(conn.get("/ok"), 200);
    let mut client = match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(c) => c,
        Err(e) => panic!("connect: {e}"),
    };
    if let Err(e) = std::io::Write::write_all(&mut client, b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n") {
        panic!("send: {e}");
    }
    let pid = [server.pid()];
    let t = wait_total(&mut probes, &pid, "the hanging request in flight", |t| t.requests_total == 2);
    assert_eq!((t.responses_total, t.inflight), (1, 1), "{t:?}");
    drop(client);
    let t = wait_total(&mut probes, &pid, "nothing in flight once the client left", |t| t.inflight == 0);
    assert_eq!((t.requests_total, t.responses_total, t.accepts_total), (2, 1, 2), "{t:?}");
    // The keep-alive connection still counts as before.
    assert_eq!(conn.get("/ok"), 200);
    let t = wait_total(&mut probes, &pid, "the next request", |t| t.responses_total == 2);
    assert_eq!((t.requests_total, t.inflight), (3, 0), "{t:?}");
}
