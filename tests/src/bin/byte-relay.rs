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

fn main() -> ExitCode {
    let (port, upstreams) = match monitor_tests::port_and_upstreams(std::env::args().skip(1)) {
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
