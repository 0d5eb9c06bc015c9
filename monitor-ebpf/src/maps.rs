//! The object's maps; their key and value types and names live in `monitor-common`, one module per map.

use aya_ebpf::{
    macros::map,
    maps::{Array, LruHashMap, PerCpuHashMap},
};
use monitor_common::{filter, pending, socks, stats};

/// Traced tgids as a bitmap (filled by user space, resized at load time to `pid_max`).
#[map(name = "FILTER")]
pub static FILTER: Array<u64> = Array::with_max_entries(filter::MAX_ENTRIES, 0);

/// Accepted sockets of traced tgids.
#[map(name = "SOCKS")]
pub static SOCKS: LruHashMap<socks::SockKey, socks::SockState> = LruHashMap::with_max_entries(socks::MAX_ENTRIES, 0);

/// Syscalls in progress on tracked sockets, by thread.
#[map(name = "PENDING")]
pub static PENDING: LruHashMap<pending::Key, pending::PendingIo> =
    LruHashMap::with_max_entries(pending::MAX_ENTRIES, 0);

/// Per-CPU counters by tgid (entries created by user space; the kernel only adds).
#[map(name = "STATS")]
pub static STATS: PerCpuHashMap<stats::Key, stats::Counters> = PerCpuHashMap::with_max_entries(stats::MAX_ENTRIES, 0);
