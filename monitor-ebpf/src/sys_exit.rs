//! Raw `sys_exit` (x86_64): one program on every syscall exit instead of 22 per-syscall tracepoint programs.
//! It tests the tgid filter first, then reads the syscall number and arguments from the task's saved
//! registers (still intact at exit), and hands the accept, read and write families to the same code as the
//! tracepoint programs. `close` stays on `sys_enter_close` (`close_enter`): at exit the fd number may already
//! belong to a socket another thread just accepted.

use aya_ebpf::{helpers::bpf_probe_read_kernel, macros::raw_tracepoint, programs::RawTracePointContext};
use monitor_common::pending::{kind, PendingIo};

use crate::{
    accept::accept_done,
    io::{current, traced},
    recv::recv_done,
    send::send_done,
};

/// x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl).
mod nr {
    pub const READ: u64 = 0;
    pub const WRITE: u64 = 1;
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

/// Attached to the raw tracepoint `sys_exit` (`struct pt_regs *regs, long ret`).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    match try_sys_exit(&ctx) {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn try_sys_exit(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let regs: *const u8 = ctx.arg(0);
    let ret: i64 = ctx.arg(1);
    // One read for the three argument registers we need and the syscall number: [dx, si, di, orig_ax].
    // SAFETY: `regs` is the kernel's pt_regs of this task; bpf_probe_read_kernel copes with any address.
    let [dx, si, di, sysno] = unsafe { bpf_probe_read_kernel(regs.wrapping_add(REGS_DX) as *const [u64; 4]) }?;
    let io_kind = match sysno {
        nr::ACCEPT | nr::ACCEPT4 => return accept_done(tgid, ret),
        nr::READ | nr::RECVFROM => kind::RECV_BUF,
        nr::READV => kind::RECV_IOV,
        nr::RECVMSG => kind::RECV_MSG,
        nr::WRITE | nr::SENDTO => kind::SEND_BUF,
        nr::WRITEV => kind::SEND_IOV,
        nr::SENDMSG => kind::SEND_MSG,
        nr::SENDFILE => kind::SENDFILE,
        _ => return Ok(()),
    };
    // The arguments as the sys_enter programs would have saved them: fd, buffer (or iovec / msghdr), length.
    // Both look the fd up: writes count on tracked sockets only, reads also adopt an fd that receives a request.
    let p = PendingIo { addr: si, len: dx, fd: di as u32, kind: io_kind };
    if kind::is_recv(io_kind) {
        recv_done(tgid, &p, ret)
    } else {
        send_done(tgid, &p, ret)
    }
}
