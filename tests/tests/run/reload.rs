//! SIGHUP under `monitor run`, during client load through the front door: python's `http.server` as master and
//! worker, clients on fresh and on kept-alive connections, and reloads sent meanwhile (a good one, a bad one, one
//! that changes a `[[process]]`). Every request is answered 200, the processes keep their pids (nothing restarts),
//! the good values are applied, the bad file is refused, and the changed `[[process]]` is named as needing a
//! restart while the running one stays.

use monitor_tests::clients::KeepAlive;
use monitor_tests::config::{Config, Process};
use monitor_tests::run::{launcher, processes, Launched, TIMEOUT};
use monitor_tests::{agent::free_port, http, require_group, require_program, temp_dir, Group};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Requests each client sends: enough to span the reloads.
const REQUESTS: usize = 300;

fn python_server(dir: &std::path::Path, port: u16) -> Vec<String> {
    let dir = dir.display().to_string();
    ["python3", "-m", "http.server", "--protocol", "HTTP/1.1", "--bind", "127.0.0.1", "--directory", &dir]
        .iter()
        .map(|s| s.to_string())
        .chain([port.to_string()])
        .collect()
}

/// The pid of each launched process, by name.
fn pids(s: &Value) -> Vec<(String, u64)> {
    launcher(s)
        .iter()
        .map(|p| (p["name"].as_str().unwrap_or("?").to_string(), p["pid"].as_u64().unwrap_or(0)))
        .collect()
}

#[test]
fn sighup_under_load_loses_no_request_and_restarts_no_process() {
    let test = "sighup_under_load_loses_no_request_and_restarts_no_process";
    if !require_group(test) || !require_program(test, "python3") {
        return;
    }
    let dir = temp_dir("run-reload");
    std::fs::write(dir.join("index.html"), "hello\n").expect("writing the page");
    let cg = Group::here("run-reload", Some(512 << 20));
    let (m0, tx1) = (free_port(), free_port());
    let fleet = |worker: Vec<String>| -> Config {
        processes([
            Process::new("m0", "master", python_server(&dir, m0), m0).set("health", "/"),
            Process::new("tx1", "worker", worker, tx1).set("health", "/"),
        ])
        .cgroup(cg.path())
    };
    let run = Launched::start(test, fleet(python_server(&dir, tx1)).set("policy", "refuse_at", 0.85), None, &[]);
    // The files written for the reloads listen where the running one does.
    let (proxy, web) = (run.proxy, run.web);
    let fleet = |worker: Vec<String>| fleet(worker).web(web).proxy(proxy);
    let base = fleet(python_server(&dir, tx1));
    let s = run.wait_for("both processes ready", |s| launcher(s).iter().all(|p| p["state"] == "ready"), TIMEOUT);
    let before = pids(&s);
    assert_eq!(before.len(), 2, "{s}");
    assert!(before.iter().all(|(_, pid)| *pid > 0), "{before:?}");

    // Clients: one on a fresh connection per request, one on a kept-alive connection.
    let answered = Arc::new(AtomicUsize::new(0));
    let fresh = {
        let answered = answered.clone();
        std::thread::spawn(move || {
            let mut failed = Vec::new();
            for i in 0..REQUESTS {
                match http::request(proxy, "GET", "/index.html", &[], TIMEOUT) {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => failed.push(format!("request {i}: {} {}", r.status, r.text())),
                    Err(e) => failed.push(format!("request {i}: {e}")),
                }
                answered.fetch_add(1, Ordering::Relaxed);
            }
            failed
        })
    };
    let kept = std::thread::spawn(move || {
        let mut conn = KeepAlive::connect(proxy.port());
        (0..REQUESTS).map(|_| conn.get("/index.html")).filter(|&code| code != 200).count()
    });
    let deadline = Instant::now() + TIMEOUT;
    while answered.load(Ordering::Relaxed) < REQUESTS / 10 {
        assert!(Instant::now() < deadline, "the clients do not get answers; stderr:\n{}", run.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }

    // Reloads while they run: a good file, a bad one, and one that changes the worker's command.
    let reload = |config: &Config, ok: u64, failed: u64| {
        config.write(&run.config);
        // SAFETY: kill has no memory effects; the pid is our child's, still unreaped.
        assert_eq!(unsafe { libc::kill(run.pid() as i32, libc::SIGHUP) }, 0);
        run.wait_for(
            &format!("{ok} good and {failed} failed reloads"),
            |s| s["config"]["reloads_ok"] == ok && s["config"]["reloads_failed"] == failed,
            TIMEOUT,
        )
    };
    // The status shows the lines the latest sample was decided with: the new ones from the first sample after the
    // sampler applied the file (within a second).
    let decided_with = |at: f64| move |s: &Value| s["policy"]["refuse_at"].as_f64() == Some(at);
    reload(&base.clone().set("policy", "refuse_at", 0.7), 1, 0);
    run.wait_for("the sample decided with refuse_at 0.7", decided_with(0.7), TIMEOUT);
    let s = reload(&base.clone().set("policy", "refuse_at", 0.6).set("proxy", "bogus", 1), 1, 1);
    let error = s["config"]["error"].as_str().unwrap_or_default();
    assert!(error.starts_with(&format!("{}:", run.config.display())) && error.contains("bogus"), "{error}");
    assert_eq!(s["policy"]["refuse_at"].as_f64(), Some(0.7), "the bad file is not applied: {s}");
    let mut other = python_server(&dir, tx1);
    other.insert(1, "-u".into());
    let s = reload(&fleet(other).set("policy", "refuse_at", 0.75), 2, 1);
    assert_eq!(s["config"]["restart_needed"], serde_json::json!(["process"]), "{s}");
    run.wait_for("the sample decided with refuse_at 0.75", decided_with(0.75), TIMEOUT);

    let failed = fresh.join().expect("the fresh-connection client");
    let kept_failed = kept.join().expect("the kept-alive client");
    assert!(failed.is_empty(), "{} of {REQUESTS} failed: {failed:?}\nstderr:\n{}", failed.len(), run.stderr());
    assert_eq!(kept_failed, 0, "kept-alive requests not answered 200");
    let s = run.status();
    assert_eq!(pids(&s), before, "the same processes serve: {s}");
    assert!(launcher(&s).iter().all(|p| p["restarts"] == 0 && p["state"] == "ready"), "{s}");
    let logged = run.stderr();
    assert_eq!(
        logged
            .lines()
            .filter(|l| l.contains("WARN") && l.contains("process changed in the file but needs a restart"))
            .count(),
        1,
        "{logged}"
    );
    drop(run);
    let _ = std::fs::remove_dir_all(&dir);
}
