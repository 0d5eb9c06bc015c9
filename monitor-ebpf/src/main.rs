//! monitor's kernel programs: count the HTTP/1.x traffic of the traced tgids from tracepoints only.
//!
//! Accepts record sockets; reads look for a request line; writes look for a status line; close forgets the
//! socket. Three sets of hooks, chosen by user space: the socket-layer tracepoints (`sock.rs`, the default where
//! the kernel has them: no syscall on the host is slowed); the raw `sys_exit` program (`sys_exit.rs`, one program
//! for every syscall exit, x86_64) plus `close_enter` (or `raw_close_enter` on the raw `sys_enter` where the
//! `close` tracepoint is refused); or the per-syscall tracepoint programs, whose entries save
//! the buffer of a tracked socket for the exits (last fallback).
//! A process forked by a traced one is traced from its fork (`fork.rs`). Counters go to the per-CPU `STATS`
//! map, which user space sums.
#![no_std]
// `atomic_or` for the filter bitmap (the BPF target offers no `AtomicU64::fetch_or`); built with nightly only.
#![allow(internal_features)]
#![feature(core_intrinsics)]
#![no_main]

mod accept;
mod close;
mod close_raw;
mod fork;
mod io;
mod maps;
mod recv;
mod send;
mod sock;
mod sys_exit;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

/// `bpf_probe_read_user` is only lent to GPL-compatible programs.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
