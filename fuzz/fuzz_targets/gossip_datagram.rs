//! A gossip datagram, as any host may send one to the gossip port: opening never panics, nothing but a datagram
//! sealed with the secret opens (the corpus holds datagrams `Wire::seal` made with this target's secret and time:
//! the gossip crate's announce, a feed with a load note, a leave notice), and one that opens is refused the second
//! time. Then what a member may send: any payload sealed opens whole, and the readers of a payload's sender, of a
//! load note and of a leave notice take any bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::cluster::load::Note;
use monitor::cluster::members::parse_leave;
use monitor::cluster::membership::gossip_sender;
use monitor::cluster::replay::Counter;
use monitor::cluster::wire::{Kind, Wire, WireError, HEAD_LEN, MAC_LEN};

const SECRET: &[u8] = b"secret of the fuzz targets' cluster, 32+ bytes";
const NOW_MS: u64 = 1_700_000_000_000;

fn read(kind: Kind, payload: &[u8]) {
    match kind {
        Kind::Gossip => {
            let _ = gossip_sender(payload);
            let _ = Note::decode(payload);
        }
        Kind::Leave => {
            let _ = parse_leave(payload);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut receiver = Wire::with_nonces(SECRET, Counter::starting(0, 0));
    if let Ok((kind, payload)) = receiver.open(data, NOW_MS) {
        assert_eq!(HEAD_LEN + payload.len() + MAC_LEN, data.len());
        assert_eq!(receiver.open(data, NOW_MS), Err(WireError::Replayed));
        read(kind, payload);
    }
    let member = Wire::with_nonces(SECRET, Counter::starting(u64::MAX, 0));
    let mut receiver = Wire::with_nonces(SECRET, Counter::starting(0, 0));
    for kind in [Kind::Gossip, Kind::Leave] {
        let sealed = member.seal(kind, data, NOW_MS);
        assert_eq!(receiver.open(&sealed, NOW_MS), Ok((kind, data)));
        read(kind, data);
    }
});
