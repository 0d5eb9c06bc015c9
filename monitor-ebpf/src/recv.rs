//! The read family (`read`, `recvfrom`, `readv`, `recvmsg`): bytes in, and requests = reads whose first bytes
//! are an HTTP/1.x request line. The entry saves the buffer of a tracked socket; the exit reads it.

use aya_ebpf::{helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use monitor_common::{
    http::{is_request, REQUEST_PEEK},
    pending::{kind, PendingIo},
    socks::SockKey,
};

use crate::{
    io::{current, first_buffer, peek, ret, save_if_tracked, take_pending, traced},
    maps::{SOCKS, STATS},
};

/// Attached to `syscalls/sys_enter_read` and `syscalls/sys_enter_recvfrom` (fd, buf, count, …).
#[tracepoint]
pub fn recv_enter_buf(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::RECV_BUF))
}

/// Attached to `syscalls/sys_enter_readv` (fd, iov, iovcnt).
#[tracepoint]
pub fn recv_enter_iov(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::RECV_IOV))
}

/// Attached to `syscalls/sys_enter_recvmsg` (fd, msg, flags).
#[tracepoint]
pub fn recv_enter_msg(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::RECV_MSG))
}

/// Attached to the four `syscalls/sys_exit_*` of the read family.
#[tracepoint]
pub fn recv_exit(ctx: TracePointContext) -> u32 {
    status(try_recv_exit(&ctx))
}

fn status(r: Result<(), i32>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn try_recv_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let Some(p) = take_pending(id) else {
        return Ok(());
    };
    if !kind::is_recv(p.kind) {
        return Ok(());
    }
    recv_done(tgid, &p, ret(ctx))
}

/// A read of `n` bytes (or an error) by `tgid` on a tracked socket, described by `p`: bytes in, and a request
/// when its first bytes are a request line. Shared by `recv_exit` and the raw `sys_exit` program.
#[inline(always)]
pub fn recv_done(tgid: u32, p: &PendingIo, n: i64) -> Result<(), i32> {
    if n <= 0 {
        return Ok(());
    }
    let Some(s) = STATS.get_ptr_mut(tgid) else {
        return Ok(());
    };
    // SAFETY: this CPU's value of our own per-CPU map; no other program runs on this CPU meanwhile.
    unsafe { (*s).bytes_in += n as u64 };
    if (n as u64) < REQUEST_PEEK as u64 {
        return Ok(());
    }
    let Some((buf, len)) = first_buffer(p) else {
        return Ok(());
    };
    if len < REQUEST_PEEK as u64 {
        return Ok(());
    }
    let Some(head) = peek::<REQUEST_PEEK>(buf) else {
        return Ok(());
    };
    if !is_request(&head) {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { (*s).requests += 1 };
    if let Some(sock) = SOCKS.get_ptr_mut(SockKey { tgid, fd: p.fd }) {
        // SAFETY: our own map's value; one socket is served by one thread at a time. The oldest request wins.
        unsafe {
            if (*sock).request_ns == 0 {
                (*sock).request_ns = bpf_ktime_get_ns();
            }
        }
    }
    Ok(())
}
