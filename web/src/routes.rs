//! The dashboard's routes over a [`Source`]. Rendering runs on the blocking pool so a large range never stalls
//! the API on the runtime's one worker.

use crate::chart::PLOT_WIDTH;
use crate::page;
use crate::view::{Range, Source};
use axum::extract::{Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize)]
struct RangeQuery {
    range: Option<String>,
}

/// The dashboard's routes: `GET /` and `GET /api/v1/dashboard`.
pub fn router(source: Arc<dyn Source>) -> Router {
    Router::new().route("/", get(home)).route("/api/v1/dashboard", get(dashboard)).with_state(source)
}

/// The requested range, or the text of a 400 answer.
fn range(q: &RangeQuery) -> Result<Range, String> {
    match q.range.as_deref() {
        None | Some("") => Ok(Range::default()),
        Some(r) => Range::parse(r).ok_or_else(|| format!("unknown range {r:?}: use 5m, 1h, 24h or 7d\n")),
    }
}

async fn home(State(source): State<Arc<dyn Source>>, Query(q): Query<RangeQuery>) -> Response {
    let r = match range(&q) {
        Ok(r) => r,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg).into_response(),
    };
    let html = tokio::task::spawn_blocking(move || page::render(&source.dashboard(r, PLOT_WIDTH))).await;
    match html {
        Ok(html) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("rendering the page: {e}\n")).into_response(),
    }
}

async fn dashboard(State(source): State<Arc<dyn Source>>, Query(q): Query<RangeQuery>) -> Response {
    let r = match range(&q) {
        Ok(r) => r,
        Err(msg) => return (StatusCode::BAD_REQUEST, msg).into_response(),
    };
    match tokio::task::spawn_blocking(move || source.dashboard(r, PLOT_WIDTH)).await {
        Ok(d) => Json(d).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("reading the history: {e}\n")).into_response(),
    }
}
