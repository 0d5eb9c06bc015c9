//! The write family (`write`, `sendto`, `writev`, `sendmsg`, `sendfile`): bytes out, and responses = writes
//! whose first bytes are an `HTTP/1.x NNN` status line, by class, with the latency since the request.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::{
    http::{parse_status, Status, RESPONSE_PEEK},
    pending::{kind, PendingIo},
    socks::SockState,
    stats::log2_bucket,
};

use crate::{
    io::{counters, current, first_buffer, peek, ret, save_if_tracked, status, take_pending, traced, tracked_socket},
    recv::now,
};

/// Attached to `syscalls/sys_enter_write` and `syscalls/sys_enter_sendto` (fd, buf, count, …).
#[tracepoint]
pub fn send_enter_buf(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::SEND_BUF))
}

/// Attached to `syscalls/sys_enter_writev` (fd, iov, iovcnt).
#[tracepoint]
pub fn send_enter_iov(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::SEND_IOV))
}

/// Attached to `syscalls/sys_enter_sendmsg` (fd, msg, flags).
#[tracepoint]
pub fn send_enter_msg(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::SEND_MSG))
}

/// Attached to `syscalls/sys_enter_sendfile64` (out_fd, in_fd, offset, count): only bytes out.
#[tracepoint]
pub fn sendfile_enter(ctx: TracePointContext) -> u32 {
    status(save_if_tracked(&ctx, kind::SENDFILE))
}

/// Attached to the five `syscalls/sys_exit_*` of the write family.
#[tracepoint]
pub fn send_exit(ctx: TracePointContext) -> u32 {
    status(try_send_exit(&ctx))
}

fn try_send_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let Some(p) = take_pending(id) else {
        return Ok(());
    };
    if kind::is_recv(p.kind) {
        return Ok(());
    }
    send_done(tgid, &p, ret(ctx))
}

/// A write of `n` bytes (or an error) by `tgid`, described by `p`, on the socket the syscall hooks know as
/// (tgid, fd). Shared by `send_exit` and the raw `sys_exit` program.
#[inline(always)]
pub fn send_done(tgid: u32, p: &PendingIo, n: i64) -> Result<(), i32> {
    if n <= 0 {
        return Ok(());
    }
    let Some(sock) = tracked_socket(tgid, p.fd) else {
        return Ok(());
    };
    count_send(sock, tgid, Some(p), n as u64)
}

/// A write of `n` bytes by `tgid` on a tracked socket, described by `p` when it is a write whose buffer can be
/// looked into: bytes out, and a response by class when it began with a status line, with the latency since the
/// request. The first status line on an adopted socket confirms it: the requests and bytes it held count from then
/// on. Shared by both hook sets.
///
/// The buffer is only looked into while a request waits for its final response (or the socket is unconfirmed): the
/// other writes are the rest of a response already counted, which spares the user read on every body write.
#[inline(always)]
pub fn count_send(sock: *mut SockState, tgid: u32, p: Option<&PendingIo>, n: u64) -> Result<(), i32> {
    let Some(s) = counters(tgid) else {
        return Ok(());
    };
    // SAFETY: our own map's value (one socket is served by one thread at a time).
    let awaited = unsafe { (*sock).request_ns != 0 || (*sock).unconfirmed != 0 };
    let st = if awaited { p.and_then(status_written) } else { None };
    // SAFETY: `sock` is our own map's value (one socket is served by one thread at a time); `s` is this CPU's
    // value of our own per-CPU map (no other program runs on this CPU meanwhile).
    unsafe {
        if (*sock).unconfirmed != 0 {
            if st.is_none() {
                return Ok(());
            }
            (*s).requests += (*sock).deferred_requests as u64;
            (*s).bytes_in += (*sock).deferred_bytes_in;
            (*sock).unconfirmed = 0;
            (*sock).deferred_requests = 0;
            (*sock).deferred_bytes_in = 0;
        }
        (*s).bytes_out += n;
    }
    let Some(st) = st else {
        return Ok(());
    };
    // SAFETY: as above. Constant indexes: the verifier cannot always follow a computed one.
    unsafe {
        let c = &mut (*s).responses_by_class;
        match st.class {
            1 => c[0] += 1,
            2 => c[1] += 1,
            3 => c[2] += 1,
            4 => c[3] += 1,
            _ => c[4] += 1,
        }
    }
    if !st.is_final() {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { (*s).responses += 1 };
    // SAFETY: as above.
    let start = unsafe { (*sock).request_ns };
    if start == 0 {
        return Ok(());
    }
    // SAFETY: as above.
    unsafe { (*sock).request_ns = 0 };
    let us = now().saturating_sub(start) / 1000;
    // SAFETY: as above.
    unsafe {
        if let Some(b) = (*s).latency_hist_us.get_mut(log2_bucket(us)) {
            *b += 1;
        }
    }
    Ok(())
}

/// The status line a write described by `p` begins with, if any. Read from the caller's buffer, which holds it
/// whole even after a short write.
#[inline(always)]
pub fn status_written(p: &PendingIo) -> Option<Status> {
    let (buf, len) = first_buffer(p)?;
    if len < RESPONSE_PEEK as u64 {
        return None;
    }
    parse_status(&peek::<RESPONSE_PEEK>(buf)?)
}
