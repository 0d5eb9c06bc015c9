//! monitor: guards the memory of a group of server processes that share one cgroup.
//!
//! Data flows one way: cgroup files, /proc and eBPF maps ([`sources`]) -> [`sampler`] -> a
//! [`decision::snapshot::Snapshot`] and [`decision::policy::decide`] -> [`feed::Published`] on the [`feed::Feed`]
//! -> its readers: the record ([`history`]), the [`consumers`] (actions, alerts, api, metrics) and the [`front`]
//! door. [`agent::Agent`] builds and stops them all, for `monitor agent` and `monitor run` alike.
//!
//! The modules stand on the floors of docs/design.md's "Layers" table, lowest last below; a floor of several
//! modules is a folder. A module imports only what its floor may (tests/tests/cli/layering.rs reads the table and
//! fails on any other import).

pub mod agent;
pub mod base;
pub mod cluster;
pub mod commands;
pub mod config;
pub mod consumers;
pub mod decision;
pub mod feed;
pub mod front;
pub mod guard;
pub mod history;
pub mod sampler;
pub mod sources;
pub mod view;
