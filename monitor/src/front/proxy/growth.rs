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
    let mut dropped = 0;
    let boards = &proxy.backends[i].flights;
    proc.keys.resize_with(boards.len(), Vec::new);
    for (at, b) in boards.iter().enumerate() {
        let mut done = Vec::new();
        dropped += b.collect(&mut done, &mut proc.keys[at], &mut flying);
        for d in done {
            for e in d.first..=d.last {
                *proc.touched.entry(e).or_default() += 1;
            }
            proc.pending.push((at, d));
        }
    }
    // Requests in flight touch every span from their first listing to the one now.
    let mut in_flight: BTreeMap<u64, u32> = BTreeMap::new();
    for &f in &flying {
        for e in f..epoch {
            *in_flight.entry(e).or_default() += 1;
        }
    }
    let growth = &proxy.counts.growth;
    let mut kept = Vec::new();
    for (at, d) in std::mem::take(&mut proc.pending) {
        if d.last >= until {
            kept.push((at, d));
            continue;
        }
        let key = proc.keys[at].get(usize::from(d.key)).map_or(crate::feed::growth::OTHER, |k| &**k);
        let Some(base) = proc.anon_at(d.first) else {
            growth.record_unmeasured(key, d.at_abort);
            continue;
        };
        let peak = (d.first + 1..=d.last + 1).filter_map(|e| proc.anon_at(e)).max().unwrap_or(base);
        let touches = |e: u64| proc.touched.get(&e).copied().unwrap_or(0) + in_flight.get(&e).copied().unwrap_or(0);
        let exact = (d.first..=d.last).all(|e| touches(e) == 1);
        growth.record(key, peak.saturating_sub(base), exact, d.at_abort);
    }
    proc.pending = kept;
    // What no request still needs: spans before the oldest pending or in-flight request, and past the kept ones.
    let oldest = proc.pending.iter().map(|(_, d)| d.first).chain(flying).min().unwrap_or(epoch);
    let floor = oldest.min(epoch).max(epoch.saturating_sub(KEPT as u64));
    proc.touched = proc.touched.split_off(&floor);
    dropped
}
