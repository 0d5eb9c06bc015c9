//! The header a node puts on a request it forwards to the owner of its cache: `X-Monitor-Hop:
//! <from node>.<unix ms>.<nonce>.<mac>`, nonce = 32 hex digits ([`Nonce`]: the sender's run, then its count of
//! hops), mac = HMAC-SHA256 (hex) with a key derived from the cluster secret over the node, the time, the nonce, the
//! method, the path and query, and the cache id. Only members can make one; it holds for one request (a captured
//! header does not carry over to another path or cache id), for [`WINDOW_MS`] either side of the receiver's clock,
//! and once: the receiver accepts each (node, nonce) a single time ([`super::replay`]). A request that carries a
//! valid one is never forwarded again. Pure: the caller gives the time and the hops accepted so far.

use super::replay::{Nonce, Replay, ReplayError};
use super::wire::derive_key;
use crate::base::token::{hex, keyed, unhex, HmacSha256};
use hmac::Mac;

/// The header's name.
pub const HEADER: &str = "x-monitor-hop";

/// How far a hop's time may be from the receiver's (clock skew plus the time in flight), in milliseconds.
pub const WINDOW_MS: u64 = 30_000;

/// Hops remembered behind the newest of each sender run: forwards overtaken by this many later ones of their
/// node are refused. Forwards of one node are signed just before they are sent and overtake each other only by
/// the ones in flight at once, a few hundred at most; 4 KiB a run.
pub const SPAN: u64 = 32_768;

/// Sender runs remembered at once: every node's current run and the runs of its restarts within [`WINDOW_MS`];
/// at most 4 MiB with [`SPAN`].
pub const MAX_SENDERS: usize = 1024;

/// The hops a node accepted: each (node, run) with the counters seen.
pub type Accepted = Replay<(String, u64)>;

/// An empty [`Accepted`] with this module's window, span and bound.
pub fn accepted() -> Accepted {
    Replay::new(WINDOW_MS, SPAN, MAX_SENDERS)
}

/// What a hop is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    pub method: &'a str,
    /// Path and query, as sent.
    pub target: &'a str,
    /// The cache id header's value, as sent ("" without one).
    pub cache_id: &'a str,
}

/// A hop header whose mac and time are good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signed {
    pub node: String,
    pub ms: u64,
    pub nonce: Nonce,
}

/// Why a hop header was refused: an authentication failure, answered 401 with this text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    #[error("hop header malformed")]
    Malformed,
    #[error("hop header signature does not match")]
    BadSignature,
    #[error("hop header outside its time window")]
    Stale,
    #[error("hop header replayed")]
    Replayed,
    #[error("hop header arrived after too many newer ones of its node")]
    TooLate,
    #[error("hop header from a new node run while too many are remembered")]
    Full,
}

impl From<ReplayError> for HopError {
    fn from(e: ReplayError) -> HopError {
        match e {
            ReplayError::Stale => HopError::Stale,
            ReplayError::Replayed => HopError::Replayed,
            ReplayError::TooLate => HopError::TooLate,
            ReplayError::Full => HopError::Full,
        }
    }
}

/// Signs and checks hop headers with the cluster secret.
#[derive(Clone)]
pub struct Hops {
    mac: HmacSha256,
}

impl Hops {
    pub fn new(secret: &[u8]) -> Hops {
        Hops { mac: keyed(&derive_key(secret, "monitor cluster hop v2")) }
    }

    fn mac(&self, node: &str, ms: u64, nonce: Nonce, hop: &Hop<'_>) -> HmacSha256 {
        let mut m = self.mac.clone();
        // Each field ends with a byte none of them can hold in a header or a request line.
        for field in [node, &ms.to_string(), &hex(&nonce.to_bytes()), hop.method, hop.target, hop.cache_id] {
            m.update(field.as_bytes());
            m.update(b"\n");
        }
        m
    }

    /// The header value `node` sends with `hop` at `now_ms`, with its next nonce.
    pub fn sign(&self, node: &str, now_ms: u64, nonce: Nonce, hop: &Hop<'_>) -> String {
        let mac = hex(&self.mac(node, now_ms, nonce, hop).finalize().into_bytes());
        format!("{node}.{now_ms}.{}.{mac}", hex(&nonce.to_bytes()))
    }

    /// The node, time and nonce of a header whose mac matches `hop` and whose time is within the window at
    /// `now_ms`. Says nothing of replays: see [`Hops::check`].
    pub fn verify(&self, value: &str, now_ms: u64, hop: &Hop<'_>) -> Result<Signed, HopError> {
        let (rest, sig) = value.rsplit_once('.').ok_or(HopError::Malformed)?;
        let (rest, nonce) = rest.rsplit_once('.').ok_or(HopError::Malformed)?;
        let (node, ms) = rest.rsplit_once('.').ok_or(HopError::Malformed)?;
        let ms: u64 = ms.parse().map_err(|_| HopError::Malformed)?;
        let nonce = Some(nonce)
            .filter(|s| s.len() == 2 * Nonce::LEN)
            .and_then(unhex)
            .and_then(|b| <[u8; Nonce::LEN]>::try_from(b).ok())
            .map(Nonce::from_bytes)
            .ok_or(HopError::Malformed)?;
        // A mac is 32 bytes: 64 hex digits.
        let sig = Some(sig).filter(|s| s.len() == 64).and_then(unhex).ok_or(HopError::Malformed)?;
        if node.is_empty() {
            return Err(HopError::Malformed);
        }
        // verify_slice compares in constant time.
        self.mac(node, ms, nonce, hop).verify_slice(&sig).map_err(|_| HopError::BadSignature)?;
        if now_ms.abs_diff(ms) > WINDOW_MS {
            return Err(HopError::Stale);
        }
        Ok(Signed { node: node.to_string(), ms, nonce })
    }

    /// The node that forwarded `hop`, when its header is valid at `now_ms` and its (node, nonce) is not among
    /// `accepted`, to which it is then added.
    pub fn check(&self, value: &str, now_ms: u64, hop: &Hop<'_>, accepted: &mut Accepted) -> Result<String, HopError> {
        let s = self.verify(value, now_ms, hop)?;
        accepted.admit((s.node.clone(), s.nonce.run), s.nonce.counter, s.ms, now_ms)?;
        Ok(s.node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const N: Nonce = Nonce { run: 0x0123_4567_89ab_cdef, counter: 7 };

    #[test]
    fn a_hop_holds_for_its_request_its_window_and_its_cluster_only() {
        let h = Hops::new(SECRET);
        let hop = Hop { method: "GET", target: "/r/ValueSet/$expand?x=1", cache_id: "b.tx1.9.99.ab" };
        let v = h.sign("a", 1_000_000, N, &hop);
        let nonce = "0123456789abcdef0000000000000007";
        assert!(v.starts_with(&format!("a.1000000.{nonce}.")), "{v}");
        assert_eq!(v.len(), "a.1000000..".len() + 32 + 64, "{v}");
        let other_cluster = Hops::new(b"another secret of thirty-two byt").sign("a", 1_000_000, N, &hop);
        let shifted = v.replacen(".1000000.", ".1000001.", 1);
        let as_b = v.replacen("a.", "b.", 1);
        let renumbered = v.replacen(nonce, "0123456789abcdef0000000000000008", 1);
        let unnumbered = v.replacen(&format!("{nonce}."), "", 1);
        let nonce_short = v.replacen(nonce, &nonce[1..], 1);
        let nonce_not_hex = v.replacen(nonce, &format!("{}g", &nonce[1..]), 1);
        let signed = |node: &str, ms| Ok(Signed { node: node.into(), ms, nonce: N });
        let other = |method, target, cache_id| Hop { method, target, cache_id };
        use HopError::{BadSignature, Malformed, Stale};
        // (value, now, the request it comes with, result)
        let cases: Vec<(&str, u64, Hop<'_>, Result<Signed, HopError>)> = vec![
            (&v, 1_000_000, hop, signed("a", 1_000_000)),
            (&v, 1_000_000 + WINDOW_MS, hop, signed("a", 1_000_000)),
            (&v, 1_000_000 - WINDOW_MS, hop, signed("a", 1_000_000)),
            (&v, 1_000_001 + WINDOW_MS, hop, Err(Stale)),
            (&v, 999_999 - WINDOW_MS, hop, Err(Stale)),
            (&v, 1_000_000, other("POST", hop.target, hop.cache_id), Err(BadSignature)),
            (&v, 1_000_000, other("GET", "/r/ValueSet/$expand?x=2", hop.cache_id), Err(BadSignature)),
            (&v, 1_000_000, other("GET", hop.target, "c.tx1.9.99.ab"), Err(BadSignature)),
            (&v, 1_000_000, other("GET", hop.target, ""), Err(BadSignature)),
            (&shifted, 1_000_000, hop, Err(BadSignature)),
            (&as_b, 1_000_000, hop, Err(BadSignature)),
            (&renumbered, 1_000_000, hop, Err(BadSignature)),
            (&other_cluster, 1_000_000, hop, Err(BadSignature)),
            ("", 1_000_000, hop, Err(Malformed)),
            ("a.1000000", 1_000_000, hop, Err(Malformed)),
            ("a.1000000.00", 1_000_000, hop, Err(Malformed)),
            ("a.soon.00.00", 1_000_000, hop, Err(Malformed)),
            (&v[..v.len() - 1], 1_000_000, hop, Err(Malformed)),
            // The header of the version before, without a nonce.
            (&unnumbered, 1_000_000, hop, Err(Malformed)),
            (&nonce_short, 1_000_000, hop, Err(Malformed)),
            (&nonce_not_hex, 1_000_000, hop, Err(Malformed)),
        ];
        for (value, now, req, want) in cases {
            assert_eq!(h.verify(value, now, &req), want, "{value:?} at {now} with {req:?}");
        }
        let zero = format!(".1000000.{nonce}.{}", "0".repeat(64));
        assert_eq!(h.verify(&zero, 1_000_000, &hop), Err(Malformed));
        // The last three fields are the time, the nonce and the mac: the parse does not depend on the node name.
        let dotted = h.sign("a.b", 5, N, &hop);
        assert_eq!(h.verify(&dotted, 5, &hop).map(|s| s.node), Ok("a.b".into()));
    }

    #[test]
    fn each_node_and_nonce_is_accepted_once() {
        let h = Hops::new(SECRET);
        let hop = Hop { method: "GET", target: "/x", cache_id: "b.tx1.1" };
        let t = 1_000_000;
        let at = |node: &str, ms: u64, run: u64, counter: u64| h.sign(node, ms, Nonce { run, counter }, &hop);
        use HopError::{BadSignature, Full, Replayed, Stale, TooLate};
        // In order, on one table: (value, now, result). Upper-case hex digits name the same nonce.
        let first = at("a", t, 1, 10);
        let shouted = {
            let (head, mac) = first.rsplit_once('.').expect("a mac");
            format!("{}.{}", head.to_uppercase().replacen('A', "a", 1), mac.to_uppercase())
        };
        let cases: Vec<(String, u64, Result<String, HopError>)> = vec![
            (first.clone(), t, Ok("a".into())),
            (first.clone(), t, Err(Replayed)),
            (first.clone(), t + WINDOW_MS, Err(Replayed)),
            (shouted, t + 1, Err(Replayed)),
            (first.clone(), t + WINDOW_MS + 1, Err(Stale)),
            // The same nonce from another node, or another run of the same node, is another hop.
            (at("b", t, 1, 10), t, Ok("b".into())),
            (at("a", t, 2, 10), t, Ok("a".into())),
            // Out of order within the span; then too far behind the newest.
            (at("a", t, 1, 12), t, Ok("a".into())),
            (at("a", t, 1, 11), t, Ok("a".into())),
            (at("a", t, 1, 11), t, Err(Replayed)),
            (at("a", t, 1, 10 + SPAN), t, Ok("a".into())),
            (at("a", t, 1, 10), t, Err(TooLate)),
            (at("a", t, 1, 11), t, Err(Replayed)),
            // A forged one leaves the table as it was.
            (at("a", t, 1, 13).replacen(".1000000.", ".1000001.", 1), t, Err(BadSignature)),
            (at("a", t, 1, 13), t, Ok("a".into())),
        ];
        let mut accepted = accepted();
        for (i, (value, now, want)) in cases.into_iter().enumerate() {
            assert_eq!(h.check(&value, now, &hop, &mut accepted), want, "case {i}: {value:?} at {now}");
        }
        assert_eq!(accepted.senders(), 3);
        // Full: a new run is refused while every remembered one is current; once they are stale, it is let in.
        let mut small: Accepted = Replay::new(WINDOW_MS, SPAN, 2);
        assert_eq!(h.check(&at("a", t, 1, 0), t, &hop, &mut small), Ok("a".into()));
        assert_eq!(h.check(&at("b", t, 1, 0), t, &hop, &mut small), Ok("b".into()));
        assert_eq!(h.check(&at("c", t, 1, 0), t, &hop, &mut small), Err(Full));
        assert_eq!(h.check(&at("a", t, 1, 1), t, &hop, &mut small), Ok("a".into()), "known runs go on");
        let later = t + WINDOW_MS + 1;
        assert_eq!(h.check(&at("c", later, 1, 0), later, &hop, &mut small), Ok("c".into()));
        assert_eq!(small.senders(), 1);
    }
}
