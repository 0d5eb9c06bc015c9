//! The eBPF object embedded at build time by `monitor/build.rs` (empty when the toolchain was missing).

/// The object's bytes, aligned for aya's ELF parser; empty when it was not built.
pub static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor-ebpf"));

/// Why the object is empty (empty when it was built).
pub(crate) const SKIPPED: &str = env!("MONITOR_EBPF_SKIPPED");
