//! The gossip datagram: `<kind><sent ms><run><counter><payload><mac>`, where mac is HMAC-SHA256 with a key derived
//! from the cluster secret over everything before it. A datagram is opened (its mac checked in constant time)
//! before anything decodes it, so a host without the secret can neither join nor disturb the membership; and it is
//! accepted once, within [`WINDOW_MS`] of the receiver's clock ([`super::replay`]: `<run>` is drawn at random when
//! the node starts, `<counter>` counts its datagrams), so a captured datagram cannot be sent again.
//!
//! What the gossip crate (foca) does itself against a datagram sent again: every membership update carries the
//! member's incarnation, and SWIM's order keeps an update of an older incarnation from overriding a newer one; a
//! member declared down stays down for that identity (it rejoins as the next generation, so a replayed notice to
//! its previous identity is ignored, as is anything not addressed to the receiver's identity); an ack counts only
//! for the probe in course, by its probe number and member. So a replay rarely changes what the crate believes, but
//! it is still acted on: a replayed ping or announce makes the receiver answer the member named in it, a replayed
//! datagram of a member that has gone silent counts as hearing from it (`last_heard_s`), and one of a member
//! forgotten after the crate's `remove_down_after` (24 h) brings it back as alive until its probes fail. Hence the
//! envelope's window and once-only rule, which foca cannot give: it has no notion of time or of a message seen.
//! Pure: no sockets; the caller gives the time.

use super::replay::{Counter, Nonce, Replay, ReplayError};
use crate::base::token::{keyed, HmacSha256};
use hmac::Mac;

/// Bytes of the mac at the end of every datagram.
pub const MAC_LEN: usize = 32;

/// Bytes before the payload: the kind, the send time and the nonce.
pub const HEAD_LEN: usize = 1 + 8 + Nonce::LEN;

/// How far a datagram's send time may be from the receiver's clock (skew plus the time in flight), in
/// milliseconds: the nodes' clocks must agree within it.
pub const WINDOW_MS: u64 = 30_000;

/// Datagrams remembered behind the newest of each sender run: UDP reorders a datagram behind a few others at most.
/// 128 bytes a run.
pub const SPAN: u64 = 1024;

/// Sender runs remembered at once: every member's current run and those of its restarts within [`WINDOW_MS`]; at
/// most 512 KiB with [`SPAN`].
pub const MAX_SENDERS: usize = 4096;

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
    #[error("datagram shorter than its head and a mac")]
    Short,
    #[error("datagram mac does not match the cluster secret")]
    BadMac,
    #[error("datagram of an unknown kind")]
    UnknownKind,
    #[error("datagram outside its time window (do the nodes' clocks agree within {} s?)", WINDOW_MS / 1000)]
    Stale,
    #[error("datagram replayed")]
    Replayed,
    #[error("datagram arrived after too many newer ones of its sender")]
    TooLate,
    #[error("datagram from a new sender while too many are remembered")]
    Full,
}

impl From<ReplayError> for WireError {
    fn from(e: ReplayError) -> WireError {
        match e {
            ReplayError::Stale => WireError::Stale,
            ReplayError::Replayed => WireError::Replayed,
            ReplayError::TooLate => WireError::TooLate,
            ReplayError::Full => WireError::Full,
        }
    }
}

/// An authentic datagram's parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sealed<'a> {
    /// The kind byte (not checked yet).
    pub kind: u8,
    pub sent_ms: u64,
    pub nonce: Nonce,
    pub payload: &'a [u8],
}

/// Seals datagrams with one cluster secret and this node's nonces, and opens each datagram of the others once.
pub struct Wire {
    mac: HmacSha256,
    nonces: Counter,
    seen: Replay<u64>,
}

/// A key for one use of the cluster secret (gossip, forwarded hops), so that a mac made for one is never valid for
/// the other: HMAC-SHA256(secret, purpose).
pub(crate) fn derive_key(secret: &[u8], purpose: &str) -> [u8; 32] {
    let mut m = keyed(secret);
    m.update(purpose.as_bytes());
    m.finalize().into_bytes().into()
}

impl Wire {
    /// With a new random run.
    pub fn new(secret: &[u8]) -> Wire {
        Wire::with_nonces(secret, Counter::new())
    }

    /// With the nonces given (tests, fuzzing).
    pub fn with_nonces(secret: &[u8], nonces: Counter) -> Wire {
        Wire {
            mac: keyed(&derive_key(secret, "monitor cluster gossip v2")),
            nonces,
            seen: Replay::new(WINDOW_MS, SPAN, MAX_SENDERS),
        }
    }

    /// The datagram for `payload`, sent at `now_ms`, with this node's next nonce.
    pub fn seal(&self, kind: Kind, payload: &[u8], now_ms: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEAD_LEN + payload.len() + MAC_LEN);
        out.push(kind.byte());
        out.extend_from_slice(&now_ms.to_be_bytes());
        out.extend_from_slice(&self.nonces.next().to_bytes());
        out.extend_from_slice(payload);
        let mut mac = self.mac.clone();
        mac.update(&out);
        out.extend_from_slice(&mac.finalize().into_bytes());
        out
    }

    /// The parts of a datagram whose mac matches, whatever its time and nonce.
    pub(crate) fn authentic<'a>(&self, datagram: &'a [u8]) -> Result<Sealed<'a>, WireError> {
        if datagram.len() < HEAD_LEN + MAC_LEN {
            return Err(WireError::Short);
        }
        let (body, tag) = datagram.split_at(datagram.len() - MAC_LEN);
        let mut mac = self.mac.clone();
        mac.update(body);
        // verify_slice compares in constant time.
        mac.verify_slice(tag).map_err(|_| WireError::BadMac)?;
        let (head, payload) = body.split_at(HEAD_LEN);
        let mut ms = [0; 8];
        ms.copy_from_slice(&head[1..9]);
        let mut nonce = [0; Nonce::LEN];
        nonce.copy_from_slice(&head[9..]);
        Ok(Sealed { kind: head[0], sent_ms: u64::from_be_bytes(ms), nonce: Nonce::from_bytes(nonce), payload })
    }

    /// The kind and payload of an authentic datagram sent within the window of `now_ms` and not seen before; it is
    /// then remembered.
    pub fn open<'a>(&mut self, datagram: &'a [u8], now_ms: u64) -> Result<(Kind, &'a [u8]), WireError> {
        let d = self.authentic(datagram)?;
        self.seen.admit(d.nonce.run, d.nonce.counter, d.sent_ms, now_ms)?;
        let kind = Kind::of(d.kind).ok_or(WireError::UnknownKind)?;
        Ok((kind, d.payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const T: u64 = 1_700_000_000_000;

    fn sender(run: u64) -> Wire {
        Wire::with_nonces(SECRET, Counter::starting(run, 0))
    }

    #[test]
    fn sealed_datagrams_open_once_and_any_change_is_refused() {
        let a = sender(1);
        let mut b = Wire::new(SECRET);
        let d = a.seal(Kind::Gossip, b"swim", T);
        assert_eq!(d.len(), HEAD_LEN + 4 + MAC_LEN);
        assert_eq!(d[..HEAD_LEN], [[1].as_slice(), &T.to_be_bytes(), &1u64.to_be_bytes(), &[0; 8]].concat());
        // Every single bit flipped, in the head, the payload or the mac, is refused, and leaves nothing seen.
        for i in 0..d.len() {
            for bit in 0..8 {
                let mut t = d.clone();
                t[i] ^= 1 << bit;
                assert_eq!(b.open(&t, T), Err(WireError::BadMac), "byte {i} bit {bit}");
            }
        }
        assert_eq!(b.open(&d, T), Ok((Kind::Gossip, &b"swim"[..])));
        let l = a.seal(Kind::Leave, b"a 17", T);
        assert_eq!(b.open(&l, T), Ok((Kind::Leave, &b"a 17"[..])));
        assert_eq!(b.open(&a.seal(Kind::Gossip, b"", T), T), Ok((Kind::Gossip, &b""[..])));
        // The same payload under another kind does not carry over.
        let mut as_leave = d.clone();
        as_leave[0] = 2;
        assert_eq!(b.open(&as_leave, T), Err(WireError::BadMac));
    }

    #[test]
    fn a_datagram_is_accepted_once_and_within_its_window() {
        let (a, c) = (sender(1), sender(2));
        let first = a.seal(Kind::Gossip, b"one", T);
        let second = a.seal(Kind::Gossip, b"two", T + 10);
        let early = a.seal(Kind::Gossip, b"early", T - WINDOW_MS - 1);
        let late = a.seal(Kind::Gossip, b"late", T + WINDOW_MS + 1);
        // c's first datagram has a's first nonce's counter: another run, another datagram.
        let other_run = c.seal(Kind::Gossip, b"one", T);
        let mut b = Wire::new(SECRET);
        use WireError::{Replayed, Stale};
        // In order, on one receiver: (datagram, receiver's clock, result).
        type Case<'a> = (&'a [u8], u64, Result<(Kind, &'a [u8]), WireError>);
        let cases: Vec<Case<'_>> = vec![
            (&second, T, Ok((Kind::Gossip, b"two"))),
            (&first, T, Ok((Kind::Gossip, b"one"))),
            (&first, T, Err(Replayed)),
            (&second, T + WINDOW_MS, Err(Replayed)),
            (&first, T + WINDOW_MS + 1, Err(Stale)),
            (&other_run, T, Ok((Kind::Gossip, b"one"))),
            (&early, T, Err(Stale)),
            (&late, T, Err(Stale)),
            (&late, T + 2, Ok((Kind::Gossip, b"late"))),
            (&late, T + 2, Err(Replayed)),
        ];
        for (i, (d, now, want)) in cases.into_iter().enumerate() {
            assert_eq!(b.open(d, now), want, "case {i}");
        }
        // Another receiver has seen none of them.
        assert_eq!(Wire::new(SECRET).open(&first, T), Ok((Kind::Gossip, &b"one"[..])));
    }

    #[test]
    fn another_secret_short_old_and_unknown_kinds_are_refused() {
        let mut w = Wire::new(SECRET);
        let other = Wire::new(b"another secret of thirty-two byt");
        assert_eq!(w.open(&other.seal(Kind::Gossip, b"swim", T), T), Err(WireError::BadMac));
        assert_eq!(w.open(&[], T), Err(WireError::Short));
        assert_eq!(w.open(&[1; HEAD_LEN + MAC_LEN - 1], T), Err(WireError::Short));
        // The format before the nonce: `<kind><payload><mac>` under the first key.
        let mut m = keyed(&derive_key(SECRET, "monitor cluster gossip v1"));
        let old = [[1].as_slice(), &[7; 40]].concat();
        m.update(&old);
        let old = [old, m.finalize().into_bytes().to_vec()].concat();
        assert_eq!(w.open(&old, T), Err(WireError::BadMac));
        // A kind this node does not know, under a good mac.
        let mut m = keyed(&derive_key(SECRET, "monitor cluster gossip v2"));
        let body = [[9].as_slice(), &T.to_be_bytes(), &[3; Nonce::LEN], b"x"].concat();
        m.update(&body);
        let d = [body, m.finalize().into_bytes().to_vec()].concat();
        assert_eq!(w.open(&d, T), Err(WireError::UnknownKind));
        // Keys for two purposes differ.
        assert_ne!(derive_key(SECRET, "a"), derive_key(SECRET, "b"));
    }
}
