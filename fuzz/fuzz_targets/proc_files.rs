//! `/proc/<pid>/statm`, `status` and `stat`: a process's name in `stat` is any bytes up to 16, parentheses and
//! spaces included. None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::procs::{parse_stat, parse_statm, parse_status_rss_anon};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_statm(text);
    let _ = parse_status_rss_anon(text);
    let _ = parse_stat(text);
});
