//! The gossip datagram: `<kind><payload><mac>`, where mac is HMAC-SHA256 with a key derived from the cluster secret
//! over kind and payload. A datagram is opened (its mac checked in constant time) before anything decodes it, so a
//! host without the secret can neither join nor disturb the membership. Pure: no sockets.

use crate::token::{keyed, HmacSha256};
use hmac::Mac;

/// Bytes of the mac at the end of every datagram.
pub const MAC_LEN: usize = 32;

/// What a datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Bytes of the gossip crate (probes, acks, membership updates).
    Gossip,
    /// A node's notice that it leaves: `<node> <started_ms>`.
    Leave,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Gossip => 1,
            Kind::Leave => 2,
        }
    }

    fn of(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Gossip),
            2 => Some(Kind::Leave),
            _ => None,
        }
    }
}

/// Why a datagram was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("datagram shorter than a kind and a mac")]
    Short,
    #[error("datagram mac does not match the cluster secret")]
    BadMac,
    #[error("datagram of an unknown kind")]
    UnknownKind,
}

/// Seals and opens datagrams with one cluster secret.
#[derive(Clone)]
pub struct Wire {
    mac: HmacSha256,
}

/// A key for one use of the cluster secret (gossip, forwarded hops), so that a mac made for one is never valid for
/// the other: HMAC-SHA256(secret, purpose).
pub fn derive_key(secret: &[u8], purpose: &str) -> [u8; 32] {
    let mut m = keyed(secret);
    m.update(purpose.as_bytes());
    m.finalize().into_bytes().into()
}

impl Wire {
    pub fn new(secret: &[u8]) -> Wire {
        Wire { mac: keyed(&derive_key(secret, "monitor cluster gossip v1")) }
    }

    /// The datagram for `payload`.
    pub fn seal(&self, kind: Kind, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + payload.len() + MAC_LEN);
        out.push(kind.byte());
        out.extend_from_slice(payload);
        let mut mac = self.mac.clone();
        mac.update(&out);
        out.extend_from_slice(&mac.finalize().into_bytes());
        out
    }

    /// The kind and payload of an authentic datagram.
    pub fn open<'a>(&self, datagram: &'a [u8]) -> Result<(Kind, &'a [u8]), WireError> {
        if datagram.len() < 1 + MAC_LEN {
            return Err(WireError::Short);
        }
        let (body, tag) = datagram.split_at(datagram.len() - MAC_LEN);
        let mut mac = self.mac.clone();
        mac.update(body);
        // verify_slice compares in constant time.
        mac.verify_slice(tag).map_err(|_| WireError::BadMac)?;
        let kind = Kind::of(body[0]).ok_or(WireError::UnknownKind)?;
        Ok((kind, &body[1..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn sealed_datagrams_open_and_any_change_is_refused() {
        let w = Wire::new(SECRET);
        let d = w.seal(Kind::Gossip, b"swim");
        assert_eq!(d.len(), 1 + 4 + MAC_LEN);
        assert_eq!(w.open(&d), Ok((Kind::Gossip, &b"swim"[..])));
        let l = w.seal(Kind::Leave, b"a 17");
        assert_eq!(w.open(&l), Ok((Kind::Leave, &b"a 17"[..])));
        assert_eq!(w.open(&w.seal(Kind::Gossip, b"")), Ok((Kind::Gossip, &b""[..])));
        // Every single bit flipped, in the kind, the payload or the mac, is refused.
        for i in 0..d.len() {
            for bit in 0..8 {
                let mut t = d.clone();
                t[i] ^= 1 << bit;
                assert_eq!(w.open(&t), Err(WireError::BadMac), "byte {i} bit {bit}");
            }
        }
        // The same payload under another kind does not carry over.
        let mut as_leave = d.clone();
        as_leave[0] = 2;
        assert_eq!(w.open(&as_leave), Err(WireError::BadMac));
    }

    #[test]
    fn another_secret_short_and_unknown_kinds_are_refused() {
        let w = Wire::new(SECRET);
        let other = Wire::new(b"another secret of thirty-two byt");
        assert_eq!(w.open(&other.seal(Kind::Gossip, b"swim")), Err(WireError::BadMac));
        assert_eq!(w.open(&[]), Err(WireError::Short));
        assert_eq!(w.open(&[1; MAC_LEN]), Err(WireError::Short));
        // A kind this node does not know, under a good mac.
        let mut m = keyed(&derive_key(SECRET, "monitor cluster gossip v1"));
        m.update(&[9, 0]);
        let mut d = vec![9, 0];
        d.extend_from_slice(&m.finalize().into_bytes());
        assert_eq!(w.open(&d), Err(WireError::UnknownKind));
        // Keys for two purposes differ.
        assert_ne!(derive_key(SECRET, "a"), derive_key(SECRET, "b"));
    }
}
