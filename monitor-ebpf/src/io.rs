//! Helpers shared by the programs: syscall arguments, the filter and tracked-socket checks, user buffers.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_user},
    programs::TracePointContext,
};
use monitor_common::{
    pending::{kind, PendingIo},
    socks::SockKey,
};

use crate::maps::{FILTER, PENDING, SOCKS};

/// Offset of the n-th syscall argument in a `syscalls/sys_enter_*` record (after 8 bytes of common fields
/// and `__syscall_nr` padded to 8).
#[inline(always)]
pub fn arg(ctx: &TracePointContext, n: usize) -> Result<u64, i32> {
    // SAFETY: the tracepoint record holds six 8-byte arguments from offset 16; read_at checks the read.
    unsafe { ctx.read_at::<u64>(16 + 8 * n) }
}

/// The return value in a `syscalls/sys_exit_*` record.
#[inline(always)]
pub fn ret(ctx: &TracePointContext) -> Result<i64, i32> {
    // SAFETY: `long ret` sits at offset 16 of every sys_exit record.
    unsafe { ctx.read_at::<i64>(16) }
}

/// The current thread id and its tgid.
#[inline(always)]
pub fn current() -> (u64, u32) {
    let id = bpf_get_current_pid_tgid();
    (id, (id >> 32) as u32)
}

/// True when the tgid is traced.
#[inline(always)]
pub fn traced(tgid: u32) -> bool {
    FILTER.get_ptr(tgid).is_some()
}

/// At a read or write entry: when `fd` is an accepted socket of a traced tgid, saves the arguments for the exit.
#[inline(always)]
pub fn save_if_tracked(ctx: &TracePointContext, io_kind: u32) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let fd = arg(ctx, 0)? as u32;
    if SOCKS.get_ptr(SockKey { tgid, fd }).is_none() {
        return Ok(());
    }
    let addr = if io_kind == kind::SENDFILE { 0 } else { arg(ctx, 1)? };
    let len = if io_kind == kind::RECV_BUF || io_kind == kind::SEND_BUF { arg(ctx, 2)? } else { 0 };
    PENDING.insert(id, PendingIo { addr, len, fd, kind: io_kind }, 0)
}

/// At an exit: takes the saved arguments of this thread's syscall, if it was on a tracked socket.
#[inline(always)]
pub fn take_pending(id: u64) -> Option<PendingIo> {
    let p = PENDING.get_ptr(id)?;
    // SAFETY: a pointer into our own map's value, copied out before the element is removed.
    let p = unsafe { *p };
    let _ = PENDING.remove(id);
    Some(p)
}

/// The first buffer of a syscall and its length: the plain buffer, `iov[0]`, or `msg->msg_iov[0]`.
#[inline(always)]
pub fn first_buffer(p: &PendingIo) -> Option<(u64, u64)> {
    match p.kind {
        kind::RECV_BUF | kind::SEND_BUF => Some((p.addr, p.len)),
        kind::RECV_IOV | kind::SEND_IOV => first_iovec(p.addr),
        kind::RECV_MSG | kind::SEND_MSG => {
            // struct user_msghdr: msg_name (8), msg_namelen (4 + 4 padding), msg_iov (8) at offset 16.
            // SAFETY: bpf_probe_read_user copes with any user address.
            let iov = unsafe { bpf_probe_read_user((p.addr + 16) as *const u64) }.ok()?;
            first_iovec(iov)
        }
        _ => None,
    }
}

/// `iov[0]` of a user `struct iovec` array: (base, len).
#[inline(always)]
fn first_iovec(iov: u64) -> Option<(u64, u64)> {
    // SAFETY: bpf_probe_read_user copes with any user address.
    let v = unsafe { bpf_probe_read_user(iov as *const [u64; 2]) }.ok()?;
    Some((v[0], v[1]))
}

/// Reads the first `N` bytes of a user buffer.
#[inline(always)]
pub fn peek<const N: usize>(addr: u64) -> Option<[u8; N]> {
    // SAFETY: bpf_probe_read_user copes with any user address.
    unsafe { bpf_probe_read_user(addr as *const [u8; N]) }.ok()
}
