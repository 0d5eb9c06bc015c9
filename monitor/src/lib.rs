//! monitor: guards the memory of a group of server processes that share one cgroup.
//!
//! Data flows one way: cgroup files, /proc and eBPF maps -> [`sampler`] -> [`snapshot::Snapshot`] and
//! [`policy::decide`] -> [`feed::Published`] on the [`feed::Feed`] -> consumers (actions, alerts, history, api,
//! metrics, proxy). [`agent::Agent`] builds and stops them all, for `monitor agent` and `monitor run` alike;
//! [`config`] holds the typed values every part reads. No module imports a consumer of its own output (a test,
//! tests/tests/cli/layering.rs, reads the imports and fails on a cycle).

pub mod accounts;
pub mod actions;
pub mod agent;
pub mod alerts;
pub mod api;
pub mod brake;
pub mod brake_file;
pub mod build;
pub mod cgroup;
pub mod client;
pub mod cluster;
pub mod config;
pub mod docs;
pub mod feed;
pub mod guard;
pub mod hangup;
pub mod history;
pub mod kernfile;
pub mod launcher;
pub mod live;
pub mod logs;
pub mod metrics;
pub mod nocaps;
pub mod notify;
pub mod pacing;
pub mod pidfd;
pub mod policy;
pub mod privileges;
pub mod probes;
pub mod procs;
pub mod proof;
pub mod proxy;
pub mod reaction;
pub mod reply;
pub mod report;
pub mod route;
pub mod sampler;
pub mod snapshot;
pub mod sockets;
pub mod table;
pub mod token;
pub mod units;
pub mod view;
pub mod wakeup;
