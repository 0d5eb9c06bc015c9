//! What the sampler reads: the cgroup's files (v1 and v2), /proc, sockets, the eBPF probes, the kernel's wake-ups,
//! the launched processes' configured names, and the agent's own build and privileges.

pub mod build;
pub mod cgroup;
pub(crate) mod launched;
pub(crate) mod privileges;
pub mod probes;
pub mod procs;
pub mod sockets;
pub(crate) mod wakeup;
