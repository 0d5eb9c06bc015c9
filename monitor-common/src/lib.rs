//! `#[repr(C)]` types shared by the kernel programs (`monitor-ebpf`) and user space (`monitor::sources::probes`).
//!
//! One module per map. Every type is plain old data: fixed size, no padding holes that the kernel could leave
//! uninitialised, and with the `user` feature an `aya::Pod` impl so user space can read and write the maps.
#![no_std]

#[cfg(test)]
#[macro_use]
extern crate std;

pub mod filter;
pub mod forked;
pub mod http;
pub mod passive;
pub mod pending;
pub mod socks;
pub mod stats;

/// Implements `aya::Pod` for a map type when building user space.
macro_rules! user_pod {
    ($t:ty) => {
        #[cfg(feature = "user")]
        // SAFETY: the type is `#[repr(C)]`, `Copy`, made of integers only, with explicit padding fields.
        unsafe impl aya::Pod for $t {}
    };
}
pub(crate) use user_pod;
