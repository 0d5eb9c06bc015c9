//! The dashboard's routes over a [`Source`], with bounded work: at most [`RENDERS`] renders at once (on threads of
//! their own at a lower priority, see [`crate::pool`], so a large range never stalls the API), one render per range and
//! [`Source::revision`] shared by every request that asks for it meanwhile (and a render that ends while a request
//! waits serves that request, even if the source has moved on since), and past [`QUEUED`] requests waiting,
//! or [`WAIT`] of waiting, a 503 with `Retry-After`. A render its request stopped waiting for still ends in the
//! cache, so on a host too loaded to render within [`WAIT`] the next request gets it rather than starting over. Memory
//! under any number of clients is that of [`RENDERS`] renders and one cached answer per range and kind.

use crate::chart::PLOT_WIDTH;
use crate::page;
use crate::pool::Pool;
use crate::view::{Range, Source};
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

/// Renders (home page or dashboard JSON) running at once.
pub const RENDERS: usize = 2;
/// Page and dashboard requests in progress (waiting or rendering) past which new ones are answered 503.
pub const QUEUED: usize = 16;
/// How long a request waits for a render before it is answered 503.
pub const WAIT: Duration = Duration::from_secs(10);
/// The `Retry-After` of a 503, in seconds.
pub const RETRY_AFTER_S: u64 = 2;

#[derive(Deserialize)]
struct RangeQuery {
    range: Option<String>,
}

/// What is rendered: the HTML page or the JSON data.
#[derive(Clone, Copy)]
enum Kind {
    Page,
    Json,
}

impl Kind {
    fn content_type(self) -> &'static str {
        match self {
            Kind::Page => "text/html; charset=utf-8",
            Kind::Json => "application/json",
        }
    }
}

/// An answer rendered at a revision.
struct Cached {
    /// What it was rendered for (a slot of spans holds one span at a time).
    range: Range,
    revision: u64,
    body: Bytes,
    /// When the render ended.
    done: Instant,
    /// How long it took.
    took: Duration,
}

impl Cached {
    /// Whether this answer is as good as a new render for a request that arrived at `arrived` wanting `wanted`: of
    /// that revision or newer, or ended no longer before the request than a render takes. A new render would read
    /// its data when the request came and answer `took` later; this one answers now with data at most `took` older.
    /// On a live source the revision moves at every sample, so without the second rule a render slower than the
    /// requests' patience (a loaded or emulated host) would be started again by every retry and never served.
    fn serves(&self, wanted: Option<u64>, arrived: Instant) -> bool {
        wanted.is_some_and(|w| self.revision >= w) || arrived.saturating_duration_since(self.done) <= self.took
    }
}

/// The routes' state: the source, the render permits, the queue count and one cache slot per (kind, range).
struct Dash {
    source: Arc<dyn Source>,
    pool: Pool,
    renders: Arc<Semaphore>,
    queued: AtomicUsize,
    /// Indexed by `kind * 5 + range` (the presets, then one for any span of minutes); the lock is held while its
    /// render runs, so requests for the same answer wait for it instead of rendering again.
    slots: [Mutex<Option<Cached>>; 10],
    wait: Duration,
}

/// Counts a request's work in [`Dash::queued`] until it is done: answered, or, when its request stopped waiting,
/// rendered into the cache.
struct InQueue(Arc<Dash>);

impl Drop for InQueue {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The dashboard's routes: `GET /` and `GET /api/v1/dashboard`.
pub fn router(source: Arc<dyn Source>) -> Router {
    router_waiting(source, WAIT)
}

/// [`router`] with requests waiting `wait` for a render instead of [`WAIT`].
pub fn router_waiting(source: Arc<dyn Source>, wait: Duration) -> Router {
    let dash = Arc::new(Dash {
        source,
        pool: Pool::new(RENDERS),
        renders: Arc::new(Semaphore::new(RENDERS)),
        queued: AtomicUsize::new(0),
        slots: Default::default(),
        wait,
    });
    Router::new()
        .route("/", get(|s, q| answer(s, q, Kind::Page)))
        .route("/api/v1/dashboard", get(|s, q| answer(s, q, Kind::Json)))
        .with_state(dash)
}

/// The requested range, or the text of a 400 answer; with none, the smallest that holds the source's data.
fn range(q: &RangeQuery, source: &dyn Source) -> Result<Range, String> {
    match q.range.as_deref() {
        None | Some("") => Ok(source.held_seconds().map_or(Range::default(), Range::fitting)),
        Some(r) => Range::parse(r)
            .ok_or_else(|| format!("unknown range {r:?}: use 5m, 1h, 24h, 7d or a number of minutes up to 1440m\n")),
    }
}

fn busy(why: &str) -> Response {
    let retry = RETRY_AFTER_S.to_string();
    (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, retry)], format!("busy: {why}; try again shortly\n"))
        .into_response()
}

fn slot_index(kind: Kind, r: Range) -> usize {
    let k = match kind {
        Kind::Page => 0,
        Kind::Json => 5,
    };
    k + Range::ALL.iter().position(|&x| x == r).unwrap_or(Range::ALL.len())
}

/// Renders on a render thread, holding `permit` until the render ends (also when its request gave up).
async fn render(dash: &Dash, kind: Kind, r: Range, permit: OwnedSemaphorePermit) -> Result<Bytes, String> {
    let source = dash.source.clone();
    let done = dash
        .pool
        .run(move || {
            let _permit = permit;
            let d = source.dashboard(r, PLOT_WIDTH);
            match kind {
                Kind::Page => Ok(Bytes::from(page::render(&d))),
                Kind::Json => serde_json::to_vec(&d).map(Bytes::from).map_err(|e| format!("serializing: {e}")),
            }
        })
        .await;
    done.map_err(|e| format!("rendering: {e}")).and_then(|r| r)
}

async fn answer(State(dash): State<Arc<Dash>>, Query(q): Query<RangeQuery>, kind: Kind) -> Response {
    let r = match range(&q, dash.source.as_ref()) {
        Ok(r) => r,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg).into_response(),
    };
    if dash.queued.fetch_add(1, Ordering::Relaxed) >= QUEUED {
        dash.queued.fetch_sub(1, Ordering::Relaxed);
        return busy(&format!("{QUEUED} dashboard requests are in progress"));
    }
    let queued = InQueue(dash.clone());
    let wanted = dash.source.revision();
    let wait = dash.wait;
    // A task of its own, so that a request that stops waiting leaves the render to finish into the cache.
    let arrived = Instant::now();
    let work = tokio::spawn(async move {
        let _queued = queued;
        let mut slot = dash.slots[slot_index(kind, r)].lock().await;
        // Fresh: of the revision asked for, rendered while this request waited, or as recent as a new render
        // would be (see Cached::serves).
        if let Some(c) = slot.as_ref().filter(|c| c.range == r && c.serves(wanted, arrived)) {
            return Ok(c.body.clone());
        }
        let permit = dash.renders.clone().acquire_owned().await.map_err(|e| format!("render permits: {e}"))?;
        let revision = dash.source.revision();
        let began = Instant::now();
        let body = render(&dash, kind, r, permit).await?;
        let done = Instant::now();
        *slot = revision.map(|revision| Cached { range: r, revision, body: body.clone(), done, took: done - began });
        Ok::<Bytes, String>(body)
    });
    match tokio::time::timeout(wait, work).await {
        Ok(Ok(Ok(body))) => ([(header::CONTENT_TYPE, kind.content_type())], body).into_response(),
        Ok(Ok(Err(e))) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("rendering: {e}\n")).into_response(),
        Err(_) => busy(&format!("no render within {:.1} s", wait.as_secs_f64())),
    }
}
