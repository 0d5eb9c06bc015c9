//! `#[repr(C)]` types shared by the kernel programs (`monitor-ebpf`) and user space (`monitor::probes`).
#![no_std]
