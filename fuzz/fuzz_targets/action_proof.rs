//! The `X-Monitor-Proof` header of an action POST, as anyone who reaches a process's port may send it: the check
//! never panics; nothing but a proof made with the group's secret for this very request to this very receiver
//! passes (the corpus holds headers `Key::sign_at` made with this target's secret, time, receiver and request); one
//! that passes is refused the second time, as a replay, and at any other receiver.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::base::proof::{Key, ProofError, Verifier};

const SECRET: &[u8] = b"secret of the fuzz targets' group, 32+ bytes";
const NOW_MS: u64 = 1_700_000_000_000;
/// The receiver's own authority, as the agent addresses it.
const AUTHORITY: &str = "127.0.0.1:3002";
const TARGET: &str = "/admin/memory";
const BODY: &[u8] = br#"{"pid":4242,"name":"tx1","action":"abort","state":"aborting","ratio":0.93,"cgroup":"/g"}"#;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = std::str::from_utf8(data) else { return };
    let Ok(key) = Key::new(SECRET) else { return };
    let mut v = Verifier::new(key.clone(), AUTHORITY);
    if v.verify_at(Some(header), "POST", TARGET, BODY, NOW_MS).is_err() {
        return;
    }
    assert_eq!(v.remembered(), 1);
    assert_eq!(v.verify_at(Some(header), "POST", TARGET, BODY, NOW_MS), Err(ProofError::Replayed));
    // Bound to the request: another body or target does not pass with it.
    assert!(v.verify_at(Some(header), "POST", TARGET, b"{}", NOW_MS + 1).is_err());
    assert!(v.verify_at(Some(header), "POST", "/admin/other", BODY, NOW_MS + 1).is_err());
    // And to the receiver: a sibling on the next port, never having seen it, refuses it all the same.
    let mut sibling = Verifier::new(key, "127.0.0.1:3003");
    assert_eq!(sibling.verify_at(Some(header), "POST", TARGET, BODY, NOW_MS), Err(ProofError::BadMac));
});
