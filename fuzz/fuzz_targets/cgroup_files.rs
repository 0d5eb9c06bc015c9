//! cgroup files as the kernel might write them, or not: v1 `memory.stat`, v2 `memory.stat` and `memory.max`, the
//! OOM counters' keyed files, and `cgroup.procs`. Any bytes: the readers refuse a file that is not UTF-8 (a parse
//! error naming the file), and the parsers are fed the text with such bytes replaced, so that every input the
//! fuzzer makes reaches them (any text is also a file the kernel could hand over). None may panic; what parses
//! reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::sources::cgroup::{parse_procs, v1, v2};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(s) = v1::parse_memory_stat(&text) {
        assert!(s.limit_bytes.is_none_or(|l| l < v1::UNLIMITED_FROM));
    }
    let _ = v2::parse_anon(&text);
    let _ = v2::parse_memory_max(&text);
    let _ = v2::keyed(&text, "oom_kill");
    let mut pids = Vec::new();
    if parse_procs(&text, &mut pids).is_ok() {
        assert!(pids.len() <= text.lines().count());
    }
});
