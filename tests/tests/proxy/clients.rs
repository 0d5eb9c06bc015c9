//! Clients as they come, through `monitor run` over Python's own `http.server` (HTTP/1.1, keep-alive;
//! tests/fixtures/python/backend.py): ApacheBench with and without keep-alive (HTTP/1.0, as health checkers,
//! scripts and many load balancers send), `curl --http1.0`, uploads with `Expect: 100-continue`, a chunked upload,
//! pipelined requests and a client that closes after its request line; and a backend that closes its keep-alive
//! connection after every tenth answer. Each gets its expected answer and none fails: no 502 that a retry would
//! have saved, and never a POST sent twice.

use monitor_tests::clients::{ab, curl, KeepAlive};
use monitor_tests::http;
use monitor_tests::run::{Run, Spec, TIMEOUT};
use monitor_tests::temp::TempDir;
use monitor_tests::{require_group, require_program};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `monitor run` over three Python backends (m0, tx1, tx2), each with `args` besides its name and port.
fn python_run(name: &str, args: &[&str], process: &str) -> Run {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/python/backend.py");
    let mut command: Vec<String> =
        ["python3", &script.display().to_string(), "--name", "{name}", "--port", "{port}"].map(String::from).into();
    command.extend(args.iter().map(|a| a.to_string()));
    // Host only: the VM's image has python3 but no ApacheBench.
    let spec = Spec { command, process: process.into(), host_only: true, ..Spec::default() };
    Run::start(name, &spec)
}

/// The backends' counters summed over the three processes.
fn total(run: &Run, key: &str) -> u64 {
    (0..3).map(|i| run.stats(i)[key].as_u64().unwrap_or_else(|| panic!("no {key} in {}", run.stats(i)))).sum()
}

fn metrics(run: &Run) -> String {
    match http::get(run.web, "/metrics", TIMEOUT) {
        Ok(r) if r.status == 200 => r.text(),
        other => panic!("GET /metrics: {other:?}"),
    }
}

#[test]
fn apache_bench_with_and_without_keep_alive_gets_no_failure() {
    if !require_group("apache_bench_with_and_without_keep_alive_gets_no_failure")
        || !require_program("apache_bench_with_and_without_keep_alive_gets_no_failure", "ab")
    {
        return;
    }
    let run = python_run("clients-ab", &[], "");
    let url = format!("http://{}/r4/x", run.proxy);
    for round in 0..3 {
        ab(&["-n", "4000", "-c", "32", &url]).clean(4000, &format!("ab -c 32, round {round}"));
        ab(&["-k", "-n", "4000", "-c", "32", &url]).clean(4000, &format!("ab -k -c 32, round {round}"));
    }
    ab(&["-n", "2000", "-c", "8", &url]).clean(2000, "ab -c 8");
    // The cause, not only the symptom: the processes got HTTP/1.1 and kept their connections open.
    assert_eq!(total(&run, "http10"), 0, "an HTTP/1.0 request line reached a process");
    let text = metrics(&run);
    for reason in ["unsent", "failed"] {
        assert!(text.contains(&format!("monitor_proxy_retries_total{{reason=\"{reason}\"}}")), "{text}");
    }
    assert!(!run.stderr().contains("upstream request failed"), "{}", run.stderr());
}

#[test]
fn a_backend_that_closes_every_tenth_connection_fails_no_get_and_gets_each_post_once() {
    let name = "a_backend_that_closes_every_tenth_connection_fails_no_get_and_gets_each_post_once";
    if !require_group(name) || !require_program(name, "ab") {
        return;
    }
    let run = python_run("clients-close", &["--close-every", "10"], "");
    let url = format!("http://{}/r4/x", run.proxy);
    ab(&["-n", "3000", "-c", "16", &url]).clean(3000, "GETs, no keep-alive");
    ab(&["-k", "-n", "3000", "-c", "16", &url]).clean(3000, "GETs, keep-alive");
    let dir = TempDir::new("clients-post");
    let body = dir.path().join("body");
    if let Err(e) = std::fs::write(&body, vec![b'p'; 2048]) {
        panic!("{}: {e}", body.display());
    }
    let posts_before = total(&run, "post");
    let body_arg = body.display().to_string();
    let post = ab(&["-k", "-n", "1500", "-c", "16", "-p", &body_arg, "-T", "application/octet-stream", &url]);
    post.clean(1500, "POSTs, keep-alive");
    // Each POST reached a process exactly once: none lost, none sent twice.
    assert_eq!(total(&run, "post") - posts_before, 1500);
    assert!(total(&run, "closed") >= 500, "the backends closed too few connections to test anything");
}

#[test]
fn curl_uploads_pipelining_and_a_client_gone_after_its_request_line_get_their_answers() {
    let name = "curl_uploads_pipelining_and_a_client_gone_after_its_request_line_get_their_answers";
    if !require_group(name) || !require_program(name, "curl") {
        return;
    }
    // No health checks after start-up: the processes' request counts move only with what the front door sends.
    let run = python_run("clients-curl", &[], "health_interval_ms = 0");
    let base = format!("http://{}", run.proxy);

    // HTTP/1.0, with and without keep-alive.
    curl(&["--http1.0", &format!("{base}/r4/a")]).answered();
    let r = curl(&["--http1.0", "-H", "Connection: keep-alive", &format!("{base}/r4/a"), &format!("{base}/r4/b")]);
    assert_eq!(r.answered().statuses, [200, 200]);

    // Uploads of 5 and 40 MiB with `Expect: 100-continue`, and a chunked one: each arrives whole.
    let dir = TempDir::new("clients-upload");
    for (what, mib, headers) in [
        ("5 MiB, 100-continue", 5, &["-H", "Expect: 100-continue"][..]),
        ("40 MiB, 100-continue", 40, &["-H", "Expect: 100-continue"][..]),
        ("3 MiB, chunked", 3, &["-H", "Transfer-Encoding: chunked"][..]),
    ] {
        let data: Vec<u8> = (0..mib << 20).map(|i: usize| (i % 251) as u8).collect();
        let file = dir.path().join(format!("up-{mib}"));
        if let Err(e) = std::fs::write(&file, &data) {
            panic!("{}: {e}", file.display());
        }
        let out = std::process::Command::new("curl")
            .args(["-sS", "--max-time", "60", "-w", "\n%{http_code}"])
            .args(headers)
            .args(["--data-binary", &format!("@{}", file.display()), &format!("{base}/r4/upload")])
            .output();
        let out = match out {
            Ok(o) => String::from_utf8_lossy(&o.stdout).into_owned(),
            Err(e) => panic!("curl: {e}"),
        };
        let (body, code) = out.rsplit_once('\n').unwrap_or_else(|| panic!("{what}: {out}"));
        assert_eq!(code, "200", "{what}: {out}");
        let v: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"));
        assert_eq!(v["bytes"].as_u64(), Some(data.len() as u64), "{what}: {v}");
        use sha2::Digest;
        let sum: String = sha2::Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(v["sha256"].as_str(), Some(sum.as_str()), "{what}: the body arrived changed");
    }

    // Two requests in one write get two answers, in order.
    let mut c = KeepAlive::connect(run.proxy.port());
    assert_eq!(c.pipeline(&["/r4/p1", "/r4/p2"]), [200, 200]);

    // A client gone after its request line: nothing reaches a process, and the front door serves on.
    let requests = total(&run, "requests");
    for _ in 0..20 {
        let mut s = TcpStream::connect(run.proxy).expect("connect");
        let _ = s.write_all(b"GET /r4/gone HTTP/1.1\r\n");
        drop(s);
    }
    let mut s = TcpStream::connect(run.proxy).expect("connect");
    let _ = s.write_all(b"GET /r4/half HTTP/1.1\r\nHost: x\r\n");
    let _ = s.shutdown(std::net::Shutdown::Write);
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.is_empty() || answer.starts_with("HTTP/1.1 400"), "a half request got: {answer}");
    assert_eq!(run.get("/r4/after", &[]).status, 200);
    // Three /stats calls to count, then the one request after.
    assert_eq!(total(&run, "requests"), requests + 3 + 1, "a process saw a request no client finished");
}
