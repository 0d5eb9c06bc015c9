//! Process file descriptors: a pidfd names one process for good, so a signal sent through it can never reach
//! another process that reused the pid. Used by the actions' signals and by the stop that ends the group.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A pidfd on `pid`: `ENOSYS` before Linux 5.3, `ESRCH` when the process is gone.
pub fn open(pid: u32) -> io::Result<OwnedFd> {
    let raw = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: pidfd_open takes a pid and flags; the result is a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, raw, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = i32::try_from(fd).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Sends `signal` to the process behind `fd`.
pub(crate) fn send_signal(fd: &OwnedFd, signal: i32) -> io::Result<()> {
    // SAFETY: a pidfd we own, a signal number, no siginfo.
    let r = unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, fd.as_raw_fd(), signal, std::ptr::null::<libc::siginfo_t>(), 0)
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
