//! Helpers shared by the programs: syscall arguments, the filter and tracked-socket checks, user buffers.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel, bpf_probe_read_user},
    programs::TracePointContext,
    EbpfContext,
};
use monitor_common::{
    filter,
    pending::{kind, PendingIo},
    socks::{SockKey, SockState},
    stats::{slot_of, Counters},
};

use crate::maps::{FILTER, PENDING, SOCKS, STATS, STATS_SLOTS};

/// The n-th syscall argument of a `syscalls/sys_enter_*` record: six 8-byte slots from offset 16 (after the
/// 8 bytes of common fields and `__syscall_nr` padded to 8). Read straight from the context, which the
/// verifier bounds-checks, instead of through a helper call.
#[inline(always)]
pub fn arg(ctx: &TracePointContext, n: usize) -> u64 {
    // SAFETY: the record is at least 16 + 6 * 8 bytes for every sys_enter tracepoint; n < 6 at every call site.
    unsafe { *(ctx.as_ptr() as *const u64).add(2 + n) }
}

/// The return value in a `syscalls/sys_exit_*` record (`long ret` at offset 16).
#[inline(always)]
pub fn ret(ctx: &TracePointContext) -> i64 {
    // SAFETY: every sys_exit record holds `ret` at offset 16.
    unsafe { *(ctx.as_ptr() as *const i64).add(2) }
}

/// A program's return value from its body's result: 0, or 1 when a map update or helper failed (the kernel
/// ignores it for tracepoints; it shows in `bpftool prog` run statistics only).
#[inline(always)]
pub fn status(r: Result<(), i32>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

/// The current thread id and its tgid.
#[inline(always)]
pub fn current() -> (u64, u32) {
    let id = bpf_get_current_pid_tgid();
    (id, (id >> 32) as u32)
}

/// True when the tgid is traced: one bit of the FILTER bitmap (an inlined array lookup).
#[inline(always)]
pub fn traced(tgid: u32) -> bool {
    let (word, bit) = filter::slot(tgid);
    match FILTER.get(word) {
        Some(w) => *w & bit != 0,
        None => false,
    }
}

/// This CPU's counters of `tgid`: its slot of `STATS_SLOTS` when it holds one (an inlined array lookup), else its
/// `STATS` entry (a hash lookup).
#[inline(always)]
pub fn counters(tgid: u32) -> Option<*mut Counters> {
    if let Some(slot) = STATS_SLOTS.get_ptr_mut(slot_of(tgid)) {
        // SAFETY: this CPU's value of our own per-CPU array; no other program runs on this CPU meanwhile.
        unsafe {
            if tgid != 0 && (*slot).tgid == tgid {
                return Some(&raw mut (*slot).counters);
            }
        }
    }
    STATS.get_ptr_mut(tgid)
}

/// At a read or write entry of a traced tgid: saves the arguments for the exit, for a write only when `fd` is a
/// tracked socket (a read on an untracked fd may adopt it).
#[inline(always)]
pub fn save_if_tracked(ctx: &TracePointContext, io_kind: u32) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let fd = arg(ctx, 0) as u32;
    if !kind::is_recv(io_kind) && tracked_socket(tgid, fd).is_none() {
        return Ok(());
    }
    let addr = if io_kind == kind::SENDFILE { 0 } else { arg(ctx, 1) };
    let len = if io_kind == kind::RECV_BUF || io_kind == kind::SEND_BUF { arg(ctx, 2) } else { 0 };
    let p = PendingIo { addr, len, fd, kind: io_kind };
    match PENDING.get_ptr_mut(id) {
        // SAFETY: our own map's value; only this thread uses its slot.
        Some(slot) => unsafe { *slot = p },
        None => PENDING.insert(id, p, 0)?,
    }
    Ok(())
}

/// The tracked socket written to by a write on `fd`. An untracked fd 1 is the socket of an adopted fd 0: the
/// inetd convention (inetd, busybox httpd's forked children), where the connection is stdin and stdout, so the
/// request is read on fd 0 and the response written on fd 1.
#[inline(always)]
pub fn tracked_socket(tgid: u32, fd: u32) -> Option<*mut SockState> {
    if let Some(sock) = SOCKS.get_ptr_mut(SockKey { tgid, fd }) {
        return Some(sock);
    }
    if fd != 1 {
        return None;
    }
    let sock = SOCKS.get_ptr_mut(SockKey { tgid, fd: 0 })?;
    // SAFETY: our own map's value.
    if unsafe { (*sock).adopted } == 0 {
        return None;
    }
    Some(sock)
}

/// At an exit of a traced tgid: takes the saved arguments of this thread's syscall, if it was on a tracked
/// socket, and marks the slot empty.
#[inline(always)]
pub fn take_pending(id: u64) -> Option<PendingIo> {
    let slot = PENDING.get_ptr_mut(id)?;
    // SAFETY: our own map's value; only this thread uses its slot.
    unsafe {
        let p = *slot;
        if p.kind == kind::EMPTY {
            return None;
        }
        (*slot).kind = kind::EMPTY;
        Some(p)
    }
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

/// x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
pub mod nr {
    pub const READ: u64 = 0;
    pub const WRITE: u64 = 1;
    pub const CLOSE: u64 = 3;
    pub const READV: u64 = 19;
    pub const WRITEV: u64 = 20;
    pub const SENDFILE: u64 = 40;
    pub const ACCEPT: u64 = 43;
    pub const SENDTO: u64 = 44;
    pub const RECVFROM: u64 = 45;
    pub const SENDMSG: u64 = 46;
    pub const RECVMSG: u64 = 47;
    pub const ACCEPT4: u64 = 288;
}

/// Byte offset of `dx` in x86_64 `struct pt_regs`; `si`, `di` and `orig_ax` (the syscall number) follow it.
const REGS_DX: usize = 96;

/// From a task's saved user registers (x86_64 `struct pt_regs`, intact for the whole syscall): the three
/// argument registers we need and the syscall number, `[dx, si, di, orig_ax]`, in one read.
#[inline(always)]
pub fn saved_args(regs: *const u8) -> Result<[u64; 4], i32> {
    // SAFETY: bpf_probe_read_kernel copes with any address.
    unsafe { bpf_probe_read_kernel(regs.wrapping_add(REGS_DX) as *const [u64; 4]) }
}

/// The read or write a syscall performs, from its number and first three arguments, as the sys_enter programs
/// would have saved it: fd, buffer (or iovec array, or msghdr), length. `None` for any other syscall.
#[inline(always)]
pub fn syscall_io(sysno: u64, di: u64, si: u64, dx: u64) -> Option<PendingIo> {
    let io_kind = match sysno {
        nr::READ | nr::RECVFROM => kind::RECV_BUF,
        nr::READV => kind::RECV_IOV,
        nr::RECVMSG => kind::RECV_MSG,
        nr::WRITE | nr::SENDTO => kind::SEND_BUF,
        nr::WRITEV => kind::SEND_IOV,
        nr::SENDMSG => kind::SEND_MSG,
        nr::SENDFILE => kind::SENDFILE,
        _ => return None,
    };
    Some(PendingIo { addr: si, len: dx, fd: di as u32, kind: io_kind })
}
