//! Which program goes on which syscall tracepoint, and making sure tracefs is mounted so they can attach.

use super::ProbeError;
use std::path::Path;

/// (program, tracepoints in category `syscalls`). Exits and `close` come before the entries that feed them,
/// and `accept` last, so that no socket is tracked before the programs that clean up after it run.
pub const ATTACHMENTS: &[(&str, &[&str])] = &[
    ("close_enter", &["sys_enter_close"]),
    ("recv_exit", &["sys_exit_read", "sys_exit_recvfrom", "sys_exit_readv", "sys_exit_recvmsg"]),
    ("send_exit", &["sys_exit_write", "sys_exit_sendto", "sys_exit_writev", "sys_exit_sendmsg", "sys_exit_sendfile64"]),
    ("recv_enter_buf", &["sys_enter_read", "sys_enter_recvfrom"]),
    ("recv_enter_iov", &["sys_enter_readv"]),
    ("recv_enter_msg", &["sys_enter_recvmsg"]),
    ("send_enter_buf", &["sys_enter_write", "sys_enter_sendto"]),
    ("send_enter_iov", &["sys_enter_writev"]),
    ("send_enter_msg", &["sys_enter_sendmsg"]),
    ("sendfile_enter", &["sys_enter_sendfile64"]),
    ("accept_exit", &["sys_exit_accept4", "sys_exit_accept"]),
];

/// Where tracefs is normally mounted, and the older place under debugfs.
const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

/// Mounts tracefs at /sys/kernel/tracing when neither usual place has it (aya reads tracepoint ids there).
pub fn ensure_tracefs() -> Result<(), ProbeError> {
    if [TRACEFS, DEBUGFS_TRACING].iter().any(|p| Path::new(p).join("events").is_dir()) {
        return Ok(());
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: valid NUL-terminated strings; a null data pointer is allowed for tracefs.
    let rc = unsafe { libc::mount(c"tracefs".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        return Err(ProbeError::Tracefs(std::io::Error::last_os_error()));
    }
    Ok(())
}
