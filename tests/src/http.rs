//! A tiny HTTP/1.1 client over std's `TcpStream` (GET with `Connection: close`), enough to talk to the agent
//! and fixture servers without pulling in an HTTP stack.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Sends `GET path` to `addr` and reads the whole response, each step bounded by `timeout` (stretched by
/// [`crate::pace::scaled`], as every timeout of this module is).
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<Response, String> {
    request(addr, "GET", path, &[], timeout)
}

/// Sends one request (with optional extra `Name: value` headers, no body) and reads the whole response.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    timeout: Duration,
) -> Result<Response, String> {
    send(addr, method, path, headers, None, timeout)
}

/// Sends one request with `body` (and its `Content-Length`) and reads the whole response.
pub fn request_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    timeout: Duration,
) -> Result<Response, String> {
    send(addr, method, path, headers, Some(body), timeout)
}

fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Response, String> {
    let timeout = crate::pace::scaled(timeout);
    let mut s = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    bytes.extend_from_slice(body.unwrap_or_default());
    s.write_all(&bytes).map_err(|e| format!("send to {addr}: {e}"))?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| format!("read from {addr}: {e}"))?;
    parse_response(&raw)
}

/// Parses a complete HTTP/1.1 response: status line, headers, and a body delimited by `Content-Length`,
/// chunked transfer coding, or the end of the connection.
pub fn parse_response(raw: &[u8]) -> Result<Response, String> {
    let end = find(raw, b"\r\n\r\n").ok_or("no end of headers")?;
    let head = std::str::from_utf8(&raw[..end]).map_err(|_| "headers are not UTF-8")?;
    let rest = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or("empty response")?;
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(format!("not an HTTP/1 status line: {status_line:?}"));
    }
    let status: u16 =
        parts.next().and_then(|c| c.parse().ok()).ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut headers = Vec::new();
    for line in lines {
        let (k, v) = line.split_once(':').ok_or_else(|| format!("bad header line {line:?}"))?;
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut resp = Response { status, headers, body: Vec::new() };
    resp.body = if resp.header("transfer-encoding").is_some_and(|te| te.eq_ignore_ascii_case("chunked")) {
        dechunk(rest)?
    } else if let Some(len) = resp.header("content-length") {
        let len: usize = len.parse().map_err(|_| format!("bad content-length {len:?}"))?;
        rest.get(..len).ok_or("body shorter than content-length")?.to_vec()
    } else {
        rest.to_vec()
    };
    Ok(resp)
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let eol = find(rest, b"\r\n").ok_or("truncated chunk size")?;
        let size_text = std::str::from_utf8(&rest[..eol]).map_err(|_| "bad chunk size")?;
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| format!("bad chunk size {size_text:?}"))?;
        rest = &rest[eol + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("truncated chunk")?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Waits (up to 10 s, [`crate::pace::scaled`]) until something accepts connections on 127.0.0.1:`port`; panics
/// otherwise.
pub fn wait_port(port: u16) {
    let deadline = std::time::Instant::now() + crate::pace::scaled(Duration::from_secs(10));
    while std::time::Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("nothing listens on 127.0.0.1:{port}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_length_body() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}junk")
            .expect("parses");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.body, b"{}");
    }

    #[test]
    fn chunked_body() {
        let r = parse_response(b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nbusy\r\n3;x=y\r\n!!!\r\n0\r\n\r\n")
            .expect("parses");
        assert_eq!(r.status, 503);
        assert_eq!(r.text(), "busy!!!");
    }

    #[test]
    fn body_until_close() {
        let r = parse_response(b"HTTP/1.0 404 Not Found\r\n\r\nnope").expect("parses");
        assert_eq!((r.status, r.text().as_str()), (404, "nope"));
    }

    #[test]
    fn garbage_is_an_error() {
        for raw in [
            &b""[..],
            b"hello",
            b"SSH-2.0\r\n\r\n",
            b"HTTP/1.1 abc\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nx",
        ] {
            assert!(parse_response(raw).is_err(), "{:?}", String::from_utf8_lossy(raw));
        }
    }

    #[test]
    fn talks_to_a_socket() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let server = std::thread::spawn(move || {
            let (mut s, _) = l.accept().expect("accept");
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).expect("read");
            let req = String::from_utf8_lossy(&buf[..n]).into_owned();
            s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").expect("write");
            req
        });
        let r = get(addr, "/healthz", Duration::from_secs(5)).expect("get");
        assert_eq!((r.status, r.text().as_str()), (200, "ok"));
        let req = server.join().expect("server");
        assert!(req.starts_with("GET /healthz HTTP/1.1\r\n"), "{req}");
    }
}
