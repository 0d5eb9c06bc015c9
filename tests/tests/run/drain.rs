//! Drain under load: SIGTERM while 24 slow requests are in flight; every one completes with 200, an idle
//! keep-alive connection is closed, new connections are refused, the children are stopped and `monitor run`
//! exits 0.

use monitor_tests::pace::{scaled, slowdown};
use monitor_tests::require_group;
use monitor_tests::run::{Run, Spec};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

#[test]
fn a_drain_under_load_finishes_every_request_and_exits_0() {
    if !require_group("a_drain_under_load_finishes_every_request_and_exits_0") {
        return;
    }
    let mut run = Run::start("drain", &Spec::default());
    let addr = run.proxy;
    // Each request lasts long enough for all 24 to be in flight at once on a slow machine too, and at most 20 s, so
    // that the last one (1.15 s more) still ends within the default 30 s drain.
    let base = (800 * u64::from(slowdown())).min(20_000);
    let clients: Vec<_> = (0..24)
        .map(|i| {
            std::thread::spawn(move || {
                let ms = base + 50 * i;
                monitor_tests::http::get(addr, &format!("/r4/slow?sleep_ms={ms}"), Duration::from_secs(20))
            })
        })
        .collect();
    // Wait until every request has reached a process.
    let deadline = Instant::now() + scaled(Duration::from_secs(5));
    loop {
        let inflight: u64 = (0..3).filter_map(|i| run.stats(i)["inflight"].as_u64()).sum();
        if inflight == 24 {
            break;
        }
        assert!(Instant::now() < deadline, "only {inflight} of 24 requests in flight");
        std::thread::sleep(Duration::from_millis(20));
    }
    // An idle keep-alive connection, one request answered on it.
    let mut idle = TcpStream::connect(addr).expect("connect");
    idle.set_read_timeout(Some(scaled(Duration::from_secs(10)))).expect("timeout");
    idle.write_all(b"GET /r4/x HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).expect("answer on the keep-alive connection");
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let pids = run.cg.procs();
    let t = Instant::now();
    run.sigterm();
    // The idle keep-alive connection is closed at once, while the slow requests are still running.
    idle.set_read_timeout(Some(scaled(Duration::from_millis(600)))).expect("timeout");
    let closed = idle.read(&mut buf);
    assert!(matches!(closed, Ok(0)), "the idle keep-alive connection was not closed: {closed:?}");
    let status = run.wait_exit(Duration::from_secs(30));
    let results: Vec<_> = clients.into_iter().map(|c| c.join().expect("client thread")).collect();
    for (i, r) in results.iter().enumerate() {
        match r {
            Ok(r) => assert_eq!(r.status, 200, "request {i}: {}", r.text()),
            Err(e) => panic!("request {i} failed during the drain: {e}\nstderr:\n{}", run.stderr()),
        }
    }
    assert!(status.success(), "monitor run exited {status}; stderr:\n{}", run.stderr());
    assert!(t.elapsed() >= Duration::from_millis(500), "exited before the requests could finish");
    assert!(TcpStream::connect(addr).is_err(), "still accepting after the drain");
    assert!(run.cg.procs().is_empty(), "children left: {:?} (were {pids:?})", run.cg.procs());
    let err = run.stderr();
    assert!(err.contains("every in-flight request finished"), "{err}");
}
