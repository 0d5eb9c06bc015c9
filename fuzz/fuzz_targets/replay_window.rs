//! The once-only rule of hop headers and datagrams (`cluster::replay`), driven by any sequence of messages: the
//! input is read 5 bytes a message (sender run, counter, send time, clock tick). A message is never accepted twice;
//! one accepted was sent within the window; and a fresh message newer than any accepted from its run is accepted,
//! unless it is a new run and the table is full.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::cluster::replay::{Replay, ReplayError};
use std::collections::{HashMap, HashSet};

const WINDOW_MS: u64 = 30_000;
const SPAN: u64 = 64;
const MAX_SENDERS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let mut r: Replay<u64> = Replay::new(WINDOW_MS, SPAN, MAX_SENDERS);
    let mut now: u64 = 1_700_000_000_000;
    // A message's send time is fixed by its first appearance: the mac binds the time to the nonce.
    let mut sent_of: HashMap<(u64, u64), u64> = HashMap::new();
    let mut accepted: HashSet<(u64, u64)> = HashSet::new();
    let mut newest: HashMap<u64, u64> = HashMap::new();
    for op in data.chunks_exact(5) {
        let run = u64::from(op[0] & 7);
        let mut counter = u64::from(u16::from_be_bytes([op[1], op[2]]));
        if op[0] & 0x80 != 0 {
            counter += 1 << 40;
        }
        let offset = (i64::from(op[3]) - 128) * 250;
        let sent = *sent_of.entry((run, counter)).or_insert_with(|| now.saturating_add_signed(offset));
        now += u64::from(op[4]) * 100;
        let full = r.senders() >= MAX_SENDERS;
        let got = r.admit(run, counter, sent, now);
        let fresh = now.abs_diff(sent) <= WINDOW_MS;
        if got.is_ok() {
            assert!(accepted.insert((run, counter)), "run {run} counter {counter} accepted twice");
            assert!(fresh, "accepted {sent} at {now}");
            let n = newest.entry(run).or_insert(counter);
            *n = (*n).max(counter);
        } else if fresh && !accepted.contains(&(run, counter)) && newest.get(&run).is_none_or(|&n| counter > n) {
            assert!(got == Err(ReplayError::Full) && full, "run {run} counter {counter} at {now}: {got:?}");
        }
    }
});
