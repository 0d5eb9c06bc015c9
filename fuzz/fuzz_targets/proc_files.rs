//! `/proc/<pid>/statm`, `status` and `stat`, as the sampler reads them: any bytes, those that are not UTF-8 replaced
//! (`kernfile::read_lossy`, and `String::from_utf8_lossy` over the sampler's buffer), since a process chooses its own
//! name (`prctl(PR_SET_NAME)`, any bytes up to 16, parentheses and spaces included). None may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::sources::procs::{parse_stat, parse_statm, parse_status_rss_anon};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_statm(&text);
    let _ = parse_status_rss_anon(&text);
    if let Ok(s) = parse_stat(&text) {
        // The name is what stands between the first '(' and the last ')': in parentheses, with none closing after.
        let named = format!("({})", s.comm);
        let at = text.find(&named).map(|i| i + named.len());
        assert!(at.is_some_and(|i| !text[i..].contains(')')), "{:?} named {:?}", text, s.comm);
    }
});
