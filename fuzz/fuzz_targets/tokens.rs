//! Signed cache ids as a client may send them: verification never panics, and nothing but what the front door
//! minted verifies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::token::Tokens;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let tokens = Tokens::new(b"a secret of at least sixteen bytes", 3600);
    assert!(tokens.verify_at(text, 1_000_000).is_err(), "a forged token verified: {text:?}");
});
