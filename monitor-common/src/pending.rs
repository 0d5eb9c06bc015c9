//! `PENDING`: arguments of a read or write on a tracked socket, saved at syscall entry for the exit program.
//! One slot per thread, updated in place (no insert or delete per syscall); an LRU map forgets dead threads.

use crate::user_pod;

/// Name of the map in the object.
pub const MAP: &str = "PENDING";
/// Capacity: threads that may be inside a traced syscall at once.
pub const MAX_ENTRIES: u32 = 16_384;

/// Key: the thread (`bpf_get_current_pid_tgid`, tgid in the high half).
pub type Key = u64;

/// Which syscall family saved the entry and how its buffer argument is laid out.
pub mod kind {
    /// `read`, `recvfrom`: a plain buffer.
    pub const RECV_BUF: u32 = 0;
    /// `readv`: an array of `struct iovec`.
    pub const RECV_IOV: u32 = 1;
    /// `recvmsg`: a `struct user_msghdr`.
    pub const RECV_MSG: u32 = 2;
    /// `write`, `sendto`: a plain buffer.
    pub const SEND_BUF: u32 = 3;
    /// `writev`: an array of `struct iovec`.
    pub const SEND_IOV: u32 = 4;
    /// `sendmsg`: a `struct user_msghdr`.
    pub const SEND_MSG: u32 = 5;
    /// `sendfile`: no buffer; only the byte count matters.
    pub const SENDFILE: u32 = 6;
    /// The slot is empty (its syscall has exited).
    pub const EMPTY: u32 = 7;

    /// True for the receiving kinds.
    #[inline(always)]
    pub fn is_recv(k: u32) -> bool {
        k <= RECV_MSG
    }
}

/// One syscall in progress.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PendingIo {
    /// User address of the buffer, iovec array or msghdr.
    pub addr: u64,
    /// Length of a plain buffer (the `count` argument); unused for the other kinds.
    pub len: u64,
    pub fd: u32,
    /// One of [`kind`].
    pub kind: u32,
}
user_pod!(PendingIo);
