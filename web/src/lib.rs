//! The dashboard: axum routes, HTML and SVG charts drawn from plain view types. It never depends on `monitor`:
//! the agent implements [`Source`] over its history and hands it to [`router`].
//!
//! - `GET /?range=5m|1h|24h|7d`: the home page (server-rendered, inline SVG, no external resources).
//! - `GET /api/v1/dashboard?range=…`: the same data as JSON.
//!
//! Both are bounded: a few renders at once, one render shared by the requests for the same answer, 503 with
//! `Retry-After` past a short queue.

pub mod chart;
pub mod fleet;
pub mod html;
pub mod page;
pub mod pool;
mod routes;
pub mod view;

pub use routes::{router, router_waiting, QUEUED, RENDERS, RETRY_AFTER_S, WAIT};
pub use view::{
    BrakeNow, Dashboard, Figures, Fleet, FleetTotal, GroupNow, KillMarker, Marker, MemberMarker, ProcSeries,
    ProcessStatus, Range, RecycleMarker, RouteGrowth, Series, Source,
};
