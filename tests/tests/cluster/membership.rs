//! Two nodes, each a real `monitor run` with its own master and worker, join each other through a seed and list
//! each other in `/api/v1/cluster` with their processes and front doors; when one is SIGTERMed, the other shows
//! it `left` well within the suspect plus dead timeouts (the leave is told, not detected), and counts it in
//! `/metrics`.

use super::*;
use monitor_tests::http;
use monitor_tests::require_program;
use serde_json::Value;
use std::time::{Duration, Instant};

#[test]
fn two_nodes_join_list_each_other_and_a_sigterm_shows_as_left() {
    if !require_program("two_nodes_join_list_each_other_and_a_sigterm_shows_as_left", "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-two");
    let (a, b) = (Node::new("a", 2), Node::new("b", 3));
    let node_a = a.start(&[], &dir);
    // a's membership is up before its processes start; b joins through it.
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let mut node_b = b.start(&[a.gossip_addr()], &dir);

    let alive = |m: &Value| m["state"] == "alive";
    let (b_on_a, _) = wait_member(&node_a, "b", alive, Duration::from_secs(20));
    let (a_on_b, _) = wait_member(&node_b, "a", alive, Duration::from_secs(20));
    assert_eq!(b_on_a["processes"], serde_json::json!(["bm0", "btx1"]), "{b_on_a:#}");
    assert_eq!(a_on_b["processes"], serde_json::json!(["am0", "atx1"]), "{a_on_b:#}");
    assert_eq!(b_on_a["gossip"], b.gossip_addr().to_string());
    assert_eq!(b_on_a["front"], b.front_addr().to_string(), "peers forward to b's front door");
    assert_eq!(a_on_b["front"], a.front_addr().to_string());
    let heard = |m: &Value| m["last_heard_s"].as_f64().is_some_and(|s| s < 5.0);
    wait_member(&node_a, "b", heard, Duration::from_secs(5));
    wait_member(&node_b, "a", heard, Duration::from_secs(5));
    // Each node's load (its group's memory ratio and policy state) reaches the other.
    let loaded = |m: &Value| m["load"]["policy"] == "normal" && m["load"]["memory_ratio"].as_f64().is_some();
    wait_member(&node_a, "b", loaded, Duration::from_secs(10));
    wait_member(&node_b, "a", loaded, Duration::from_secs(10));
    // Both are ready for a load balancer: members, with their processes healthy.
    wait_ready(&node_a);
    wait_ready(&node_b);
    // `monitor status --cluster` asked of a: a row for each node, from each one's own API.
    let out = monitor_tests::run_monitor(
        &["status", "--cluster", "--url", &format!("http://{}", a.web_addr())],
        Duration::from_secs(20),
    );
    assert!(out.status.success(), "{}{}", out.stdout, out.stderr);
    for (node, state, front) in [("a", "alive*", a.front_addr()), ("b", "alive", b.front_addr())] {
        let row = out.stdout.lines().find(|l| l.starts_with(&format!("{node} "))).unwrap_or_default();
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.get(1), Some(&state), "{}", out.stdout);
        assert!(row.contains("normal") && row.ends_with(&front.to_string()), "{}", out.stdout);
        assert!(!row.contains(" - "), "{node}'s status was fetched: {}", out.stdout);
    }
    assert_eq!(b_on_a["web"], b.web_addr().to_string());
    // a's home page lists both nodes, each linked to its own page.
    let page = http::get(a.web_addr(), "/", Duration::from_secs(10)).expect("a's home page");
    let page = String::from_utf8_lossy(&page.body);
    for (node, web) in [("a", a.web_addr()), ("b", b.web_addr())] {
        assert!(page.contains(&format!("<a href=\"http://{web}/\">{node}</a>")), "{node} not linked:\n{page}");
    }
    // Both front doors serve, on their nodes' addresses.
    for front in [a.front_addr(), b.front_addr()] {
        let r = http::get(front, "/", Duration::from_secs(10));
        assert!(r.as_ref().is_ok_and(|r| r.status == 200), "{front}: {:?}", r.map(|r| r.status));
    }

    // SIGTERM on b: a sees it left, well before the suspect and dead timeouts (2.5 s) would have declared it dead.
    node_b.sigterm();
    let (_, took) = wait_member(&node_a, "b", |m| m["state"] == "left", Duration::from_secs(10));
    assert!(took < Duration::from_millis(1500), "left seen after {took:?}");
    let status = node_b.wait_exit(Duration::from_secs(30));
    assert!(status.success(), "b exited with {status}; stderr:\n{}", node_b.stderr());
    assert!(node_b.stderr().contains("left the cluster"), "{}", node_b.stderr());
    assert!(node_a.stderr().contains("cluster member left"), "{}", node_a.stderr());
    // a keeps the changes it saw of b, in order, with their times.
    let view = cluster(&node_a).expect("a's cluster view");
    let of_b: Vec<&str> = view["events"]
        .as_array()
        .map(|e| e.iter().filter(|e| e["node"] == "b").filter_map(|e| e["what"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(of_b.first(), Some(&"joined"), "{view:#}");
    assert_eq!(of_b.last(), Some(&"left"), "{view:#}");
    let metrics = http::get(node_a.web, "/metrics", Duration::from_secs(5)).expect("metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    // Every series carries the node's name.
    for line in [
        "monitor_cluster_members{node=\"a\",state=\"left\"} 1",
        "monitor_cluster_members{node=\"a\",state=\"alive\"} 1",
    ] {
        assert!(text.lines().any(|l| l == line), "{line} not in /metrics:\n{text}");
    }
    let unlabelled = text.lines().find(|l| !l.starts_with('#') && !l.contains("{node=\"a\""));
    assert_eq!(unlabelled, None, "a series without the node label:\n{text}");
    // The labelled text is still the exposition format, as promtool reads it.
    if monitor_tests::require_program("two_nodes_join_list_each_other_and_a_sigterm_shows_as_left", "promtool") {
        let file = dir.join("metrics.txt");
        std::fs::write(&file, text.as_bytes()).expect("write the metrics");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("promtool check metrics < {}", file.display()))
            .output()
            .expect("promtool");
        let msg = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && msg.trim().is_empty(), "promtool check metrics: {msg}\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_killed_node_is_suspect_then_dead_after_the_dead_timeout() {
    if !require_program("a_killed_node_is_suspect_then_dead_after_the_dead_timeout", "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-kill");
    let (a, b) = (Node::new("a", 4), Node::new("b", 5));
    let node_a = a.start(&[], &dir);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    let node_b = b.start(&[a.gossip_addr()], &dir);
    wait_member(&node_a, "b", |m| m["state"] == "alive", Duration::from_secs(20));
    wait_member(&node_b, "a", |m| m["state"] == "alive", Duration::from_secs(20));
    // kill -9: no leave is told. Its servers are ended too, so that nothing of b answers.
    let servers = children(node_b.pid());
    assert_eq!(servers.len(), 2, "b's master and worker: {servers:?}");
    let pid = i32::try_from(node_b.pid()).expect("a pid");
    signal(pid, libc::SIGKILL);
    for s in &servers {
        signal(*s, libc::SIGKILL);
    }
    let killed = Instant::now();
    // Suspect after a missed probe (a probe period is 500 ms), dead once the 2000 ms suspicion runs out.
    let (_, to_suspect) = wait_member(&node_a, "b", |m| m["state"] != "alive", Duration::from_secs(5));
    let (_, _) = wait_member(&node_a, "b", |m| m["state"] == "dead", Duration::from_secs(6));
    let to_dead = killed.elapsed();
    assert!(to_suspect < Duration::from_millis(1500), "suspect after {to_suspect:?}");
    assert!(
        to_dead >= Duration::from_millis(2000) && to_dead < Duration::from_millis(4000),
        "dead after {to_dead:?}: the suspicion lasts the 2000 ms dead timeout, after a probe period or two"
    );
    // The log line may follow the state the API shows by a moment.
    for line in ["cluster member suspect", "cluster member dead"] {
        monitor_tests::wait_until(line, Duration::from_secs(5), || node_a.stderr().contains(line).then_some(()));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_whose_process_names_clash_with_a_member_is_refused_at_join() {
    if !require_program("a_node_whose_process_names_clash_with_a_member_is_refused_at_join", "python3") {
        return;
    }
    let _serial = one_at_a_time();
    let dir = monitor_tests::temp_dir("cluster-clash");
    let (a, c) = (Node::new("a", 8), Node::new("c", 9));
    let node_a = a.start(&[], &dir);
    wait_member(&node_a, "a", |m| m["self"] == true, Duration::from_secs(20));
    // c names its master am0, as a's is named.
    let (m, w) = (free_port(), free_port());
    let server =
        |port: u16| ["python3", "-m", "http.server", "--bind", "127.0.0.1", &port.to_string()].map(String::from);
    let config = c
        .config(&[a.gossip_addr()])
        .process(Process::new("am0", "master", server(m), m).set("health", "/"))
        .process(Process::new("ctx1", "worker", server(w), w).set("health", "/"));
    let mut node_c = c.launch("cluster-clash-c", config);
    let status = node_c.wait_exit(Duration::from_secs(20));
    assert!(!status.success(), "c ran with a clashing name");
    let err = node_c.stderr();
    assert!(err.contains("refused by the cluster: member a") && err.contains("already has am0"), "{err}");
    // c never started its processes, and a lists it as left, never as a live owner of am0.
    assert!(!err.contains("started the master"), "{err}");
    wait_member(&node_a, "c", |m| m["state"] == "left", Duration::from_secs(5));
    let _ = std::fs::remove_dir_all(&dir);
}
