//! The routing of one request: any path and any `X-Cache-Id` (its prefix before the first dot names the owner)
//! gives a route, never a panic, and a route to a process names one of the table's.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::config::paths::Readings;
use monitor::config::route::{cache_prefix, Live, Request, Role, Route, Table};

/// The default routing table over a master and two workers, built once (its regexes are the slow part).
fn table() -> &'static Table {
    static TABLE: std::sync::OnceLock<Table> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let procs = [("m0".into(), Role::Master), ("tx1".into(), Role::Worker), ("tx2".into(), Role::Worker)];
        let master = [r"(\$|%24)closure".to_string(), "^/syndication".to_string(), "^/info/".to_string()];
        match Table::new(&procs, &master, &["^/".to_string()], true) {
            Ok(t) => t,
            Err(e) => panic!("the default routing table: {e}"),
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (path, id) = text.split_once('\0').unwrap_or((text, ""));
    let table = table();
    let prefix = (!id.is_empty()).then(|| cache_prefix(id));
    let readings = Readings::of(path);
    let req = Request { path: &readings, cache_prefix: prefix, signed: false, exempt: path == "/health" };
    for ready in [true, false] {
        let live = |i: usize| Live { ready: ready || i == 0, serving: true, outstanding: i as u32 };
        if let Route::To { index, .. } = table.select(&req, live, data.len() as u64) {
            assert!(index < table.len());
        }
    }
});
