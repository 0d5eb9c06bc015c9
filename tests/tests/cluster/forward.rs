//! Two nodes a and b, each a real `monitor run` over fixture-backend processes, signing cache ids with a shared
//! token secret. A cache id minted on a, used through b, reaches a's process that issued it (b counts the forward),
//! and 12 clients at once through both nodes with ids of both are each answered by the owner of their id;
//! a tampered token is refused with 401 and an unsigned id with 400; a hop header that no member signed is refused
//! with 401; an expired token gets 410 where it arrives and is never forwarded; and once a has left, b answers a's
//! ids with 503 `owner-node-unavailable` and `Retry-After`, never with one of its own processes.

use super::*;
use monitor_tests::http;
use std::time::Duration;

const TOKENS: &str = "token-secret-of-the-test-cluster-0123";

fn get(front: SocketAddr, path: &str, headers: &[(&str, &str)]) -> http::Response {
    match http::request(front, "GET", path, headers, Duration::from_secs(10)) {
        Ok(r) => r,
        Err(e) => panic!("GET {path} via {front}: {e}"),
    }
}

#[test]
fn a_cache_id_minted_on_a_and_used_through_b_reaches_its_process_on_a() {
    let _serial = one_at_a_time();
    let (a, b, mut node_a, node_b) = fixture_pair((6, 7), TOKENS);

    // A cache started on a: its id comes back signed for node a and the process that issued it.
    let started = get(a.front_addr(), "/fhir/start?cache=start", &[]);
    assert_eq!(started.status, 200, "{}", started.text());
    let owner = started.header("x-served-by").expect("X-Served-By").to_string();
    let token = started.header("x-cache-id").expect("a signed X-Cache-Id").to_string();
    assert!(token.starts_with(&format!("a.{owner}.")), "{token}");
    assert_eq!(token.split('.').count(), 5, "<node>.<process>.<id>.<expiry>.<mac>: {token}");

    // Used through b, again and again: each reaches the owner on a, which knows the cache.
    for _ in 0..5 {
        let r = get(b.front_addr(), "/fhir/use", &[("X-Cache-Id", &token)]);
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-served-by"), Some(owner.as_str()), "{}", r.text());
        let echo: Value = serde_json::from_slice(&r.body).expect("the fixture's JSON echo");
        let inner = token.split('.').take(3).skip(1).collect::<Vec<_>>().join(".");
        assert_eq!(echo["cache_id"], inner, "the process got its own id back");
        assert!(echo["xff"].as_str().is_some_and(|x| x.contains("127.0.0.1")), "{echo}");
    }
    let metrics = http::get(node_b.web, "/metrics", Duration::from_secs(5)).expect("b's metrics");
    let text = String::from_utf8_lossy(&metrics.body);
    let line = "monitor_cluster_forwarded_total{node=\"b\"} 5";
    assert!(text.lines().any(|l| l == line), "b counts its forwards:\n{text}");
    assert_eq!(node_a.stderr().matches("forward to the owner node failed").count(), 0, "{}", node_a.stderr());

    // 12 clients at once for 2 s, through both front doors, with ids minted on both nodes: every answer comes
    // from the process named in its id.
    let mut ids: Vec<(String, String)> = Vec::new();
    for front in [a.front_addr(), b.front_addr()] {
        for _ in 0..4 {
            let r = get(front, "/fhir/start?cache=start", &[]);
            let (Some(id), Some(by)) = (r.header("x-cache-id"), r.header("x-served-by")) else {
                panic!("no cache id from {front}: {}", r.text());
            };
            ids.push((id.to_string(), by.to_string()));
        }
    }
    let fronts = [a.front_addr(), b.front_addr()];
    let until = std::time::Instant::now() + Duration::from_secs(2);
    let clients: Vec<_> = (0..12)
        .map(|c| {
            let ids = ids.clone();
            std::thread::spawn(move || {
                let (mut served, mut wrong) = (0u32, Vec::new());
                let mut i = c;
                while std::time::Instant::now() < until {
                    let (id, owner) = &ids[i % ids.len()];
                    let front = fronts[(i / ids.len()) % 2];
                    let r = get(front, "/fhir/use", &[("X-Cache-Id", id)]);
                    if r.status != 200 || r.header("x-served-by") != Some(owner.as_str()) {
                        wrong.push(format!("{id} via {front}: {} {:?}", r.status, r.header("x-served-by")));
                    }
                    served += 1;
                    i += 7;
                }
                (served, wrong)
            })
        })
        .collect();
    let mut total = 0;
    for c in clients {
        let (served, wrong) = c.join().expect("a client thread");
        assert!(wrong.is_empty(), "misrouted: {wrong:?}");
        total += served;
    }
    assert!(total >= 100, "only {total} requests in 2 s");

    // Refused where they arrive: a tampered token (401), an unsigned id (400), a hop no member signed (401), an
    // expired token (410).
    let mut tampered = token.clone().into_bytes();
    let last = tampered.len() - 1;
    tampered[last] = if tampered[last] == b'0' { b'1' } else { b'0' };
    let tampered = String::from_utf8(tampered).expect("ascii");
    assert_eq!(get(b.front_addr(), "/fhir/use", &[("X-Cache-Id", &tampered)]).status, 401);
    assert_eq!(get(a.front_addr(), "/fhir/use", &[("X-Cache-Id", &tampered)]).status, 401);
    assert_eq!(get(b.front_addr(), "/fhir/use", &[("X-Cache-Id", &format!("{owner}.1"))]).status, 400);
    let forged = format!("b.1.{}.{}", "0".repeat(32), "0".repeat(64));
    let r = get(a.front_addr(), "/fhir/use", &[("X-Cache-Id", &token), ("X-Monitor-Hop", &forged)]);
    assert_eq!((r.status, r.text()), (401, "hop header signature does not match\n".to_string()));
    // Expired: a token of a's, well signed, whose expiry has passed: 410 where it arrives, not forwarded.
    let inner = token.split('.').take(3).skip(1).collect::<Vec<_>>().join(".");
    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let expired = monitor::base::token::NodeTokens::new(TOKENS.as_bytes(), "a", 60)
        .sign_at(&inner, now_s.saturating_sub(120))
        .expect("a signed token");
    let forwarded = |n: &Launched| {
        let m = http::get(n.web, "/metrics", Duration::from_secs(5)).expect("metrics");
        let text = String::from_utf8_lossy(&m.body).to_string();
        text.lines().find(|l| l.starts_with("monitor_cluster_forwarded_total")).map(str::to_string)
    };
    let before = forwarded(&node_b);
    for front in [a.front_addr(), b.front_addr()] {
        let r = get(front, "/fhir/use", &[("X-Cache-Id", &expired)]);
        assert_eq!(r.status, 410, "{front}: {}", r.text());
        assert_eq!(r.header("x-served-by"), None, "{front}: {}", r.text());
    }
    assert_eq!(forwarded(&node_b), before, "b forwarded an expired token");

    // a leaves: b answers a's ids with 503 owner-node-unavailable and Retry-After, and serves nothing of them.
    let status = node_a.terminate(Duration::from_secs(30));
    assert!(status.success(), "a exited with {status}");
    wait_member(&node_b, "a", |m| m["state"] == "left", Duration::from_secs(5));
    let r = get(b.front_addr(), "/fhir/use", &[("X-Cache-Id", &token)]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("owner-node-unavailable"), "{}", r.text());
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(r.header("x-served-by"), None, "no process of b served it");
}
