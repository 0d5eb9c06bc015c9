//! HTTP clients that are not ours, driven for exact request counts: curl (each transfer's status and the
//! connections it opened), wrk (exactly N requests on one keep-alive connection) and a hand-driven keep-alive
//! connection (which requests go on which connection, pipelined or not).

use crate::temp::TempDir;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one curl invocation did: the status of every transfer and how many connections it opened.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CurlRun {
    pub statuses: Vec<u16>,
    pub connects: u64,
}

impl CurlRun {
    /// Panics unless every transfer got an answer (a status; curl says 000 when there was none).
    pub fn answered(self) -> CurlRun {
        assert!(!self.statuses.is_empty() && !self.statuses.contains(&0), "curl got no answer: {self:?}");
        self
    }
}

/// Runs curl once with `args` (URLs and options; several URLs share one keep-alive connection when the server
/// allows). Reports each transfer's status and the number of new connections (`%{num_connects}`).
pub fn curl(args: &[&str]) -> CurlRun {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10", "-w", "%{stderr}%{http_code} %{num_connects}\\n"])
        .args(args)
        .stdout(Stdio::null())
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => panic!("curl {args:?}: {e}"),
    };
    // Bodies go to /dev/null (stdout); the write-out lines, one per transfer, to stderr.
    let text = String::from_utf8_lossy(&out.stderr);
    let mut run = CurlRun::default();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(code), Some(conns)) = (it.next(), it.next()) else {
            panic!("curl {args:?}: unexpected output {text:?}");
        };
        run.statuses
            .push(code.parse().unwrap_or_else(|e| panic!("curl {args:?}: status {code:?}: {e}; output {text:?}")));
        run.connects += conns.parse::<u64>().unwrap_or_else(|e| panic!("curl num_connects {conns:?}: {e}"));
    }
    run
}

/// What a set of client runs amounts to: requests, responses by class, connections.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Sent {
    pub requests: u64,
    pub by_class: [u64; 5],
    pub connects: u64,
}

impl Sent {
    pub fn add(&mut self, run: &CurlRun) {
        self.connects += run.connects;
        for &s in &run.statuses {
            assert!((100..600).contains(&s), "transfer failed (status {s})");
            self.requests += 1;
            self.by_class[(s / 100 - 1) as usize] += 1;
        }
    }

    /// A wrk run of 200s.
    pub fn add_wrk(&mut self, w: &WrkRun) {
        self.requests += w.requests;
        self.connects += w.connects;
        self.by_class[1] += w.requests;
    }

    pub fn responses(&self) -> u64 {
        self.by_class[1..].iter().sum()
    }
}

/// What a bounded wrk run did.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct WrkRun {
    /// Responses wrk completed (each to one request it sent).
    pub requests: u64,
    /// Connections wrk opened.
    pub connects: u64,
}

/// Runs `wrk -t1 -c1` with a script that stops its thread after exactly `n` responses on its one keep-alive
/// connection, so exactly `n` requests reach the server; then SIGINTs wrk so it reports at once (its `-d30s`
/// bounds the run otherwise). Connections: wrk's `script_resolve` first opens and closes one connection to
/// check the address (no request on it), then the run's one.
pub fn wrk_exact(url: &str, n: u64, dir: &TempDir) -> WrkRun {
    let script = dir.write(
        "exact.lua",
        format!(
            "local left = {n}\n\
             response = function(status, headers, body)\n\
               left = left - 1\n\
               if left == 0 then\n\
                 io.write(\"DONE\\n\")\n\
                 io.flush()\n\
                 wrk.thread:stop()\n\
               end\n\
             end\n\
             done = function(summary, latency, requests)\n\
               io.write(string.format(\"RESULT %d\\n\", summary.requests))\n\
             end\n"
        )
        .as_bytes(),
    );
    let mut child = match Command::new("wrk")
        .args(["-t1", "-c1", "-d30s", "--timeout", "5s", "-s"])
        .arg(&script)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => panic!("wrk: {e}"),
    };
    let Some(stdout) = child.stdout.take() else { panic!("wrk: no stdout") };
    let mut text = String::new();
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if line == "DONE" {
            // SAFETY: kill has no memory preconditions; the pid is our child's.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        }
        text.push_str(&line);
        text.push('\n');
    }
    let _ = child.wait();
    let Some(line) = text.lines().find(|l| l.starts_with("RESULT ")) else {
        panic!("wrk printed no RESULT: {text}");
    };
    let requests = line[7..].trim().parse::<u64>().unwrap_or(u64::MAX);
    assert_eq!(requests, n, "wrk completed {requests} responses, wanted {n}: {text}");
    WrkRun { requests, connects: 2 }
}

/// One keep-alive HTTP/1.1 connection driven by hand (std `TcpStream`): sends GET requests and reads each whole
/// response (`Content-Length` or chunked body), so a test controls exactly which requests go on which connection.
pub struct KeepAlive {
    stream: BufReader<std::net::TcpStream>,
    port: u16,
}

impl KeepAlive {
    /// Connects to 127.0.0.1:`port`.
    pub fn connect(port: u16) -> KeepAlive {
        let stream = match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => s,
            Err(e) => panic!("connect 127.0.0.1:{port}: {e}"),
        };
        if let Err(e) = stream.set_read_timeout(Some(Duration::from_secs(10))) {
            panic!("set_read_timeout: {e}");
        }
        KeepAlive { stream: BufReader::new(stream), port }
    }

    /// Sends `GET path` and returns the response's status after reading its body.
    pub fn get(&mut self, path: &str) -> u16 {
        self.pipeline(&[path])[0]
    }

    /// Sends `GET` for every path in one write (HTTP/1.1 pipelining), then reads the responses in order and
    /// returns their statuses.
    pub fn pipeline(&mut self, paths: &[&str]) -> Vec<u16> {
        use std::io::Write;
        let port = self.port;
        let reqs: String = paths
            .iter()
            .map(|p| format!("GET {p} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n\r\n"))
            .collect();
        if let Err(e) = self.stream.get_mut().write_all(reqs.as_bytes()) {
            panic!("send GET {paths:?}: {e}");
        }
        paths.iter().map(|p| self.response(p)).collect()
    }

    /// Reads one response to `GET path` (head and body) and returns its status.
    fn response(&mut self, path: &str) -> u16 {
        use std::io::Read;
        let status_line = self.line();
        let status = status_line.split_whitespace().nth(1).and_then(|s| s.parse::<u16>().ok());
        let Some(status) = status else { panic!("GET {path}: status line {status_line:?}") };
        let (mut length, mut chunked) = (0usize, false);
        loop {
            let h = self.line();
            if h.is_empty() {
                break;
            }
            let Some((name, value)) = h.split_once(':') else { continue };
            let value = value.trim();
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or_else(|e| panic!("GET {path}: content-length {value:?}: {e}"));
            } else if name.eq_ignore_ascii_case("transfer-encoding") && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
        let skip = |n: usize, stream: &mut BufReader<std::net::TcpStream>| {
            let mut body = vec![0u8; n];
            if let Err(e) = stream.read_exact(&mut body) {
                panic!("GET {path}: body of {n} bytes: {e}");
            }
        };
        if !chunked {
            skip(length, &mut self.stream);
            return status;
        }
        loop {
            let size_line = self.line();
            let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16);
            let size = size.unwrap_or_else(|e| panic!("GET {path}: chunk size {size_line:?}: {e}"));
            skip(size + 2, &mut self.stream);
            if size == 0 {
                return status;
            }
        }
    }

    /// One CRLF-terminated line, without the CRLF.
    fn line(&mut self) -> String {
        let mut s = String::new();
        match self.stream.read_line(&mut s) {
            Ok(0) => panic!("connection to port {} closed by the server", self.port),
            Ok(_) => s.trim_end_matches(['\r', '\n']).to_string(),
            Err(e) => panic!("reading from port {}: {e}", self.port),
        }
    }
}

/// What one ApacheBench run reported.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AbRun {
    pub complete: u64,
    pub failed: u64,
    /// Answers with a status outside 2xx (ab leaves the line out when there are none).
    pub non_2xx: u64,
    /// ab's whole report, for failure messages.
    pub text: String,
}

impl AbRun {
    /// Panics unless all `n` requests completed, none failed and every answer was 2xx.
    pub fn clean(self, n: u64, what: &str) -> AbRun {
        assert!(
            self.complete == n && self.failed == 0 && self.non_2xx == 0,
            "{what}: {} of {n} complete, {} failed, {} non-2xx:\n{}",
            self.complete,
            self.failed,
            self.non_2xx,
            self.text
        );
        self
    }
}

/// Runs ApacheBench (`ab`, HTTP/1.0: a new connection per request, or with `-k` keep-alive) with `args` and reads
/// its report. A bounded run: every call names `-n`.
pub fn ab(args: &[&str]) -> AbRun {
    assert!(args.contains(&"-n"), "ab without -n: {args:?}");
    let out = match Command::new("ab").args(["-q", "-s", "30", "-r"]).args(args).output() {
        Ok(o) => o,
        Err(e) => panic!("ab {args:?}: {e}"),
    };
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
    };
    let Some(complete) = field("Complete requests:") else { panic!("ab {args:?}: no report:\n{text}") };
    AbRun {
        complete,
        failed: field("Failed requests:").unwrap_or(u64::MAX),
        non_2xx: field("Non-2xx responses:").unwrap_or(0),
        text,
    }
}
