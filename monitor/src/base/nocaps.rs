//! A program the agent runs for someone else (an alert command) gets none of the agent's privileges: the units give
//! the agent ambient capabilities for its probes and its kills (CAP_BPF, CAP_PERFMON, CAP_KILL, CAP_DAC_READ_SEARCH),
//! and an agent run as root has every capability. In the child, before exec: the capability bounding set is emptied
//! (so even root's exec gains none), the ambient, inheritable, permitted and effective sets are cleared, and
//! `no_new_privs` is set (no setuid or file-capability program can win them back). `grep Cap /proc/<pid>/status`
//! of the running command shows all zero.

use std::io;

/// The highest capability number the kernel knows (`/proc/sys/kernel/cap_last_cap`), read before the fork.
pub(crate) fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(63)
}

/// Drops every capability and sets `no_new_privs`. Only for a forked child about to exec: it makes only
/// async-signal-safe system calls (prctl, capset) and allocates nothing.
///
/// # Safety
/// Call only between fork and exec (`Command::pre_exec`).
pub(crate) unsafe fn drop_all(last_cap: u32) -> io::Result<()> {
    // SAFETY (of each call below): prctl and capset with plain integers and a pointer to stack memory.
    unsafe {
        for cap in 0..=last_cap {
            // EPERM without CAP_SETPCAP (an unprivileged agent): its exec gains nothing but the ambient set anyway.
            libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
        }
        libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong, 0, 0, 0);
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
    }
    Ok(())
}
