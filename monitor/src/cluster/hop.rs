//! The header a node puts on a request it forwards to the owner of its cache: `X-Monitor-Hop:
//! <from node>.<unix ms>.<mac>`, mac = HMAC-SHA256 (hex) with a key derived from the cluster secret over the node,
//! the time, the method, the path and query, and the cache id. Only members can make one; it holds for one request
//! (a captured header does not carry over to another path or cache id) and for [`WINDOW_MS`] either side of the
//! receiver's clock. A request that carries a valid one is never forwarded again. Pure: the caller gives the time.

use super::wire::derive_key;
use crate::token::{hex, keyed, unhex, HmacSha256};
use hmac::Mac;

/// The header's name.
pub const HEADER: &str = "x-monitor-hop";

/// How far a hop's time may be from the receiver's (clock skew plus the time in flight), in milliseconds.
pub const WINDOW_MS: u64 = 30_000;

/// What a hop is bound to.
#[derive(Debug, Clone, Copy)]
pub struct Hop<'a> {
    pub method: &'a str,
    /// Path and query, as sent.
    pub target: &'a str,
    /// The cache id header's value, as sent ("" without one).
    pub cache_id: &'a str,
}

/// Why a hop header was refused (403).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HopError {
    #[error("hop header malformed")]
    Malformed,
    #[error("hop header signature does not match")]
    BadSignature,
    #[error("hop header outside its time window")]
    Stale,
}

/// Signs and checks hop headers with the cluster secret.
#[derive(Clone)]
pub struct Hops {
    mac: HmacSha256,
}

impl Hops {
    pub fn new(secret: &[u8]) -> Hops {
        Hops { mac: keyed(&derive_key(secret, "monitor cluster hop v1")) }
    }

    fn mac(&self, node: &str, ms: u64, hop: &Hop<'_>) -> HmacSha256 {
        let mut m = self.mac.clone();
        // Each field ends with a byte none of them can hold in a header or a request line.
        for field in [node, &ms.to_string(), hop.method, hop.target, hop.cache_id] {
            m.update(field.as_bytes());
            m.update(b"\n");
        }
        m
    }

    /// The header value `node` sends with `hop` at `now_ms`.
    pub fn sign(&self, node: &str, now_ms: u64, hop: &Hop<'_>) -> String {
        format!("{node}.{now_ms}.{}", hex(&self.mac(node, now_ms, hop).finalize().into_bytes()))
    }

    /// The node that forwarded `hop`, when its header is valid at `now_ms`.
    pub fn verify(&self, value: &str, now_ms: u64, hop: &Hop<'_>) -> Result<String, HopError> {
        let (rest, sig) = value.rsplit_once('.').ok_or(HopError::Malformed)?;
        let (node, ms) = rest.rsplit_once('.').ok_or(HopError::Malformed)?;
        let ms: u64 = ms.parse().map_err(|_| HopError::Malformed)?;
        // A mac is 32 bytes: 64 hex digits.
        let sig = Some(sig).filter(|s| s.len() == 64).and_then(unhex).ok_or(HopError::Malformed)?;
        if node.is_empty() {
            return Err(HopError::Malformed);
        }
        // verify_slice compares in constant time.
        self.mac(node, ms, hop).verify_slice(&sig).map_err(|_| HopError::BadSignature)?;
        if now_ms.abs_diff(ms) > WINDOW_MS {
            return Err(HopError::Stale);
        }
        Ok(node.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn a_hop_holds_for_its_request_its_window_and_its_cluster_only() {
        let h = Hops::new(SECRET);
        let hop = Hop { method: "GET", target: "/r/ValueSet/$expand?x=1", cache_id: "b.tx1.9.99.ab" };
        let v = h.sign("a", 1_000_000, &hop);
        assert!(v.starts_with("a.1000000.") && v.len() == "a.1000000.".len() + 64, "{v}");
        let other_cluster = Hops::new(b"another secret of thirty-two byt").sign("a", 1_000_000, &hop);
        let shifted = v.replacen(".1000000.", ".1000001.", 1);
        let as_b = v.replacen("a.", "b.", 1);
        let other = |method, target, cache_id| Hop { method, target, cache_id };
        use HopError::{BadSignature, Malformed, Stale};
        // (value, now, the request it comes with, result)
        let cases: Vec<(&str, u64, Hop<'_>, Result<String, HopError>)> = vec![
            (&v, 1_000_000, hop, Ok("a".into())),
            (&v, 1_000_000 + WINDOW_MS, hop, Ok("a".into())),
            (&v, 1_000_000 - WINDOW_MS, hop, Ok("a".into())),
            (&v, 1_000_001 + WINDOW_MS, hop, Err(Stale)),
            (&v, 999_999 - WINDOW_MS, hop, Err(Stale)),
            (&v, 1_000_000, other("POST", hop.target, hop.cache_id), Err(BadSignature)),
            (&v, 1_000_000, other("GET", "/r/ValueSet/$expand?x=2", hop.cache_id), Err(BadSignature)),
            (&v, 1_000_000, other("GET", hop.target, "c.tx1.9.99.ab"), Err(BadSignature)),
            (&v, 1_000_000, other("GET", hop.target, ""), Err(BadSignature)),
            (&shifted, 1_000_000, hop, Err(BadSignature)),
            (&as_b, 1_000_000, hop, Err(BadSignature)),
            (&other_cluster, 1_000_000, hop, Err(BadSignature)),
            ("", 1_000_000, hop, Err(Malformed)),
            ("a.1000000", 1_000_000, hop, Err(Malformed)),
            ("a.soon.00", 1_000_000, hop, Err(Malformed)),
            (&v[..v.len() - 1], 1_000_000, hop, Err(Malformed)),
        ];
        for (value, now, req, want) in cases {
            assert_eq!(h.verify(value, now, &req), want, "{value:?} at {now} with {req:?}");
        }
        let zero = format!(".1000000.{}", "0".repeat(64));
        assert_eq!(h.verify(&zero, 1_000_000, &hop), Err(Malformed));
        // The last two fields are the time and the mac: the parse does not depend on the node name's characters.
        let dotted = h.sign("a.b", 5, &hop);
        assert_eq!(h.verify(&dotted, 5, &hop), Ok("a.b".into()));
    }
}
