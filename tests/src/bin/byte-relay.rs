//! `byte-relay --port 8080 --upstream 3001 --upstream 3002`: the least any proxy can do, as a floor for
//! `cargo xtask bench proxy` to measure the latency goal against.
//!
//! Each client connection gets its own upstream connection, to the upstreams in turn, and two threads that copy
//! bytes, one each way, with blocking reads and writes. A request costs it one read and one write each way and the
//! two wake-ups of its threads: no event loop, no parsing, no HTTP at all. Every HTTP proxy makes at least those
//! four socket calls per request, so what this adds over a direct connection is the machine's floor for a hop.
//! Not a proxy to use: one thread per direction per connection, and it knows nothing of HTTP.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::ExitCode;

fn parse_args() -> Result<(u16, Vec<SocketAddr>), String> {
    let (mut port, mut upstreams) = (None, Vec::new());
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().ok_or_else(|| format!("{a} needs a value"))?;
        let p: u16 = v.parse().map_err(|e| format!("{a} {v}: {e}"))?;
        match a.as_str() {
            "--port" => port = Some(p),
            "--upstream" => upstreams.push(SocketAddr::from(([127, 0, 0, 1], p))),
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    let port = port.ok_or("--port is required")?;
    if upstreams.is_empty() {
        return Err("at least one --upstream is required".into());
    }
    Ok((port, upstreams))
}

fn main() -> ExitCode {
    let (port, upstreams) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("byte-relay: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("byte-relay: listening on 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for (n, client) in listener.incoming().enumerate() {
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                eprintln!("byte-relay: accept: {e}");
                continue;
            }
        };
        let up = upstreams[n % upstreams.len()];
        std::thread::spawn(move || {
            // A connection's end is not reported: wrk cuts its connections mid-request at the end of every run.
            let _ = relay(client, up);
        });
    }
    ExitCode::SUCCESS
}

fn relay(client: TcpStream, up: SocketAddr) -> std::io::Result<()> {
    let upstream = TcpStream::connect(up)?;
    client.set_nodelay(true)?;
    upstream.set_nodelay(true)?;
    let (c2, u2) = (client.try_clone()?, upstream.try_clone()?);
    let back = std::thread::spawn(move || copy(u2, c2));
    let _ = copy(client, upstream);
    let _ = back.join();
    Ok(())
}

/// Copies until `from` ends or fails, then ends both directions of both sockets (the other thread's read returns).
fn copy(mut from: TcpStream, mut to: TcpStream) -> std::io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let r = loop {
        match from.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => {
                if let Err(e) = to.write_all(&buf[..n]) {
                    break Err(e);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => break Err(e),
        }
    };
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
    r
}
