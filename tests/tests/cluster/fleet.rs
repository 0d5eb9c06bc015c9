//! Two nodes a and b, each a real `monitor run` over fixture-backend processes in a memory cgroup of its own (a
//! limited to 512 MiB, b to 768 MiB), counting requests with the probes. After requests through both front doors,
//! a's home page and its `/api/v1/cluster/fleet` show b's group memory and requests as b's own `/api/v1/status`
//! gives them (within a poll), and `monitor status --cluster` prints them; once b is killed with SIGKILL, a shows
//! b's last figures with "no answer" within a few seconds, and its page still answers.

use super::*;
use monitor_tests::{monitor_bin, require_group, require_root, Group};

const MIB: u64 = 1 << 20;

/// `/api/v1/cluster/fleet` of a node, when it answers 200 with JSON.
fn fleet(n: &Launched) -> Option<Value> {
    let r = http::get(n.web, "/api/v1/cluster/fleet", Duration::from_secs(2)).ok()?;
    (r.status == 200).then(|| serde_json::from_slice(&r.body).ok()).flatten()
}

/// The row of `node` in a fleet document.
fn row(f: &Value, node: &str) -> Option<Value> {
    f["nodes"].as_array()?.iter().find(|r| r["node"] == node).cloned()
}

/// Polls `n`'s fleet every 100 ms until `pred` holds for the row of `node`; panics after `timeout`.
fn wait_row(n: &Launched, node: &str, pred: impl Fn(&Value) -> bool, timeout: Duration) -> Value {
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < timeout {
        if let Some(f) = fleet(n) {
            if let Some(r) = row(&f, node).filter(|r| pred(r)) {
                return r;
            }
            last = Some(f);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{node}'s fleet row not as wanted within {timeout:?}: {last:#?}\nstderr:\n{}", n.stderr())
}

/// The home page of a node.
fn page(n: &Launched) -> String {
    match http::get(n.web, "/", Duration::from_secs(10)) {
        Ok(r) if r.status == 200 => r.text(),
        Ok(r) => panic!("GET / answered {}: {}", r.status, r.text()),
        Err(e) => panic!("GET /: {e}\nstderr:\n{}", n.stderr()),
    }
}

/// The `<tr>` of `node` in the Cluster table of a home page.
fn page_row<'a>(page: &'a str, node: &str) -> &'a str {
    let start = page.find(&format!("id=\"peer-{node}\"")).unwrap_or_else(|| panic!("no row of {node} in:\n{page}"));
    let len = page[start..].find("</tr>").unwrap_or(0);
    &page[start..start + len]
}

fn requests(status: &Value) -> u64 {
    status["processes"].as_array().map_or(0, |ps| ps.iter().filter_map(|p| p["requests_total"].as_u64()).sum())
}

#[test]
fn a_shows_b_s_memory_and_requests_and_says_when_b_stops_answering() {
    let test = "a_shows_b_s_memory_and_requests_and_says_when_b_stops_answering";
    if !require_root(test) || !require_group(test) {
        return;
    }
    let _serial = one_at_a_time();
    let (cg_a, cg_b) = (Group::here("fleet-a", Some(512 * MIB)), Group::here("fleet-b", Some(768 * MIB)));
    let (a, b) = (Node::new("a", 8), Node::new("b", 9));
    let start = |n: &Node, seeds: &[SocketAddr], cg: &Group| {
        let config = n
            .config(seeds)
            .probes(true)
            .process(Process::fixture_on(&format!("{}m0", n.name), "master", free_port()))
            .process(Process::fixture_on(&format!("{}tx1", n.name), "worker", free_port()));
        let mut l = Launched::start(&format!("cluster-fleet-{}", n.name), config, Some(cg.path()), &[]);
        (l.proxy, l.web) = (n.front_addr(), n.web_addr());
        l
    };
    let node_a = start(&a, &[], &cg_a);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let mut node_b = start(&b, &[a.gossip_addr()], &cg_b);
    wait_member(&node_a, "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_ready(&node_a);
    wait_ready(&node_b);
    let b_status = node_b.status();
    assert_eq!(b_status["probes"]["enabled"], true, "probes must load as root: {}", b_status["probes"]);

    // Requests through both front doors: 60 through b, 30 through a.
    for (front, n) in [(b.front_addr(), 60), (a.front_addr(), 30)] {
        for i in 0..n {
            let r = http::get(front, &format!("/fhir/Patient/{i}"), Duration::from_secs(10));
            assert!(r.as_ref().is_ok_and(|r| r.status == 200), "GET via {front}: {:?}", r.map(|r| r.status));
        }
    }

    // a's row of b: b's limit, b's memory and b's requests, as b's own status gives them, within a poll (b's count
    // goes on growing with the requests for its API, a's polls among them).
    let counted = |r: &Value| r["figures"]["requests_total"].as_u64().is_some_and(|n| n >= 60);
    let b_row = wait_row(&node_a, "b", counted, Duration::from_secs(10));
    let b_status = node_b.status();
    let f = &b_row["figures"];
    assert_eq!(f["limit_bytes"], b_status["group"]["limit_bytes"], "{b_row:#}");
    assert_eq!(f["limit_bytes"].as_u64(), Some(768 * MIB), "{b_row:#}");
    let (usage, own_usage) = (f["usage_bytes"].as_u64().unwrap_or(0), b_status["group"]["usage_bytes"].as_u64());
    let own_usage = own_usage.unwrap_or(0);
    assert!(usage > 0 && usage.abs_diff(own_usage) <= own_usage / 5 + 4 * MIB, "{usage} vs b's own {own_usage}");
    let (seen, own) = (f["requests_total"].as_u64().unwrap_or(0), requests(&b_status));
    assert!(seen <= own && own - seen <= 30, "a saw {seen} requests of b, b counts {own}");
    assert_eq!(f["processes"].as_u64(), b_status["processes"].as_array().map(|p| p.len() as u64), "{b_row:#}");
    assert_eq!((f["ready"].as_u64(), &b_row["error"]), (Some(2), &Value::Null), "{b_row:#}");
    let a_row = row(&fleet(&node_a).expect("a's fleet"), "a").expect("a's own row");
    assert_eq!(a_row["figures"]["limit_bytes"].as_u64(), Some(512 * MIB), "a's own figures: {a_row:#}");
    assert_eq!(a_row["this"], true);
    // Two answers with requests between them make a rate.
    wait_row(&node_a, "b", |r| r["figures"]["requests_per_s"].as_f64().is_some(), Duration::from_secs(6));

    let home = page(&node_a);
    let b_line = page_row(&home, "b");
    assert!(b_line.contains(" / 768.0 MiB</td>") && !b_line.contains("stale"), "{b_line}");
    assert!(b_line.contains("(2 ready)") && b_line.contains(" s ago"), "{b_line}");
    assert!(page_row(&home, "a").contains(" / 512.0 MiB</td>"), "{home}");
    assert!(home.contains("<td class=\"l\">2 of 2 answering</td>"), "{home}");

    // `monitor status --cluster` reads the same document.
    let out = std::process::Command::new(monitor_bin())
        .args(["status", "--cluster", "--url", &format!("http://{}", a.web_addr())])
        .output()
        .expect("monitor status --cluster");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("2 answering") && text.lines().any(|l| l.starts_with("fleet ")), "{text}");
    assert!(text.lines().any(|l| l.starts_with("b ") && l.contains("768.0 MiB")), "{text}");

    // b killed: within a few seconds a shows b's last figures with no answer and why; its page still answers.
    let pid = libc::pid_t::try_from(node_b.pid()).expect("a pid");
    // SAFETY: kill has no memory-safety preconditions; the pid is the test's un-reaped child.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    let killed = Instant::now();
    let b_row = wait_row(&node_a, "b", |r| r["error"].is_string(), Duration::from_secs(6));
    assert!(killed.elapsed() < Duration::from_secs(5), "seen after {:?}", killed.elapsed());
    assert_eq!(b_row["figures"]["limit_bytes"].as_u64(), Some(768 * MIB), "the last figures stay: {b_row:#}");
    assert!(b_row["no_answer_s"].as_f64().is_some(), "{b_row:#}");
    let home = page(&node_a);
    let b_line = page_row(&home, "b");
    assert!(b_line.starts_with("id=\"peer-b\"") && home.contains("<tr class=\"stale\" id=\"peer-b\">"), "{home}");
    assert!(b_line.contains("no answer since") && b_line.contains(" / 768.0 MiB</td>"), "{b_line}");
    assert!(home.contains("<td class=\"l\">1 of 2 answering</td>"), "{home}");
    let _ = node_b.wait_exit(Duration::from_secs(5));
}
