//! Signed cache ids (cyoda's routing tokens): the front door rewrites a process's `X-Cache-Id: <prefix>.<id>` to
//! `<prefix>.<id>~<expiry>.<hmac>`, where hmac = HMAC-SHA256(secret, `<prefix>.<id>~<expiry>`) in hex, and checks
//! it in constant time on the way back. Tampered or malformed: 401; expired: 410; the owner unavailable: 503 (the
//! proxy's part). A forged prefix is never routed to the process it names.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::{SystemTime, UNIX_EPOCH};

type HmacSha256 = Hmac<Sha256>;

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

/// Signs and verifies cache ids with one secret.
#[derive(Clone)]
pub struct Tokens {
    mac: HmacSha256,
    ttl_s: u64,
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 15)] as char);
    }
    s
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    s.as_bytes().chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

impl Tokens {
    pub fn new(secret: &[u8], ttl_s: u64) -> Tokens {
        // HMAC takes keys of any length; new_from_slice cannot fail for it.
        let mac = match HmacSha256::new_from_slice(secret) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts keys of any length"),
        };
        Tokens { mac, ttl_s }
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
}
