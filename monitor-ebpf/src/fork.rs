//! `task/task_newtask`: a process forked by a traced tgid is traced from its first instruction (a server that
//! forks a child per connection is served by children the sampler would only see 100 ms later). The record
//! carries the clone flags, so a new thread (`CLONE_THREAD`: same tgid, already traced) is left alone. It is not a
//! syscall tracepoint, so it slows no syscall.

use aya_ebpf::{bindings::BPF_NOEXIST, macros::tracepoint, programs::TracePointContext};
use core::intrinsics::{atomic_or, atomic_xadd, AtomicOrdering};
use monitor_common::{filter, forked::CLONE_THREAD, stats::Counters};

use crate::{
    io::{current, status, traced},
    maps::{FILTER, FORKED, FORK_COUNT, STATS},
};

/// Offsets of `pid_t pid` and `u64 clone_flags` in the `task_newtask` record, read by user space from the event's
/// `format` in tracefs and set here before loading (records change between kernels); 0 means unknown and the
/// program does nothing.
#[no_mangle]
static NEWTASK_PID_OFFSET: u32 = 0;
#[no_mangle]
static NEWTASK_FLAGS_OFFSET: u32 = 0;

/// Attached to `task/task_newtask`, which runs in the parent (inside `copy_process`) before the child first runs.
#[tracepoint]
pub fn fork(ctx: TracePointContext) -> u32 {
    status(try_fork(&ctx))
}

fn try_fork(ctx: &TracePointContext) -> Result<(), i32> {
    let (_, tgid) = current();
    if !traced(tgid) {
        return Ok(());
    }
    // SAFETY: volatile reads of our own read-only globals (set by the loader; volatile so they are not folded).
    let (pid_at, flags_at) =
        unsafe { (core::ptr::read_volatile(&NEWTASK_PID_OFFSET), core::ptr::read_volatile(&NEWTASK_FLAGS_OFFSET)) };
    if pid_at == 0 || pid_at > 64 || flags_at == 0 || flags_at > 64 {
        return Ok(());
    }
    // SAFETY: read_at goes through bpf_probe_read_kernel, which copes with any offset into the record.
    let flags: u64 = unsafe { ctx.read_at(flags_at as usize) }?;
    if flags & CLONE_THREAD != 0 {
        return Ok(());
    }
    // SAFETY: as above.
    let child: i32 = unsafe { ctx.read_at(pid_at as usize) }?;
    if child <= 0 {
        return Ok(());
    }
    let child = child as u32;
    // Counters first, then the lineage, then the filter bit: nothing the filter lets through is lost, and user
    // space learns of every child it traces. BPF_NOEXIST: a fork never resets counters.
    let _ = STATS.insert(child, Counters::ZERO, BPF_NOEXIST as u64);
    FORKED.insert(child, tgid, 0)?;
    if let Some(n) = FORK_COUNT.get_ptr_mut(0) {
        // SAFETY: word 0 of our own array map, 8-byte aligned; other forks add concurrently.
        unsafe { atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(n, 1) };
    }
    let (word, bit) = filter::slot(child);
    if let Some(w) = FILTER.get_ptr_mut(word) {
        // An atomic OR (BPF_ATOMIC | BPF_OR; `AtomicU64::fetch_or` is not offered on this target): other forks
        // and user space change other bits of the same word concurrently.
        // SAFETY: a word of our own array map, 8-byte aligned.
        unsafe { atomic_or::<u64, u64, { AtomicOrdering::Relaxed }>(w, bit) };
    }
    Ok(())
}
