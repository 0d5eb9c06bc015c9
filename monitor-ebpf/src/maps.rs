//! The object's maps; their key and value types and names live in `monitor-common`, one module per map.

use aya_ebpf::{
    bindings::BPF_F_MMAPABLE,
    macros::map,
    maps::{Array, LruHashMap, PerCpuArray, PerCpuHashMap},
};
use monitor_common::{filter, forked, passive, pending, socks, stats};

/// Traced tgids as a bitmap (filled by user space, resized at load time to `pid_max`; the `fork` program sets
/// the bits of children). Memory-mappable so that user space and the kernel both change single bits atomically.
#[map(name = "FILTER")]
pub static FILTER: Array<u64> = Array::with_max_entries(filter::MAX_ENTRIES, BPF_F_MMAPABLE);

/// Children the `fork` program started tracing, with their parent's tgid (drained by user space).
#[map(name = "FORKED")]
pub static FORKED: LruHashMap<forked::Key, forked::Value> = LruHashMap::with_max_entries(forked::MAX_ENTRIES, 0);

/// How many entries the `fork` program wrote to `FORKED` (word 0, wrapping), read by user space from memory.
#[map(name = "FORK_COUNT")]
pub static FORK_COUNT: Array<u64> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Accepted sockets of traced tgids.
#[map(name = "SOCKS")]
pub static SOCKS: LruHashMap<socks::SockKey, socks::SockState> = LruHashMap::with_max_entries(socks::MAX_ENTRIES, 0);

/// Sockets of traced tgids by `struct sock` address (the socket hooks).
#[map(name = "SOCK_BY_SK")]
pub static SOCK_BY_SK: LruHashMap<socks::SkKey, socks::SockState> = LruHashMap::with_max_entries(socks::MAX_ENTRIES, 0);

/// Passively opened TCP sockets no process has read or written yet (the socket hooks' accepts).
#[map(name = "PASSIVE")]
pub static PASSIVE: LruHashMap<passive::Key, passive::Value> = LruHashMap::with_max_entries(passive::MAX_ENTRIES, 0);

/// Syscalls in progress on tracked sockets, by thread.
#[map(name = "PENDING")]
pub static PENDING: LruHashMap<pending::Key, pending::PendingIo> =
    LruHashMap::with_max_entries(pending::MAX_ENTRIES, 0);

/// Per-CPU counter slots, each held by at most one traced tgid (written by user space; the kernel only adds).
#[map(name = "STATS_SLOTS")]
pub static STATS_SLOTS: PerCpuArray<stats::Slot> = PerCpuArray::with_max_entries(stats::SLOTS, 0);

/// Per-CPU counters by tgid (entries created by user space; the kernel only adds).
#[map(name = "STATS")]
pub static STATS: PerCpuHashMap<stats::Key, stats::Counters> = PerCpuHashMap::with_max_entries(stats::MAX_ENTRIES, 0);
