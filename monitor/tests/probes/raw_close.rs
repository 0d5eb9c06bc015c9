//! `close` on the raw `sys_enter` tracepoint, what the raw `sys_exit` set runs where `perf_event_open` refuses the
//! `close` tracepoint (Debian's `kernel.perf_event_paranoid = 3` without CAP_SYS_ADMIN), forced here with
//! `Probes::load_with_close`: exact counts against python's http.server, and closed sockets forgotten, so many
//! short connections leave no tracked socket behind.

use crate::counts::{assert_counts, load_probes_raw_close, sync};
use monitor::sources::probes::{CloseHook, Hooks, Probes};
use monitor_tests::agent::free_port;
use monitor_tests::clients::{curl, KeepAlive, Sent};
use monitor_tests::servers::{python_http, Server};
use monitor_tests::{require_program, require_root, TempDir};
use std::time::{Duration, Instant};

/// Short connections opened, one request each, in the leak check: far below `SOCKS`' capacity (65,536), so the
/// LRU map never evicts and every socket left behind would show.
const SHORT_CONNECTIONS: u64 = 300;

/// Waits up to 5 s for the kernel to track no more than `most` sockets; returns how many it tracks.
fn settle_sockets(probes: &Probes, most: usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n = probes.tracked_sockets();
        if n <= most || Instant::now() >= deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn raw_close_counts_exactly_and_forgets_closed_sockets() {
    let name = "raw_close_counts_exactly_and_forgets_closed_sockets";
    if !require_root(name) || !require_program(name, "curl") {
        return;
    }
    let dir = TempDir::new("py-rawclose");
    dir.write("hello.txt", b"hello from python\n");
    let port = free_port();
    let server = Server::start(&mut python_http(dir.path(), "127.0.0.1", port), port);
    let mut probes = load_probes_raw_close();
    assert_eq!((probes.hooks(), probes.close_hook()), (Hooks::RawSysExit, Some(CloseHook::RawSysEnter)));
    // Loaded: `sys_exit`, `raw_close_enter` and the fork-following program; not the `close` tracepoint's.
    let mut names: Vec<String> = probes.run_stats().into_iter().map(|(n, _, _)| n).collect();
    names.sort();
    assert_eq!(names, ["fork", "raw_close_enter", "sys_exit"], "loaded programs");
    sync(&mut probes, &[server.pid()]);
    assert_eq!(probes.tracked_sockets(), 0);
    let url = |p: &str| format!("http://127.0.0.1:{port}{p}");

    let mut sent = Sent::default();
    for _ in 0..5 {
        sent.add(&curl(&[&url("/hello.txt")]));
    }
    let ok = url("/hello.txt");
    sent.add(&curl(&[&ok, &ok, &ok, &ok, &ok, &ok, &ok, &ok]));
    sent.add(&curl(&["-I", &ok, &ok]));
    // http.server closes the connection after an error: curl reconnects.
    let missing = url("/missing");
    sent.add(&curl(&[&missing, &ok, &missing]));
    // POST: no do_POST, so 501.
    sent.add(&curl(&["--data-binary", "a=1", &url("/form")]));
    assert_eq!(sent.by_class[3], 2, "{sent:?}");
    assert_eq!(sent.by_class[4], 1, "{sent:?}");
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "python, close on raw sys_enter");
    assert_eq!(t.inflight, 0, "{t:?}");
    let left = settle_sockets(&probes, 0);
    assert_eq!(left, 0, "sockets still tracked after every curl connection closed");

    // Many short connections, one request each, closed by the client: the server closes each socket, and the
    // raw `sys_enter` program forgets it. The kernel's run statistics, on meanwhile, show what the raw `sys_enter`
    // program costs: it runs on every syscall entry of the host, traced or not.
    let stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| eprintln!("no run statistics: {e}")).ok();
    let before = probes.run_stats();
    let started = Instant::now();
    for _ in 0..SHORT_CONNECTIONS {
        let mut conn = KeepAlive::connect(port);
        assert_eq!(conn.get("/hello.txt"), 200);
        sent.connects += 1;
        sent.requests += 1;
        sent.by_class[1] += 1;
    }
    let spent = started.elapsed();
    if stats.is_some() {
        for (name, time, runs) in probes.run_stats() {
            let (t0, r0) = before.iter().find(|(n, _, _)| *n == name).map_or((Duration::ZERO, 0), |(_, t, r)| (*t, *r));
            let (time, runs) = (time.saturating_sub(t0), runs.saturating_sub(r0));
            let per_run = if runs > 0 { time.as_nanos() / u128::from(runs) } else { 0 };
            eprintln!("{name}: {runs} runs in {} µs, {per_run} ns a run", time.as_micros());
        }
    }
    drop(stats);
    let t = assert_counts(&mut probes, &[server.pid()], &sent, "python, short connections");
    assert_eq!(t.inflight, 0, "{t:?}");
    let left = settle_sockets(&probes, 0);
    eprintln!(
        "{SHORT_CONNECTIONS} short connections in {:.0} ms: {left} sockets still tracked",
        spent.as_secs_f64() * 1e3
    );
    assert_eq!(left, 0, "sockets tracked after {SHORT_CONNECTIONS} closed connections");

    // An open keep-alive connection stays tracked until its close.
    let mut conn = KeepAlive::connect(port);
    assert_eq!(conn.get("/hello.txt"), 200);
    sent.connects += 1;
    sent.requests += 1;
    sent.by_class[1] += 1;
    assert_counts(&mut probes, &[server.pid()], &sent, "python, one connection open");
    assert_eq!(probes.tracked_sockets(), 1, "the open connection is tracked");
    drop(conn);
    assert_eq!(settle_sockets(&probes, 0), 0, "the connection forgotten at its close");
}
