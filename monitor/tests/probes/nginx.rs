//! eBPF request counting against nginx (master + 2 workers, its own config on 127.0.0.1): exact counts summed
//! over the workers (the master accepts nothing) for curl traffic (200/404/500, HEAD, POST, a static file sent
//! with sendfile) and wrk runs: exact on one keep-alive connection, and against nginx's own access log with 8
//! (every logged request counted, answered or closed unanswered when wrk cut its connection at the end of its run).

use crate::counts::{assert_counts, counts, late_accepts, load_probes, read, sync, total, wait_total};
use monitor_tests::agent::free_port;
use monitor_tests::clients::{curl, wrk_exact, KeepAlive, Sent};
use monitor_tests::servers::{start_nginx, Server};
use monitor_tests::{require_program, require_root, TempDir};
use std::collections::BTreeSet;
use std::process::{Command, Stdio};
use std::time::Duration;

/// nginx's own configuration for the test: everything under `dir`, loopback only, 2 workers.
fn config(dir: &TempDir, port: u16) -> String {
    let d = dir.path().display();
    format!(
        "daemon off;\n\
         master_process on;\n\
         worker_processes 2;\n\
         user root;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\n\
         events {{ worker_connections 512; }}\n\
         http {{\n\
           log_format counts '$status $connection $connection_requests $bytes_sent';\n\
           access_log {d}/access.log counts;\n\
           client_body_temp_path {d}/body;\n\
           proxy_temp_path {d}/proxy;\n\
           fastcgi_temp_path {d}/fastcgi;\n\
           uwsgi_temp_path {d}/uwsgi;\n\
           scgi_temp_path {d}/scgi;\n\
           sendfile on;\n\
           keepalive_requests 100000;\n\
           server {{\n\
             listen 127.0.0.1:{port};\n\
             root {d}/www;\n\
             location = /ok {{ return 200 \"ok\\n\"; }}\n\
             location = /fail {{ return 500; }}\n\
           }}\n\
         }}\n"
    )
}

/// Starts nginx and waits (bounded) for its two workers.
fn nginx(dir: &TempDir) -> (Server, Vec<u32>) {
    let port = free_port();
    start_nginx(dir, &config(dir, port), port, 2)
}

/// (requests, statuses by class, distinct connections, requests answered with 0 bytes sent) in nginx's access log
/// (`status connection connection_requests bytes_sent`). nginx logs a request whose client was gone before the
/// answer (a wrk connection cut at the end of its run) with its status, and 0 bytes sent when its write failed.
fn access_log(dir: &TempDir) -> (u64, [u64; 5], u64, u64) {
    let text = std::fs::read_to_string(dir.path().join("access.log")).unwrap_or_default();
    let mut by_class = [0u64; 5];
    let mut conns = BTreeSet::new();
    let (mut n, mut unsent) = (0, 0);
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(status), Some(conn), Some(sent)) =
            (f.first().and_then(|s| s.parse::<u16>().ok()), f.get(1), f.get(3).and_then(|s| s.parse::<u64>().ok()))
        else {
            panic!("access log line {line:?}");
        };
        n += 1;
        if sent == 0 {
            unsent += 1;
        }
        if (100..600).contains(&status) {
            by_class[(status / 100 - 1) as usize] += 1;
        }
        conns.insert(conn.to_string());
    }
    (n, by_class, conns.len() as u64, unsent)
}

#[test]
fn nginx_counts_exactly() {
    let name = "nginx_counts_exactly";
    if !require_root(name) || !require_program(name, "curl") || !require_program(name, "nginx") {
        return;
    }
    let wrk = require_program(name, "wrk");
    let dir = TempDir::new("nginx");
    std::fs::create_dir_all(dir.path().join("www")).unwrap_or_else(|e| panic!("mkdir www: {e}"));
    let file = vec![b'z'; 64 * 1024];
    dir.write("www/static.bin", &file);
    let (server, workers) = nginx(&dir);
    let mut probes = load_probes();
    let mut all_pids = workers.clone();
    all_pids.push(server.pid());
    sync(&mut probes, &all_pids);
    let url = |p: &str| format!("http://127.0.0.1:{}{p}", server.port);
    let (ok, fail, missing, stat) = (url("/ok"), url("/fail"), url("/missing"), url("/static.bin"));

    let mut sent = Sent::default();
    for _ in 0..8 {
        sent.add(&curl(&[&ok]));
    }
    sent.add(&curl(&[&ok, &missing, &fail, &stat, &ok, &missing, &fail, &ok, &stat]));
    sent.add(&curl(&["-I", &ok, &stat, &missing]));
    for _ in 0..3 {
        sent.add(&curl(&["--data-binary", "name=value&other=thing", &ok]));
    }
    sent.add(&curl(&["--data-binary", &"p".repeat(5000), &ok, &ok]));
    assert_eq!(sent.requests, 25);
    assert_eq!(sent.by_class, [0, 20, 0, 3, 2], "{sent:?}");
    let t = assert_counts(&mut probes, &workers, &sent, "nginx (curl)");
    assert_eq!(t.inflight, 0);
    assert!(t.bytes_out >= 2 * file.len() as u64, "sendfile bytes not counted: {t:?}");
    let master = total(&read(&mut probes), &[server.pid()]);
    assert_eq!(counts(&master), (0, 0, 0, [0; 5]), "the master serves nothing");
    assert_eq!(access_log(&dir), (sent.requests, sent.by_class, sent.connects, 0), "nginx's own log");

    if wrk {
        sent.add_wrk(&wrk_exact(&ok, 2000, &dir));
        assert_counts(&mut probes, &workers, &sent, "nginx (curl + exact wrk)");

        // 8 connections for a second: compare with nginx's own access log (wrk cannot stop all of them at
        // once, so the log is the ground truth). Each wrk run adds one address-check connection with no request: 2.
        let out = Command::new("wrk")
            .args(["-t2", "-c8", "-d1s", "--timeout", "5s", &ok])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        assert!(out.is_ok_and(|s| s.success()), "wrk -c8 failed");
        // nginx may still be answering (and logging) requests it read before wrk's connections closed: wait
        // until its log stops growing.
        let mut log = access_log(&dir);
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let again = access_log(&dir);
            if again == log {
                break;
            }
            log = again;
        }
        let (requests, by_class, connections, unsent) = log;
        // Every request nginx logged was read (and counted) by the kernel, and is either answered or, when wrk cut
        // its connection before the answer went out, closed unanswered: nothing stays in flight. wrk cuts each of its
        // 8 connections at most once; a request whose write failed (0 bytes sent) is one of those.
        let what = "nginx (after wrk -c8, vs its access log)";
        wait_total(&mut probes, &workers, what, |t| t.requests_total == requests && t.inflight == 0);
        std::thread::sleep(Duration::from_millis(300));
        let got = total(&read(&mut probes), &workers);
        assert_eq!(
            (got.accepts_total, got.requests_total, got.inflight),
            (connections + 2, requests, 0),
            "{what}: {got:?}"
        );
        let cut =
            requests.checked_sub(got.responses_total).unwrap_or_else(|| panic!("{what}: more responses: {got:?}"));
        assert!(unsent <= cut && cut <= 8, "{what}: {cut} requests unanswered, {unsent} logged with 0 bytes: {got:?}");
        // The cut requests were 200s (wrk asks for /ok); the other classes come from the curl requests, exactly.
        let mut want = by_class;
        want[1] -= cut;
        assert_eq!(got.responses_by_class, want, "{what}: responses by class");
        assert_eq!(got.latency_hist_us.iter().sum::<u64>(), got.responses_total, "{what}: one latency per response");
        eprintln!("{what}: {requests} requests, {cut} cut by wrk before their answer ({unsent} logged with 0 bytes)");
    }
}

/// Keep-alive connections nginx accepted before the probes loaded, or before its workers joined the filter:
/// every request sent on them afterwards counts (summed over the workers), adopted from the request line.
#[test]
fn nginx_keepalive_opened_before_tracing_counts_exactly() {
    let name = "nginx_keepalive_opened_before_tracing_counts_exactly";
    if !require_root(name) || !require_program(name, "nginx") {
        return;
    }
    let dir = TempDir::new("nginx-adopt");
    std::fs::create_dir_all(dir.path().join("www")).unwrap_or_else(|e| panic!("mkdir www: {e}"));
    let (server, workers) = nginx(&dir);
    let mut early = KeepAlive::connect(server.port);
    assert_eq!(early.get("/ok"), 200);
    let mut probes = load_probes();
    let mut late = KeepAlive::connect(server.port);
    assert_eq!(late.get("/ok"), 200);
    let mut all_pids = workers.clone();
    all_pids.push(server.pid());
    sync(&mut probes, &all_pids);

    let mut sent = Sent::default();
    sent.connects += late_accepts(&probes);
    // No 500s: nginx closes the connection after one.
    for (i, path) in ["/ok", "/missing", "/ok"].iter().cycle().take(30).enumerate() {
        let conn = if i % 2 == 0 { &mut late } else { &mut early };
        let status = conn.get(path);
        sent.requests += 1;
        sent.by_class[(status / 100 - 1) as usize] += 1;
    }
    assert_eq!(sent.by_class, [0, 20, 0, 10, 0], "{sent:?}");
    let t = assert_counts(&mut probes, &workers, &sent, "nginx keep-alive opened before tracing");
    assert_eq!(t.inflight, 0);
}
