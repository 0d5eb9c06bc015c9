//! Signed cache ids as a client may send them, to a single host and to a cluster node: verification never panics,
//! and nothing but what a front door minted verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::base::token::{HostTokens, NodeTokens};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let secret = b"a secret of at least thirty-two bytes";
    let host = HostTokens::new(secret, "web1", 3600);
    assert!(host.verify_at(text, 1_000_000).is_err(), "a forged token verified on a host: {text:?}");
    let node = NodeTokens::new(secret, "a", 3600);
    assert!(node.verify_at(text, 1_000_000).is_err(), "a forged token verified on a node: {text:?}");
});
