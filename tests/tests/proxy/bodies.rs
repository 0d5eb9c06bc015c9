//! Malformed request bodies at the front door: a bad chunk size (`zz`, `-5`, `0x5`, one past 64 bits) or a chunk
//! shorter or longer than its size gets 400 with a short body of the front door's own, and the process sees
//! nothing of the request (the fixture's `/stats` counts every request its handler got). A malformed body longer
//! than the front door holds gets 400 too, and never reaches the process as a complete request. Sound chunked
//! bodies still go through whole. A flood of malformed bodies writes at most a debug line a second.

use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The fixture's counters summed over every process.
fn counts(run: &Run, processes: usize) -> (u64, u64) {
    (0..processes).fold((0, 0), |(r, s), i| {
        let v = run.stats(i);
        (r + v["requests"].as_u64().unwrap_or(0), s + v["served"].as_u64().unwrap_or(0))
    })
}

/// Sends a chunked POST whose body is `body` (framing included) and returns the whole answer as text.
fn post_chunked(run: &Run, body: &[u8]) -> String {
    let mut s = TcpStream::connect(run.proxy).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let mut req = b"POST /r4/upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    req.extend_from_slice(body);
    // A client that sends a long body may see the connection closed before it is done: the answer is what counts.
    let _ = s.write_all(&req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn a_malformed_chunked_body_gets_400_and_never_reaches_a_process() {
    if !require_group("a_malformed_chunked_body_gets_400_and_never_reaches_a_process") {
        return;
    }
    // No health checks after start-up: the processes' request counts move only with what the front door sends.
    // The front door's debug lines, to count them.
    let spec = Spec {
        workers: 1,
        process: "health_interval_ms = 0".into(),
        env: vec![("MONITOR_LOG".into(), "info,monitor::front::proxy=debug".into())],
        ..Spec::default()
    };
    let run = Run::start("bodies", &spec);
    let flood_started = std::time::Instant::now();
    let cases: &[(&str, &[u8])] = &[
        ("size zz", b"zz\r\nhello\r\n0\r\n\r\n"),
        ("size -5", b"-5\r\nhello\r\n0\r\n\r\n"),
        ("size 0x5", b"0x5\r\nhello\r\n0\r\n\r\n"),
        ("size past 64 bits", b"fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n"),
        ("chunk shorter than its size", b"5\r\nabc\r\n0\r\n\r\n"),
        ("chunk longer than its size", b"3\r\nabcdef\r\n0\r\n\r\n"),
        ("bad size after a sound chunk", b"5\r\nhello\r\nzz\r\nworld\r\n0\r\n\r\n"),
    ];
    let (requests, served) = counts(&run, 2);
    for round in 0..3 {
        for (what, body) in cases {
            let answer = post_chunked(&run, body);
            assert!(answer.starts_with("HTTP/1.1 400"), "{what} (round {round}): {answer}");
            assert!(answer.contains("malformed request body"), "{what}: {answer}");
            assert!(answer.to_ascii_lowercase().contains("connection: close"), "{what}: {answer}");
            for leak in ["bad gateway", "Body stream", "tx1", "m0"] {
                assert!(!answer.contains(leak), "{what}: the answer names {leak:?}: {answer}");
            }
        }
    }
    // Each /stats call counts itself: two calls per process since `requests` was taken, nothing else.
    let (requests_after, served_after) = counts(&run, 2);
    assert_eq!(requests_after, requests + 2, "a process saw a malformed request");
    assert_eq!(served_after, served);

    // A sound chunked body goes through whole.
    let answer = post_chunked(&run, b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"body_bytes\":11"), "{answer}");

    // Longer than the front door holds, then malformed: 400, and no process served it.
    let (_, served) = counts(&run, 2);
    let mut long = Vec::new();
    for _ in 0..40 {
        long.extend_from_slice(b"1000\r\n");
        long.extend(std::iter::repeat_n(b'a', 4096));
        long.extend_from_slice(b"\r\n");
    }
    long.extend_from_slice(b"zz\r\nhello\r\n0\r\n\r\n");
    let answer = post_chunked(&run, &long);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("malformed request body"), "{answer}");
    let (_, served_after) = counts(&run, 2);
    assert_eq!(served_after, served, "a process served a request whose body was malformed");

    // A flood of them: at most a debug line a second about them.
    for _ in 0..300 {
        assert!(post_chunked(&run, b"zz\r\nhello\r\n0\r\n\r\n").starts_with("HTTP/1.1 400"));
    }
    let seconds = flood_started.elapsed().as_secs() + 1;
    let err = run.stderr();
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("malformed request body")).collect();
    assert!(!lines.is_empty() && lines.len() as u64 <= seconds + 1, "{} lines in {seconds} s: {lines:#?}", lines.len());
    assert!(lines.iter().all(|l| l.contains("DEBUG")), "{lines:#?}");

    // Still serving, and none of this was logged as the processes' fault.
    assert_eq!(run.get("/r4/x", &[]).status, 200);
    let err = run.stderr();
    let blamed: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("WARN") && (l.contains("upstream request failed") || l.contains("Body")))
        .collect();
    assert!(blamed.is_empty(), "{blamed:#?}");
}
