//! Recognising HTTP/1.x from the first bytes of a socket read or write (pure; used by the kernel programs).
//!
//! The kernel reads the first 8 bytes of a read and the first 12 of a write; these functions decide on them
//! without loops or `memcmp` so the BPF verifier and linker accept them.

/// Bytes the kernel reads from the start of a received buffer.
pub const REQUEST_PEEK: usize = 8;
/// Bytes the kernel reads from the start of a sent buffer: `HTTP/1.1 200` is 12.
pub const RESPONSE_PEEK: usize = 12;

/// The first `n` bytes of `s` as a little-endian word, the rest zero.
const fn word(s: &[u8]) -> u64 {
    let mut w = 0u64;
    let mut i = 0;
    while i < s.len() {
        w |= (s[i] as u64) << (8 * i);
        i += 1;
    }
    w
}

/// Mask of the low `n` bytes.
const fn mask(n: usize) -> u64 {
    if n >= 8 {
        u64::MAX
    } else {
        (1u64 << (8 * n)) - 1
    }
}

/// (prefix word, mask) for every method, the trailing space included.
const METHODS: [(u64, u64); 9] = [
    (word(b"GET "), mask(4)),
    (word(b"POST "), mask(5)),
    (word(b"PUT "), mask(4)),
    (word(b"HEAD "), mask(5)),
    (word(b"DELETE "), mask(7)),
    (word(b"PATCH "), mask(6)),
    (word(b"OPTIONS "), mask(8)),
    (word(b"CONNECT "), mask(8)),
    (word(b"TRACE "), mask(6)),
];

/// True when the first bytes of a read are an HTTP/1.x request line (`GET `, `POST `, … with the space).
#[inline(always)]
pub fn is_request(head: &[u8; REQUEST_PEEK]) -> bool {
    let w = u64::from_le_bytes(*head);
    // Unrolled by hand: a loop over METHODS is fine for the verifier, but this keeps it branch-light.
    (w & METHODS[0].1) == METHODS[0].0
        || (w & METHODS[1].1) == METHODS[1].0
        || (w & METHODS[2].1) == METHODS[2].0
        || (w & METHODS[3].1) == METHODS[3].0
        || (w & METHODS[4].1) == METHODS[4].0
        || (w & METHODS[5].1) == METHODS[5].0
        || (w & METHODS[6].1) == METHODS[6].0
        || (w & METHODS[7].1) == METHODS[7].0
        || (w & METHODS[8].1) == METHODS[8].0
}

/// A response's status line: `HTTP/1.x NNN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Status {
    /// 1 … 5 for 1xx … 5xx.
    pub class: u8,
    /// The three digits as a number (100 … 599).
    pub code: u16,
}

impl Status {
    /// A final response ends the request: anything but an interim 1xx (101 Switching Protocols is final).
    #[inline(always)]
    pub fn is_final(self) -> bool {
        self.class != 1 || self.code == 101
    }
}

/// Parses the first bytes of a write as a status line, `None` when they are not one.
#[inline(always)]
pub fn parse_status(head: &[u8; RESPONSE_PEEK]) -> Option<Status> {
    let prefix = u64::from_le_bytes([head[0], head[1], head[2], head[3], head[4], head[5], head[6], head[7]]);
    // "HTTP/1." then the minor version digit, checked apart.
    if prefix & mask(7) != word(b"HTTP/1.") || !head[7].is_ascii_digit() || head[8] != b' ' {
        return None;
    }
    let (a, b, c) = (head[9], head[10], head[11]);
    if !(b'1'..=b'5').contains(&a) || !b.is_ascii_digit() || !c.is_ascii_digit() {
        return None;
    }
    let class = a - b'0';
    let code = class as u16 * 100 + (b - b'0') as u16 * 10 + (c - b'0') as u16;
    Some(Status { class, code })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(s: &[u8]) -> bool {
        let mut h = [0u8; REQUEST_PEEK];
        let n = s.len().min(REQUEST_PEEK);
        h[..n].copy_from_slice(&s[..n]);
        is_request(&h)
    }

    fn status(s: &[u8]) -> Option<(u8, u16)> {
        let mut h = [0u8; RESPONSE_PEEK];
        let n = s.len().min(RESPONSE_PEEK);
        h[..n].copy_from_slice(&s[..n]);
        parse_status(&h).map(|s| (s.class, s.code))
    }

    #[test]
    fn requests() {
        for m in ["GET", "POST", "PUT", "HEAD", "DELETE", "PATCH", "OPTIONS", "CONNECT", "TRACE"] {
            assert!(req(format!("{m} / HTTP/1.1\r\n").as_bytes()), "{m}");
            assert!(!req(format!("{m}/ HTTP/1.1\r\n").as_bytes()), "{m} without space");
            assert!(!req(m.to_lowercase().as_bytes()), "{m} lower case");
        }
        for not in [&b"GETS / HTTP"[..], b"HTTP/1.1 200 OK", b"\x16\x03\x01\x02\x00\x01\x00\x01", b"PRI * HT", b""] {
            assert!(!req(not), "{not:?}");
        }
    }

    #[test]
    fn statuses() {
        assert_eq!(status(b"HTTP/1.1 200 OK\r\n"), Some((2, 200)));
        assert_eq!(status(b"HTTP/1.0 404 Not Found"), Some((4, 404)));
        assert_eq!(status(b"HTTP/1.1 500 "), Some((5, 500)));
        assert_eq!(status(b"HTTP/1.1 100 Continue"), Some((1, 100)));
        assert_eq!(status(b"HTTP/1.1 302 Found"), Some((3, 302)));
        for not in
            [&b"HTTP/2 200 OK"[..], b"HTTP/1.1 600 X", b"HTTP/1.1 2x0", b"HTTP/1.1  200", b"GET / HTTP/1.1", b"HTTP/1."]
        {
            assert_eq!(status(not), None, "{not:?}");
        }
    }

    #[test]
    fn finality() {
        let s = |code: u16| Status { class: (code / 100) as u8, code };
        assert!(!s(100).is_final());
        assert!(!s(103).is_final());
        assert!(s(101).is_final());
        assert!(s(200).is_final());
        assert!(s(503).is_final());
    }
}
