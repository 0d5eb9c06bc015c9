//! Signed cache ids (cyoda's routing tokens): the front door rewrites a process's `X-Cache-Id: <process>.<id>` to
//! `<node>.<process>.<id>.<expiry>.<mac>` ([`NodeTokens`]), where `<node>` is the node that owns the cache,
//! `<expiry>` is in seconds since the Unix epoch and mac = HMAC-SHA256(secret, everything before it) in hex, and
//! checks it in constant time on the way back. Malformed: 400; tampered: 401; expired: 410; the owner unavailable:
//! 503 (the proxy's part). A forged prefix is never routed to the process it names.
//!
//! A single host is the one-node case ([`HostTokens`]): the same form, with the host's own node name (the host
//! name up to its first dot, as `[cluster] node` defaults to), so a host that joins a cluster later keeps its
//! ids. It also accepts, until they expire, ids of the form `<process>.<id>~<expiry>.<mac>` ([`Tokens`]) that an
//! older monitor handed to clients, so an upgrade loses no cache.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::{SystemTime, UNIX_EPOCH};

/// The mac of cache ids, and of the cluster's datagrams and hop headers.
pub(crate) type HmacSha256 = Hmac<Sha256>;

/// HMAC-SHA256 keyed with `key`.
pub(crate) fn keyed(key: &[u8]) -> HmacSha256 {
    match HmacSha256::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    }
}

/// Why a cache id was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("cache id is not a signed token")]
    Malformed,
    #[error("cache id signature does not match")]
    BadSignature,
    #[error("cache id expired")]
    Expired,
}

/// Signs and verifies cache ids of the form `<process>.<id>~<expiry>.<mac>`, which older single-host monitors
/// minted: verified still, so the ids clients hold stay valid until they expire.
#[derive(Clone)]
pub struct Tokens {
    mac: HmacSha256,
    ttl_s: u64,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// Lower-case hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

/// The bytes of a hex text (either case); None for an odd length or a character that is not a hex digit.
pub(crate) fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes().chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

impl Tokens {
    pub fn new(secret: &[u8], ttl_s: u64) -> Tokens {
        Tokens { mac: keyed(secret), ttl_s }
    }

    /// The signed form of a process's cache id, valid for the configured lifetime.
    pub fn sign(&self, id: &str) -> String {
        self.sign_at(id, now_s())
    }

    pub fn sign_at(&self, id: &str, now_s: u64) -> String {
        let body = format!("{id}~{}", now_s.saturating_add(self.ttl_s));
        let mut mac = self.mac.clone();
        mac.update(body.as_bytes());
        let sig = hex(&mac.finalize().into_bytes());
        format!("{body}.{sig}")
    }

    /// The process's own cache id inside a valid token.
    pub fn verify(&self, token: &str) -> Result<String, TokenError> {
        self.verify_at(token, now_s())
    }

    pub fn verify_at(&self, token: &str, now_s: u64) -> Result<String, TokenError> {
        let (body, sig) = token.rsplit_once('.').ok_or(TokenError::Malformed)?;
        let sig = unhex(sig).ok_or(TokenError::Malformed)?;
        let mut mac = self.mac.clone();
        mac.update(body.as_bytes());
        // verify_slice compares in constant time.
        mac.verify_slice(&sig).map_err(|_| TokenError::BadSignature)?;
        let (id, exp) = body.rsplit_once('~').ok_or(TokenError::Malformed)?;
        let exp: u64 = exp.parse().map_err(|_| TokenError::Malformed)?;
        if now_s > exp {
            return Err(TokenError::Expired);
        }
        Ok(id.to_string())
    }
}

impl TokenError {
    /// The HTTP status a request with this token gets: malformed 400, tampered (forged, another cluster's) 401,
    /// expired 410.
    pub fn status(&self) -> u16 {
        match self {
            TokenError::Malformed => 400,
            TokenError::BadSignature => 401,
            TokenError::Expired => 410,
        }
    }
}

/// The owner a valid node-bound token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub node: String,
    pub process: String,
    /// The process's own cache id, `<process>.<id>`, as it issued it.
    pub cache_id: String,
    /// Seconds since the Unix epoch.
    pub expiry: u64,
}

/// Signs cache ids for one node and verifies any node's, with the cluster's `token_secret`.
#[derive(Clone)]
pub struct NodeTokens {
    mac: HmacSha256,
    node: String,
    ttl_s: u64,
}

impl NodeTokens {
    /// `node` has no dot (a config's node name).
    pub fn new(secret: &[u8], node: &str, ttl_s: u64) -> NodeTokens {
        NodeTokens { mac: keyed(secret), node: node.to_string(), ttl_s }
    }

    fn mac_hex(&self, body: &str) -> String {
        let mut mac = self.mac.clone();
        mac.update(body.as_bytes());
        hex(&mac.finalize().into_bytes())
    }

    /// The token for a process's cache id `<process>.<id>`, valid for the configured lifetime; None for an id
    /// without a process prefix and an id, which is passed on as it is.
    pub fn sign(&self, cache_id: &str) -> Option<String> {
        self.sign_at(cache_id, now_s())
    }

    pub fn sign_at(&self, cache_id: &str, now_s: u64) -> Option<String> {
        let (process, id) = cache_id.split_once('.')?;
        if process.is_empty() || id.is_empty() {
            return None;
        }
        let body = format!("{}.{cache_id}.{}", self.node, now_s.saturating_add(self.ttl_s));
        let sig = self.mac_hex(&body);
        Some(format!("{body}.{sig}"))
    }

    /// The owner named by a valid token.
    pub fn verify(&self, token: &str) -> Result<Owner, TokenError> {
        self.verify_at(token, now_s())
    }

    pub fn verify_at(&self, token: &str, now_s: u64) -> Result<Owner, TokenError> {
        use TokenError::{BadSignature, Expired, Malformed};
        let (body, sig) = token.rsplit_once('.').ok_or(Malformed)?;
        let (node, rest) = body.split_once('.').ok_or(Malformed)?;
        let (cache_id, expiry) = rest.rsplit_once('.').ok_or(Malformed)?;
        let (process, id) = cache_id.split_once('.').ok_or(Malformed)?;
        if node.is_empty() || process.is_empty() || id.is_empty() || expiry.is_empty() || sig.len() != 64 {
            return Err(Malformed);
        }
        let sig = unhex(sig).ok_or(Malformed)?;
        let mut mac = self.mac.clone();
        mac.update(body.as_bytes());
        // verify_slice compares in constant time.
        mac.verify_slice(&sig).map_err(|_| BadSignature)?;
        let expiry: u64 = expiry.parse().map_err(|_| Malformed)?;
        if now_s > expiry {
            return Err(Expired);
        }
        Ok(Owner { node: node.into(), process: process.into(), cache_id: cache_id.into(), expiry })
    }
}

/// What a single host's front door learns from a cache id ([`HostTokens::verify`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostOwner {
    /// This host's: the process's own cache id, `<process>.<id>`.
    Here(String),
    /// A valid token of another node (the host was renamed, or the id comes from a cluster sharing the secret):
    /// this host cannot serve it.
    Node(String),
}

/// The tokens of a front door without `[cluster]`: node-bound tokens naming this host, and the older form still
/// verified (see the module's documentation).
#[derive(Clone)]
pub struct HostTokens {
    node: NodeTokens,
    older: Tokens,
}

impl HostTokens {
    pub fn new(secret: &[u8], node: &str, ttl_s: u64) -> HostTokens {
        HostTokens { node: NodeTokens::new(secret, node, ttl_s), older: Tokens::new(secret, ttl_s) }
    }

    /// The token for a process's cache id `<process>.<id>` (None: not of that form, passed on as it is).
    pub fn sign(&self, cache_id: &str) -> Option<String> {
        self.node.sign(cache_id)
    }

    pub fn verify(&self, token: &str) -> Result<HostOwner, TokenError> {
        self.verify_at(token, now_s())
    }

    pub fn verify_at(&self, token: &str, now_s: u64) -> Result<HostOwner, TokenError> {
        // `~` is in no node-bound token: a node name, a process name and an expiry have none, and a process's id
        // with one would make the older form ambiguous anyway.
        if token.contains('~') {
            return self.older.verify_at(token, now_s).map(HostOwner::Here);
        }
        let owner = self.node.verify_at(token, now_s)?;
        if owner.node == self.node.node {
            Ok(HostOwner::Here(owner.cache_id))
        } else {
            Ok(HostOwner::Node(owner.node))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_tamper_expiry() {
        let t = Tokens::new(b"0123456789abcdef-secret", 60);
        let tok = t.sign_at("tx1.6f1c", 1000);
        assert!(tok.starts_with("tx1.6f1c~1060."), "{tok}");
        assert_eq!(t.verify_at(&tok, 1000), Ok("tx1.6f1c".into()));
        assert_eq!(t.verify_at(&tok, 1060), Ok("tx1.6f1c".into()));
        assert_eq!(t.verify_at(&tok, 1061), Err(TokenError::Expired));
        // A forged owner: same id and signature, another prefix.
        let forged = tok.replacen("tx1", "tx2", 1);
        assert_eq!(t.verify_at(&forged, 1000), Err(TokenError::BadSignature));
        // A stretched expiry.
        let stretched = tok.replacen("~1060", "~9999", 1);
        assert_eq!(t.verify_at(&stretched, 1000), Err(TokenError::BadSignature));
        // Another secret.
        let other = Tokens::new(b"another-secret-of-16", 60);
        assert_eq!(other.verify_at(&tok, 1000), Err(TokenError::BadSignature));
        for bad in ["", "tx1.6f1c", "tx1.6f1c.zz", "tx1.6f1c~1.abc", ".", "~."] {
            assert!(t.verify_at(bad, 1000).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hex_round_trips() {
        assert_eq!(unhex(&hex(&[0, 1, 0xab, 0xff])), Some(vec![0, 1, 0xab, 0xff]));
        assert_eq!(unhex("0g"), None);
        assert_eq!(unhex("abc"), None);
    }

    const NODE_SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn node_tokens_name_node_and_process_and_refuse_what_is_not_theirs() {
        let a = NodeTokens::new(NODE_SECRET, "a", 60);
        let b = NodeTokens::new(NODE_SECRET, "b", 60);
        let tok = a.sign_at("tx1.6f1c.9", 1000).expect("signed");
        let sig = tok.rsplit_once('.').map(|(_, s)| s.to_string()).expect("a mac");
        assert_eq!(tok, format!("a.tx1.6f1c.9.1060.{sig}"));
        assert_eq!(sig.len(), 64);
        let owner = Owner { node: "a".into(), process: "tx1".into(), cache_id: "tx1.6f1c.9".into(), expiry: 1060 };
        // Any node of the cluster verifies any node's tokens.
        assert_eq!(b.verify_at(&tok, 1000), Ok(owner.clone()));
        use TokenError::{BadSignature, Expired, Malformed};
        let other = NodeTokens::new(b"another secret of thirty-two byt", "a", 60);
        let forged_mac = format!("a.tx1.6f1c.9.1060.{}", "0".repeat(64));
        let cases: Vec<(String, u64, Result<Owner, TokenError>)> = vec![
            (tok.clone(), 1060, Ok(owner)),
            (tok.clone(), 1061, Err(Expired)),
            (tok.replacen("a.", "b.", 1), 1000, Err(BadSignature)),
            (tok.replacen("tx1", "tx2", 1), 1000, Err(BadSignature)),
            (tok.replacen(".1060.", ".9999.", 1), 1000, Err(BadSignature)),
            (tok.replacen("6f1c", "6f1d", 1), 1000, Err(BadSignature)),
            (other.sign_at("tx1.6f1c.9", 1000).expect("signed"), 1000, Err(BadSignature)),
            (forged_mac, 1000, Err(BadSignature)),
            // An expired token whose mac does not match is tampered first.
            (tok.replacen(".1060.", ".1.", 1), 1000, Err(BadSignature)),
            (format!("{tok}0"), 1000, Err(Malformed)),
            (tok[..tok.len() - 2].to_string(), 1000, Err(Malformed)),
            (tok.replacen(&sig, &"z".repeat(64), 1), 1000, Err(Malformed)),
            ("tx1.6f1c".into(), 1000, Err(Malformed)),
            ("".into(), 1000, Err(Malformed)),
            ("....".into(), 1000, Err(Malformed)),
            (format!("a.tx1.1060.{sig}"), 1000, Err(Malformed)),
            (format!(".tx1.x.1060.{sig}"), 1000, Err(Malformed)),
        ];
        for (token, now, want) in cases {
            assert_eq!(a.verify_at(&token, now), want, "{token:?} at {now}");
        }
        // A mac over a non-numeric expiry is well signed but not a token.
        let mut m = a.mac.clone();
        m.update(b"a.tx1.x.soon");
        let odd = format!("a.tx1.x.soon.{}", hex(&m.finalize().into_bytes()));
        assert_eq!(a.verify_at(&odd, 0), Err(Malformed));
        assert_eq!((Malformed.status(), BadSignature.status(), Expired.status()), (400, 401, 410));
        // Only `<process>.<id>` is signed; anything else is passed on as it is.
        for unsigned in ["tx1", "tx1.", ".x", ""] {
            assert_eq!(a.sign_at(unsigned, 1000), None, "{unsigned:?}");
        }
    }

    #[test]
    fn a_single_host_mints_node_bound_tokens_and_still_takes_the_older_form_until_it_expires() {
        let host = HostTokens::new(NODE_SECRET, "web1", 60);
        let tok = host.node.sign_at("tx1.6f1c", 1000).expect("signed");
        assert!(tok.starts_with("web1.tx1.6f1c.1060."), "{tok}");
        assert_eq!(host.verify_at(&tok, 1000), Ok(HostOwner::Here("tx1.6f1c".into())));
        assert_eq!(host.verify_at(&tok, 1061), Err(TokenError::Expired));
        // The same secret on a host named otherwise: valid, but not this host's cache.
        let renamed = HostTokens::new(NODE_SECRET, "web2", 60);
        assert_eq!(renamed.verify_at(&tok, 1000), Ok(HostOwner::Node("web1".into())));
        // The older form, as an older monitor minted it with the same secret.
        let older = Tokens::new(NODE_SECRET, 60).sign_at("tx1.6f1c", 1000);
        assert_eq!(host.verify_at(&older, 1000), Ok(HostOwner::Here("tx1.6f1c".into())));
        assert_eq!(host.verify_at(&older, 1061), Err(TokenError::Expired));
        assert_eq!(host.verify_at(&older.replacen("tx1", "tx2", 1), 1000), Err(TokenError::BadSignature));
        for bad in ["", "garbage", "tx1.1", "tx1.1~x", "~"] {
            assert_eq!(host.verify_at(bad, 1000).map_err(|e| e.status()), Err(400), "{bad:?}");
        }
    }
}
