//! The read family (`read`, `recvfrom`, `readv`, `recvmsg`): bytes in, and requests = reads whose first bytes
//! are an HTTP/1.x request line. The entry saves the buffer of every read of a traced tgid; the exit reads it, on
//! a tracked socket or to adopt an untracked fd that receives a request line.

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_ktime_get_ns, macros::tracepoint, programs::TracePointContext};
use monitor_common::{
    http::{is_request, REQUEST_PEEK},
    pending::{kind, PendingIo},
    socks::{SockKey, SockState},
};

use crate::{
    io::{counters, current, first_buffer, peek, ret, save_if_tracked, status, take_pending, traced},
    maps::SOCKS,
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

/// A read of `n` bytes (or an error) by `tgid`, described by `p`, on the socket the syscall hooks know as
/// (tgid, fd). Shared by `recv_exit` and the raw `sys_exit` program.
#[inline(always)]
pub fn recv_done(tgid: u32, p: &PendingIo, n: i64) -> Result<(), i32> {
    if n <= 0 {
        return Ok(());
    }
    let key = SockKey { tgid, fd: p.fd };
    match SOCKS.get_ptr_mut(key) {
        Some(sock) => count_recv(sock, tgid, Some(p), n as u64),
        None if is_request_read(p, n as u64) => {
            // BPF_NOEXIST: never overwrite a socket an accept on another thread just recorded.
            let _ = SOCKS.insert(key, SockState::adopted(tgid, now(), n as u64), BPF_NOEXIST as u64);
            Ok(())
        }
        None => Ok(()),
    }
}

/// A read of `n` bytes by `tgid` on a tracked socket, described by `p` when it is a read whose buffer can be
/// looked into: bytes in, and a request when it began with a request line; on an unconfirmed socket both are held
/// until a status line confirms it. Shared by both hook sets.
///
/// The buffer is only looked into while no request waits on the socket: a read while one waits is the rest of that
/// request (its body), or a pipelined request, counted with the one waiting (docs/probes.md). That spares the user
/// read, the dearest part of the program, on every body read.
///
/// An untracked fd (or socket) whose read began with a request line is adopted by the caller as an unconfirmed
/// socket holding that request ([`SockState::adopted`]). That costs one 8-byte user read per read of 8 bytes or
/// more on an untracked socket of a traced tgid.
#[inline(always)]
pub fn count_recv(sock: *mut SockState, tgid: u32, p: Option<&PendingIo>, n: u64) -> Result<(), i32> {
    // SAFETY: our own map's value; one socket is served by one thread at a time.
    let idle = unsafe { (*sock).request_ns == 0 };
    let request = idle && p.is_some_and(|p| is_request_read(p, n));
    // SAFETY: as above.
    unsafe {
        if request {
            (*sock).owner = tgid;
            (*sock).request_ns = now();
        }
        if (*sock).unconfirmed != 0 {
            (*sock).deferred_bytes_in += n;
            if request {
                (*sock).deferred_requests += 1;
            }
            return Ok(());
        }
    }
    let Some(s) = counters(tgid) else {
        return Ok(());
    };
    // SAFETY: this CPU's value of our own per-CPU map; no other program runs on this CPU meanwhile.
    unsafe {
        (*s).bytes_in += n;
        if request {
            (*s).requests += 1;
        }
    }
    Ok(())
}

/// `bpf_ktime_get_ns`.
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: a helper with no arguments.
    unsafe { bpf_ktime_get_ns() }
}

/// True when a read of `n` bytes described by `p` began with an HTTP/1.x request line.
#[inline(always)]
pub fn is_request_read(p: &PendingIo, n: u64) -> bool {
    if n < REQUEST_PEEK as u64 {
        return false;
    }
    let Some((buf, len)) = first_buffer(p) else {
        return false;
    };
    if len < REQUEST_PEEK as u64 {
        return false;
    }
    match peek::<REQUEST_PEEK>(buf) {
        Some(head) => is_request(&head),
        None => false,
    }
}
