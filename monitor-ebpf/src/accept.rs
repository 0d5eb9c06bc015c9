//! `sys_exit_accept4` and `sys_exit_accept`: remember each socket a traced tgid accepts and count it.

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::socks::{SockKey, SockState};

use crate::{
    io::{counters, current, ret, status, traced},
    maps::SOCKS,
};

/// Attached to `syscalls/sys_exit_accept4` and `syscalls/sys_exit_accept`.
#[tracepoint]
pub fn accept_exit(ctx: TracePointContext) -> u32 {
    status(try_accept_exit(&ctx))
}

fn try_accept_exit(ctx: &TracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    accept_done(tgid, ret(ctx))
}

/// An `accept`/`accept4` by `tgid` that returned `fd` (or an error). Shared with the raw `sys_exit` program.
#[inline(always)]
pub fn accept_done(tgid: u32, fd: i64) -> Result<(), i32> {
    if fd < 0 {
        return Ok(());
    }
    // A new socket on a reused fd number starts clean.
    SOCKS.insert(SockKey { tgid, fd: fd as u32 }, SockState::accepted(tgid), 0)?;
    count_accept(tgid);
    Ok(())
}

/// Counts an accept for `tgid`. Shared with the socket programs.
#[inline(always)]
pub fn count_accept(tgid: u32) {
    if let Some(s) = counters(tgid) {
        // SAFETY: this CPU's value of our own per-CPU map; no other program runs on this CPU meanwhile.
        unsafe { (*s).accepts += 1 };
    }
}
