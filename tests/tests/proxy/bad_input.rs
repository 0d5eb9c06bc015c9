//! Bad input at the front door and at start-up: a malformed request line gets 400, an oversized request head 431,
//! a backend that hangs 504 after the upstream timeout; a missing binary or a master that never turns healthy
//! stops `monitor run` with a clear error, never a panic.

use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Sends raw bytes and returns the status line of the answer.
fn raw(run: &Run, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(run.proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(bytes).expect("send");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).lines().next().unwrap_or_default().to_string()
}

#[test]
fn malformed_oversized_and_hanging() {
    if !require_group("malformed_oversized_and_hanging") {
        return;
    }
    let spec = Spec { workers: 1, proxy: "upstream_timeout_s = 1\nmax_header_bytes = 16384".into(), ..Spec::default() };
    let run = Run::start("badinput", &spec);
    assert!(raw(&run, b"NOT A REQUEST\r\n\r\n").starts_with("HTTP/1.1 400"));
    assert!(raw(&run, b"GET /r4/x HTTP/1.1 extra\r\n\r\n").starts_with("HTTP/1.1 400"));
    let mut big = b"GET /r4/x HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 20_000));
    big.extend(b"\r\n\r\n");
    assert!(raw(&run, &big).starts_with("HTTP/1.1 431"), "{}", raw(&run, &big));
    // Just under the limit is fine.
    let mut ok = b"GET /r4/x HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: ".to_vec();
    ok.extend(std::iter::repeat_n(b'a', 8_000));
    ok.extend(b"\r\n\r\n");
    assert!(raw(&run, &ok).starts_with("HTTP/1.1 200"));
    let t = Instant::now();
    let r = run.get("/r4/hang?sleep_ms=8000", &[]);
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(t.elapsed() < Duration::from_secs(4), "504 after {:?}", t.elapsed());
    assert!(r.text().contains("no answer within 1 s"), "{}", r.text());
    // Still serving afterwards.
    assert_eq!(run.get("/r4/x", &[]).status, 200);
}

#[test]
fn a_missing_binary_is_a_clear_start_up_error() {
    if !require_group("a_missing_binary_is_a_clear_start_up_error") {
        return;
    }
    let spec = Spec {
        workers: 1,
        master_command: Some(vec!["/nonexistent/fhirsmith".into(), "--role=master".into()]),
        ..Spec::default()
    };
    let mut run = Run::launch("missingbin", &spec);
    let status = run.wait_exit(Duration::from_secs(10));
    let err = run.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("process m0: cannot start \"/nonexistent/fhirsmith\": No such file"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_master_that_never_turns_healthy_is_a_clear_start_up_error() {
    if !require_group("a_master_that_never_turns_healthy_is_a_clear_start_up_error") {
        return;
    }
    let spec = Spec {
        workers: 1,
        fixture_args: vec!["--health-delay-ms".into(), "60000".into()],
        start_timeout_s: 1,
        ..Spec::default()
    };
    let mut run = Run::launch("neverhealthy", &spec);
    let status = run.wait_exit(Duration::from_secs(10));
    let err = run.stderr();
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(
        err.contains("process m0 (master): http://127.0.0.1:") && err.contains("did not answer 200 within 1 s"),
        "{err}"
    );
    // Its master was killed with it: nothing is left in the group.
    std::thread::sleep(Duration::from_millis(300));
    assert!(run.cg.procs().is_empty(), "left behind: {:?}", run.cg.procs());
}
