//! The dashboard, stats database and /metrics of a real `monitor agent` on its own cgroup: the history survives a
//! restart, /metrics passes `promtool check metrics` and a real Prometheus scrapes it, headless Chromium renders
//! the home page. Tests that need promtool, prometheus or chromium skip locally and fail in CI.

use monitor_tests::agent::free_port;
use monitor_tests::config::Config;
use monitor_tests::{require, run_monitor, Agent};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A fresh temp folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("monitor-web-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).expect("temp dir");
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// An agent on its own cgroup with the stats database at `db`, probes off.
fn agent(dir: &Path, db: &Path) -> Agent {
    Agent::with_config("auto", &Config::new().stats(db).probes(false), dir)
}

/// SIGTERM and wait until the agent has exited (a zombie, reaped by the guard).
fn stop(a: &Agent) {
    // SAFETY: kill has no memory effects; the pid is our child's, still unreaped.
    unsafe { libc::kill(a.pid() as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", a.pid())).unwrap_or_default();
        if stat.is_empty() || stat.rsplit(')').next().is_some_and(|r| r.trim_start().starts_with('Z')) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the agent did not stop on SIGTERM; stderr:\n{}", a.stderr());
}

fn json(a: &Agent, path: &str) -> Value {
    let (code, body) = a.get(path);
    assert_eq!(code, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: bad JSON ({e}): {body}"))
}

fn finite(v: &Value) -> usize {
    v.as_array().map(|a| a.iter().filter(|x| x.as_f64().is_some()).count()).unwrap_or(0)
}

#[test]
fn history_survives_a_restart_and_report_reads_it() {
    let dir = TempDir::new("restart");
    let db = dir.0.join("stats.db");
    let first = agent(&dir.0, &db);
    std::thread::sleep(Duration::from_millis(2500));
    let before = json(&first, "/api/v1/dashboard?range=5m");
    assert!(finite(&before["series"]["usage_bytes"]) >= 2, "seconds recorded: {before}");
    let names: Vec<String> = before["series"]["procs"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    assert!(names.iter().any(|n| n.starts_with("monitor")), "the agent's own process is a series: {names:?}");
    stop(&first);
    drop(first);
    assert!(db.is_file(), "the database exists");

    let second = agent(&dir.0, &db);
    let after = json(&second, "/api/v1/dashboard?range=24h");
    assert!(finite(&after["series"]["usage_bytes"]) >= 1, "the minute written before the restart is back: {after}");
    drop(second);

    let out = run_monitor(&["report", "--db", &db.display().to_string(), "--json"], Duration::from_secs(20));
    assert!(out.status.success(), "report failed: {}", out.stderr);
    let r: Value = serde_json::from_str(&out.stdout).expect("report JSON");
    assert!(r["minutes"].as_u64().unwrap_or(0) >= 1, "{r}");
    assert!(r["peak_usage_bytes"].as_u64().unwrap_or(0) > 0, "{r}");
    assert!(r["processes"].as_array().is_some_and(|p| !p.is_empty()), "{r}");
}

#[test]
fn a_corrupt_database_is_reported_and_the_agent_runs_on() {
    let dir = TempDir::new("corrupt");
    let db = dir.0.join("stats.db");
    std::fs::write(&db, vec![0x42u8; 16384]).expect("garbage");
    let a = agent(&dir.0, &db);
    let (code, html) = a.get("/");
    assert_eq!(code, 200);
    assert!(html.contains("history is not persisted"), "the page says so");
    let (_, metrics) = a.get("/metrics");
    assert!(metrics.contains("monitor_history_persisted 0"), "{metrics}");
    assert_eq!(a.status()["policy"]["state"], "normal");
}

fn have(bin: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {bin}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn metrics_pass_promtool() {
    if !require(have("promtool"), "metrics_pass_promtool", "promtool not installed (apt-get install prometheus)") {
        return;
    }
    let dir = TempDir::new("promtool");
    let a = agent(&dir.0, &dir.0.join("stats.db"));
    let (code, text) = a.get("/metrics");
    assert_eq!(code, 200);
    for family in [
        "monitor_group_memory_usage_bytes",
        "monitor_group_memory_limit_bytes",
        "monitor_policy_state",
        "monitor_process_resident_memory_bytes{process=",
        "monitor_http_requests_total{",
        "monitor_http_request_duration_seconds_bucket{",
        "monitor_process_restarts_total{",
        "monitor_shed_requests_total",
    ] {
        assert!(text.contains(family), "{family} missing:\n{text}");
    }
    let file = dir.0.join("metrics.txt");
    std::fs::write(&file, &text).expect("write");
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", file.display()))
        .output()
        .expect("promtool");
    let msg = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && msg.trim().is_empty(), "promtool check metrics: {msg}\n{text}");
}

#[test]
fn prometheus_scrapes_the_agent() {
    if !require(
        have("prometheus"),
        "prometheus_scrapes_the_agent",
        "prometheus not installed (apt-get install prometheus)",
    ) {
        return;
    }
    let dir = TempDir::new("prometheus");
    let a = agent(&dir.0, &dir.0.join("stats.db"));
    let cfg = dir.0.join("prometheus.yml");
    // The fleet's rules too (docs/prometheus-alerts.yml): evaluated on the scraped series, they raise the alert
    // under the name the agent itself uses for the same fault.
    let rules = monitor_tests::workspace_root().join("docs/prometheus-alerts.yml");
    let scrape = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: monitor\n    static_configs:\n      - targets: ['{}']\n",
        rules.display(),
        a.addr()
    );
    std::fs::write(&cfg, scrape).expect("prometheus.yml");
    let port = free_port();
    let mut cmd = Command::new("prometheus");
    cmd.arg(format!("--config.file={}", cfg.display()))
        .arg(format!("--storage.tsdb.path={}", dir.0.join("tsdb").display()))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let _prom = monitor_tests::ChildGuard::spawn(&mut cmd);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    while Instant::now() < deadline {
        let q = "/api/v1/query?query=monitor_process_resident_memory_bytes";
        if let Ok(r) = monitor_tests::http::get(addr, q, Duration::from_secs(5)) {
            last = r.text();
            let v: Value = serde_json::from_str(&last).unwrap_or(Value::Null);
            if v["data"]["result"].as_array().is_some_and(|r| !r.is_empty()) {
                let up = monitor_tests::http::get(
                    addr,
                    "/api/v1/query?query=monitor_group_memory_usage_bytes",
                    Duration::from_secs(5),
                )
                .map(|r| r.text())
                .unwrap_or_default();
                assert!(up.contains("\"job\":\"monitor\""), "{up}");
                // The agent runs with its probes off: the rule of that fault is pending (for: 10m), named as the
                // agent names it.
                let alerts =
                    monitor_tests::wait_until("the rules to see the probes off", Duration::from_secs(30), || {
                        let r = monitor_tests::http::get(addr, "/api/v1/alerts", Duration::from_secs(5)).ok()?;
                        let v: Value = serde_json::from_str(&r.text()).ok()?;
                        let names: Vec<String> = v["data"]["alerts"]
                            .as_array()?
                            .iter()
                            .filter_map(|a| a["labels"]["alertname"].as_str().map(String::from))
                            .collect();
                        names.contains(&"MonitorProbesDisabled".to_string()).then_some(v)
                    });
                assert!(alerts.to_string().contains("alerts.md#monitorprobesdisabled"), "its runbook: {alerts}");
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("Prometheus never saw monitor_process_resident_memory_bytes; last answer: {last}");
}

#[test]
fn chromium_renders_the_home_page() {
    let bin = ["chromium", "chromium-browser"].into_iter().find(|b| have(b));
    let Some(bin) = bin else {
        require(false, "chromium_renders_the_home_page", "chromium not installed (apt-get install chromium)");
        return;
    };
    let dir = TempDir::new("chromium");
    let a = agent(&dir.0, &dir.0.join("stats.db"));
    std::thread::sleep(Duration::from_millis(1500));
    let url = format!("{}/?range=5m", a.url());
    let chrome = |extra: &[String]| {
        let profile = dir.0.join(format!("profile-{}", extra.len()));
        let mut cmd = Command::new(bin);
        cmd.args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            .args([
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(&url);
        cmd.output().unwrap_or_else(|e| panic!("running {bin}: {e}"))
    };
    let dom = chrome(&["--dump-dom".to_string()]);
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(html.matches("<svg").count() >= 5, "the five charts are in the DOM:\n{html}");
    assert!(html.contains("id=\"processes\""), "the status strip is in the DOM");
    let stderr = String::from_utf8_lossy(&dom.stderr);
    let console: Vec<&str> =
        stderr.lines().filter(|l| l.contains("CONSOLE") && (l.contains("ERROR") || l.contains("Uncaught"))).collect();
    assert!(console.is_empty(), "console errors: {console:?}");
    let shot = monitor_tests::workspace_root().join("target/web-home.png");
    let out = chrome(&[format!("--screenshot={}", shot.display()), "--window-size=1100,1900".into()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 10_000, "screenshot {} is {size} bytes", shot.display());
}

/// The points of every `<tag … points="x,y …">` in `svg` whose attributes contain each of `with`.
fn shapes(svg: &str, tag: &str, with: &[&str]) -> Vec<Vec<(i64, i64)>> {
    svg.split(&format!("<{tag} "))
        .skip(1)
        .filter_map(|rest| rest.split_once('>').map(|(attrs, _)| attrs))
        .filter(|attrs| with.iter().all(|w| attrs.contains(w)))
        .filter_map(|attrs| attrs.split_once("points=\"").and_then(|(_, p)| p.split_once('"')).map(|(p, _)| p))
        .map(|p| {
            p.split_whitespace()
                .filter_map(|xy| xy.split_once(',').and_then(|(x, y)| Some((x.parse().ok()?, y.parse().ok()?))))
                .collect()
        })
        .collect()
}

/// The page as a user first meets it, rendered by headless Chromium: an agent whose stats database holds the last
/// ten minutes (two processes of 40 and 60 MiB anon but 100 MiB resident each, the group's usage their anon) over
/// a group where a hog holds 100 MiB now. The page opens on the minutes the data fills, so the data spans the
/// memory chart's width; the chart stacks each process's anon, so the stack's top stays within 5% of the group
/// usage line (stacked RSS would be twice it, and pass the limit).
#[test]
fn chromium_shows_the_data_across_the_width_with_the_stack_on_the_usage_line() {
    let test = "chromium_shows_the_data_across_the_width_with_the_stack_on_the_usage_line";
    let bin = ["chromium", "chromium-browser"].into_iter().find(|b| have(b));
    let Some(bin) = bin else {
        require(false, test, "chromium not installed (apt-get install chromium)");
        return;
    };
    if !monitor_tests::require_group(test) {
        return;
    }
    const MIB: u64 = 1 << 20;
    let dir = TempDir::new("chromium-fit");
    let db = dir.0.join("stats.db");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    {
        use monitor::history::ring::{Labels, Minute, ProcMinute};
        let mut store = monitor::history::store::Store::open(&db).expect("a stats database");
        let mut labels = Labels::default();
        let (a, b) = (labels.intern("old-a", "worker"), labels.intern("old-b", "worker"));
        let proc = |label, anon: u64| ProcMinute { label, rss_max: 100 * MIB, anon_max: anon, ..ProcMinute::default() };
        for back in 1..=10 {
            let m = Minute {
                t: (now_s / 60 - back) * 60,
                usage_max: 100 * MIB,
                usage_mean: 100 * MIB,
                limit: 160 * MIB,
                procs: vec![proc(a, 40 * MIB), proc(b, 60 * MIB)],
                ..Minute::default()
            };
            store.insert(&m, &labels).expect("a minute");
        }
    }
    let cg = monitor_tests::Group::here("chromium-fit", Some(160 * MIB));
    let _hog = monitor_tests::Hog::spawn(env!("CARGO_BIN_EXE_alloc-hog"), cg.path(), 100, false);
    let a = Agent::with_config(&cg.path().display().to_string(), &Config::new().stats(&db).probes(false), &dir.0);
    std::thread::sleep(Duration::from_millis(2500));
    let profile = dir.0.join("profile");
    let chrome = |extra: &str| {
        Command::new(bin)
            .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            .args(["--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1100,1900"])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg(extra)
            .arg(format!("{}/", a.url()))
            .output()
            .unwrap_or_else(|e| panic!("running {bin}: {e}"))
    };
    let dom = String::from_utf8_lossy(&chrome("--dump-dom").stdout).to_string();
    let heading = dom.split("<span id=\"range\">").nth(1).and_then(|s| s.split('<').next()).unwrap_or_default();
    assert!(heading == "showing the last 10 minutes" || heading == "showing the last 11 minutes", "{heading:?}");
    let svg = dom.split("id=\"chart-memory\"").nth(1).and_then(|s| s.split("</svg>").next()).expect("the chart");
    // The plot's frame: the y axis (one vertical line at its left, down to its foot) and the grid's widest line.
    let lines = shapes(svg, "polyline", &[]);
    let y_axis = lines.iter().find(|l| l.len() == 2 && l[0].0 == l[1].0 && l[1].1 - l[0].1 > 100).expect("y axis");
    let foot = y_axis[1].1.max(y_axis[0].1);
    let attr = |el: &str, name: &str| -> Option<i64> {
        el.split(&format!(" {name}=\"")).nth(1)?.split('"').next()?.parse().ok()
    };
    let (left, right) = svg
        .split("<line ")
        .skip(1)
        .filter_map(|el| Some((attr(el, "x1")?, attr(el, "x2")?)))
        .max_by_key(|(x1, x2)| x2 - x1)
        .expect("the grid");
    let usage = shapes(svg, "polyline", &["stroke=\"#000000\"", "stroke-width=\"2\""]);
    let xs: Vec<i64> = usage.iter().flatten().map(|p| p.0).collect();
    let (from, to) = (xs.iter().min().copied().unwrap_or(0), xs.iter().max().copied().unwrap_or(0));
    let width = (to - from) as f64 / (right - left) as f64;
    assert!(width >= 0.9, "the usage line spans {from}..{to} of the plot's {left}..{right}: {width:.2}");
    // The stack's top at each x: the highest point (least y) of any process's area there.
    let mut top = std::collections::BTreeMap::new();
    for p in shapes(svg, "polygon", &[]).iter().flatten() {
        let y = top.entry(p.0).or_insert(p.1);
        *y = (*y).min(p.1);
    }
    let (mut near, mut all) = (0, 0);
    for &(x, y) in usage.iter().flatten() {
        if let Some(&t) = top.get(&x) {
            all += 1;
            let ratio = (foot - t) as f64 / (foot - y).max(1) as f64;
            near += usize::from((0.95..=1.05).contains(&ratio));
        }
    }
    assert!(all > 100 && near as f64 >= 0.95 * all as f64, "the stack's top within 5% of usage at {near} of {all} x");
    let shot = monitor_tests::workspace_root().join("target/web-home-fit.png");
    let out = chrome(&format!("--screenshot={}", shot.display()));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    eprintln!("opened on {heading:?}; usage over {width:.2} of the width; stack on usage at {near} of {all} x");
}
