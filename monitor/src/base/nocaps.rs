//! A program the agent runs for someone else (an alert command) gets none of the agent's privileges: the units give
//! the agent ambient capabilities for its probes and its kills (CAP_BPF, CAP_PERFMON, CAP_KILL, CAP_DAC_READ_SEARCH),
//! and an agent run as root has every capability and uid 0. In the child, before exec: the capability bounding set
//! is emptied (so even root's exec gains none), a root agent's child takes an unprivileged user's uid and gid with
//! no supplementary groups (so it cannot write root's files or signal the agent), the ambient, inheritable,
//! permitted and effective sets are cleared, `no_new_privs` is set (no setuid or file-capability program can win
//! them back), and every descriptor above stderr is closed at exec. `grep Cap /proc/<pid>/status` of the running
//! command shows all zero.

use std::io;

/// The highest capability number the kernel knows (`/proc/sys/kernel/cap_last_cap`), read before the fork.
pub(crate) fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(63)
}

/// Whether this process runs as root (effective uid 0): only then does a child change its user.
pub(crate) fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The user a child becomes: numbers resolved before the fork (the user database cannot be read in the child).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ids {
    pub uid: u32,
    pub gid: u32,
}

/// Drops every capability, becomes `user` (when given: supplementary groups cleared, then the gid, then the uid),
/// sets `no_new_privs` and marks every descriptor above 2 close-on-exec. Only for a forked child about to exec: it
/// makes only async-signal-safe system calls (prctl, setgroups, setgid, setuid, capset, close_range) and allocates
/// nothing.
///
/// # Safety
/// Call only between fork and exec (`Command::pre_exec`).
pub(crate) unsafe fn drop_all(last_cap: u32, user: Option<Ids>) -> io::Result<()> {
    // SAFETY (of each call below): prctl, setgroups, setgid, setuid, close_range and capset with plain integers, a
    // null pointer of length 0, and a pointer to stack memory.
    unsafe {
        // First, while CAP_SETPCAP is still effective: once the uid changes, the kernel clears the effective set.
        for cap in 0..=last_cap {
            // EPERM without CAP_SETPCAP (an unprivileged agent): its exec gains nothing but the ambient set anyway.
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
        if let Some(Ids { uid, gid }) = user {
            // The gid before the uid: after setuid the process may no longer change its groups.
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        // _LINUX_CAPABILITY_VERSION_3: two 32-bit words of each set.
        let mut header = Header { version: 0x2008_0522, pid: 0 };
        let data =
            [Data { effective: 0, permitted: 0, inheritable: 0 }, Data { effective: 0, permitted: 0, inheritable: 0 }];
        if libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        // Whatever descriptor the agent holds without close-on-exec (one it inherited) closes at exec. Marked, not
        // closed now: std reports a failed exec through a descriptor of its own that must stay open until then.
        // EINVAL before Linux 5.11: the descriptors Rust opened are close-on-exec already.
        libc::syscall(libc::SYS_close_range, 3 as libc::c_uint, libc::c_uint::MAX, libc::CLOSE_RANGE_CLOEXEC);
    }
    Ok(())
}
