//! Accepts each authenticated message of the cluster once: the hop header of a forwarded request and the gossip
//! datagram both carry a [`Nonce`], `<run>` (a random number a sender picks when it starts) and `<counter>` (counted
//! up from 0 by that sender for each message), under the message's mac with the sender's clock. A receiver keeps,
//! per sender run, the highest counter it accepted and which of the [`Replay::new`] `span` counters below it it
//! has seen (the anti-replay window of IPsec, RFC 4303 section 3.4.3), so it accepts a message:
//!
//! - sent within `window_ms` either side of its own clock (one sent earlier is stale);
//! - whose counter it has not seen (one seen is a replay);
//! - whose counter is less than `span` below the highest it accepted from that run (a message overtaken by that
//!   many later ones of its sender is refused as too late: it cannot be told from a replay of a forgotten one).
//!
//! A run is forgotten once the newest message accepted from it is stale: any replay of its messages is then
//! refused by its time. Memory is bounded: at most `max_senders` runs of `span` bits each; a new run finding the
//! table full (only members, who hold the secret, can make runs) is refused rather than any run forgotten early,
//! since forgetting one would let its recent messages be replayed. Counting rather than remembering each nonce
//! keeps the memory per sender fixed however many messages it sends. Pure: the caller gives the time, after the
//! mac has been checked (a message without the secret never reaches the table).

use std::collections::HashMap;
use std::hash::Hash;

/// A message's nonce: its sender's run and its number in that run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Nonce {
    pub run: u64,
    pub counter: u64,
}

impl Nonce {
    /// Bytes of [`Nonce::to_bytes`].
    pub(crate) const LEN: usize = 16;

    /// The run, then the counter, big-endian.
    pub fn to_bytes(self) -> [u8; Nonce::LEN] {
        let mut b = [0; Nonce::LEN];
        b[..8].copy_from_slice(&self.run.to_be_bytes());
        b[8..].copy_from_slice(&self.counter.to_be_bytes());
        b
    }

    pub(crate) fn from_bytes(b: [u8; Nonce::LEN]) -> Nonce {
        let word =
            |i: usize| u64::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]]);
        Nonce { run: word(0), counter: word(8) }
    }
}

/// The nonces one sender hands out: a random run, then counter 0, 1, 2 …
#[derive(Debug)]
pub struct Counter {
    run: u64,
    next: std::sync::atomic::AtomicU64,
}

impl Counter {
    /// A run drawn from the system's random source.
    pub fn new() -> Counter {
        use rand::Rng;
        let mut rng: rand::rngs::SmallRng = rand::make_rng();
        Counter::starting(rng.next_u64(), 0)
    }

    /// A run chosen by the caller, counting from `next` (tests).
    pub fn starting(run: u64, next: u64) -> Counter {
        Counter { run, next: std::sync::atomic::AtomicU64::new(next) }
    }

    /// The next nonce; safe to call from many tasks at once.
    pub fn next(&self) -> Nonce {
        Nonce { run: self.run, counter: self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) }
    }
}

impl Default for Counter {
    fn default() -> Counter {
        Counter::new()
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("outside its time window")]
    Stale,
    #[error("replayed")]
    Replayed,
    #[error("arrived after too many newer ones of its sender")]
    TooLate,
    #[error("from a new sender while too many are remembered")]
    Full,
}

/// One sender run's window.
#[derive(Debug)]
struct Run {
    /// The highest counter accepted.
    top: u64,
    /// Bit `c % span` is set when counter `c` (within `span` below `top`) was accepted.
    bits: Vec<u64>,
    /// The newest send time accepted (ms since the Unix epoch).
    newest_ms: u64,
}

/// The runs a receiver has heard from, keyed by `K` (the run itself, or the sender's name with it).
#[derive(Debug)]
pub struct Replay<K> {
    window_ms: u64,
    span: u64,
    max_senders: usize,
    runs: HashMap<K, Run>,
}

impl<K: Hash + Eq> Replay<K> {
    /// Messages within `window_ms` of the clock; `span` counters remembered behind each run's highest (rounded up
    /// to a multiple of 64, at least 64); at most `max_senders` runs at once.
    pub fn new(window_ms: u64, span: u64, max_senders: usize) -> Replay<K> {
        let span = span.max(64).div_ceil(64) * 64;
        Replay { window_ms, span, max_senders, runs: HashMap::new() }
    }

    /// Runs remembered now.
    pub fn senders(&self) -> usize {
        self.runs.len()
    }

    /// Accepts the message `counter` of the run `key`, sent at `sent_ms`, at `now_ms`, once.
    pub fn admit(&mut self, key: K, counter: u64, sent_ms: u64, now_ms: u64) -> Result<(), ReplayError> {
        if now_ms.abs_diff(sent_ms) > self.window_ms {
            return Err(ReplayError::Stale);
        }
        if !self.runs.contains_key(&key) {
            self.forget_stale(now_ms);
            if self.runs.len() >= self.max_senders {
                return Err(ReplayError::Full);
            }
        }
        let span = self.span;
        let run = self.runs.entry(key).or_insert_with(|| Run {
            top: counter,
            bits: vec![0; (span / 64) as usize],
            newest_ms: sent_ms,
        });
        Self::mark(run, span, counter, sent_ms)
    }

    fn mark(run: &mut Run, span: u64, counter: u64, sent_ms: u64) -> Result<(), ReplayError> {
        let bit = |c: u64| ((c % span / 64) as usize, 1u64 << (c % 64));
        if counter > run.top {
            // Slide: the counters between the old top and the new one are not seen yet.
            if counter - run.top >= span {
                run.bits.iter_mut().for_each(|w| *w = 0);
            } else {
                for c in run.top + 1..counter {
                    let (w, b) = bit(c);
                    run.bits[w] &= !b;
                }
            }
            run.top = counter;
        } else if run.top - counter >= span {
            return Err(ReplayError::TooLate);
        } else {
            let (w, b) = bit(counter);
            if run.bits[w] & b != 0 {
                return Err(ReplayError::Replayed);
            }
        }
        let (w, b) = bit(counter);
        run.bits[w] |= b;
        run.newest_ms = run.newest_ms.max(sent_ms);
        Ok(())
    }

    /// Drops the runs whose newest accepted message is stale at `now_ms`.
    fn forget_stale(&mut self, now_ms: u64) {
        let window = self.window_ms;
        self.runs.retain(|_, r| r.newest_ms.saturating_add(window) >= now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ReplayError::{Full, Replayed, Stale, TooLate};

    #[test]
    fn each_counter_of_a_run_is_accepted_once_within_the_span_and_the_window() {
        let t = 1_000_000;
        // In order, on one table of window 1000 ms and span 64: (run, counter, sent, now, result).
        type Case = (u64, u64, u64, u64, Result<(), ReplayError>);
        let cases: &[Case] = &[
            (1, 5, t, t, Ok(())),
            (1, 5, t, t, Err(Replayed)),
            (1, 6, t, t, Ok(())),
            (1, 4, t, t, Ok(())),
            (1, 0, t, t, Ok(())),
            (1, 4, t, t, Err(Replayed)),
            // Another run of the same counters.
            (2, 5, t, t, Ok(())),
            // Sent too early or too late for the receiver's clock, seen or not.
            (1, 7, t - 1001, t, Err(Stale)),
            (1, 7, t + 1001, t, Err(Stale)),
            (1, 5, t - 1001, t, Err(Stale)),
            (1, 7, t - 1000, t, Ok(())),
            (1, 8, t + 1000, t, Ok(())),
            // A jump within the span keeps what is still in it; a counter span below the top is too late.
            (1, 70, t, t, Ok(())),
            (1, 6, t, t, Err(TooLate)),
            (1, 7, t, t, Err(Replayed)),
            (1, 9, t, t, Ok(())),
            (1, 69, t, t, Ok(())),
            (1, 8, t, t, Err(Replayed)),
            (1, 72, t, t, Ok(())),
            (1, 7, t, t, Err(TooLate)),
            (1, 8, t, t, Err(TooLate)),
            (1, 9, t, t, Err(Replayed)),
            (1, 71, t, t, Ok(())),
            // A jump past the whole span forgets every bit: what it passed over is too late or new.
            (1, 1000, t, t, Ok(())),
            (1, 72, t, t, Err(TooLate)),
            (1, 999, t, t, Ok(())),
            (1, 937, t, t, Ok(())),
            (1, 936, t, t, Err(TooLate)),
            (1, u64::MAX, t, t, Ok(())),
            (1, u64::MAX, t, t, Err(Replayed)),
        ];
        let mut r = Replay::new(1000, 64, 8);
        for (i, &(run, counter, sent, now, want)) in cases.iter().enumerate() {
            assert_eq!(r.admit(run, counter, sent, now), want, "case {i}: run {run} counter {counter}");
        }
        assert_eq!(r.senders(), 2);
    }

    #[test]
    fn a_run_is_forgotten_once_stale_and_a_full_table_refuses_new_runs() {
        let t = 1_000_000;
        let mut r = Replay::new(1000, 64, 2);
        assert_eq!(r.admit(1, 0, t, t), Ok(()));
        assert_eq!(r.admit(2, 0, t + 500, t), Ok(()));
        assert_eq!(r.admit(3, 0, t, t), Err(Full), "two runs remembered, both current");
        assert_eq!(r.admit(1, 1, t, t), Ok(()), "known runs go on when full");
        // Run 1's newest is stale after t + 1000; run 2's after t + 1500.
        assert_eq!(r.admit(3, 0, t + 1001, t + 1001), Ok(()));
        assert_eq!(r.senders(), 2);
        assert_eq!(r.admit(4, 0, t + 1001, t + 1001), Err(Full));
        assert_eq!(r.admit(4, 0, t + 1501, t + 1501), Ok(()));
        // Run 1 forgotten: its messages are stale by then, so none can be replayed.
        assert_eq!(r.admit(1, 0, t, t + 1501), Err(Stale));
    }

    #[test]
    fn spans_round_up_to_whole_words_and_nonces_round_trip() {
        for (asked, span) in [(0, 64), (1, 64), (64, 64), (65, 128), (32_768, 32_768)] {
            assert_eq!(Replay::<u64>::new(1000, asked, 1).span, span, "{asked}");
        }
        let n = Nonce { run: 0x0102_0304_0506_0708, counter: u64::MAX - 1 };
        assert_eq!(n.to_bytes()[..9], [1, 2, 3, 4, 5, 6, 7, 8, 0xff]);
        assert_eq!(Nonce::from_bytes(n.to_bytes()), n);
        let c = Counter::starting(9, 41);
        assert_eq!((c.next(), c.next()), (Nonce { run: 9, counter: 41 }, Nonce { run: 9, counter: 42 }));
        assert_ne!(Counter::new().next().run, Counter::new().next().run, "runs are drawn at random");
    }
}
