//! `close` at entry: forget a tracked socket; a request still waiting for its response counts as unanswered.
//! Two hooks share [`forget`]: the `syscalls/sys_enter_close` tracepoint (`close_enter`, below) and, where that
//! tracepoint is refused, the raw `sys_enter` tracepoint (`raw_close_enter`, `close_raw.rs`).

use aya_ebpf::{macros::tracepoint, programs::TracePointContext};
use monitor_common::socks::SockKey;

use crate::{
    io::{arg, counters, current, status, traced},
    maps::SOCKS,
};

/// Attached to `syscalls/sys_enter_close`.
#[tracepoint]
pub fn close_enter(ctx: TracePointContext) -> u32 {
    status(try_close_enter(&ctx))
}

fn try_close_enter(ctx: &TracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    forget(tgid, arg(ctx, 0) as u32);
    Ok(())
}

/// `tgid` (traced) is closing `fd`: drops its tracked socket, if any, and counts a request still waiting for its
/// response as unanswered.
#[inline(always)]
pub fn forget(tgid: u32, fd: u32) {
    let key = SockKey { tgid, fd };
    let Some(sock) = SOCKS.get_ptr(key) else {
        return;
    };
    // SAFETY: a pointer into our own map's value, read before the element is removed.
    // An unconfirmed (adopted, never answered) socket's requests were never counted: nothing is unanswered.
    let waiting = unsafe { (*sock).request_ns != 0 && (*sock).unconfirmed == 0 };
    let _ = SOCKS.remove(key);
    if waiting {
        if let Some(s) = counters(tgid) {
            // SAFETY: this CPU's value of our own per-CPU map.
            unsafe { (*s).unanswered += 1 };
        }
    }
}
