//! `/proc/<pid>/statm`, `status` and `stat`, as the sampler reads them: any bytes, those that are not UTF-8 replaced
//! (`kernfile::read_lossy`, and `String::from_utf8_lossy` over the sampler's buffer), since a process chooses its own
//! name (`prctl(PR_SET_NAME)`, any bytes up to 16, parentheses and spaces included). None may panic, and the name
//! comes out with its control characters escaped.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::base::text::escape_controls;
use monitor::sources::procs::{parse_stat, parse_statm, parse_status_rss_anon};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = parse_statm(&text);
    let _ = parse_status_rss_anon(&text);
    if let Ok(s) = parse_stat(&text) {
        // The name is what stands between the first '(' and the last ')', its control characters escaped: no name
        // can carry a newline or an escape sequence into a log line, a table or an alert.
        let (open, close) = (text.find('('), text.rfind(')'));
        let raw = open.zip(close).map(|(o, c)| &text[o + 1..c]);
        assert_eq!(raw.map(escape_controls).as_deref(), Some(s.comm.as_str()), "{:?}", text);
        assert!(!s.comm.chars().any(char::is_control), "{:?} named {:?}", text, s.comm);
    }
});
