//! The brake's record, read back from an extended attribute anyone with write access to the cgroup could have
//! set: never a panic, and a record that parses prints back to one that parses the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::guard::brake::parse_record;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(r) = parse_record(text) {
        assert_eq!(parse_record(&r.text()).map(|again| again.text()), Ok(r.text()));
    }
});
