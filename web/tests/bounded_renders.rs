//! The dashboard's work is bounded: concurrent requests for one page share one render, at most `RENDERS` run at
//! once, and past `QUEUED` requests in progress the answer is 503 with `Retry-After`; a render its request stopped
//! waiting for still ends in the cache, and answers the requests that come within as long as it took.

use axum::body::Body;
use axum::http::{header, Request, StatusCode};
use http_body_util::BodyExt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;
use web::{Dashboard, Range, Source};

/// A source whose render takes `delay`, counting renders and the most that ran at once.
#[derive(Default)]
struct Slow {
    delay: Duration,
    revision: AtomicU64,
    renders: AtomicUsize,
    running: AtomicUsize,
    most: AtomicUsize,
}

impl Source for Slow {
    fn dashboard(&self, range: Range, _buckets: usize) -> Dashboard {
        self.renders.fetch_add(1, Ordering::SeqCst);
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.running.fetch_sub(1, Ordering::SeqCst);
        Dashboard { range, ..Dashboard::default() }
    }

    fn revision(&self) -> Option<u64> {
        Some(self.revision.load(Ordering::SeqCst))
    }
}

async fn get(app: axum::Router, uri: &str) -> (StatusCode, Option<String>, usize) {
    let req = Request::builder().uri(uri).body(Body::empty()).expect("a request");
    let resp = app.oneshot(req).await.expect("infallible");
    let retry = resp.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).map(str::to_string);
    let code = resp.status();
    let body = resp.into_body().collect().await.map(|b| b.to_bytes().len()).unwrap_or(0);
    (code, retry, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_for_one_page_share_one_render() {
    let source = Arc::new(Slow { delay: Duration::from_millis(300), ..Slow::default() });
    let app = web::router(source.clone());
    let asks: Vec<_> = (0..web::QUEUED).map(|_| tokio::spawn(get(app.clone(), "/?range=24h"))).collect();
    for a in asks {
        let (code, _, len) = a.await.expect("joined");
        assert_eq!(code, StatusCode::OK);
        assert!(len > 1000, "a whole page");
    }
    assert_eq!(source.renders.load(Ordering::SeqCst), 1, "one render for the one revision");
    // A new revision, once the last render is older than a render takes: the next request renders again; the
    // same revision again does not.
    tokio::time::sleep(source.delay + Duration::from_millis(200)).await;
    source.revision.fetch_add(1, Ordering::SeqCst);
    assert_eq!(get(app.clone(), "/?range=24h").await.0, StatusCode::OK);
    assert_eq!(get(app.clone(), "/?range=24h").await.0, StatusCode::OK);
    assert_eq!(source.renders.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renders_are_limited_and_a_crowd_past_the_queue_gets_503() {
    let source = Arc::new(Slow { delay: Duration::from_millis(400), ..Slow::default() });
    let app = web::router(source.clone());
    // Every range and both kinds at once: 8 different answers, 4 times each, far past the queue.
    let uris: Vec<String> = ["/?range=", "/api/v1/dashboard?range="]
        .iter()
        .flat_map(|p| Range::ALL.iter().map(move |r| format!("{p}{}", r.name())))
        .collect();
    let asks: Vec<_> = (0..4)
        .flat_map(|_| uris.clone())
        .map(|u| {
            let app = app.clone();
            tokio::spawn(async move { get(app, &u).await })
        })
        .collect();
    let (mut ok, mut busy) = (0, 0);
    for a in asks {
        match a.await.expect("joined") {
            (StatusCode::OK, _, _) => ok += 1,
            (StatusCode::SERVICE_UNAVAILABLE, retry, _) => {
                assert_eq!(retry.as_deref(), Some(web::RETRY_AFTER_S.to_string().as_str()), "says when to come back");
                busy += 1
            }
            (code, _, _) => panic!("unexpected {code}"),
        }
    }
    assert_eq!(ok + busy, 32);
    assert!(busy >= 32 - web::QUEUED, "past the queue: 503 ({ok} ok, {busy} busy)");
    assert!(ok >= 8, "the queue was served ({ok} ok)");
    assert!(source.most.load(Ordering::SeqCst) <= web::RENDERS, "at most {} renders at once", web::RENDERS);
    assert!(source.renders.load(Ordering::SeqCst) <= 8, "one render per answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_render_its_request_gave_up_on_still_ends_in_the_cache() {
    // Renders take 600 ms, requests wait 400 ms: the first gets 503 and its render goes on. The source moves on
    // (a live agent's revision changes at every sample), and a second request that came while the render ran gets
    // it when it ends, without a second render.
    let source = Arc::new(Slow { delay: Duration::from_millis(600), ..Slow::default() });
    let app = web::router_waiting(source.clone(), Duration::from_millis(400));
    let (code, retry, _) = get(app.clone(), "/?range=24h").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry.as_deref(), Some(web::RETRY_AFTER_S.to_string().as_str()));
    source.revision.fetch_add(1, Ordering::SeqCst);
    let (code, _, len) = get(app.clone(), "/?range=24h").await;
    assert_eq!(code, StatusCode::OK);
    assert!(len > 1000, "a whole page");
    assert_eq!(source.renders.load(Ordering::SeqCst), 1, "the given-up render was kept, not done again");
    // A retry that comes just after the render ended, the source moved on again: that render is as recent as a new
    // one would be, so it is the answer (else a render slower than the requests' patience is never served).
    tokio::time::sleep(Duration::from_millis(100)).await;
    source.revision.fetch_add(1, Ordering::SeqCst);
    assert_eq!(get(app.clone(), "/?range=24h").await.0, StatusCode::OK);
    assert_eq!(source.renders.load(Ordering::SeqCst), 1, "served from the cache");
    // Asked once the render is older than a render takes, the source moved on: this one renders anew (and gives up
    // again).
    tokio::time::sleep(source.delay + Duration::from_millis(200)).await;
    source.revision.fetch_add(1, Ordering::SeqCst);
    assert_eq!(get(app.clone(), "/?range=24h").await.0, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(source.renders.load(Ordering::SeqCst), 2);
}
