//! `GET /metrics`: the latest sample, the policy, the history's counters and the agent's reaction times in the
//! Prometheus text format (version 0.0.4), written by prometheus-client: a registry built once holds the
//! collectors (the history's, and more, such as the cluster's) and the constant labels (`node` in a cluster); each
//! scrape encodes what they read then. Written on a thread of its own, a bounded number of scrapes at a time.

mod render;

use render::{encode, Extra};

use crate::base::reaction::Kind;
use crate::history::History;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{prometheus_text, DescriptorEncoder};
use prometheus_client::registry::Registry;
use std::borrow::Cow;
use std::sync::Arc;
use web::pool::{Gate, PoolError};

/// Threads that write `/metrics` (hundreds of processes make it milliseconds of work), at nice 10.
pub(crate) const THREADS: usize = 1;
/// Scrapes waiting or being written past which the answer is 503 with `Retry-After`.
pub(crate) const QUEUED: usize = 16;

/// `GET /metrics` over the history's families, then `more`'s (the cluster's under `[cluster]`), every series
/// labelled `node` first when `node` is given (a member of a cluster, so that the fleet's series never collide).
pub(crate) fn router(history: Arc<History>, more: Option<Box<dyn Collector>>, node: Option<String>) -> Router {
    let registry = Arc::new(registry([Box::new(Record(history)) as Box<dyn Collector>].into_iter().chain(more), node));
    let gate = Arc::new(Gate::new(THREADS, QUEUED));
    Router::new().route("/metrics", get(move || metrics(registry.clone(), gate.clone())))
}

/// The collectors in order, under the constant label `node` when given.
fn registry(collectors: impl IntoIterator<Item = Box<dyn Collector>>, node: Option<String>) -> Registry {
    let mut registry = Registry::with_labels(node.map(|n| (Cow::Borrowed("node"), Cow::Owned(n))).into_iter());
    for c in collectors {
        registry.register_collector(c);
    }
    registry
}

/// Written on the gate's thread, off the runtime that answers the probes.
async fn metrics(registry: Arc<Registry>, gate: Arc<Gate>) -> Response {
    let text = move || {
        let mut text = String::with_capacity(64 * 1024);
        prometheus_text::encode(&mut text, &registry).map(|()| text)
    };
    match gate.run(text).await {
        Ok(Ok(body)) => ([(header::CONTENT_TYPE, prometheus_text::CONTENT_TYPE)], body).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("writing the metrics: {e}\n")).into_response(),
        Err(e @ PoolError::Busy(_)) => crate::base::reply::busy(&e),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

/// The history's families, read from it and its latest sample at each scrape.
struct Record(Arc<History>);

impl std::fmt::Debug for Record {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Record")
    }
}

impl Collector for Record {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let h = &self.0;
        let p = h.latest();
        let launched = h.launched();
        let mut extra = Extra {
            restarts: h.restarts(),
            shed_total: h.shed_total().unwrap_or(0),
            retries: h.retries(),
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
            growth: h.growth(),
        };
        for m in &launched {
            if let Some(r) = extra.restarts.iter_mut().find(|(n, _)| n == &m.name) {
                r.1 = r.1.max(m.restarts as u64);
            } else {
                extra.restarts.push((m.name.clone(), m.restarts as u64));
            }
        }
        encode(&mut e, &p, &h.names(&p), &extra)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::EncodeMetric;
    use prometheus_client::metrics::gauge::ConstGauge;
    use prometheus_client::metrics::MetricType;

    /// One family of a gauge without labels and one with, as any collector writes them.
    #[derive(Debug)]
    struct Two;

    impl Collector for Two {
        fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
            ConstGauge::new(1u64).encode(e.encode_descriptor("monitor_x", "X.", None, MetricType::Gauge)?)?;
            let mut family = e.encode_descriptor("monitor_y", "Y.", None, MetricType::Gauge)?;
            ConstGauge::new(2u64).encode(family.encode_family(&[("process", "tx1"), ("role", "worker")])?)
        }
    }

    fn text(node: Option<&str>) -> String {
        let registry = registry([Box::new(Two) as Box<dyn Collector>, Box::new(Two)], node.map(String::from));
        let mut text = String::new();
        prometheus_text::encode(&mut text, &registry).expect("encoded");
        text
    }

    #[test]
    fn every_series_of_every_collector_gets_the_node_label_first() {
        let family = "# HELP monitor_x X.\n# TYPE monitor_x gauge\nmonitor_x{node=\"a\\\"b\"} 1\n\
                      # HELP monitor_y Y.\n# TYPE monitor_y gauge\n\
                      monitor_y{node=\"a\\\"b\",process=\"tx1\",role=\"worker\"} 2\n";
        assert_eq!(text(Some("a\"b")), family.repeat(2));
        let bare = "# HELP monitor_x X.\n# TYPE monitor_x gauge\nmonitor_x 1\n\
                    # HELP monitor_y Y.\n# TYPE monitor_y gauge\nmonitor_y{process=\"tx1\",role=\"worker\"} 2\n";
        assert_eq!(text(None), bare.repeat(2));
    }
}
