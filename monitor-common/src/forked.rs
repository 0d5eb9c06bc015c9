//! `FORKED`: processes the kernel started tracing at their fork (`task/task_newtask`) (their parent's tgid was traced),
//! with that parent's tgid. The `fork` program writes an entry before it sets the child's filter bit; user space drains
//! the map every sample, keeps the lineage and folds the counts of children that have exited into their nearest traced
//! ancestor.

/// Name of the map in the object.
pub const MAP: &str = "FORKED";
/// Name of the one-word, memory-mappable array whose word 0 the `fork` program adds 1 to after each entry it
/// writes: user space drains `FORKED` only when the count moved, since walking an empty hash map visits every
/// bucket.
pub const COUNT_MAP: &str = "FORK_COUNT";
/// Capacity (an LRU map): forks by traced processes between two samples.
pub const MAX_ENTRIES: u32 = 16_384;

/// Key: the child's pid (its tgid: a new process).
pub type Key = u32;
/// Value: the parent's tgid.
pub type Value = u32;

/// `CLONE_THREAD` (include/uapi/linux/sched.h): the new task joins the caller's thread group (nothing to trace).
pub const CLONE_THREAD: u64 = 0x0001_0000;
