//! The readers of the feed that act on it or show it: the actions told to the processes, the alerts, the JSON API
//! and `/metrics`. None imports another (docs/design.md, "Layers").

pub(crate) mod actions;
pub mod alerts;
pub mod api;
pub mod metrics;
