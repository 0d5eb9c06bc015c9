//! Proof that an action POST comes from the agent, for the one process it is sent to. Each POST of an action change
//! (to a process's admin endpoint and to `[actions] post_url`) carries
//!
//! ```text
//! X-Monitor-Proof: t=<unix ms>,n=<nonce: 32 hex digits>,mac=<64 hex digits>
//! ```
//!
//! where mac = HMAC-SHA256(secret, `<t>\n<n>\n<METHOD>\n<authority>\n<target>\n<body>`): `<t>` and `<n>` exactly as
//! they appear in the header, the method (`POST`), the authority the request is sent to, the request target as sent
//! (path and query) and the exact body bytes. The authority is `host:port` as the agent addresses the receiver, the
//! host in lower case and the port always written (the request's `Host` header carries the same): under `monitor
//! run` a process's admin endpoint is `127.0.0.1:<its port>`; under `monitor agent` it is the address of the lowest
//! TCP port the process listens on, a listener on `0.0.0.0` reached at `127.0.0.1`, one on `::` at `[::1]`; for
//! `post_url` it is the URL's host and port (80 or 443 when it names none). A proof captured on its way to one process
//! is thus no good at another within the window.
//!
//! A receiver accepts a proof whose mac matches for its own authority (compared in constant time), whose time is
//! within [`WINDOW_MS`] of its own clock either side, and whose nonce it has not accepted before within that window
//! ([`Verifier`]). It knows its authority from where it listens, never from the request's `Host` header, which
//! whoever sends the request writes. On an admin endpoint it then acts only on a body whose `pid` is its own.
//!
//! The secret is the group's, 32 bytes or more: made at random by `monitor run` and handed to every child it
//! starts as hex in [`SECRET_ENV`], or read from `[actions] secret_file`. Signing and verifying are pure: the clock
//! and the nonce are parameters of [`Key::sign_at`] and [`Verifier::verify_at`].

use crate::base::token::{hex, keyed, unhex, HmacSha256};
use hmac::Mac;
use std::collections::HashMap;

/// Milliseconds since the Unix epoch now: what a proof is stamped with and checked against.
pub use crate::base::units::unix_ms as now_ms;

/// The header the proof travels in.
pub const HEADER: &str = "X-Monitor-Proof";
/// The variable `monitor run` hands its children the secret in, as lower-case hex.
pub const SECRET_ENV: &str = "MONITOR_ACTION_SECRET";
/// How far a proof's time may be from the receiver's clock, either side.
pub const WINDOW_MS: u64 = 30_000;
/// The shortest secret accepted.
pub(crate) const MIN_SECRET_BYTES: usize = 32;
/// The random bytes of a nonce (32 hex digits).
pub(crate) const NONCE_BYTES: usize = 16;
/// The most nonces a [`Verifier`] remembers at once: past it, a new proof is refused until older ones leave the
/// window. Only proofs whose mac matches are remembered, so only a holder of the secret can fill it.
pub(crate) const MAX_REMEMBERED: usize = 4096;

/// Why a proof was not accepted (or not made).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("no {HEADER} header")]
    Missing,
    #[error("{HEADER} is not t=<unix ms>,n=<32 hex digits>,mac=<64 hex digits>")]
    Malformed,
    #[error("{HEADER} does not match the request (another secret or receiver, or an altered method, target or body)")]
    BadMac,
    #[error("{HEADER} was made {skew_ms} ms from now, outside the {WINDOW_MS} ms window")]
    Stale { skew_ms: i128 },
    #[error("{HEADER} was accepted before (its nonce was seen within the window)")]
    Replayed,
    #[error("{MAX_REMEMBERED} proofs within the window already: refused until older ones leave it")]
    Busy,
    #[error("the secret is {0} bytes, must be at least {MIN_SECRET_BYTES}")]
    ShortSecret(usize),
    #[error("no random bytes from the kernel: {0}")]
    Random(String),
}

/// `N` bytes from the kernel's random source.
fn random<const N: usize>() -> Result<[u8; N], ProofError> {
    use rand::TryRng;
    let mut b = [0u8; N];
    rand::rngs::SysRng.try_fill_bytes(&mut b).map_err(|e| ProofError::Random(e.to_string()))?;
    Ok(b)
}

/// A new random secret of [`MIN_SECRET_BYTES`] (`monitor run`'s when `[actions] secret_file` is unset).
pub(crate) fn random_secret() -> Result<Vec<u8>, ProofError> {
    Ok(random::<MIN_SECRET_BYTES>()?.to_vec())
}

/// The group's secret, ready to sign and check proofs with.
#[derive(Clone)]
pub struct Key {
    mac: HmacSha256,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Key {
    /// A key from `secret`, which must be [`MIN_SECRET_BYTES`] or more.
    pub fn new(secret: &[u8]) -> Result<Key, ProofError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(ProofError::ShortSecret(secret.len()));
        }
        Ok(Key { mac: keyed(secret) })
    }

    /// The mac over the signed string of `t`, `n`, `method`, `authority` (lower-cased here), `target` and `body`.
    fn mac(&self, t: &str, n: &str, method: &str, authority: &str, target: &str, body: &[u8]) -> HmacSha256 {
        let mut m = self.mac.clone();
        for part in [t, n, method, &authority.to_ascii_lowercase(), target] {
            m.update(part.as_bytes());
            m.update(b"\n");
        }
        m.update(body);
        m
    }

    /// The header value for a request made now to `authority` (`host:port`), with a fresh random nonce.
    pub fn sign(&self, method: &str, authority: &str, target: &str, body: &[u8]) -> Result<String, ProofError> {
        Ok(self.sign_at(method, authority, target, body, now_ms(), &random::<NONCE_BYTES>()?))
    }

    /// The header value for a request made at `t_ms` with `nonce` to `authority` (`host:port`, the host's case aside).
    pub fn sign_at(
        &self,
        method: &str,
        authority: &str,
        target: &str,
        body: &[u8],
        t_ms: u64,
        nonce: &[u8; NONCE_BYTES],
    ) -> String {
        let (t, n) = (t_ms.to_string(), hex(nonce));
        let mac = hex(&self.mac(&t, &n, method, authority, target, body).finalize().into_bytes());
        format!("t={t},n={n},mac={mac}")
    }
}

/// A header value split into its fields, each as written (spaces around them dropped).
struct Fields<'a> {
    t: &'a str,
    n: &'a str,
    mac: &'a str,
}

fn fields(header: &str) -> Option<Fields<'_>> {
    let mut parts = header.split(',').map(str::trim);
    let t = parts.next()?.strip_prefix("t=")?;
    let n = parts.next()?.strip_prefix("n=")?;
    let mac = parts.next()?.strip_prefix("mac=")?;
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let ok = parts.next().is_none()
        && (1..=20).contains(&t.len())
        && digits(t)
        && n.len() == 2 * NONCE_BYTES
        && mac.len() == 64;
    ok.then_some(Fields { t, n, mac })
}

/// Checks proofs for one receiver: the mac for its own authority, the time window and the nonces seen within it (at
/// most [`MAX_REMEMBERED`], each forgotten once its time has left the window).
#[derive(Debug)]
pub struct Verifier {
    key: Key,
    /// The receiver's own `host:port`, as the agent addresses it.
    authority: String,
    /// Each accepted nonce and its proof's time.
    seen: HashMap<[u8; NONCE_BYTES], u64>,
}

impl Verifier {
    /// The checker of the receiver at `authority`: its own `host:port` as the agent addresses it (see the module
    /// doc), known from where it listens; never the request's `Host` header, which the sender writes.
    pub fn new(key: Key, authority: &str) -> Verifier {
        Verifier { key, authority: authority.to_string(), seen: HashMap::new() }
    }

    /// Accepts the request if `header` (the value of [`HEADER`], None when absent) proves it, now.
    pub fn verify(&mut self, header: Option<&str>, method: &str, target: &str, body: &[u8]) -> Result<(), ProofError> {
        self.verify_at(header, method, target, body, now_ms())
    }

    /// Accepts the request if `header` proves it at `now_ms`: a well-formed header whose mac matches for this
    /// receiver's authority (a tampered proof, or one made for another receiver, is `BadMac` whatever its time), made within [`WINDOW_MS`] of `now_ms`, with a nonce not accepted
    /// before. An accepted nonce is remembered.
    pub fn verify_at(
        &mut self,
        header: Option<&str>,
        method: &str,
        target: &str,
        body: &[u8],
        now_ms: u64,
    ) -> Result<(), ProofError> {
        let f = fields(header.ok_or(ProofError::Missing)?).ok_or(ProofError::Malformed)?;
        let nonce: [u8; NONCE_BYTES] = unhex(f.n).and_then(|b| b.try_into().ok()).ok_or(ProofError::Malformed)?;
        let mac = unhex(f.mac).ok_or(ProofError::Malformed)?;
        // verify_slice compares in constant time.
        let signed = self.key.mac(f.t, f.n, method, &self.authority, target, body);
        signed.verify_slice(&mac).map_err(|_| ProofError::BadMac)?;
        let t: u64 = f.t.parse().map_err(|_| ProofError::Malformed)?;
        let skew_ms = i128::from(now_ms) - i128::from(t);
        if skew_ms.unsigned_abs() > u128::from(WINDOW_MS) {
            return Err(ProofError::Stale { skew_ms });
        }
        // Nonces whose proofs have left the window are stale anyway: forgotten.
        self.seen.retain(|_, at| at.saturating_add(WINDOW_MS) >= now_ms);
        if self.seen.contains_key(&nonce) {
            return Err(ProofError::Replayed);
        }
        if self.seen.len() >= MAX_REMEMBERED {
            return Err(ProofError::Busy);
        }
        self.seen.insert(nonce, t);
        Ok(())
    }

    /// How many nonces it remembers now.
    pub fn remembered(&self) -> usize {
        self.seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";
    const BODY: &[u8] = br#"{"pid":42,"name":"tx1","action":"refuse","state":"refusing","ratio":0.86,"cgroup":"/g"}"#;
    const T: u64 = 1_700_000_000_000;
    const P: &str = "/admin/memory";
    /// tx1's admin endpoint, as `monitor run` addresses it.
    const A: &str = "127.0.0.1:3002";

    fn key() -> Key {
        Key::new(SECRET).expect("32 bytes")
    }

    /// The verifier of the receiver at [`A`].
    fn at_a() -> Verifier {
        Verifier::new(key(), A)
    }

    /// A header, the request's method, target and body, the time it is checked at, and the verdict.
    type Case<'a> = (Option<String>, &'a str, &'a str, &'a [u8], u64, Result<(), ProofError>);

    fn nonce(i: u8) -> [u8; NONCE_BYTES] {
        [i; NONCE_BYTES]
    }

    #[test]
    fn the_header_is_the_documented_string_signed() {
        let h = key().sign_at("POST", A, P, BODY, T, &nonce(0xab));
        let n = "ab".repeat(16);
        let mut m = keyed(SECRET);
        m.update(format!("{T}\n{n}\nPOST\n127.0.0.1:3002\n/admin/memory\n").as_bytes());
        m.update(BODY);
        assert_eq!(h, format!("t={T},n={n},mac={}", hex(&m.finalize().into_bytes())));
        // The host is signed in lower case, whichever case it was given in.
        let mut m = keyed(SECRET);
        m.update(format!("{T}\n{n}\nPOST\nrelay.example:80\n/r\n").as_bytes());
        let lower = format!("t={T},n={n},mac={}", hex(&m.finalize().into_bytes()));
        assert_eq!(key().sign_at("POST", "Relay.EXAMPLE:80", "/r", b"", T, &nonce(0xab)), lower);
    }

    #[test]
    fn proofs_are_accepted_only_for_the_exact_request_in_time_and_once() {
        use ProofError::{BadMac, Malformed, Missing, Replayed, Stale};
        let good = key().sign_at("POST", A, P, BODY, T, &nonce(1));
        let other = Key::new(b"another secret of thirty-two byt").expect("32 bytes");
        let mut altered = BODY.to_vec();
        altered[8] ^= 1;
        let w = WINDOW_MS;
        let cases: Vec<Case> = vec![
            (Some(good.clone()), "POST", P, BODY, T, Ok(())),
            (Some(good.clone()), "POST", P, BODY, T + w, Ok(())),
            (Some(good.clone()), "POST", P, BODY, T - w, Ok(())),
            (Some(good.clone()), "POST", P, &altered, T, Err(BadMac)),
            (Some(good.clone()), "POST", P, b"", T, Err(BadMac)),
            (Some(good.clone()), "POST", "/ADMIN/memory", BODY, T, Err(BadMac)),
            (Some(good.clone()), "POST", "/admin/memory?x=1", BODY, T, Err(BadMac)),
            (Some(good.clone()), "PUT", P, BODY, T, Err(BadMac)),
            (Some(other.sign_at("POST", A, P, BODY, T, &nonce(1))), "POST", P, BODY, T, Err(BadMac)),
            (Some(good.replace(&format!("t={T}"), &format!("t={}", T + 1))), "POST", P, BODY, T, Err(BadMac)),
            (Some(good.replace(&"01".repeat(16), &"02".repeat(16))), "POST", P, BODY, T, Err(BadMac)),
            (Some(good.clone()), "POST", P, BODY, T + w + 1, Err(Stale { skew_ms: i128::from(w) + 1 })),
            (Some(good.clone()), "POST", P, BODY, T - w - 1, Err(Stale { skew_ms: -i128::from(w) - 1 })),
            (None, "POST", P, BODY, T, Err(Missing)),
            (Some(String::new()), "POST", P, BODY, T, Err(Malformed)),
            (Some(good.replace(",n=", ",x=")), "POST", P, BODY, T, Err(Malformed)),
            (Some(format!("{good},x=1")), "POST", P, BODY, T, Err(Malformed)),
            (Some(good.replace(&format!("t={T}"), "t=-1")), "POST", P, BODY, T, Err(Malformed)),
            (
                Some(good.replace(&format!("t={T}"), &format!("t={}", "9".repeat(21)))),
                "POST",
                P,
                BODY,
                T,
                Err(Malformed),
            ),
            (Some(good.replace(&"01".repeat(16), &"zz".repeat(16))), "POST", P, BODY, T, Err(Malformed)),
            (Some(good[..good.len() - 2].to_string()), "POST", P, BODY, T, Err(Malformed)),
        ];
        for (i, (header, method, target, body, now, want)) in cases.into_iter().enumerate() {
            // A verifier each: the first good case would make the others replays.
            let mut v = at_a();
            assert_eq!(v.verify_at(header.as_deref(), method, target, body, now), want, "case {i}: {header:?}");
        }
        // Spaces after the commas, as a header may be written by hand, change nothing.
        let spaced = good.replace(',', ", ");
        assert_eq!(at_a().verify_at(Some(&spaced), "POST", P, BODY, T), Ok(()));
        // Once accepted, the same proof is a replay, within the window and at its edge.
        let mut v = at_a();
        assert_eq!(v.verify_at(Some(&good), "POST", P, BODY, T), Ok(()));
        assert_eq!(v.verify_at(Some(&good), "POST", P, BODY, T + 1), Err(Replayed));
        assert_eq!(v.verify_at(Some(&good), "POST", P, BODY, T + w), Err(Replayed));
        // After the window it is stale, and forgotten.
        assert_eq!(v.verify_at(Some(&good), "POST", P, BODY, T + w + 1), Err(Stale { skew_ms: 30_001 }));
        let fresh = key().sign_at("POST", A, P, BODY, T + w + 1, &nonce(2));
        assert_eq!(v.verify_at(Some(&fresh), "POST", P, BODY, T + w + 1), Ok(()));
        assert_eq!(v.remembered(), 1, "the first nonce left with its window");
    }

    #[test]
    fn a_proof_is_good_at_its_own_receiver_only() {
        // Captured on its way to tx1 (A) and replayed, unchanged, within the window.
        let for_a = key().sign_at("POST", A, P, BODY, T, &nonce(1));
        // At a sibling on the next port, and at every other receiver, the mac fails: each checks against its own
        // authority, the one it listens at.
        for b in ["127.0.0.1:3003", "127.0.0.1:30020", "127.0.0.2:3002", "localhost:3002", "[::1]:3002", "127.0.0.1"] {
            assert_eq!(
                Verifier::new(key(), b).verify_at(Some(&for_a), "POST", P, BODY, T),
                Err(ProofError::BadMac),
                "{b}"
            );
        }
        // Sent to the sibling with `Host: 127.0.0.1:3002`, it fares no better: nothing of the request names the
        // authority a verifier checks, which is fixed when it is made. A receiver that took it from the `Host`
        // header instead would be fooled, which is why it must not.
        let mut sibling = Verifier::new(key(), "127.0.0.1:3003");
        assert_eq!(sibling.verify_at(Some(&for_a), "POST", P, BODY, T), Err(ProofError::BadMac));
        let spoofed_host = A;
        assert_eq!(Verifier::new(key(), spoofed_host).verify_at(Some(&for_a), "POST", P, BODY, T), Ok(()));
        assert_eq!(sibling.remembered(), 0, "a proof for another receiver was remembered");
        // At its own receiver it is good once, the host's case aside.
        let mut a = Verifier::new(key(), A);
        assert_eq!(a.verify_at(Some(&for_a), "POST", P, BODY, T), Ok(()));
        assert_eq!(a.verify_at(Some(&for_a), "POST", P, BODY, T), Err(ProofError::Replayed));
        let relay = key().sign_at("POST", "relay.example:8080", "/r", BODY, T, &nonce(2));
        assert_eq!(Verifier::new(key(), "Relay.Example:8080").verify_at(Some(&relay), "POST", "/r", BODY, T), Ok(()));
    }

    #[test]
    fn the_nonces_remembered_are_bounded() {
        let mut v = at_a();
        for i in 0..MAX_REMEMBERED as u32 {
            let mut n = [0u8; NONCE_BYTES];
            n[..4].copy_from_slice(&i.to_be_bytes());
            let h = key().sign_at("POST", A, "/a", b"", T, &n);
            assert_eq!(v.verify_at(Some(&h), "POST", "/a", b"", T), Ok(()), "proof {i}");
        }
        let one_more = key().sign_at("POST", A, "/a", b"", T, &[0xff; NONCE_BYTES]);
        assert_eq!(v.verify_at(Some(&one_more), "POST", "/a", b"", T), Err(ProofError::Busy));
        // Forged proofs are never remembered, so they cannot fill it.
        let forged = one_more.replace("t=", "t=1");
        assert_eq!(v.verify_at(Some(&forged), "POST", "/a", b"", T), Err(ProofError::BadMac));
        assert_eq!(v.remembered(), MAX_REMEMBERED);
        // Once the window has passed, the old nonces go and new proofs are taken again.
        let later = T + WINDOW_MS + 1;
        let next = key().sign_at("POST", A, "/a", b"", later, &[0xff; NONCE_BYTES]);
        assert_eq!(v.verify_at(Some(&next), "POST", "/a", b"", later), Ok(()));
        assert_eq!(v.remembered(), 1);
    }

    #[test]
    fn secrets_are_long_enough_and_proofs_fresh() {
        assert_eq!(Key::new(&SECRET[..31]).map(|_| ()), Err(ProofError::ShortSecret(31)));
        let s = random_secret().expect("random");
        assert_eq!(s.len(), MIN_SECRET_BYTES);
        assert_ne!(s, random_secret().expect("random"), "two secrets drawn alike");
        let k = key();
        let sign = || k.sign("POST", A, "/a", BODY).expect("signed");
        let (a, b) = (sign(), sign());
        assert_ne!(a, b, "each proof has its own nonce");
        let mut v = at_a();
        assert_eq!((v.verify(Some(&a), "POST", "/a", BODY), v.verify(Some(&b), "POST", "/a", BODY)), (Ok(()), Ok(())));
    }
}
