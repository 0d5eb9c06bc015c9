//! wrk for a fixed time, with every response's status counted (a Lua script, one table per wrk thread, summed in
//! its `done`), so a test can tell a shed 503 from any other answer and see wrk's socket errors.

use crate::temp::TempDir;
use std::collections::BTreeMap;
use std::process::Command;

const SCRIPT: &str = r#"
threads = {}
setup = function(thread)
  table.insert(threads, thread)
end
codes = {}
response = function(status, headers, body)
  codes[status] = (codes[status] or 0) + 1
end
done = function(summary, latency, requests)
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("codes")) do
      io.write(string.format("STATUS %d %d\n", code, n))
    end
  end
end
"#;

/// What wrk reported.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct WrkReport {
    /// Responses wrk completed.
    pub requests: u64,
    /// Socket errors: connect, read, write, timeout.
    pub socket_errors: [u64; 4],
    /// Responses by status (from this module's script; empty under another script).
    pub statuses: BTreeMap<u16, u64>,
    /// wrk's own "Non-2xx or 3xx responses: N" (0 when it does not say).
    pub non_2xx: u64,
    /// wrk's whole output.
    pub text: String,
}

impl WrkReport {
    /// Responses with a status in `range`.
    pub fn count(&self, range: std::ops::Range<u16>) -> u64 {
        self.statuses.range(range).map(|(_, n)| n).sum()
    }
}

/// Parses wrk's summary ("N requests in …", "Socket errors: connect A, read B, write C, timeout D" and "Non-2xx or
/// 3xx responses: N" when there were any) and the script's "STATUS code n" lines.
pub fn parse(text: &str) -> WrkReport {
    let mut r = WrkReport { text: text.to_string(), ..WrkReport::default() };
    for line in text.lines().map(str::trim) {
        if let Some(n) = line.split_once(" requests in ").and_then(|(n, _)| n.trim().parse().ok()) {
            r.requests = n;
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            for (i, part) in rest.split(',').enumerate().take(4) {
                r.socket_errors[i] = part.split_whitespace().last().and_then(|n| n.parse().ok()).unwrap_or(u64::MAX);
            }
        } else if let Some(n) = line.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = n.trim().parse().unwrap_or(u64::MAX);
        } else if let Some(rest) = line.strip_prefix("STATUS ") {
            let mut it = rest.split_whitespace().map(str::parse::<u64>);
            if let (Some(Ok(code)), Some(Ok(n))) = (it.next(), it.next()) {
                *r.statuses.entry(u16::try_from(code).unwrap_or(0)).or_default() += n;
            }
        }
    }
    r
}

/// Runs `wrk -t<threads> -c<connections> -d<seconds>s --timeout 5s` against `url` and returns its report; panics
/// when wrk cannot run or fails.
pub fn wrk(url: &str, threads: u32, connections: u32, seconds: u32, dir: &TempDir) -> WrkReport {
    let script = dir.write("statuses.lua", SCRIPT.as_bytes());
    let out = Command::new("wrk")
        .args([format!("-t{threads}"), format!("-c{connections}"), format!("-d{seconds}s")])
        .args(["--timeout", "5s", "-s"])
        .arg(&script)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("wrk: {e}"));
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "wrk failed: {text}");
    parse(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_and_statuses_are_parsed() {
        let text =
            "  2 threads and 64 connections\n  23736 requests in 10.08s, 4.85MB read\n  Socket errors: connect 0, \
                    read 50, write 0, timeout 3\nRequests/sec:   2353.85\nSTATUS 200 11000\nSTATUS 503 2\n\
                    STATUS 200 12734\n";
        let r = parse(text);
        assert_eq!((r.requests, r.socket_errors), (23736, [0, 50, 0, 3]));
        assert_eq!(r.statuses.into_iter().collect::<Vec<_>>(), [(200, 23734), (503, 2)]);
        let r = parse("  68461 requests in 3.05s, 9.79MB read\n");
        assert_eq!((r.requests, r.socket_errors, r.count(200..300), r.non_2xx), (68461, [0; 4], 0, 0));
        assert_eq!(parse("  Non-2xx or 3xx responses: 12\n").non_2xx, 12);
    }
}
