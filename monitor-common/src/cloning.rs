//! `CLONING`: the flags of a `clone`/`clone3` in progress, by thread, saved at the syscall's entry so that the
//! `fork` program can tell a new thread (`CLONE_THREAD`: same tgid, nothing to trace) from a new process.
//! `fork`/`vfork` save nothing: their children are processes.

/// Name of the map in the object.
pub const MAP: &str = "CLONING";
/// Capacity (an LRU map): threads of traced processes inside `clone` at once.
pub const MAX_ENTRIES: u32 = 4096;

/// Key: the thread (`bpf_get_current_pid_tgid`).
pub type Key = u64;
/// Value: the clone flags.
pub type Value = u64;

/// `CLONE_THREAD` (include/uapi/linux/sched.h): the child joins the caller's thread group.
pub const CLONE_THREAD: u64 = 0x0001_0000;
