//! The `X-Monitor-Hop` header of a forwarded request, as any client or host on the network may send it: the check
//! never panics; nothing but a header a member signed passes (the corpus holds headers `Hops::sign` made with this
//! target's secret, time and request); and one that passes is refused the second time, as a replay.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::cluster::hop::{accepted, Hop, HopError, Hops};

const SECRET: &[u8] = b"secret of the fuzz targets' cluster, 32+ bytes";
const NOW_MS: u64 = 1_700_000_000_000;
const HOP: Hop<'static> =
    Hop { method: "GET", target: "/fhir/ValueSet/$expand?url=http%3A%2F%2Fx", cache_id: "a.tx1.1f2e.1700000060.00ff" };

fn hops() -> &'static Hops {
    static HOPS: std::sync::OnceLock<Hops> = std::sync::OnceLock::new();
    HOPS.get_or_init(|| Hops::new(SECRET))
}

fuzz_target!(|data: &[u8]| {
    // The front door hands the check the header's value as text when it is visible ASCII (HeaderValue::to_str),
    // and "" otherwise.
    let visible = data.iter().all(|&b| b == b'\t' || (0x20..0x7f).contains(&b));
    let value = if visible { std::str::from_utf8(data).unwrap_or_default() } else { "" };
    let hops = hops();
    let mut seen = accepted();
    let Ok(node) = hops.check(value, NOW_MS, &HOP, &mut seen) else { return };
    // It names what a member signed: signed again from its parts, it reads back the same.
    let signed = match hops.verify(value, NOW_MS, &HOP) {
        Ok(s) => s,
        Err(e) => panic!("{value:?} passed the check but not the verify: {e}"),
    };
    assert_eq!(signed.node, node);
    let again = hops.sign(&signed.node, signed.ms, signed.nonce, &HOP);
    assert_eq!(hops.verify(&again, NOW_MS, &HOP), Ok(signed));
    // Once only, in any spelling of the same nonce.
    assert_eq!(hops.check(value, NOW_MS, &HOP, &mut seen), Err(HopError::Replayed));
    assert_eq!(hops.check(&again, NOW_MS, &HOP, &mut seen), Err(HopError::Replayed));
});
