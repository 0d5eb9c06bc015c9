//! `GET /metrics`: the latest sample, the policy, the history's counters and the agent's reaction times in the
//! Prometheus text format (version 0.0.4), every family with HELP and TYPE, label values escaped. Written on a
//! thread of its own, a bounded number of scrapes at a time.

mod render;

pub use render::{escape_label, render, Extra};

use crate::base::reaction::Kind;
use crate::history::History;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::fmt::Write;
use std::sync::Arc;
use web::pool::{Gate, PoolError};

/// The content type of the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// `GET /metrics` over the history (which holds the latest sample too).
pub fn router(history: Arc<History>) -> Router {
    router_with(history, None, None)
}

/// More families, written after the history's (the cluster's under `[cluster]`).
pub type MoreFn = Arc<dyn Fn() -> String + Send + Sync>;

/// `GET /metrics` over the history, with `more` families after its own, and every series labelled `node` with
/// `node` when given (a member of a cluster, so that the fleet's series never collide).
pub fn router_with(history: Arc<History>, more: Option<MoreFn>, node: Option<String>) -> Router {
    let gate = Arc::new(Gate::new(THREADS, QUEUED));
    let node: Option<Arc<str>> = node.map(|n| Arc::from(escape_label(&n)));
    Router::new()
        .route(
            "/metrics",
            get(move |State(h): State<Arc<History>>| metrics(h, gate.clone(), more.clone(), node.clone())),
        )
        .with_state(history)
}

/// `text` with the label `node="<node>"` (already escaped) first on every sample line; comments are kept.
pub fn with_node_label(text: &str, node: &str) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    for line in text.lines() {
        if line.starts_with('#') || line.is_empty() {
            out.push_str(line);
        } else {
            // A sample is `name{labels} value` or `name value`; the name holds neither `{` nor a space.
            let cut = line.find(['{', ' ']).unwrap_or(line.len());
            let (name, rest) = line.split_at(cut);
            out.push_str(name);
            match rest.strip_prefix('{') {
                Some(labels) if labels.starts_with('}') => {
                    let _ = write!(out, "{{node=\"{node}\"{labels}");
                }
                Some(labels) => {
                    let _ = write!(out, "{{node=\"{node}\",{labels}");
                }
                None => {
                    let _ = write!(out, "{{node=\"{node}\"}}{rest}");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// Threads that write `/metrics` (hundreds of processes make it milliseconds of work), at nice 10.
pub const THREADS: usize = 1;
/// Scrapes waiting or being written past which the answer is 503 with `Retry-After`.
pub const QUEUED: usize = 16;

/// Written on the gate's thread, off the runtime that answers the probes.
async fn metrics(h: Arc<History>, gate: Arc<Gate>, more: Option<MoreFn>, node: Option<Arc<str>>) -> Response {
    let all = move || {
        let mut t = text(&h);
        if let Some(more) = &more {
            t.push_str(&more());
        }
        match &node {
            Some(n) => with_node_label(&t, n),
            None => t,
        }
    };
    match gate.run(all).await {
        Ok(body) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response(),
        Err(e @ PoolError::Busy(_)) => crate::base::reply::busy(&e),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The whole text from the history and its latest sample.
fn text(h: &History) -> String {
    let p = h.latest();
    let restarts = h.restarts();
    let launched = h.launched();
    let mut extra = Extra {
        restarts,
        shed_total: h.shed_total().unwrap_or(0),
        persisted: h.note().is_none(),
        states: launched.iter().map(|m| (m.name.clone(), m.role.to_string(), m.state.to_string())).collect(),
        reactions: h.reactions().map(|r| Kind::ALL.iter().map(|&k| (k, r.counts(k))).collect()).unwrap_or_default(),
        thresholds: (*p.thresholds).clone(),
        reloads: h.reloads().map(|r| r.counts()),
        decisions: h.decisions(),
        kills: h.kill_counts(),
        now_unix_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0),
    };
    for m in &launched {
        if let Some(r) = extra.restarts.iter_mut().find(|(n, _)| n == &m.name) {
            r.1 = r.1.max(m.restarts as u64);
        } else {
            extra.restarts.push((m.name.clone(), m.restarts as u64));
        }
    }
    let names = h.names(&p);
    render(&p, &names, &extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_sample_gets_the_node_label_and_comments_stay() {
        let text =
            "# HELP monitor_x X.\n# TYPE monitor_x gauge\nmonitor_x 1\nmonitor_y{process=\"tx1\",role=\"worker\"} 2\n\
                    monitor_h_bucket{le=\"+Inf\"} 3\nmonitor_z{} 4\n";
        let want = "# HELP monitor_x X.\n# TYPE monitor_x gauge\nmonitor_x{node=\"a\"} 1\n\
                    monitor_y{node=\"a\",process=\"tx1\",role=\"worker\"} 2\nmonitor_h_bucket{node=\"a\",le=\"+Inf\"} 3\n\
                    monitor_z{node=\"a\"} 4\n";
        assert_eq!(with_node_label(text, "a"), want);
        assert_eq!(with_node_label("", "a"), "");
    }
}
