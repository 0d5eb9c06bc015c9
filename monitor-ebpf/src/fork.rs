//! `sched/sched_process_fork`: a process forked by a traced tgid is traced from its first instruction (a server
//! that forks a child per connection is served by children the sampler would only see 100 ms later). The
//! `clone`/`clone3` entries save their flags so that a new thread (same tgid, already traced) is left alone.

use aya_ebpf::{bindings::BPF_NOEXIST, helpers::bpf_probe_read_user, macros::tracepoint, programs::TracePointContext};
use core::intrinsics::{atomic_or, AtomicOrdering};
use monitor_common::{cloning::CLONE_THREAD, filter, stats::Counters};

use crate::{
    io::{arg, current, traced},
    maps::{CLONING, FILTER, FORKED, STATS},
};

/// Offset of `pid_t child_pid` in the `sched_process_fork` record. It moved between kernels (6.1/6.12: the comms
/// are `char[16]`, offset 44; 6.18: they are `__data_loc`, offset 20), so user space reads it from the event's
/// `format` in tracefs and sets it here before loading; 0 means unknown and the program does nothing.
#[no_mangle]
static CHILD_PID_OFFSET: u32 = 0;

/// Attached to `syscalls/sys_enter_clone` (flags, newsp, parent_tid, child_tid, tls).
#[tracepoint]
pub fn clone_enter(ctx: TracePointContext) -> u32 {
    status(save_flags(arg(&ctx, 0)))
}

/// Attached to `syscalls/sys_enter_clone3` (uargs, size): the flags are the first field of `struct clone_args`.
#[tracepoint]
pub fn clone3_enter(ctx: TracePointContext) -> u32 {
    // SAFETY: bpf_probe_read_user copes with any user address.
    match unsafe { bpf_probe_read_user(arg(&ctx, 0) as *const u64) } {
        Ok(flags) => status(save_flags(flags)),
        Err(_) => 1,
    }
}

/// Attached to `sched/sched_process_fork`, which runs in the parent before the child is first scheduled.
#[tracepoint]
pub fn fork(ctx: TracePointContext) -> u32 {
    status(try_fork(&ctx))
}

fn status(r: Result<(), i32>) -> u32 {
    match r {
        Ok(()) => 0,
        Err(_) => 1,
    }
}

fn save_flags(flags: u64) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    CLONING.insert(id, flags, 0)
}

fn try_fork(ctx: &TracePointContext) -> Result<(), i32> {
    let (id, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    if let Some(flags) = CLONING.get_ptr(id) {
        // SAFETY: our own map's value; only this thread uses its slot.
        let flags = unsafe { *flags };
        let _ = CLONING.remove(id);
        if flags & CLONE_THREAD != 0 {
            return Ok(());
        }
    }
    // SAFETY: a volatile read of our own read-only global (set by the loader; volatile so it is not folded).
    let offset = unsafe { core::ptr::read_volatile(&CHILD_PID_OFFSET) };
    if offset == 0 || offset > 64 {
        return Ok(());
    }
    // SAFETY: read_at goes through bpf_probe_read_kernel, which copes with any offset into the record.
    let child: i32 = unsafe { ctx.read_at(offset as usize) }.map_err(|e| e as i32)?;
    if child <= 0 {
        return Ok(());
    }
    let child = child as u32;
    // Counters first, then the lineage, then the filter bit: nothing the filter lets through is lost, and user
    // space learns of every child it traces. BPF_NOEXIST: a fork never resets counters.
    let _ = STATS.insert(child, Counters::ZERO, BPF_NOEXIST as u64);
    FORKED.insert(child, tgid, 0)?;
    let (word, bit) = filter::slot(child);
    if let Some(w) = FILTER.get_ptr_mut(word) {
        // An atomic OR (BPF_ATOMIC | BPF_OR; `AtomicU64::fetch_or` is not offered on this target): other forks
        // and user space change other bits of the same word concurrently.
        // SAFETY: a word of our own array map, 8-byte aligned.
        unsafe { atomic_or::<u64, u64, { AtomicOrdering::Relaxed }>(w, bit) };
    }
    Ok(())
}
