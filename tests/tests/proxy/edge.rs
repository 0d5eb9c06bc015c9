//! HTTP edge cases at the front door, with real clients (raw sockets, curl) against the real `monitor run`: a raw
//! backend in this test process stands in for the master so it can answer what no sane server would (101 unasked,
//! garbage, a cut body, a stalled body) and show the exact bytes the proxy sent it. The master's command is `sleep`,
//! which inherits the raw backend's listening socket: the launcher marks a process ready only when the socket on its
//! port is its own, and so it is.
//! Covered: `Expect: 100-continue`, chunked bodies both ways, Content-Length with Transfer-Encoding, codings besides
//! chunked, HEAD/204/304 on a kept-alive connection, `Connection: close` and the hop-by-hop fields it names,
//! upgrades, absolute-form targets, Host, `OPTIONS *`, CONNECT, long URIs and many headers, a byte-by-byte client,
//! broken backends, and clients that leave mid-request or stop reading (the outstanding counts least-outstanding
//! routing reads go back to zero).

use monitor_tests::require_group;
use monitor_tests::run::{launcher, served_by, Run, Spec, TIMEOUT};
use monitor_tests::{on_path, require};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the raw backend saw.
#[derive(Default)]
struct Seen {
    /// Every request (head and body as received), in order.
    requests: Mutex<Vec<Vec<u8>>>,
    /// Connections that carried a request other than the launcher's health checks.
    connections: AtomicUsize,
}

impl Seen {
    fn last(&self) -> String {
        let r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        r.last().map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
    }

    fn any(&self, needle: &str) -> bool {
        let r = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        r.iter().any(|b| String::from_utf8_lossy(b).contains(needle))
    }
}

/// Reads one request (head, then a body by Content-Length or chunked) from `r`; None at the connection's end.
fn read_request(r: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    loop {
        let mut line = Vec::new();
        if r.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
        head.extend_from_slice(&line);
        if line == b"\r\n" {
            break;
        }
    }
    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let mut all = head;
    if text.contains("\r\ntransfer-encoding: chunked") {
        loop {
            let mut line = Vec::new();
            if r.read_until(b'\n', &mut line).ok()? == 0 {
                return Some(all);
            }
            all.extend_from_slice(&line);
            let size = String::from_utf8_lossy(&line).trim().split(';').next().map(|s| s.to_string())?;
            let size = usize::from_str_radix(&size, 16).ok()?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    let mut t = Vec::new();
                    if r.read_until(b'\n', &mut t).ok()? == 0 || t == b"\r\n" {
                        all.extend_from_slice(&t);
                        return Some(all);
                    }
                    all.extend_from_slice(&t);
                }
            }
            let mut chunk = vec![0u8; size + 2];
            r.read_exact(&mut chunk).ok()?;
            all.extend_from_slice(&chunk);
        }
    }
    let len = text
        .split("\r\n")
        .find_map(|l| l.strip_prefix("content-length:").and_then(|v| v.trim().parse::<usize>().ok()))
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).ok()?;
    all.extend_from_slice(&body);
    Some(all)
}

/// The raw backend's answer to a request for `path`; None closes the connection.
fn answer(path: &str, req: &[u8], out: &mut TcpStream) -> Option<()> {
    let p = path.split('?').next().unwrap_or_default().trim_start_matches("/info");
    let send = |out: &mut TcpStream, b: &[u8]| out.write_all(b).ok();
    match p {
        "/echo" => {
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", req.len());
            send(out, &[head.as_bytes(), req].concat())
        }
        "/204" => send(out, b"HTTP/1.1 204 No Content\r\n\r\n"),
        "/304" => send(out, b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: 100\r\n\r\n"),
        "/head" => send(out, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"),
        "/chunked" => {
            send(out, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        }
        "/coded" => send(out, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
        "/close" => {
            send(out, b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 3\r\n\r\nbye")?;
            None
        }
        "/hop" => send(out, b"HTTP/1.1 200 OK\r\nConnection: X-Secret\r\nX-Secret: s\r\nContent-Length: 2\r\n\r\nok"),
        "/garbage" => {
            send(out, b"HTTZ/9 what\r\n\r\n")?;
            None
        }
        "/short" => {
            send(out, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly-some")?;
            None
        }
        "/extra" => send(
            out,
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nsmuggled",
        ),
        "/stall" => {
            send(out, b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nsome")?;
            std::thread::sleep(Duration::from_secs(30));
            None
        }
        "/101" => {
            send(out, b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")?;
            std::thread::sleep(Duration::from_secs(30));
            None
        }
        _ => send(out, b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"),
    }
}

/// A raw HTTP/1.1 server on `listener`, one thread per connection, answering by path ([`answer`]).
fn raw_backend(listener: TcpListener) -> Arc<Seen> {
    let seen = Arc::new(Seen::default());
    let s = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let s = s.clone();
            std::thread::spawn(move || {
                let Ok(mut out) = stream.try_clone() else { return };
                let mut r = BufReader::new(stream);
                let mut counted = false;
                while let Some(req) = read_request(&mut r) {
                    let path = String::from_utf8_lossy(&req).split(' ').nth(1).unwrap_or_default().to_string();
                    if !counted && path != "/health" {
                        counted = true;
                        s.connections.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Ok(mut v) = s.requests.lock() {
                        v.push(req.clone());
                    }
                    if answer(&path, &req, &mut out).is_none() {
                        return;
                    }
                }
            });
        }
    });
    seen
}

/// `monitor run` whose master is the raw backend (paths under `/info/` go to it) and whose workers are fixtures
/// (paths under `/r4/`).
fn start_with_raw(name: &str, workers: usize, proxy: &str) -> (Run, Arc<Seen>) {
    let listener = match TcpListener::bind(("127.0.0.1", 0)) {
        Ok(l) => l,
        Err(e) => panic!("raw backend: {e}"),
    };
    let port = listener.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("raw backend's port: {e}"));
    // The socket passes through `monitor run` to the master's `sleep`, which holds it (and never accepts).
    let fd = std::os::fd::AsRawFd::as_raw_fd(&listener);
    // SAFETY: clears FD_CLOEXEC on a socket this test owns; no memory is touched.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        panic!("fcntl on the raw backend's socket: {}", std::io::Error::last_os_error());
    }
    let spec = Spec {
        workers,
        // Paths under /r4/ go to the fixture workers only.
        proxy: format!("master_serves_tx = false\n{proxy}"),
        master_command: Some(vec!["sleep".into(), "600".into()]),
        master_port: Some(port),
        ..Spec::default()
    };
    let run = Run::launch(name, &spec);
    let seen = raw_backend(listener);
    run.wait_for("every process ready", |s| launcher(s).iter().all(|p| p["state"] == "ready"), TIMEOUT);
    (run, seen)
}

/// One response read off a kept-alive connection.
#[derive(Debug)]
struct Resp {
    head: String,
    body: Vec<u8>,
}

impl Resp {
    fn status(&self) -> u16 {
        self.head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    fn header(&self, name: &str) -> Option<String> {
        let name = name.to_ascii_lowercase();
        self.head.split("\r\n").skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim().eq_ignore_ascii_case(&name)).then(|| v.trim().to_string())
        })
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// A client connection to the front door.
struct Client {
    r: BufReader<TcpStream>,
}

impl Client {
    fn connect(run: &Run) -> Client {
        let s = match TcpStream::connect_timeout(&run.proxy, TIMEOUT) {
            Ok(s) => s,
            Err(e) => panic!("connect {}: {e}", run.proxy),
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        Client { r: BufReader::new(s) }
    }

    fn send(&mut self, bytes: &[u8]) {
        if let Err(e) = self.r.get_mut().write_all(bytes) {
            panic!("send: {e}");
        }
    }

    /// Reads one response (no body when `bodiless`: HEAD, or a status without one); None at the end or a timeout.
    fn read(&mut self, bodiless: bool) -> Option<Resp> {
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if self.r.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut resp = Resp { head, body: Vec::new() };
        let status = resp.status();
        if bodiless || status == 204 || status == 304 || (100..200).contains(&status) {
            return Some(resp);
        }
        if resp.header("transfer-encoding").is_some_and(|t| t.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut line = String::new();
                if self.r.read_line(&mut line).ok()? == 0 {
                    return Some(resp);
                }
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or_default(), 16).ok()?;
                let mut chunk = vec![0u8; size + 2];
                self.r.read_exact(&mut chunk).ok()?;
                if size == 0 {
                    return Some(resp);
                }
                resp.body.extend_from_slice(&chunk[..size]);
            }
        }
        match resp.header("content-length").and_then(|l| l.parse::<usize>().ok()) {
            Some(n) => {
                let mut body = vec![0u8; n];
                let mut got = 0;
                while got < n {
                    match self.r.read(&mut body[got..]) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => got += k,
                    }
                }
                body.truncate(got);
                resp.body = body;
            }
            None => {
                let _ = self.r.read_to_end(&mut resp.body);
            }
        }
        Some(resp)
    }

    /// Sends a request and reads its response.
    fn ask(&mut self, bytes: &[u8]) -> Resp {
        self.send(bytes);
        let head_req = bytes.starts_with(b"HEAD ");
        self.read(head_req).unwrap_or_else(|| panic!("no response to {:?}", String::from_utf8_lossy(bytes)))
    }

    /// True when the proxy closed the connection (EOF) within the read timeout.
    fn closed(&mut self) -> bool {
        let mut b = [0u8; 1];
        matches!(self.r.read(&mut b), Ok(0))
    }
}

/// One request on a new connection; the response.
fn once(run: &Run, bytes: &[u8]) -> Resp {
    Client::connect(run).ask(bytes)
}

#[test]
fn bodies_framing_and_kept_alive_connections() {
    if !require_group("bodies_framing_and_kept_alive_connections") {
        return;
    }
    let (run, seen) = start_with_raw("edge-framing", 1, "");

    // Expect: 100-continue: the 100 comes at once (not after a client's 1 s wait), the body gets through whole.
    let body = vec![b'x'; 5000];
    let mut c = Client::connect(&run);
    c.send(b"POST /info/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n");
    let t = Instant::now();
    let cont = c.read(false).expect("an interim answer");
    assert_eq!(cont.status(), 100, "{cont:?}");
    assert!(t.elapsed() < Duration::from_millis(500), "100 Continue after {:?}", t.elapsed());
    c.send(&body);
    let r = c.read(false).expect("the answer");
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(r.body.ends_with(&body), "the backend got: {}", r.text());
    assert!(r.text().to_ascii_lowercase().contains("content-length: 5000\r\n"), "{}", r.text());
    // And the connection goes on.
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);

    // curl sends Expect itself for a large body: no stall either.
    if require(on_path("curl"), "bodies_framing_and_kept_alive_connections", "needs curl") {
        let file = std::env::temp_dir().join(format!("edge-body-{}", std::process::id()));
        std::fs::write(&file, vec![b'y'; 2 * 1024 * 1024]).expect("body file");
        let t = Instant::now();
        let out = std::process::Command::new("curl")
            // Without a `100 Continue` curl would wait these 20 s before sending the body.
            .args([
                "-sS",
                "--max-time",
                "30",
                "--expect100-timeout",
                "20",
                "-H",
                "Expect: 100-continue",
                "--data-binary",
            ])
            .arg(format!("@{}", file.display()))
            .arg(format!("http://{}/r4/x", run.proxy))
            .output()
            .expect("curl");
        let _ = std::fs::remove_file(&file);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("\"body_bytes\":2097152"), "{text} {}", String::from_utf8_lossy(&out.stderr));
        let quick = monitor_tests::pace::scaled(Duration::from_secs(5));
        assert!(t.elapsed() < quick, "curl took {:?}: the front door did not say 100 Continue", t.elapsed());
    }

    // A chunked request body arrives chunked (no Content-Length made up), whole; a chunked response comes back whole.
    let r = once(
        &run,
        b"POST /info/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    );
    let got = r.text().to_ascii_lowercase();
    assert!(got.contains("transfer-encoding: chunked\r\n") && !got.contains("content-length"), "{got}");
    assert!(got.contains("hello") && got.contains(" world") && got.ends_with("0\r\n\r\n"), "{got}");
    let mut c = Client::connect(&run);
    let r = c.ask(b"GET /info/chunked HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.text().as_str()), (200, "hello world"), "{r:?}");
    let r = once(&run, b"POST /r4/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
    assert!(r.text().contains("\"body_bytes\":3"), "{}", r.text());

    // Content-Length and Transfer-Encoding together (RFC 9112 §6.1): the body is framed by the transfer coding
    // alone, the process never gets the Content-Length, and the client's connection is closed after the answer, so
    // bytes past the chunked body are never read as a request (no smuggling).
    for req in [
        &b"POST /info/echo HTTP/1.1\r\nHost: x\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /info/smuggled HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"POST /info/echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n5\r\nhello\r\n0\r\n\r\nGET /info/smuggled HTTP/1.1\r\nHost: x\r\n\r\n",
    ] {
        let mut c = Client::connect(&run);
        c.send(req);
        let r = c.read(false).expect("an answer");
        if r.status() != 400 {
            let fwd = r.text().to_ascii_lowercase();
            assert_eq!(r.status(), 200, "{r:?}");
            assert!(!fwd.contains("content-length") && fwd.contains("5\r\nhello\r\n0\r\n\r\n"), "{fwd}");
        }
        assert!(c.closed(), "the connection stays open after an ambiguous request");
        assert!(!seen.any("smuggled"), "a request smuggled past the front door: {}", seen.last());
    }

    // A transfer coding besides chunked (RFC 9112 §6.1; nginx: 501): never forwarded with the coding dropped, which
    // would hand the process still-coded bytes as the body. Both ways.
    for te in ["gzip, chunked", "chunked, chunked", "deflate\r\nTransfer-Encoding: chunked"] {
        let req =
            format!("POST /info/echo?te HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: {te}\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
        let r = once(&run, req.as_bytes());
        assert_eq!(r.status(), 501, "{te}: {r:?}");
        assert!(!seen.any("/info/echo?te"), "{te}: forwarded: {}", seen.last());
    }
    let r = once(&run, b"GET /info/coded HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status(), 502, "{r:?}");

    // HEAD, 204 and 304 have no body: the next request on the same connection is answered, and the upstream
    // connection is reused (the raw backend sees no new connection).
    let mut c = Client::connect(&run);
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
    let conns = seen.connections.load(Ordering::Relaxed);
    let r = c.ask(b"HEAD /info/head HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.header("content-length").as_deref()), (200, Some("100")), "{r:?}");
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
    assert_eq!(c.ask(b"GET /info/204 HTTP/1.1\r\nHost: x\r\n\r\n").status(), 204);
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
    assert_eq!(c.ask(b"GET /info/304 HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v1\"\r\n\r\n").status(), 304);
    let r = c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.text().as_str()), (200, "ok\n"), "{r:?}");
    let r = c.ask(b"HEAD /r4/x HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status(), 200, "{r:?}");
    assert_eq!(c.ask(b"GET /r4/x HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
    assert_eq!(seen.connections.load(Ordering::Relaxed), conns, "a bodiless answer cost its upstream connection");

    // Connection: close from the client: answered, then closed; the fields it names are not forwarded.
    let mut c = Client::connect(&run);
    let r = c.ask(
        b"GET /info/echo HTTP/1.1\r\nHost: x\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nKeep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\n\r\n",
    );
    assert_eq!(r.header("connection").as_deref(), Some("close"), "{r:?}");
    let fwd = r.text().to_ascii_lowercase();
    for hop in ["x-secret", "keep-alive", "te:", "proxy-connection", "connection"] {
        assert!(!fwd.contains(hop), "{hop} forwarded: {fwd}");
    }
    assert!(c.closed(), "open after Connection: close");
    // From the backend: its connection ends, the client's stays usable; the fields it names do not reach the client.
    let mut c = Client::connect(&run);
    let r = c.ask(b"GET /info/close HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.text().as_str(), r.header("connection")), (200, "bye", None), "{r:?}");
    let r = c.ask(b"GET /info/hop HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.header("x-secret"), r.header("connection")), (200, None, None), "{r:?}");
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
}

#[test]
fn request_targets_methods_and_upgrades() {
    if !require_group("request_targets_methods_and_upgrades") {
        return;
    }
    let (run, seen) = start_with_raw("edge-targets", 1, "");

    // Absolute form: the process gets the origin form, and the Host of the target (RFC 9112 §3.2.2).
    let r = once(&run, b"GET http://example.org/info/echo?a=1 HTTP/1.1\r\nHost: other.example\r\n\r\n");
    let fwd = r.text();
    assert!(fwd.starts_with("GET /info/echo?a=1 HTTP/1.1\r\n"), "{fwd}");
    assert!(fwd.contains("host: example.org\r\n") && !fwd.contains("other.example"), "{fwd}");

    // Host (RFC 9112 §3.2; nginx): an HTTP/1.1 request without one, or with two, is 400 and never forwarded; an
    // HTTP/1.0 one without gets the process's address.
    for req in [
        &b"GET /info/echo?nohost HTTP/1.1\r\n\r\n"[..],
        b"GET /info/echo?twohosts HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
    ] {
        let r = once(&run, req);
        assert_eq!(r.status(), 400, "{r:?}");
    }
    assert!(!seen.any("nohost") && !seen.any("twohosts"), "forwarded: {}", seen.last());
    let r = once(&run, b"GET /info/echo HTTP/1.0\r\n\r\n");
    assert!(r.text().contains(&format!("host: 127.0.0.1:{}\r\n", run.ports[0])), "{}", r.text());

    // OPTIONS * is answered (by the master), not mangled into a path.
    let r = once(&run, b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(seen.any("OPTIONS * HTTP/1.1\r\n"), "{}", seen.last());

    // CONNECT is refused, never forwarded, and the connection is closed (the client may already be tunnelling).
    let mut c = Client::connect(&run);
    c.send(b"CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\nSSH-2.0-x\r\n");
    let r = c.read(false).expect("an answer to CONNECT");
    assert_eq!(r.status(), 405, "{r:?}");
    assert!(c.closed(), "open after a refused CONNECT");
    assert!(!seen.any("CONNECT"), "CONNECT forwarded: {}", seen.last());

    // Very long URIs and very many headers: 431, no panic, still serving.
    for n in [70_000, 1_000_000] {
        let mut req = b"GET /r4/".to_vec();
        req.extend(std::iter::repeat_n(b'a', n));
        req.extend(b" HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut c = Client::connect(&run);
        let _ = c.r.get_mut().write_all(&req);
        let r = c.read(false).expect("an answer to a long URI");
        assert!(matches!(r.status(), 414 | 431), "{r:?}");
    }
    let mut req = b"GET /r4/x HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..500 {
        req.extend(format!("X-H{i}: v\r\n").as_bytes());
    }
    req.extend(b"\r\n");
    assert_eq!(once(&run, &req).status(), 431);
    let mut req = b"GET /r4/x HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..60 {
        req.extend(format!("X-H{i}: v\r\n").as_bytes());
    }
    req.extend(b"\r\n");
    assert_eq!(once(&run, &req).status(), 200);

    // A websocket handshake is refused with a clear status, at once, never half-switched.
    let t = Instant::now();
    let r = once(
        &run,
        b"GET /info/ok HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    );
    assert_eq!(r.status(), 501, "{r:?}");
    assert!(r.text().contains("websocket"), "{}", r.text());
    assert!(t.elapsed() < Duration::from_secs(2));
    // Another upgrade (h2c, which curl --http2 asks for) is ignored: a plain HTTP/1.1 answer, without the upgrade
    // fields reaching the process.
    let r = once(&run, b"GET /info/echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n");
    assert_eq!(r.status(), 200, "{r:?}");
    assert!(!r.text().to_ascii_lowercase().contains("upgrade"), "{}", r.text());
    // A process that switches protocols unasked: 502, not a 101 the front door cannot carry.
    let mut c = Client::connect(&run);
    let r = c.ask(b"GET /info/101 HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status(), 502, "{r:?}");
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
}

#[test]
fn a_client_sending_its_head_byte_by_byte_is_cut_off() {
    if !require_group("a_client_sending_its_head_byte_by_byte_is_cut_off") {
        return;
    }
    let (run, _seen) = start_with_raw("edge-slowloris", 1, "");
    let mut c = Client::connect(&run);
    let _ = c.r.get_mut().set_read_timeout(Some(Duration::from_millis(500)));
    let t = Instant::now();
    let head = b"GET /r4/x HTTP/1.1\r\nHost: x\r\nX-A: b\r\n".repeat(20);
    let mut cut = None;
    // One byte every 500 ms: the whole head would take minutes.
    for b in head.iter().take(120) {
        if c.r.get_mut().write_all(&[*b]).is_err() {
            cut = Some(t.elapsed());
            break;
        }
        let mut buf = [0u8; 64];
        match c.r.read(&mut buf) {
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            // The end, a reset, or an answer: the front door gave up on this head.
            _ => {
                cut = Some(t.elapsed());
                break;
            }
        }
    }
    let cut = cut.expect("a byte-by-byte client was never cut off");
    assert!(cut < Duration::from_secs(40), "cut off after {cut:?}");
    // The front door still serves.
    assert_eq!(once(&run, b"GET /r4/x HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);
}

#[test]
fn broken_backends_get_502_or_a_cut_never_a_hang() {
    if !require_group("broken_backends_get_502_or_a_cut_never_a_hang") {
        return;
    }
    let (run, _seen) = start_with_raw("edge-broken", 1, "upstream_timeout_s = 2");

    // A malformed head: 502, and the client's connection goes on.
    let mut c = Client::connect(&run);
    let r = c.ask(b"GET /info/garbage HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(r.status(), 502, "{r:?}");
    assert_eq!(c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n").status(), 200);

    // Closed mid-body: the client's connection is cut before the promised length.
    let mut c = Client::connect(&run);
    let t = Instant::now();
    let r = c.read_after(b"GET /info/short HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.body.as_slice()), (200, &b"only-some"[..]), "{r:?}");
    assert!(c.closed(), "not cut");
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // Stalled mid-body: cut after the upstream timeout, not held open for as long as the process likes.
    let mut c = Client::connect(&run);
    let _ = c.r.get_mut().set_read_timeout(Some(Duration::from_secs(10)));
    let t = Instant::now();
    let r = c.read_after(b"GET /info/stall HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!((r.status(), r.body.as_slice()), (200, &b"some"[..]), "{r:?}");
    assert!(c.closed(), "a stalled body is not cut");
    assert!(t.elapsed() < Duration::from_secs(6), "cut after {:?}", t.elapsed());

    // Bytes after the end of a response: that connection is not used again (its extra bytes are never an answer).
    let mut c = Client::connect(&run);
    assert_eq!(c.ask(b"GET /info/extra HTTP/1.1\r\nHost: x\r\n\r\n").text(), "ok");
    for _ in 0..3 {
        let r = c.ask(b"GET /info/ok HTTP/1.1\r\nHost: x\r\n\r\n");
        assert_eq!((r.status(), r.text().as_str()), (200, "ok\n"), "{r:?}");
    }
}

impl Client {
    /// Sends a request and reads its head and whatever body comes before the connection ends or times out.
    fn read_after(&mut self, req: &[u8]) -> Resp {
        self.send(req);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            match self.r.read_line(&mut line) {
                Ok(0) | Err(_) => panic!("no head for {}: {head}", String::from_utf8_lossy(req)),
                Ok(_) if line == "\r\n" => break,
                Ok(_) => head.push_str(&line),
            }
        }
        let mut body = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => body.extend_from_slice(&buf[..n]),
            }
            if body.len() >= 100 {
                break;
            }
        }
        // The connection's end was seen by the last read: leave it for closed().
        Resp { head, body }
    }
}

/// A front door over tx1 and tx2 only (least-outstanding between them), and a cache id tx1 issued, to pin
/// requests to tx1.
fn over_tx1_and_tx2(name: &str) -> (Run, String) {
    let spec = Spec { workers: 2, proxy: "master_serves_tx = false".into(), ..Spec::default() };
    let run = Run::start(name, &spec);
    let id = (0..10)
        .map(|_| run.get("/r4/x?cache=start", &[]))
        .find(|r| served_by(r) == "tx1")
        .and_then(|r| r.header("x-cache-id").map(str::to_string))
        .expect("tx1 issues a cache id within 10 tries");
    (run, id)
}

/// `None` when four unpinned requests are shared evenly by tx1 and tx2 (neither holds a count); otherwise who
/// served them.
fn uneven(run: &Run) -> Option<Vec<String>> {
    let by: Vec<String> = (0..4).map(|_| served_by(&run.get("/r4/x", &[]))).collect();
    (by.iter().filter(|b| *b == "tx1").count() != 2).then_some(by)
}

#[test]
fn clients_that_leave_mid_request_leave_no_outstanding_count() {
    if !require_group("clients_that_leave_mid_request_leave_no_outstanding_count") {
        return;
    }
    // Least-outstanding over tx1 and tx2 only; a leaked count on tx1 would send every later request to tx2.
    let (run, id) = over_tx1_and_tx2("edge-leave");
    let pinned = format!("X-Cache-Id: {id}\r\n");
    let cases: [(&str, String, bool); 5] = [
        ("waiting for a slow answer", format!("GET /r4/x?sleep_ms=20000 HTTP/1.1\r\nHost: x\r\n{pinned}\r\n"), false),
        ("mid-body", format!("POST /r4/x HTTP/1.1\r\nHost: x\r\n{pinned}Content-Length: 1000\r\n\r\nabc"), false),
        (
            "mid-chunk",
            format!("POST /r4/x HTTP/1.1\r\nHost: x\r\n{pinned}Transfer-Encoding: chunked\r\n\r\n5\r\nhel"),
            false,
        ),
        (
            "after Expect: 100-continue",
            format!("POST /r4/x HTTP/1.1\r\nHost: x\r\n{pinned}Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n"),
            false,
        ),
        ("mid-response", format!("GET /r4/x?body_kib=20000 HTTP/1.1\r\nHost: x\r\n{pinned}\r\n"), true),
    ];
    for (what, req, read_some) in &cases {
        let mut clients: Vec<Client> = (0..3).map(|_| Client::connect(&run)).collect();
        for c in &mut clients {
            c.send(req.as_bytes());
        }
        std::thread::sleep(Duration::from_millis(300));
        if *read_some {
            for c in &mut clients {
                let mut b = [0u8; 1000];
                let _ = c.r.read(&mut b);
            }
        }
        drop(clients);
        // The proxy sees the clients gone; the counts go back to zero, ties rotate over tx1 and tx2 again.
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(by) = uneven(&run) {
            assert!(Instant::now() < deadline, "{what}: tx1 kept a count: later requests went to {by:?}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[test]
fn a_client_that_stops_reading_is_cut_off() {
    if !require_group("a_client_that_stops_reading_is_cut_off") {
        return;
    }
    let (run, id) = over_tx1_and_tx2("edge-unread");
    // 64 MiB, far more than the sockets between tx1 and this client buffer: the answer waits on the client.
    let mut c = Client::connect(&run);
    c.send(format!("GET /r4/x?body_kib=65536 HTTP/1.1\r\nHost: x\r\nX-Cache-Id: {id}\r\n\r\n").as_bytes());
    let mut b = [0u8; 1000];
    let _ = c.r.read(&mut b);
    // Never read again: the front door gives up on this client after its send timeout, and tx1's count goes back
    // to zero (ties rotate over tx1 and tx2 again) instead of staying up for as long as the client stays connected.
    let t = Instant::now();
    while let Some(by) = uneven(&run) {
        assert!(t.elapsed() < Duration::from_secs(45), "tx1 still counts the unread answer: requests went to {by:?}");
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(t.elapsed() > Duration::from_secs(5), "the answer was never waiting on the client");
    drop(c);
}
