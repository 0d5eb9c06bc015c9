//! Memory per request, from the samples: how much each request's process grew its anonymous memory while the
//! request was in flight, by route key ([`crate::feed::growth`]).
//!
//! The sampler reads every process's `RssAnon` at each listing (once a second, and at every sample near the lines).
//! A request notes the listing the front door last saw when it starts and when it ends ([`super::flights`]); once
//! the listing after its end has come, its growth is the highest anon its process showed at the listings after its
//! start, up to that one, less the anon at the listing before its start (none when it fell). It is exact when no
//! other request on that process touched any of those listings' spans (ended or still in flight), shared
//! otherwise: the whole growth is then each one's, and counted apart. Nothing is read per request: on the
//! request's path are two loads, the board's lock and a hash of its folded path ([`super::flights`]); the rest runs
//! here, once per listing (`cargo xtask bench proxy-instructions` counts the request's part against
//! `track_requests = false`).

use super::flights::Done;
use super::Proxy;
use crate::feed::Samples;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Listings kept per process (at one a second, 10 minutes): a request longer than that is not measured.
const KEPT: usize = 600;

/// What is kept of one process between listings.
#[derive(Default)]
struct Process {
    pid: u32,
    /// The route keys of each of its boards (one per front-door thread), by index ([`super::flights::Keys`]).
    keys: Vec<Vec<Box<str>>>,
    /// Its anon at each listing, oldest first.
    anon: VecDeque<(u64, u64)>,
    /// Ended requests' touches of each listing's span (the span from a listing to the next).
    touched: BTreeMap<u64, u32>,
    /// Ended requests waiting for the listing after their end, with the board they ended on.
    pending: Vec<(usize, Done)>,
    /// The steps of the last [`Process::settle`] (listings touched and looked at): bounded by the requests and
    /// [`KEPT`], never by how long a request has been in flight.
    work: usize,
}

impl Process {
    fn anon_at(&self, epoch: u64) -> Option<u64> {
        let first = self.anon.front()?.0;
        self.anon.get(usize::try_from(epoch.checked_sub(first)?).ok()?).map(|&(_, a)| a)
    }
}

/// Follows every sample: at each new listing, resolves the requests that ended before it. Ends with the samples.
pub async fn follow(proxy: Arc<Proxy>, mut samples: Samples) {
    if !proxy.track {
        return;
    }
    let mut procs: Vec<Process> = proxy.members.iter().map(|_| Process::default()).collect();
    let mut listing: Option<Arc<Vec<crate::decision::snapshot::ProcSample>>> = None;
    let mut epoch = 0u64;
    let mut dropped = 0u64;
    while let Some(p) = samples.next().await {
        let list = &p.snapshot.processes;
        if listing.as_ref().is_some_and(|l| Arc::ptr_eq(l, list)) {
            continue;
        }
        listing = Some(list.clone());
        epoch += 1;
        for (i, proc) in procs.iter_mut().enumerate() {
            let pid = proxy.members[i].pid();
            if pid != proc.pid {
                // Restarted (killed, crashed) or started: its ended requests are counted with what was seen of the
                // process before (a request in flight when it was killed is one the operator asks about), and what
                // was kept of it goes; the boards' route keys stay, as the boards do.
                dropped += resolve(&proxy, i, proc, u64::MAX, epoch);
                *proc = Process { pid, keys: std::mem::take(&mut proc.keys), ..Process::default() };
            }
            let anon = list.binary_search_by_key(&pid, |s| s.pid).ok().map(|at| list[at].anon_bytes);
            match anon {
                Some(a) => {
                    proc.anon.push_back((epoch, a));
                    if proc.anon.len() > KEPT {
                        proc.anon.pop_front();
                    }
                }
                // Not listed (starting, gone): the listings before are no base for what follows.
                None => proc.anon.clear(),
            }
        }
        proxy.epoch.store(epoch, Ordering::Relaxed);
        for (i, proc) in procs.iter_mut().enumerate() {
            dropped += resolve(&proxy, i, proc, epoch, epoch);
        }
        if dropped > 0 {
            tracing::warn!(dropped, "requests ended faster than the memory per request could keep them: not measured");
            dropped = 0;
        }
    }
}

/// Takes in process `i`'s ended requests and resolves those that ended before listing `until` (the listing after
/// them has come; `u64::MAX`: every one, as the process is gone), the listing now being `epoch`. One whose listing
/// before its start is not known (the process was not listed then) is counted, unmeasured. Returns the ended
/// requests its boards dropped.
fn resolve(proxy: &Proxy, i: usize, proc: &mut Process, until: u64, epoch: u64) -> u64 {
    let mut flying = Vec::new();
    let mut done = Vec::new();
    let mut dropped = 0;
    let boards = &proxy.backends[i].flights;
    proc.keys.resize_with(boards.len(), Vec::new);
    for (at, b) in boards.iter().enumerate() {
        let mut ended = Vec::new();
        dropped += b.collect(&mut ended, &mut proc.keys[at], &mut flying);
        done.extend(ended.into_iter().map(|d| (at, d)));
    }
    let growth = &proxy.counts.growth;
    for (at, d, measured) in proc.settle(done, flying, until, epoch) {
        let key = proc.keys[at].get(usize::from(d.key)).map_or(crate::feed::growth::OTHER, |k| &**k);
        match measured {
            Some((grown, exact)) => growth.record(key, grown, exact, d.at_abort),
            None => growth.record_unmeasured(key, d.at_abort),
        }
    }
    dropped
}

/// What became of an ended request: its board, itself, and its growth with whether it was alone on its process
/// (None: unmeasured, its process was not listed before its start).
type Settled = (usize, Done, Option<(u64, bool)>);

impl Process {
    /// Takes in the ended requests `done` (with their boards) and the first listing of each request in flight, and
    /// settles those that ended before listing `until`, the listing now being `epoch`.
    ///
    /// The work is bounded by the listings kept, whatever the requests' ages: only the spans from
    /// `epoch - KEPT` on can be asked about (a request measured has its listing before its start among the
    /// [`KEPT`] anon readings), so an ended request touches at most those; a request in flight is one number,
    /// counted over a span by a search among the sorted first listings, not one entry per listing it spans.
    fn settle(&mut self, done: Vec<(usize, Done)>, mut flying: Vec<u64>, until: u64, epoch: u64) -> Vec<Settled> {
        let low = epoch.saturating_sub(KEPT as u64);
        self.work = 0;
        for (at, d) in done {
            for e in d.first.max(low)..=d.last {
                *self.touched.entry(e).or_default() += 1;
                self.work += 1;
            }
            self.pending.push((at, d));
        }
        // A request in flight since listing `f` touches every span from `f` to the one now (`epoch` excluded).
        flying.sort_unstable();
        let in_flight = |e: u64| if e < epoch { flying.partition_point(|&f| f <= e) as u32 } else { 0 };
        let mut out = Vec::new();
        let mut kept = Vec::new();
        for (at, d) in std::mem::take(&mut self.pending) {
            if d.last >= until {
                kept.push((at, d));
                continue;
            }
            let Some(base) = self.anon_at(d.first) else {
                out.push((at, d, None));
                continue;
            };
            // Measured: `d.first` is among the kept readings, so both spans below hold at most KEPT + 1 listings.
            let peak = (d.first + 1..=d.last + 1).filter_map(|e| self.anon_at(e)).max().unwrap_or(base);
            let touches = |e: u64| self.touched.get(&e).copied().unwrap_or(0) + in_flight(e);
            let exact = (d.first..=d.last).all(|e| touches(e) == 1);
            self.work += 2 * (d.last - d.first + 1) as usize;
            out.push((at, d, Some((peak.saturating_sub(base), exact))));
        }
        self.pending = kept;
        // What no request still needs: spans before the oldest pending or in-flight request, and past the kept ones.
        let oldest = self.pending.iter().map(|(_, d)| d.first).chain(flying.first().copied()).min().unwrap_or(epoch);
        let floor = oldest.min(epoch).max(low);
        self.touched = self.touched.split_off(&floor);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Listing `epoch` read the process's anon as `anon`, as [`follow`] keeps it.
    fn listed(p: &mut Process, epoch: u64, anon: u64) {
        p.anon.push_back((epoch, anon));
        if p.anon.len() > KEPT {
            p.anon.pop_front();
        }
    }

    fn done(first: u64, last: u64) -> (usize, Done) {
        (0, Done { key: 0, first, last, at_abort: false })
    }

    /// Each settled request's (first listing, last listing, growth and whether alone).
    type Measure = (u64, u64, Option<(u64, bool)>);

    fn measures(out: &[Settled]) -> Vec<Measure> {
        out.iter().map(|(_, d, m)| (d.first, d.last, *m)).collect()
    }

    #[test]
    fn growth_is_the_peak_after_the_start_less_the_anon_before_it_exact_when_alone() {
        let mut p = Process::default();
        for (e, a) in [(1, 100), (2, 100), (3, 150)] {
            listed(&mut p, e, a);
        }
        // Ended at listing 2: waits for listing 3, then grew from 100 (listing 1) to 150 (listing 3), alone.
        assert!(p.settle(vec![done(1, 2)], vec![], 2, 2).is_empty(), "waits for the listing after its end");
        assert_eq!(measures(&p.settle(vec![], vec![], 3, 3)), [(1, 2, Some((50, true)))]);
        // Two requests over listing 4's span, one ended and one still in flight: each is given the whole, shared.
        listed(&mut p, 4, 130);
        listed(&mut p, 5, 170);
        assert_eq!(measures(&p.settle(vec![done(3, 4)], vec![4], 5, 5)), [(3, 4, Some((20, false)))]);
        // A request whose listing before its start is not kept is counted, unmeasured.
        assert_eq!(measures(&p.settle(vec![done(0, 4)], vec![], 5, 5)), [(0, 4, None)]);
        // The restart path settles every one pending.
        assert!(p.settle(vec![done(5, 6)], vec![], 6, 6).is_empty());
        assert_eq!(measures(&p.settle(vec![], vec![], u64::MAX, 6)), [(5, 6, Some((0, true)))]);
    }

    #[test]
    fn a_request_in_flight_before_an_ended_one_shares_its_spans_one_started_after_its_end_does_not() {
        let process = || {
            let mut p = Process::default();
            for e in 1..=6 {
                listed(&mut p, e, 100 * e);
            }
            p
        };
        assert_eq!(measures(&process().settle(vec![done(2, 3)], vec![1], 6, 6)), [(2, 3, Some((200, false)))]);
        assert_eq!(measures(&process().settle(vec![done(2, 3)], vec![4], 6, 6)), [(2, 3, Some((200, true)))]);
    }

    /// A request held in flight across a million listings, while a short one ends at each: the work of each
    /// listing and the spans kept stay bounded by [`KEPT`], not by the long request's age.
    #[test]
    fn a_request_in_flight_for_a_million_listings_costs_each_listing_a_bounded_work() {
        let mut p = Process::default();
        let mut most = 0;
        for epoch in 1..=1_000_000u64 {
            listed(&mut p, epoch, 1000 + epoch % 7);
            let ended = if epoch > 1 { vec![done(epoch - 1, epoch - 1)] } else { vec![] };
            let out = p.settle(ended, vec![1], epoch, epoch);
            assert!(
                out.iter().all(|(_, _, m)| matches!(m, Some((_, false)))),
                "shared with the long one: {:?}",
                measures(&out)
            );
            most = most.max(p.work);
            assert!(p.work <= 4 * (KEPT + 1), "listing {epoch}: {} steps", p.work);
            assert!(p.touched.len() <= KEPT + 1, "listing {epoch}: {} spans kept", p.touched.len());
        }
        // Its end touches only the spans still kept.
        let out = p.settle(vec![done(1, 1_000_000)], vec![], 1_000_001, 1_000_000);
        assert_eq!(measures(&out).last(), Some(&(1, 1_000_000, None)), "its start is no longer kept: unmeasured");
        assert!(p.work <= 4 * (KEPT + 1), "its end: {} steps", p.work);
        assert!(most >= 2, "the short requests were settled");
    }
}
