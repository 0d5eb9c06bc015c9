//! A webhook recorder: python3's `http.server` on a loopback port that answers each request from a schedule of
//! statuses (over TLS when given a certificate) and writes it down (method, path, headers, body, the status it got)
//! as one JSON line in a file of its own, which [`Recorder::requests`] reads back. Killed and its folder removed on
//! drop.

use crate::child::ChildGuard;
use crate::temp::TempDir;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The server, its settings in one JSON argument: `first` (the statuses of the first requests, in order), `then`
/// (every later one's), `log` (the JSON lines), `port_file` (written once it listens, renamed into place so it is
/// never read half written), and `cert` and `key` for TLS (none: plain HTTP). Single-threaded, so the schedule
/// follows the order the requests arrive in; each is written down before it is answered.
const RECORDER: &str = r#"
import http.server, json, os, ssl, sys
conf = json.loads(sys.argv[1])
class Recorder(http.server.BaseHTTPRequestHandler):
    seen = 0
    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        first = conf["first"]
        status = first[Recorder.seen] if Recorder.seen < len(first) else conf["then"]
        Recorder.seen += 1
        line = json.dumps({
            "method": self.command,
            "path": self.path,
            "status": status,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
        })
        with open(conf["log"], "a") as f:
            f.write(line + "\n")
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
if conf["cert"]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(conf["cert"], conf["key"])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
with open(conf["port_file"] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(conf["port_file"] + ".tmp", conf["port_file"])
server.serve_forever()
"#;

/// How long [`Recorder::start`] waits for python to listen ([`crate::pace::scaled`]).
const READY: Duration = Duration::from_secs(10);

/// One request as the recorder wrote it down.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    /// The request target as sent (`/hook?x=1`).
    pub path: String,
    /// The status the recorder answered it with.
    pub status: u16,
    /// Header names lower-cased; the last value of a repeated header.
    pub headers: BTreeMap<String, String>,
    /// The body as text (invalid UTF-8 replaced).
    pub body: String,
}

impl Request {
    /// The header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }

    /// The body as JSON; panics when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{} {}: body is not JSON ({e}): {}", self.method, self.path, self.body))
    }
}

/// The requests of a recorder's file: one JSON object per complete line; an unfinished last line (being written)
/// is left for the next read.
pub fn parse_requests(text: &str) -> Result<Vec<Request>, String> {
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    complete.lines().filter(|l| !l.trim().is_empty()).map(parse_request).collect()
}

fn parse_request(line: &str) -> Result<Request, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("bad JSON ({e}): {line}"))?;
    let text = |key: &str| v[key].as_str().map(String::from).ok_or_else(|| format!("no {key}: {line}"));
    let status =
        v["status"].as_u64().and_then(|s| u16::try_from(s).ok()).ok_or_else(|| format!("no status: {line}"))?;
    let headers = v["headers"].as_object().ok_or_else(|| format!("no headers: {line}"))?;
    let headers = headers.iter().map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string())).collect();
    Ok(Request { method: text("method")?, path: text("path")?, status, headers, body: text("body")? })
}

/// A running recorder on 127.0.0.1; python is killed and reaped, then its folder removed, on drop.
pub struct Recorder {
    // Declared before `dir`: python is gone before its folder is removed.
    child: ChildGuard,
    dir: TempDir,
    port: u16,
    tls: bool,
}

impl Recorder {
    /// A recorder over plain HTTP answering `first[i]` to the i-th request, then `then` to every later one.
    pub fn start(first: &[u16], then: u16) -> Recorder {
        Recorder::spawn(first, then, None)
    }

    /// [`Recorder::start`] over TLS with the PEM certificate (chain) `cert` and its key `key`.
    pub fn start_tls(first: &[u16], then: u16, cert: &Path, key: &Path) -> Recorder {
        Recorder::spawn(first, then, Some((cert, key)))
    }

    fn spawn(first: &[u16], then: u16, tls: Option<(&Path, &Path)>) -> Recorder {
        let dir = TempDir::new("recorder");
        let port_file = dir.path().join("port");
        let stderr = dir.path().join("stderr");
        let conf = serde_json::json!({
            "first": first,
            "then": then,
            "log": dir.path().join("requests.jsonl"),
            "port_file": port_file,
            "cert": tls.map(|(c, _)| c),
            "key": tls.map(|(_, k)| k),
        });
        let err = std::fs::File::create(&stderr).unwrap_or_else(|e| panic!("{}: {e}", stderr.display()));
        let mut child = ChildGuard::spawn(
            Command::new("python3")
                .args(["-c", RECORDER, &conf.to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(err),
        );
        let ready = crate::pace::scaled(READY);
        let deadline = Instant::now() + ready;
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
                break port;
            }
            let said = || std::fs::read_to_string(&stderr).unwrap_or_default();
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the recorder exited before listening ({status}):\n{}", said());
            }
            if Instant::now() >= deadline {
                panic!("the recorder did not listen within {ready:?}:\n{}", said());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Recorder { child, dir, port, tls: tls.is_some() }
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:<port><path>` (`https` over TLS); `path` starts with `/`.
    pub fn url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.port)
    }

    /// The pid of the python process.
    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Every request answered so far, in the order they came.
    pub fn requests(&self) -> Vec<Request> {
        let log = self.dir.path().join("requests.jsonl");
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        parse_requests(&text).unwrap_or_else(|e| panic!("{}: {e}", log.display()))
    }

    /// Waits (polling, at most `timeout`) until at least `n` requests were answered, and returns them all; panics
    /// with those it has otherwise. Blocks the thread: an async test polls [`Recorder::requests`] instead.
    pub fn wait_for(&self, n: usize, timeout: Duration) -> Vec<Request> {
        let timeout = crate::pace::scaled(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.requests();
            if got.len() >= n {
                return got;
            }
            if Instant::now() >= deadline {
                panic!("the recorder got {} requests within {timeout:?}, not {n}: {got:#?}", got.len());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_lines_are_requests_and_a_half_written_one_waits() {
        let line = r#"{"method": "POST", "path": "/hook", "status": 500, "headers": {"authorization": "Bearer t"}, "body": "{\"a\": 1}"}"#;
        let got = parse_requests(&format!("{line}\n\n{line}\n{{\"method\": \"PO")).expect("two requests");
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].method.as_str(), got[0].path.as_str(), got[0].status), ("POST", "/hook", 500));
        assert_eq!(got[0].header("Authorization"), Some("Bearer t"));
        assert_eq!(got[0].json()["a"], 1);
        assert_eq!(parse_requests(""), Ok(Vec::new()));
        assert_eq!(parse_requests(line), Ok(Vec::new()), "no newline yet: still being written");
        assert!(parse_requests("{\"method\": \"GET\", \"status\": 200, \"headers\": {}, \"body\": \"\"}\n")
            .is_err_and(|e| e.contains("no path")));
        assert!(parse_requests("nonsense\n").is_err_and(|e| e.contains("bad JSON")));
    }

    #[test]
    fn a_recorder_answers_its_schedule_and_writes_each_request_down() {
        let test = "a_recorder_answers_its_schedule_and_writes_each_request_down";
        if !crate::require_program(test, "python3") {
            return;
        }
        let hook = Recorder::start(&[500, 400], 204);
        assert!(hook.url("/x").starts_with("http://127.0.0.1:"));
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], hook.port()));
        let send = |method, path| {
            let r = crate::http::request(addr, method, path, &[("X-Test", "yes")], Duration::from_secs(5));
            r.unwrap_or_else(|e| panic!("{method} {path}: {e}")).status
        };
        let statuses: Vec<u16> = [("POST", "/a"), ("GET", "/b?c=1"), ("PUT", "/d"), ("POST", "/e")]
            .into_iter()
            .map(|(m, p)| send(m, p))
            .collect();
        assert_eq!(statuses, [500, 400, 204, 204]);
        let got = hook.wait_for(4, Duration::from_secs(5));
        let seen: Vec<(&str, &str, u16)> = got.iter().map(|r| (r.method.as_str(), r.path.as_str(), r.status)).collect();
        assert_eq!(seen, [("POST", "/a", 500), ("GET", "/b?c=1", 400), ("PUT", "/d", 204), ("POST", "/e", 204)]);
        assert!(got.iter().all(|r| r.header("x-test") == Some("yes") && r.body.is_empty()), "{got:#?}");
        let (pid, dir) = (hook.pid(), hook.dir.path().to_path_buf());
        drop(hook);
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "python killed and reaped");
        assert!(!dir.exists(), "its folder removed");
    }
}
