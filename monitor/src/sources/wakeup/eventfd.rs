//! The eventfds the sampler waits on: the v1 thresholds' and the one [`crate::sources::probes::Tracer`] rings.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A new non-blocking, close-on-exec eventfd at 0.
pub fn new() -> io::Result<OwnedFd> {
    // SAFETY: eventfd takes an initial value and flags; the result is a new fd or -1.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// Adds one to the counter, waking whoever polls it.
pub fn ring(fd: &OwnedFd) {
    let one = 1u64;
    // SAFETY: writing 8 bytes from a u64 to an eventfd.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// Reads and resets the counter: whether it was rung (or fired) since the last call.
pub fn take(fd: &OwnedFd) -> bool {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes into a u64 from a non-blocking eventfd.
    let n = unsafe { libc::read(fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    n == 8 && v > 0
}
