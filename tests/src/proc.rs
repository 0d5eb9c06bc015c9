//! Reads what the kernel says about a process (`/proc/<pid>/status`, `smaps_rollup`), to compare the agent's
//! figures against.

use std::fs;

/// The value of a `Name:   123 kB` line of `/proc/<pid>/status` (or `smaps_rollup`), in bytes.
pub fn parse_kib_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let n: u64 = words.next()?.parse().ok()?;
        match words.next() {
            Some("kB") => Some(n * 1024),
            None => Some(n),
            Some(_) => None,
        }
    })
}

/// A `kB` field of `/proc/<pid>/status` in bytes (`RssAnon`, `VmRSS`, …); `None` if the process is gone.
pub fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_kib_field(&text, field)
}

/// `RssAnon` of a process in bytes.
pub fn rss_anon(pid: u32) -> Option<u64> {
    status_bytes(pid, "RssAnon")
}

/// `VmRSS` of a process in bytes.
pub fn vm_rss(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS")
}

/// `AnonHugePages` of a process in bytes, from `smaps_rollup` (slow for big processes: tests only).
pub fn anon_huge_pages(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    parse_kib_field(&text, "AnonHugePages")
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str =
        "Name:\talloc-hog\nVmRSS:\t  102876 kB\nRssAnon:\t  102500 kB\nRssFile:\t     376 kB\nThreads:\t1\n";

    #[test]
    fn reads_kib_fields_as_bytes() {
        assert_eq!(parse_kib_field(STATUS, "RssAnon"), Some(102_500 * 1024));
        assert_eq!(parse_kib_field(STATUS, "VmRSS"), Some(102_876 * 1024));
        assert_eq!(parse_kib_field(STATUS, "Threads"), Some(1));
    }

    #[test]
    fn a_prefix_of_another_field_does_not_match() {
        assert_eq!(parse_kib_field(STATUS, "Rss"), None);
        assert_eq!(parse_kib_field(STATUS, "Missing"), None);
        assert_eq!(parse_kib_field("RssAnon: lots kB", "RssAnon"), None);
    }

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        assert!(vm_rss(me).is_some_and(|b| b > 0));
        assert!(rss_anon(me).is_some());
    }
}
