//! The one retry of an idempotent request that failed before any response byte (the fixture's `?drop_on=NAME`
//! closes the connection unanswered on process NAME): on another ready process when least-outstanding chose the
//! first; on the same process for a cache id's owner and a master-only path; none for a POST. A signed cache id
//! whose owner fails gets 503 (owner unavailable), as one whose owner is down does.

use monitor_tests::http;
use monitor_tests::require_group;
use monitor_tests::run::{served_by, Run, Spec, TIMEOUT};

fn dropped(run: &Run, i: usize) -> u64 {
    run.stats(i)["dropped"].as_u64().unwrap_or_else(|| panic!("no dropped count in {}", run.stats(i)))
}

#[test]
fn a_request_dropped_before_any_byte_is_retried_elsewhere_when_the_route_allows() {
    if !require_group("a_request_dropped_before_any_byte_is_retried_elsewhere_when_the_route_allows") {
        return;
    }
    let run = Run::start("retry", &Spec::default());

    // Least-outstanding (ties rotate over m0, tx1, tx2): tx1 is chosen first for some of these, drops them, and
    // the retry is answered by another process.
    for i in 0..12 {
        let r = run.get("/r4/x?drop_on=tx1", &[]);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_ne!(served_by(&r), "tx1", "request {i}");
    }
    let first = dropped(&run, 1);
    assert!((1..=12).contains(&first), "tx1 dropped {first} of 12");
    assert_eq!(dropped(&run, 0) + dropped(&run, 2), 0);

    // A cache id's owner: the retry goes to the same process, which drops it again.
    let id = (0..30)
        .map(|_| run.get("/r4/x?cache=start", &[]))
        .find(|r| served_by(r) == "tx1")
        .and_then(|r| r.header("x-cache-id").map(str::to_string))
        .expect("tx1 issues a cache id within 30 tries");
    let r = run.get("/r4/x?drop_on=tx1", &[("X-Cache-Id", &id)]);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(dropped(&run, 1), first + 2);

    // A master-only path: the master, twice.
    let r = run.get("/info/x?drop_on=m0", &[]);
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(dropped(&run, 0), 2);

    // Not idempotent: no retry at all.
    let r = match http::request(run.proxy, "POST", "/r4/x?drop_on=tx1", &[("X-Cache-Id", &id)], TIMEOUT) {
        Ok(r) => r,
        Err(e) => panic!("POST via the proxy: {e}"),
    };
    assert_eq!(r.status, 502, "{}", r.text());
    assert_eq!(dropped(&run, 1), first + 3);
}

#[test]
fn a_signed_cache_id_whose_owner_fails_gets_503() {
    if !require_group("a_signed_cache_id_whose_owner_fails_gets_503") {
        return;
    }
    let spec = Spec { proxy: "token_secret = \"a-test-secret-of-32-bytes-length\"".into(), ..Spec::default() };
    let run = Run::start("retry-signed", &spec);
    let id = (0..30)
        .map(|_| run.get("/r4/x?cache=start", &[]))
        .find(|r| served_by(r) == "tx1")
        .and_then(|r| r.header("x-cache-id").map(str::to_string))
        .expect("tx1 issues a cache id within 30 tries");
    assert_eq!(run.get("/r4/x", &[("X-Cache-Id", &id)]).status, 200, "the signed id reaches its owner");
    // The owner is up (ready) but fails the request twice (the retry goes to the owner too): nobody else may answer.
    let r = run.get("/r4/x?drop_on=tx1", &[("X-Cache-Id", &id)]);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("owner of this cache id (tx1) is not available"), "{}", r.text());
    assert!(r.header("retry-after").is_some(), "503 without Retry-After");
    assert_eq!(dropped(&run, 1), 2);
    assert_eq!(dropped(&run, 0) + dropped(&run, 2), 0, "another process was asked");
}
