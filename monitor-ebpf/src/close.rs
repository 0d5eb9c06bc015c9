//! `sys_enter_close`: forget a tracked socket; a request still waiting for its response counts as unanswered.

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
    let key = SockKey { tgid, fd: arg(ctx, 0) as u32 };
    let Some(sock) = SOCKS.get_ptr(key) else {
        return Ok(());
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
    Ok(())
}
