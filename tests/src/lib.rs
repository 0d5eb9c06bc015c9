//! Shared support for monitor's integration tests: requirement checks, cgroup and child-process guards, the
//! `alloc-hog` driver, a tiny HTTP client and a runner for the real `monitor` binary.
//!
//! Every guard cleans up on drop (children killed and reaped, cgroups removed), so a failing test leaves nothing
//! behind. Declare guards in the order they depend on each other: cgroup first, then the processes in it, then
//! the agent watching it; Rust drops them in reverse.

pub mod agent;
pub mod cgroup;
pub mod cgroup2;
pub mod child;
pub mod hog;
pub mod http;
pub mod proc;
pub mod require;

pub use agent::{monitor_bin, run_monitor, workspace_root, Agent, Finished};
pub use cgroup::CgroupV1;
pub use child::{spawn_in_cgroup, ChildGuard};
pub use hog::Hog;
pub use require::{in_ci, is_root, on_path, require, require_root, require_v1};

/// One mebibyte.
pub const MIB: u64 = 1024 * 1024;
