//! `STATS` and `STATS_SLOTS`: per-CPU request counters of each traced tgid. User space creates the entries, the
//! kernel only adds.
//!
//! `STATS` is a per-CPU hash by tgid. `STATS_SLOTS` is a per-CPU array of [`SLOTS`] slots: user space gives a traced
//! tgid the slot `tgid % SLOTS` when no other traced tgid holds it, by writing the tgid into the slot on every CPU.
//! The kernel programs count in the slot when it holds their tgid (an inlined array lookup and a compare) and in
//! the hash otherwise (a forked child before user space sees it, or two tgids on one slot). User space sums both.

use crate::user_pod;

/// Name of the map in the object.
pub const MAP: &str = "STATS";
/// Capacity: the most processes one group may have.
pub const MAX_ENTRIES: u32 = 4096;
/// Buckets of the latency histogram: bucket i counts latencies in [2^i, 2^(i+1)) µs (bucket 0 also holds < 1 µs).
pub const HIST_BUCKETS: usize = 32;

/// Key: a tgid.
pub type Key = u32;

/// Name of the slot array in the object.
pub const SLOTS_MAP: &str = "STATS_SLOTS";
/// Slots in `STATS_SLOTS`.
pub const SLOTS: u32 = 4096;

/// The slot a tgid may hold.
#[inline(always)]
pub fn slot_of(tgid: u32) -> u32 {
    tgid % SLOTS
}

/// One slot of `STATS_SLOTS` on one CPU: the tgid holding it (0: free) and its counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub tgid: u32,
    pub _pad: u32,
    pub counters: Counters,
}
user_pod!(Slot);

impl Slot {
    /// A free slot.
    pub const FREE: Slot = Slot { tgid: 0, _pad: 0, counters: Counters::ZERO };
}

/// Counters of one tgid on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counters {
    /// Sockets accepted (`accept`, `accept4`).
    pub accepts: u64,
    /// Reads on accepted sockets that began with an HTTP/1.x method.
    pub requests: u64,
    /// Writes on accepted sockets that began with `HTTP/1.`, by status class: 0 = 1xx … 4 = 5xx.
    pub responses_by_class: [u64; 5],
    /// Final responses: every response except the interim 1xx ones (101 Switching Protocols counts).
    pub responses: u64,
    /// Requests whose socket was closed before a final response.
    pub unanswered: u64,
    /// Bytes read from accepted sockets.
    pub bytes_in: u64,
    /// Bytes written to accepted sockets (including `sendfile`).
    pub bytes_out: u64,
    /// Request-to-first-response latency, log2 buckets of microseconds.
    pub latency_hist_us: [u64; HIST_BUCKETS],
}
user_pod!(Counters);

impl Counters {
    /// All zero.
    pub const ZERO: Counters = Counters {
        accepts: 0,
        requests: 0,
        responses_by_class: [0; 5],
        responses: 0,
        unanswered: 0,
        bytes_in: 0,
        bytes_out: 0,
        latency_hist_us: [0; HIST_BUCKETS],
    };
}

impl Default for Counters {
    fn default() -> Self {
        Counters::ZERO
    }
}

/// The log2 bucket of a latency in microseconds, clamped to the last bucket. Branch-only (no `ctlz` on BPF).
#[inline(always)]
pub fn log2_bucket(us: u64) -> usize {
    let mut v = us;
    let mut b = 0usize;
    if v >= 1 << 32 {
        v >>= 32;
        b += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        b += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        b += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        b += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        b += 2;
    }
    if v >= 1 << 1 {
        b += 1;
    }
    if b >= HIST_BUCKETS {
        HIST_BUCKETS - 1
    } else {
        b
    }
}

#[cfg(test)]
mod tests {
    use super::log2_bucket;

    #[test]
    fn buckets() {
        for (us, b) in [(0, 0), (1, 0), (2, 1), (3, 1), (4, 2), (1023, 9), (1024, 10), (u64::MAX, 31)] {
            assert_eq!(log2_bucket(us), b, "{us}");
        }
    }
}
