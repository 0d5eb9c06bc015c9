//! The demo's load through the front door: a few client threads opening cache-id sessions and following them,
//! sending `$closure` requests (master-only) and plain ones, tallying what came back; and single requests that
//! make one process hold memory for a while.

use monitor_tests::http::{self, Response};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub const TIMEOUT: Duration = Duration::from_secs(30);

/// What the clients saw since the last [`Load::take`].
#[derive(Default)]
pub struct Tally {
    pub by_status: BTreeMap<u16, u64>,
    pub by_server: BTreeMap<String, u64>,
    pub errors: u64,
    pub sessions: u64,
    /// Requests carrying a cache id that its owner served.
    pub followed: u64,
    pub closures: u64,
    pub closures_to_master: u64,
    /// The first shed answer: `Retry-After` and body.
    pub shed: Option<(String, String)>,
}

impl Tally {
    /// `412 requests: 200 × 380, 503 × 32`.
    pub fn statuses(&self) -> String {
        let total: u64 = self.by_status.values().sum::<u64>() + self.errors;
        let mut s = format!("{total} requests:");
        for (code, n) in &self.by_status {
            let _ = write!(s, " {code} × {n},");
        }
        if self.errors > 0 {
            let _ = write!(s, " no answer × {},", self.errors);
        }
        s.trim_end_matches(',').to_string()
    }

    /// Which process served how many, and how the routing rules showed.
    pub fn routing(&self) -> String {
        let served: Vec<String> = self.by_server.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!(
            "served by {}; {} sessions opened, {} requests followed their cache id to its owner; \
             $closure: {} of {} to the master",
            served.join(", "),
            self.sessions,
            self.followed,
            self.closures_to_master,
            self.closures
        )
    }
}

/// Client threads sending requests through the proxy until dropped.
pub struct Load {
    stop: Arc<AtomicBool>,
    /// While set, the threads send nothing (their current request finishes).
    held: Arc<AtomicBool>,
    /// Pause between a thread's requests, in ms.
    pace_ms: Arc<AtomicU64>,
    tally: Arc<Mutex<Tally>>,
    threads: Vec<JoinHandle<()>>,
}

impl Load {
    pub fn start(proxy: SocketAddr, clients: usize, pace: Duration) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let held = Arc::new(AtomicBool::new(false));
        let pace_ms = Arc::new(AtomicU64::new(u64::try_from(pace.as_millis()).unwrap_or(100)));
        let tally = Arc::new(Mutex::new(Tally::default()));
        let threads = (0..clients)
            .map(|c| {
                let (stop, held, pace_ms, tally) = (stop.clone(), held.clone(), pace_ms.clone(), tally.clone());
                std::thread::spawn(move || client(proxy, c, &stop, &held, &pace_ms, &tally))
            })
            .collect();
        Load { stop, held, pace_ms, tally, threads }
    }

    /// Holds the clients (`true`: each finishes its current request, then waits) or lets them go on.
    pub fn hold(&self, on: bool) {
        self.held.store(on, Ordering::Relaxed);
    }

    pub fn set_pace(&self, pace: Duration) {
        self.pace_ms.store(u64::try_from(pace.as_millis()).unwrap_or(100), Ordering::Relaxed);
    }

    /// The tally so far, reset.
    pub fn take(&self) -> Tally {
        self.tally.lock().map(|mut t| std::mem::take(&mut *t)).unwrap_or_default()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn client(
    proxy: SocketAddr,
    c: usize,
    stop: &AtomicBool,
    held: &AtomicBool,
    pace_ms: &AtomicU64,
    tally: &Mutex<Tally>,
) {
    let mut session: Option<String> = None;
    let mut i: u64 = c as u64 * 3;
    while !stop.load(Ordering::Relaxed) {
        if held.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        i += 1;
        let code = i % 50;
        let (path, cache_id) = match i % 10 {
            0 => ("/fhir/ValueSet/$expand?cache=start".to_string(), None),
            3 | 7 => ("/fhir/ConceptMap/$closure".to_string(), None),
            5 => ("/fhir/metadata".to_string(), None),
            _ => (format!("/fhir/CodeSystem/$lookup?code={code}"), session.clone()),
        };
        let headers: Vec<(&str, &str)> = cache_id.iter().map(|id| ("X-Cache-Id", id.as_str())).collect();
        let r = http::request(proxy, "GET", &path, &headers, TIMEOUT);
        if let Ok(mut t) = tally.lock() {
            match &r {
                Ok(r) => {
                    *t.by_status.entry(r.status).or_default() += 1;
                    let by = served_by(r);
                    if r.status == 200 {
                        *t.by_server.entry(by.clone()).or_default() += 1;
                    }
                    if path.contains("$closure") {
                        t.closures += 1;
                        t.closures_to_master += u64::from(r.status == 200 && by == "m0");
                    }
                    if let Some(id) = &cache_id {
                        t.followed += u64::from(r.status == 200 && prefix(id) == by);
                    }
                    if r.status == 503 && t.shed.is_none() {
                        let retry = r.header("retry-after").unwrap_or("-").to_string();
                        t.shed = Some((retry, r.text().trim().to_string()));
                    }
                    if let Some(id) = r.header("x-cache-id").filter(|_| cache_id.is_none()) {
                        t.sessions += 1;
                        session = Some(id.to_string());
                    }
                }
                Err(_) => t.errors += 1,
            }
        }
        std::thread::sleep(Duration::from_millis(pace_ms.load(Ordering::Relaxed)));
    }
}

/// The process that answered (`X-Served-By`), or `-`.
pub fn served_by(r: &Response) -> String {
    r.header("x-served-by").unwrap_or("-").to_string()
}

fn prefix(id: &str) -> &str {
    id.split('.').next().unwrap_or(id)
}

/// Opens sessions until one is owned by each of `names` (bounded); name -> cache id.
pub fn sessions(proxy: SocketAddr, names: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for _ in 0..60 {
        if names.iter().all(|n| out.contains_key(*n)) {
            break;
        }
        let Ok(r) = http::get(proxy, "/fhir/ValueSet/$expand?cache=start", TIMEOUT) else { continue };
        if let Some(id) = r.header("x-cache-id") {
            out.entry(prefix(id).to_string()).or_insert_with(|| id.to_string());
        }
    }
    out
}

/// A request in its own thread, on `cache_id`'s owner, that holds `mib` MiB for `hold`.
pub fn hold(proxy: SocketAddr, cache_id: &str, mib: u64, hold: Duration) -> JoinHandle<Result<Response, String>> {
    let path = format!("/fhir/ValueSet/$expand?alloc_mib={mib}&sleep_ms={}", hold.as_millis());
    let id = cache_id.to_string();
    std::thread::spawn(move || http::request(proxy, "GET", &path, &[("X-Cache-Id", &id)], TIMEOUT))
}

/// A slow request (least-outstanding) in its own thread.
pub fn slow(proxy: SocketAddr, hold: Duration) -> JoinHandle<Result<Response, String>> {
    let path = format!("/fhir/ValueSet/$validate-code?sleep_ms={}", hold.as_millis());
    std::thread::spawn(move || http::get(proxy, &path, TIMEOUT))
}
