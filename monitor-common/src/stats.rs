//! `STATS`: per-CPU request counters of each traced tgid. User space creates the entry, the kernel only adds.

use crate::user_pod;

/// Name of the map in the object.
pub const MAP: &str = "STATS";
/// Capacity: the most processes one group may have.
pub const MAX_ENTRIES: u32 = 4096;
/// Buckets of the latency histogram: bucket i counts latencies in [2^i, 2^(i+1)) µs (bucket 0 also holds < 1 µs).
pub const HIST_BUCKETS: usize = 32;

/// Key: a tgid.
pub type Key = u32;

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
