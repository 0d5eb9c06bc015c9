//! Raw `sys_exit` (x86_64): one program on every syscall exit instead of 22 per-syscall tracepoint programs.
//! It tests the tgid filter first, then reads the syscall number and arguments from the task's saved
//! registers (still intact at exit), and hands the accept, read and write families to the same code as the
//! tracepoint programs. `close` stays at entry, on `sys_enter_close` (`close_enter`) or on the raw `sys_enter`
//! (`raw_close_enter`): at exit the fd number may already belong to a socket another thread just accepted.

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};
use monitor_common::pending::kind;

use crate::{
    accept::accept_done,
    io::{current, nr, saved_args, status, syscall_io, traced},
    recv::recv_done,
    send::send_done,
};

/// Attached to the raw tracepoint `sys_exit` (`struct pt_regs *regs, long ret`).
#[raw_tracepoint(tracepoint = "sys_exit")]
pub fn sys_exit(ctx: RawTracePointContext) -> u32 {
    status(try_sys_exit(&ctx))
}

fn try_sys_exit(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let regs: *const u8 = ctx.arg(0);
    let ret: i64 = ctx.arg(1);
    let [dx, si, di, sysno] = saved_args(regs)?;
    if sysno == nr::ACCEPT || sysno == nr::ACCEPT4 {
        return accept_done(tgid, ret);
    }
    // The arguments as the sys_enter programs would have saved them: fd, buffer (or iovec / msghdr), length.
    // Both look the fd up: writes count on tracked sockets only, reads also adopt an fd that receives a request.
    let Some(p) = syscall_io(sysno, di, si, dx) else {
        return Ok(());
    };
    if kind::is_recv(p.kind) {
        recv_done(tgid, &p, ret)
    } else {
        send_done(tgid, &p, ret)
    }
}
