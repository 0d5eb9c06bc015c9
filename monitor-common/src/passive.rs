//! `PASSIVE`: TCP sockets of the host that were just opened passively (`SYN_RECV` -> `ESTABLISHED`, in softirq,
//! before any process accepts them), by `struct sock` address. The socket hooks count an accept when a traced
//! process first reads or writes such a socket, and remove the entry; `TCP_CLOSE` removes it too.

/// Name of the map in the object.
pub const MAP: &str = "PASSIVE";
/// Capacity (an LRU map): connections opened and not yet touched or closed, host-wide.
pub const MAX_ENTRIES: u32 = 65_536;

/// Key: the address of the kernel's `struct sock`.
pub type Key = u64;
/// Value: unused (1).
pub type Value = u8;
