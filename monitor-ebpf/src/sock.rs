//! The socket hooks: the same counting as the syscall hooks, from three tracepoints of the socket layer instead
//! of syscall exits, so that no syscall of any process on the host is slowed.
//!
//! Any program on a `syscalls/*` tracepoint (or the raw `sys_exit`) puts every thread of the host on the slow
//! syscall path, and the program then runs on every syscall. These tracepoints only fire for socket reads,
//! socket writes and TCP state changes:
//! - `sock_recv_length` and `sock_send_length` (6.3+) fire in the reading or writing task, inside the syscall, with
//!   the socket and the byte count. The syscall's number and arguments (fd, buffer) are still in the task's saved
//!   user registers (x86_64), so the first bytes are read from the caller's buffer as the syscall hooks do.
//! - `inet_sock_set_state` marks connections opened passively (`SYN_RECV` -> `ESTABLISHED`, before any accept):
//!   the first read or write of a traced process on one counts its accept (a read of the end of the stream too:
//!   a connection closed before it carried a byte was still accepted). `TCP_CLOSE` forgets the socket and
//!   counts its unanswered request.
//!
//! Sockets are keyed by their `struct sock` address: a connection shared by several fds (dup, inetd's fd 0 and 1)
//! or processes is one entry.

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    helpers::{bpf_get_current_task_btf, bpf_probe_read_kernel, bpf_task_pt_regs},
    macros::raw_tracepoint,
    programs::RawTracePointContext,
};
use monitor_common::{
    pending::{kind, PendingIo},
    socks::SockState,
};

use crate::{
    accept::count_accept,
    io::{counters, current, status, syscall_io, traced},
    maps::{PASSIVE, SOCK_BY_SK},
    recv::{count_recv, is_request_read, now},
    send::count_send,
};

/// `MSG_PEEK`: a read that leaves the bytes queued (the real read that follows counts them).
const MSG_PEEK: i32 = 2;
/// A non-blocking read that found nothing yet.
const EAGAIN: i32 = 11;
/// TCP states (include/net/tcp_states.h).
const TCP_ESTABLISHED: i32 = 1;
const TCP_SYN_RECV: i32 = 3;
const TCP_CLOSE: i32 = 7;
/// Address families of TCP sockets, and where `skc_family` sits in `struct sock` (`struct sock_common` starts it;
/// the field has been at byte 16 on 64-bit kernels since 2.6).
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
const SKC_FAMILY: usize = 16;

/// Attached to the raw tracepoint `sock_recv_length` (`struct sock *sk, int ret, int flags`).
#[raw_tracepoint(tracepoint = "sock_recv_length")]
pub fn sock_recv(ctx: RawTracePointContext) -> u32 {
    status(try_sock_recv(&ctx))
}

/// Attached to the raw tracepoint `sock_send_length` (`struct sock *sk, int ret, int flags`).
#[raw_tracepoint(tracepoint = "sock_send_length")]
pub fn sock_send(ctx: RawTracePointContext) -> u32 {
    status(try_sock_send(&ctx))
}

/// Attached to the raw tracepoint `inet_sock_set_state` (`const struct sock *sk, int oldstate, int newstate`).
#[raw_tracepoint(tracepoint = "inet_sock_set_state")]
pub fn sock_state(ctx: RawTracePointContext) -> u32 {
    status(try_sock_state(&ctx))
}

fn try_sock_recv(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let n = ctx.arg::<u64>(1) as i32;
    if ctx.arg::<u64>(2) as i32 & MSG_PEEK != 0 || n == -EAGAIN {
        return Ok(());
    }
    let sk: u64 = ctx.arg(0);
    if n <= 0 {
        // The end of the stream (or a reset) on a connection that never carried a byte: still an accept.
        take_passive(sk, tgid);
        return Ok(());
    }
    let n = n as u64;
    // A read by another path (recvmmsg, io_uring, splice) counts its bytes but is not looked into.
    let p = current_io().filter(|p| kind::is_recv(p.kind));
    let sock = match SOCK_BY_SK.get_ptr_mut(sk) {
        Some(sock) => sock,
        None => match accept(sk, tgid)? {
            Some(sock) => sock,
            None => {
                if p.is_some_and(|p| is_request_read(&p, n)) && is_tcp(sk) {
                    // BPF_NOEXIST: never overwrite what another thread just recorded.
                    let _ = SOCK_BY_SK.insert(sk, SockState::adopted(tgid, now(), n), BPF_NOEXIST as u64);
                }
                return Ok(());
            }
        },
    };
    count_recv(sock, tgid, p.as_ref(), n)
}

fn try_sock_send(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let n = ctx.arg::<u64>(1) as i32;
    if n <= 0 {
        return Ok(());
    }
    let sk: u64 = ctx.arg(0);
    let sock = match SOCK_BY_SK.get_ptr_mut(sk) {
        Some(sock) => sock,
        None => match accept(sk, tgid)? {
            Some(sock) => sock,
            None => return Ok(()),
        },
    };
    // `sendfile` and the other paths (io_uring, splice) count their bytes only.
    let p = current_io().filter(|p| !kind::is_recv(p.kind) && p.kind != kind::SENDFILE);
    count_send(sock, tgid, p.as_ref(), n as u64)
}

/// The first read or write of a traced tgid on an untracked socket: when the socket was opened passively and no
/// process has touched it yet, `tgid` accepted it. Tracks it and counts the accept.
#[inline(always)]
fn accept(sk: u64, tgid: u32) -> Result<Option<*mut SockState>, i32> {
    if !take_passive(sk, tgid) {
        return Ok(None);
    }
    SOCK_BY_SK.insert(sk, SockState::accepted(tgid), 0)?;
    Ok(SOCK_BY_SK.get_ptr_mut(sk))
}

/// When `sk` was opened passively and no process has touched it yet: forgets that and counts the accept for
/// `tgid`, the first traced process to touch it. False when it was not.
#[inline(always)]
fn take_passive(sk: u64, tgid: u32) -> bool {
    if PASSIVE.get_ptr(sk).is_none() {
        return false;
    }
    let _ = PASSIVE.remove(sk);
    count_accept(tgid);
    true
}

fn try_sock_state(ctx: &RawTracePointContext) -> Result<(), i32> {
    let sk: u64 = ctx.arg(0);
    let old = ctx.arg::<u64>(1) as i32;
    let new = ctx.arg::<u64>(2) as i32;
    if new == TCP_ESTABLISHED && old == TCP_SYN_RECV {
        return PASSIVE.insert(sk, 1, 0);
    }
    if new != TCP_CLOSE {
        return Ok(());
    }
    let _ = PASSIVE.remove(sk);
    let Some(sock) = SOCK_BY_SK.get_ptr(sk) else {
        return Ok(());
    };
    // SAFETY: a pointer into our own map's value, read before the element is removed.
    // An unconfirmed (adopted, never answered) socket's requests were never counted: nothing is unanswered.
    let (waiting, owner) = unsafe { ((*sock).request_ns != 0 && (*sock).unconfirmed == 0, (*sock).owner) };
    let _ = SOCK_BY_SK.remove(sk);
    if waiting {
        if let Some(s) = counters(owner) {
            // SAFETY: this CPU's value of our own per-CPU map.
            unsafe { (*s).unanswered += 1 };
        }
    }
    Ok(())
}

/// The read or write the current task's syscall performs (from its saved user registers), if it is one of the
/// read or write family.
#[inline(always)]
fn current_io() -> Option<PendingIo> {
    // SAFETY: helpers on the current task, which is valid for the whole program run. `bpf_task_pt_regs` returns a
    // BTF-typed pointer to the task's `struct pt_regs`: the verifier turns these loads into fault-tolerant
    // kernel loads, bounds-checked against the kernel's BTF (no helper call: a `bpf_probe_read_kernel` costs
    // more than the rest of the program).
    let [dx, si, di, sysno] = unsafe {
        let regs = bpf_task_pt_regs(bpf_get_current_task_btf()) as *const u64;
        let at = |i: usize| core::ptr::read_volatile(regs.add(i));
        [at(REGS_DX), at(REGS_DX + 1), at(REGS_DX + 2), at(REGS_DX + 3)]
    };
    syscall_io(sysno, di, si, dx)
}

/// Index of `dx` among the u64 fields of x86_64 `struct pt_regs`; `si`, `di` and `orig_ax` follow it.
const REGS_DX: usize = 12;

/// True for an IPv4 or IPv6 socket: only TCP sockets are adopted, since only they are forgotten at `TCP_CLOSE`.
#[inline(always)]
fn is_tcp(sk: u64) -> bool {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    match unsafe { bpf_probe_read_kernel((sk as *const u8).wrapping_add(SKC_FAMILY) as *const u16) } {
        Ok(f) => f == AF_INET || f == AF_INET6,
        Err(_) => false,
    }
}
