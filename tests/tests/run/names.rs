//! Every message about a launched process names it as configured, across restarts: the status (with its command
//! name beside), the action POSTs on its admin endpoint, the home page's series and the stats database. A process
//! killed and started again is still `tx2` there, never its command name.

use monitor_tests::require_group;
use monitor_tests::run::{json, member, Run, Spec, TIMEOUT};
use monitor_tests::Hog;
use serde_json::Value;
use std::collections::BTreeSet;
use std::time::Duration;

const HOG: &str = env!("CARGO_BIN_EXE_alloc-hog");

/// `/proc/<pid>/comm` of a process this test started.
fn comm_of(pid: u64) -> String {
    let c = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_else(|e| panic!("comm of {pid}: {e}"));
    c.trim_end().to_string()
}

/// The status's process `pid`, if listed.
fn listed(s: &Value, pid: u64) -> Option<Value> {
    s["processes"].as_array()?.iter().find(|p| p["pid"].as_u64() == Some(pid)).cloned()
}

/// The launched process `name`'s pid, when the status lists it under its configured name with its command name.
fn named_pid(s: &Value, name: &str) -> Option<u64> {
    let pid = member(s, name)["pid"].as_u64()?;
    let p = listed(s, pid)?;
    (p["name"] == name && p["comm"].as_str().is_some_and(|c| !c.is_empty() && c != name)).then_some(pid)
}

/// The names of the home page's process series over the last five minutes.
fn series_names(run: &Run) -> BTreeSet<String> {
    let d = json(&monitor_tests::http::get(run.web, "/api/v1/dashboard?range=5m", TIMEOUT).expect("the dashboard"));
    d["series"]["procs"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str().map(String::from)).collect())
        .unwrap_or_default()
}

/// The last bucket of the dashboard with the group's usage in it, as the start of that bucket (Unix ms).
fn last_bucket_ms(run: &Run) -> u64 {
    let d = json(&monitor_tests::http::get(run.web, "/api/v1/dashboard?range=5m", TIMEOUT).expect("the dashboard"));
    let (start, step) = (d["series"]["start_ms"].as_u64().unwrap_or(0), d["series"]["step_ms"].as_u64().unwrap_or(0));
    let usage = d["series"]["usage_bytes"].as_array().cloned().unwrap_or_default();
    usage.iter().rposition(|v| v.as_f64().is_some()).map_or(0, |i| start + i as u64 * step)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[test]
fn a_launched_process_keeps_its_configured_name_across_a_restart() {
    if !require_group("a_launched_process_keeps_its_configured_name_across_a_restart") {
        return;
    }
    let dir = monitor_tests::temp_dir("run-names");
    let db = dir.join("stats.db");
    let spec = Spec {
        workers: 2,
        limit_mib: 256,
        process: "admin_path = \"/admin/memory\"\n".into(),
        extra: monitor_tests::config::Config::new().stats(&db),
        ..Spec::default()
    };
    let mut run = Run::start("names", &spec);
    let s = run.wait_for(
        "every process listed by name",
        |s| ["m0", "tx1", "tx2"].iter().all(|n| named_pid(s, n).is_some()),
        TIMEOUT,
    );
    let comm = comm_of(named_pid(&s, "tx2").expect("tx2"));
    for name in ["m0", "tx1", "tx2"] {
        let p = listed(&s, named_pid(&s, name).expect("listed")).expect("listed");
        assert_eq!((p["name"].as_str(), p["comm"].as_str()), (Some(name), Some(comm.as_str())), "{p}");
    }

    // tx2 dies by a hand the launcher does not know of (as by the guard's) and is started again.
    let old = named_pid(&s, "tx2").expect("tx2");
    let old_pid = libc::pid_t::try_from(old).expect("a pid");
    // SAFETY: kill has no memory-safety preconditions; the pid is a process this test's `monitor run` started.
    unsafe { libc::kill(old_pid, libc::SIGKILL) };
    let s = run.wait_for(
        "tx2 started again and listed by its name",
        |s| member(s, "tx2")["state"] == "ready" && named_pid(s, "tx2").is_some_and(|p| p != old),
        TIMEOUT + Duration::from_secs(5),
    );
    let new = named_pid(&s, "tx2").expect("tx2");
    assert_eq!(listed(&s, new).expect("listed")["comm"].as_str(), Some(comm.as_str()));
    assert!(s["processes"].as_array().is_some_and(|ps| ps.iter().all(|p| p["name"] != comm.as_str())), "{s:#}");

    // The page draws one series per configured name, before, during and after the restart: none by the command name.
    let restarted = now_ms();
    monitor_tests::wait_until("the page to draw a sample after the restart", TIMEOUT, || {
        (last_bucket_ms(&run) > restarted).then_some(())
    });
    let names = series_names(&run);
    assert!(names.is_superset(&["m0", "tx1", "tx2"].map(String::from).into()), "series: {names:?}");
    assert!(!names.contains(&comm), "a series named by the command name {comm:?}: {names:?}");

    // An action POSTed to a process's admin endpoint names it as configured, its command name beside.
    let mut hog = Hog::spawn(HOG, run.cg.path(), 224, false);
    let told = monitor_tests::wait_until("tx2 told to refuse", TIMEOUT, || {
        let log = run.stats(2)["admin_log"].as_array().cloned().unwrap_or_default();
        log.iter()
            .filter_map(|e| serde_json::from_str::<Value>(e["body"].as_str()?).ok())
            .find(|b| b["action"] == "refuse")
    });
    assert_eq!((told["name"].as_str(), told["comm"].as_str()), (Some("tx2"), Some(comm.as_str())), "{told}");
    assert_eq!(told["pid"].as_u64(), Some(new), "{told}");
    hog.set_mib(0);
    drop(hog);

    // The stats database's rows, written as the run stops: by configured name too.
    let status = run.terminate(TIMEOUT);
    assert!(status.success(), "monitor run exited {status}; stderr:\n{}", run.stderr());
    let out = monitor_tests::run_monitor(&["report", "--db", &db.display().to_string(), "--json"], TIMEOUT);
    assert!(out.status.success(), "report failed: {}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).expect("report JSON");
    let rows: BTreeSet<String> = r["processes"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["process"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    assert!(rows.is_superset(&["m0", "tx1", "tx2"].map(String::from).into()), "report: {r:#}");
    assert!(!rows.contains(&comm), "a row named by the command name {comm:?}: {rows:?}");
}
