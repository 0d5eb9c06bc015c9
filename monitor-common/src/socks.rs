//! `SOCKS`: accepted sockets of traced processes, keyed by (tgid, fd), with the request awaiting its response.

use crate::user_pod;

/// Name of the map in the object.
pub const MAP: &str = "SOCKS";
/// Capacity (an LRU map: the oldest idle sockets are forgotten first).
pub const MAX_ENTRIES: u32 = 65_536;

/// One accepted socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockKey {
    pub tgid: u32,
    pub fd: u32,
}
user_pod!(SockKey);

/// State of one accepted socket.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockState {
    /// `bpf_ktime_get_ns` when the oldest unanswered request was read; 0 when none is waiting.
    pub request_ns: u64,
}
user_pod!(SockState);
