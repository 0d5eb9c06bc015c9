//! monitor: guards the memory of a group of server processes that share one cgroup.
//!
//! Data flows one way: cgroup files, /proc and eBPF maps -> [`sampler`] -> [`snapshot::Snapshot`] and
//! [`policy::decide`] -> [`feed::Published`] on the [`feed::Feed`] -> its readers: the record ([`history`]), the
//! consumers (actions, alerts, api, metrics) and the front door. [`agent::Agent`] builds and stops them all, for
//! `monitor agent` and `monitor run` alike. Every module stands on a floor of docs/design.md's "Layers" table and imports
//! only what its floor may (tests/tests/cli/layering.rs reads the table and fails on any other import).

pub mod accept;
pub(crate) mod accounts;
pub(crate) mod actions;
pub mod agent;
pub mod alerts;
pub mod api;
pub mod brake;
pub mod build;
pub mod cgroup;
pub mod client;
pub mod cluster;
pub mod config;
pub mod docs;
pub mod feed;
pub(crate) mod guard;
pub mod hangup;
pub mod history;
pub mod kernfile;
pub(crate) mod launcher;
pub mod live;
pub mod logs;
pub mod metrics;
pub(crate) mod nocaps;
pub(crate) mod notify;
pub(crate) mod ordered;
pub(crate) mod pacing;
pub(crate) mod pidfd;
pub mod policy;
pub(crate) mod privileges;
pub mod probes;
pub mod procs;
pub mod proof;
pub mod proxy;
pub(crate) mod reaction;
pub(crate) mod reply;
pub mod report;
pub mod route;
pub mod sampler;
pub mod snapshot;
pub mod sockets;
pub mod table;
pub mod token;
pub(crate) mod units;
pub mod view;
pub(crate) mod wakeup;
