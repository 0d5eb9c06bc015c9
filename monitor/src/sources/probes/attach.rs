//! Which program goes on which hook, and making sure tracefs is mounted so the tracepoints can attach.

use super::ProbeError;
use crate::config::Hooks;
use std::path::Path;

/// The order the sets are tried in. The sets and their names are the config's ([`Hooks`], `[probes] hooks`).
impl Hooks {
    /// The set `Probes::load` tries first: the socket and raw `sys_exit` programs read x86_64 registers, so
    /// elsewhere the per-syscall tracepoints.
    pub(crate) fn preferred() -> Hooks {
        if cfg!(target_arch = "x86_64") {
            Hooks::Sock
        } else {
            Hooks::Tracepoints
        }
    }

    /// The set to try when this one does not attach, if any.
    pub fn fallback(self) -> Option<Hooks> {
        match self {
            Hooks::Sock => Some(Hooks::RawSysExit),
            Hooks::RawSysExit => Some(Hooks::Tracepoints),
            Hooks::Tracepoints => None,
        }
    }
}

/// The socket set: (program, raw tracepoint). The state program first (it forgets closed sockets and marks
/// passive opens), then writes, then reads (the first read of a passive socket is its accept).
pub(crate) const SOCK: &[(&str, &str)] =
    &[("sock_state", "inet_sock_set_state"), ("sock_send", "sock_send_length"), ("sock_recv", "sock_recv_length")];

/// The raw `sys_exit` program and its raw tracepoint.
pub(crate) const RAW_EXIT: &[(&str, &str)] = &[("sys_exit", "sys_exit")];

/// `close` is hooked at entry by both syscall sets (at exit the fd number may already be a socket another
/// thread accepted), and attached first, so that no socket is tracked before the program that forgets it runs.
pub const CLOSE: &[(&str, &[&str])] = &[("close_enter", &["sys_enter_close"])];

/// `close` on the raw `sys_enter` tracepoint: the syscall sets' hook for `close` where `perf_event_open` refuses
/// [`CLOSE`] (above `kernel.perf_event_paranoid = 2` without CAP_SYS_ADMIN). It runs on every syscall entry of
/// the host, so it is the fallback, not the default.
pub(crate) const RAW_CLOSE: &[(&str, &str)] = &[("raw_close_enter", "sys_enter")];

/// Following forks, in every set: (program, category, tracepoint). `fork` traces the children of traced
/// processes from their fork (not their threads: the record has the clone flags).
pub const FORK: &[(&str, &str, &str)] = &[("fork", "task", "task_newtask")];

/// The per-syscall set, after [`CLOSE`]: (program, tracepoints in category `syscalls`). Exits come before the
/// entries that feed them, and `accept` last.
pub const TRACEPOINTS: &[(&str, &[&str])] = &[
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

/// The byte offset of `field` in a tracepoint record, from the event's `format` text
/// (`\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;`).
pub(crate) fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let decl = line.trim().strip_prefix("field:")?;
        let (decl, rest) = decl.split_once(';')?;
        let name = decl.rsplit(|c: char| c.is_whitespace() || c == '*').next()?;
        let name = name.split('[').next()?;
        if name != field {
            return None;
        }
        rest.split(';').find_map(|kv| kv.trim().strip_prefix("offset:")?.trim().parse().ok())
    })
}

/// Whether tracefs's events are readable at either usual place.
pub fn tracefs_reachable() -> bool {
    [TRACEFS, DEBUGFS_TRACING].iter().any(|p| Path::new(p).join("events").is_dir())
}

/// The offset of `field` in `category/event`'s records on this kernel (tracefs must be mounted).
pub(crate) fn field_offset(category: &str, event: &str, field: &str) -> Option<u32> {
    [TRACEFS, DEBUGFS_TRACING].iter().find_map(|root| {
        let text =
            std::fs::read_to_string(Path::new(root).join("events").join(category).join(event).join("format")).ok()?;
        parse_field_offset(&text, field)
    })
}

/// Mounts tracefs at /sys/kernel/tracing when neither usual place has it (aya reads tracepoint ids there). When
/// tracefs is mounted but this process cannot search it (root's, mode 0700, without CAP_DAC_READ_SEARCH), says so
/// rather than trying to mount it again.
pub(crate) fn ensure_tracefs() -> Result<(), ProbeError> {
    if tracefs_reachable() {
        return Ok(());
    }
    // Mounted, but its root (or debugfs's, above the older place) cannot be searched.
    for root in [TRACEFS, DEBUGFS_TRACING] {
        if let Err(e) = std::fs::metadata(Path::new(root).join("events")) {
            if e.kind() == std::io::ErrorKind::PermissionDenied {
                return Err(ProbeError::TracefsUnreadable { at: root.into(), source: e });
            }
        }
    }
    let target = c"/sys/kernel/tracing";
    // SAFETY: valid NUL-terminated strings; a null data pointer is allowed for tracefs.
    let rc = unsafe { libc::mount(c"tracefs".as_ptr(), target.as_ptr(), c"tracefs".as_ptr(), 0, std::ptr::null()) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        // Refused, yet tracefs is mounted somewhere this process cannot reach: that is the cause, not the mount.
        let mounted = std::fs::read_to_string("/proc/self/mountinfo")
            .ok()
            .and_then(|m| tracefs_mounts(&m).next().map(String::from));
        return Err(match mounted {
            Some(at) => ProbeError::TracefsUnreadable { at: at.into(), source: e },
            None => ProbeError::Tracefs(e),
        });
    }
    Ok(())
}

/// The mount points of tracefs in a `/proc/<pid>/mountinfo` text (the fifth field; the type follows ` - `).
pub(crate) fn tracefs_mounts(mountinfo: &str) -> impl Iterator<Item = &str> {
    mountinfo.lines().filter_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        (after.split_whitespace().next()? == "tracefs").then(|| before.split_whitespace().nth(4)).flatten()
    })
}

#[cfg(test)]
mod format_tests {
    use super::{parse_field_offset, tracefs_mounts};

    /// `/proc/self/mountinfo` of a Debian bookworm host, trimmed: tracefs at its usual place and under debugfs.
    const MOUNTINFO: &str = "22 28 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n\
        30 22 0:7 / /sys/kernel/debug rw,nosuid,nodev,noexec,relatime shared:13 - debugfs debugfs rw\n\
        31 22 0:12 / /sys/kernel/tracing rw,nosuid,nodev,noexec,relatime shared:14 - tracefs tracefs rw\n\
        45 30 0:12 / /sys/kernel/debug/tracing rw,nosuid,nodev,noexec,relatime - tracefs tracefs rw\n";

    #[test]
    fn finds_tracefs_mount_points() {
        assert_eq!(tracefs_mounts(MOUNTINFO).collect::<Vec<_>>(), ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]);
        assert_eq!(tracefs_mounts("22 28 0:20 / /sys rw - sysfs sysfs rw\n").count(), 0);
        assert_eq!(tracefs_mounts("garbage\n\n").count(), 0);
    }

    /// `sched_process_fork`'s format on 6.18 (comms as `__data_loc`) and on 6.1/6.12 (comms as `char[16]`): the
    /// parser finds a field after a `__data_loc` one and after an array.
    const V6_18: &str = "name: sched_process_fork\nID: 366\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
    const V6_1: &str = "format:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";

    #[test]
    fn child_pid_offset_on_both_layouts() {
        assert_eq!(parse_field_offset(V6_18, "child_pid"), Some(20));
        assert_eq!(parse_field_offset(V6_1, "child_pid"), Some(44));
        assert_eq!(parse_field_offset(V6_1, "child_comm"), Some(28));
        assert_eq!(parse_field_offset(V6_1, "pid"), None);
        assert_eq!(parse_field_offset("garbage", "child_pid"), None);
    }

    /// `task_newtask`'s format on 6.18 (tracefs on this host).
    const NEWTASK: &str = "name: task_newtask\nID: 205\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\tfield:pid_t pid;\toffset:8;\tsize:4;\tsigned:1;\n\tfield:char comm[16];\toffset:12;\tsize:16;\tsigned:0;\n\tfield:u64 clone_flags;\toffset:32;\tsize:8;\tsigned:0;\n\tfield:short oom_score_adj;\toffset:40;\tsize:2;\tsigned:1;\n";

    #[test]
    fn newtask_offsets() {
        assert_eq!(parse_field_offset(NEWTASK, "pid"), Some(8));
        assert_eq!(parse_field_offset(NEWTASK, "clone_flags"), Some(32));
        assert_eq!(parse_field_offset(NEWTASK, "common_pid"), Some(4));
    }
}
