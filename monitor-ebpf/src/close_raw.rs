//! Raw `sys_enter` (x86_64): `close` at entry without the `syscalls/sys_enter_close` tracepoint, whose
//! `perf_event_open` is refused without CAP_SYS_ADMIN above `kernel.perf_event_paranoid = 2` (Debian's 3). A raw
//! tracepoint attaches with CAP_BPF and CAP_PERFMON at any setting, but runs on every syscall entry of the host:
//! the tgid filter is tested first, then the syscall number, and only a traced `close` reads the saved registers.
//! At entry, as `close_enter`: at exit the fd number may already be a socket another thread just accepted.

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::{
    close::forget,
    io::{current, nr, saved_args, status, traced},
};

/// Attached to the raw tracepoint `sys_enter` (`struct pt_regs *regs, long id`).
#[raw_tracepoint(tracepoint = "sys_enter")]
pub fn raw_close_enter(ctx: RawTracePointContext) -> u32 {
    status(try_raw_close_enter(&ctx))
}

fn try_raw_close_enter(ctx: &RawTracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    let id: i64 = ctx.arg(1);
    if id as u64 != nr::CLOSE {
        return Ok(());
    }
    let regs: *const u8 = ctx.arg(0);
    let [_, _, di, _] = saved_args(regs)?;
    forget(tgid, di as u32);
    Ok(())
}
