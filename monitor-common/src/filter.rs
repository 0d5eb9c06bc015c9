//! `FILTER`: the tgids whose traffic is traced. User space keeps it equal to the group's processes.

/// Name of the map in the object.
pub const MAP: &str = "FILTER";
/// Capacity: the most processes one group may have.
pub const MAX_ENTRIES: u32 = 4096;

/// Key: a tgid (what user space calls a pid). Value: always [`PRESENT`].
pub type Key = u32;
/// The value stored for every traced tgid.
pub const PRESENT: u8 = 1;
