//! The front door's routing rules through a real `monitor run` (master m0 + workers tx1, tx2 of the fixture backend):
//! cache-id owner, unknown and dead owners, master-only paths incl. encoded `$closure`, non-tx paths,
//! least-outstanding under uneven slow requests with rotating ties, X-Forwarded-For, and signed cache ids.

use monitor_tests::require_group;
use monitor_tests::run::{json, member, served_by, Run, Spec, TIMEOUT};
use std::collections::BTreeSet;
use std::time::Duration;

#[test]
fn every_routing_rule() {
    if !require_group("every_routing_rule") {
        return;
    }
    let spec = Spec { proxy: "tx_paths = [\"^/r4/\"]".into(), ..Spec::default() };
    let run = Run::start("routing", &spec);

    // Ties rotate over the whole pool (the master serves tx by default).
    let seen: BTreeSet<String> = (0..6).map(|_| served_by(&run.get("/r4/CodeSystem/$lookup", &[]))).collect();
    assert_eq!(seen, ["m0", "tx1", "tx2"].map(String::from).into());

    // A cache id goes back to the process that issued it.
    let issued = run.get("/r4/ValueSet/$expand?cache=start", &[]);
    let id = issued.header("x-cache-id").expect("a cache id").to_string();
    let owner = served_by(&issued);
    assert!(id.starts_with(&format!("{owner}.")), "{id} issued by {owner}");
    for _ in 0..5 {
        let r = run.get("/r4/ValueSet/$expand", &[("X-Cache-Id", &id)]);
        assert_eq!((r.status, served_by(&r)), (200, owner.clone()), "{}", r.text());
        assert_eq!(r.header("x-route-fallback"), None);
    }

    // Unknown prefix: any tx process, which answers cache-id-unknown.
    let r = run.get("/r4/ValueSet/$expand", &[("X-Cache-Id", "zz9.1")]);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.header("x-route-fallback"), Some("unknown-prefix"));
    assert!(r.text().contains("cache-id-unknown"), "{}", r.text());

    // Master-only paths, encoded or not, and paths outside tx_paths.
    for path in [
        "/r4/ConceptMap/$closure",
        "/r4/ConceptMap/%24closure",
        "/r4/$closure?name=t1",
        "/syndication/feed",
        "/info/vsac",
        "/packages/list",
        "/",
    ] {
        let r = run.get(path, &[]);
        assert_eq!((r.status, served_by(&r).as_str()), (200, "m0"), "{path}: {}", r.text());
    }

    // X-Forwarded-For: the client's address is appended.
    let r = run.get("/r4/x", &[("X-Forwarded-For", "203.0.113.9")]);
    assert_eq!(json(&r)["xff"], "203.0.113.9, 127.0.0.1");
    let r = run.get("/r4/x", &[]);
    assert_eq!(json(&r)["xff"], "127.0.0.1");

    // Dead owner: the owner's id falls back to another tx process while it is down.
    let victim = if owner == "m0" { "tx1" } else { owner.as_str() };
    let issued = (0..20)
        .map(|_| run.get("/r4/x?cache=start", &[]))
        .find(|r| served_by(r) == victim)
        .expect("the victim issues an id within 20 tries");
    let vid = issued.header("x-cache-id").expect("id").to_string();
    let index: usize = victim.trim_start_matches("tx").parse().expect("tx<n>");
    run.crash(index);
    run.wait_for("the owner down", |s| member(s, victim)["state"] == "backing-off", TIMEOUT);
    let r = run.get("/r4/x", &[("X-Cache-Id", &vid)]);
    assert_eq!(r.status, 404, "{}", r.text());
    assert_eq!(r.header("x-route-fallback"), Some("owner-down"));
    assert_ne!(served_by(&r), victim);
}

#[test]
fn least_outstanding_under_uneven_slow_requests() {
    if !require_group("least_outstanding_under_uneven_slow_requests") {
        return;
    }
    let spec = Spec { proxy: "master_serves_tx = false".into(), ..Spec::default() };
    let run = Run::start("least", &spec);
    // Two slow requests to one process and one to the other, then fast ones: every fast one must go to the
    // process with fewer outstanding requests, never to the busy one, and never to the master.
    let addr = run.proxy;
    let slow = |ms: u64| {
        std::thread::spawn(move || {
            monitor_tests::http::get(addr, &format!("/r4/slow?sleep_ms={ms}"), TIMEOUT).map(|r| served_by(&r))
        })
    };
    let first = slow(3000);
    std::thread::sleep(Duration::from_millis(300));
    let second = slow(3000);
    std::thread::sleep(Duration::from_millis(300));
    let third = slow(3000);
    std::thread::sleep(Duration::from_millis(300));
    // Outstanding now: one process has 2, the other 1 (ties rotate, so either order).
    let fast: Vec<String> = (0..10).map(|_| served_by(&run.get("/r4/fast", &[]))).collect();
    let a = first.join().expect("thread").expect("slow 1");
    let b = second.join().expect("thread").expect("slow 2");
    let c = third.join().expect("thread").expect("slow 3");
    assert_ne!(a, b, "the second slow request must go to the idle process");
    let busy = if c == a { &a } else { &b };
    let light = if busy == &a { &b } else { &a };
    assert!(fast.iter().all(|f| f == light), "fast requests went to {fast:?}; busy {busy}, light {light}");
    assert!(!fast.iter().any(|f| f == "m0"));
}

const SECRET: &str = "a-test-secret-of-32-bytes-length";

#[test]
fn signed_cache_ids() {
    if !require_group("signed_cache_ids") {
        return;
    }
    let spec = Spec { proxy: format!("token_secret = \"{SECRET}\"\ntoken_ttl_s = 3"), ..Spec::default() };
    let run = Run::start("tokens", &spec);
    let issued = run.get("/r4/x?cache=start", &[]);
    let token = issued.header("x-cache-id").expect("signed id").to_string();
    let owner = served_by(&issued);
    // The one-node case of the cluster's tokens: <host>.<process>.<id>.<expiry>.<mac>, the host's name first.
    let host = monitor::config::host_name();
    let (body, sig) = token.rsplit_once('.').expect("<body>.<mac>");
    assert!(body.starts_with(&format!("{host}.{owner}.")) && sig.len() == 64, "{token}");
    let r = run.get("/r4/x", &[("X-Cache-Id", &token)]);
    assert_eq!((r.status, served_by(&r)), (200, owner.clone()), "{}", r.text());
    // The process sees its own id, not the token.
    let own = json(&r)["cache_id"].as_str().unwrap_or_default().to_string();
    assert!(own.starts_with(&format!("{owner}.")) && token.contains(&format!(".{own}.")), "{own} in {token}");

    // An id in the older form `<process>.<id>~<expiry>.<mac>`, signed with the same secret, is still served.
    let older = monitor::base::token::Tokens::new(SECRET.as_bytes(), 60).sign(&own);
    let r = run.get("/r4/x", &[("X-Cache-Id", &older)]);
    assert_eq!((r.status, served_by(&r)), (200, owner.clone()), "{}", r.text());
    // A valid token of another node (a renamed host, or a cluster with the same secret): 503, not served here.
    let elsewhere = monitor::base::token::NodeTokens::new(SECRET.as_bytes(), "another-host", 60).sign(&own);
    let r = run.get("/r4/x", &[("X-Cache-Id", elsewhere.as_deref().unwrap_or_default())]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("owner-node-unavailable") && r.header("retry-after").is_some(), "{}", r.text());

    // Tampered signature, and a forged owner (another prefix with the same signature): 401, never routed.
    // Not tokens at all: 400.
    let other = if owner == "tx1" { "tx2" } else { "tx1" };
    let other_index: usize = other.trim_start_matches("tx").parse().expect("tx<n>");
    let served_before = run.stats(other_index)["served"].as_u64();
    let mut tampered = token.clone();
    let last = if tampered.ends_with('0') { "1" } else { "0" };
    tampered.replace_range(tampered.len() - 1.., last);
    let forged = token.replacen(&format!(".{owner}."), &format!(".{other}."), 1);
    for (bad, want) in [(tampered.as_str(), 401), (forged.as_str(), 401), ("tx1.1", 400), ("garbage", 400)] {
        let r = run.get("/r4/x", &[("X-Cache-Id", bad)]);
        assert_eq!(r.status, want, "{bad}: {}", r.text());
    }
    assert_eq!(run.stats(other_index)["served"].as_u64(), served_before, "a forged id reached {other}");

    // Owner unavailable: 503, not another process.
    if owner != "m0" {
        let index: usize = owner.trim_start_matches("tx").parse().expect("tx<n>");
        run.crash(index);
        run.wait_for("the owner down", |s| member(s, &owner)["state"] == "backing-off", TIMEOUT);
        let r = run.get("/r4/x", &[("X-Cache-Id", &token)]);
        assert_eq!(r.status, 503, "{}", r.text());
        assert!(r.text().contains(&owner), "{}", r.text());
    }

    // Expired (ttl 3 s): 410.
    std::thread::sleep(Duration::from_millis(4100));
    let r = run.get("/r4/x", &[("X-Cache-Id", &token)]);
    assert_eq!(r.status, 410, "{}", r.text());
}
