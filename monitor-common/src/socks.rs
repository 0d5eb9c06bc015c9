//! `SOCKS` and `SOCK_BY_SK`: sockets of traced processes (accepted, or adopted from a request line read on them),
//! with the request awaiting its response. The syscall hooks key them by (tgid, fd) in `SOCKS`; the socket hooks
//! by the kernel's `struct sock` address in `SOCK_BY_SK` (one entry however many fds or processes share it).

use crate::user_pod;

/// Name of the map in the object.
pub const MAP: &str = "SOCKS";
/// Capacity (an LRU map: the oldest idle sockets are forgotten first).
pub const MAX_ENTRIES: u32 = 65_536;

/// Name of the map keyed by socket address, used by the socket hooks.
pub const BY_SK_MAP: &str = "SOCK_BY_SK";

/// Key of `SOCK_BY_SK`: the address of the kernel's `struct sock` (unique while the socket lives; the entry is
/// removed when the socket reaches `TCP_CLOSE`).
pub type SkKey = u64;

/// One socket: the tgid and the fd number.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SockKey {
    pub tgid: u32,
    pub fd: u32,
}
user_pod!(SockKey);

/// State of one tracked socket.
///
/// A socket is tracked from its `accept`, or adopted when a traced tgid reads a request line on an fd it does
/// not track (a connection accepted before the probes loaded or before the tgid joined the filter). An adopted
/// fd might be a file that happens to start with `GET `, so it stays unconfirmed, its requests and bytes held
/// here instead of counted, until it writes a status line back: then it is a socket serving HTTP and they count.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SockState {
    /// `bpf_ktime_get_ns` when the oldest unanswered request was read; 0 when none is waiting.
    pub request_ns: u64,
    /// Requests read while unconfirmed, counted when the socket is confirmed.
    pub deferred_requests: u32,
    /// 1 while adopted and not yet confirmed by a status line written back; 0 for accepted or confirmed sockets.
    pub unconfirmed: u32,
    /// Bytes read while unconfirmed, counted when the socket is confirmed.
    pub deferred_bytes_in: u64,
    /// 1 when the socket was adopted (not seen accepted). An adopted fd 0 also takes the writes on an untracked
    /// fd 1: the inetd convention, where a forked child serves the connection on stdin and stdout.
    pub adopted: u32,
    /// The tgid that last read a request on it (or accepted it): whose request is unanswered when it closes.
    pub owner: u32,
}
user_pod!(SockState);

impl SockState {
    /// An fd adopted from a read of `bytes` that began with a request line at `now_ns`.
    #[inline(always)]
    pub fn adopted(owner: u32, now_ns: u64, bytes: u64) -> SockState {
        SockState {
            request_ns: now_ns,
            deferred_requests: 1,
            unconfirmed: 1,
            deferred_bytes_in: bytes,
            adopted: 1,
            owner,
        }
    }

    /// A socket `owner` accepted: nothing waiting, counted as it goes.
    #[inline(always)]
    pub fn accepted(owner: u32) -> SockState {
        SockState { owner, ..SockState::default() }
    }
}
