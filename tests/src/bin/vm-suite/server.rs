//! `vm-suite serve <port>`: a tiny single-threaded HTTP/1.1 server (keep-alive, HEAD, POST bodies) for the exact
//! request-count tests. Each response goes out in one `write`, each request is read from the start of a read.
//!
//! Routes: `/missing` 404, `/error` 500, anything else 200 (`hello\n`; a POST answers with its body's length).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;

pub fn main(args: &[String]) -> ExitCode {
    let Some(port) = args.first().and_then(|p| p.parse::<u16>().ok()) else {
        eprintln!("usage: vm-suite serve <port>");
        return ExitCode::FAILURE;
    };
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("vm-suite serve: bind 127.0.0.1:{port}: {e}");
            return ExitCode::FAILURE;
        }
    };
    for conn in listener.incoming() {
        match conn {
            Ok(stream) => {
                if let Err(e) = serve(stream) {
                    eprintln!("vm-suite serve: {e}");
                }
            }
            Err(e) => eprintln!("vm-suite serve: accept: {e}"),
        }
    }
    ExitCode::SUCCESS
}

/// Serves the requests of one connection until the client closes it or asks to. Reads and writes go through the
/// accepted fd itself (no `try_clone`: the probes track the fd that `accept` returned, not a duplicate).
fn serve(stream: TcpStream) -> std::io::Result<()> {
    let mut out = &stream;
    let mut reader = BufReader::new(&stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        let mut words = request_line.split_whitespace();
        let (method, path, version) =
            (words.next().unwrap_or(""), words.next().unwrap_or(""), words.next().unwrap_or(""));
        let mut length = 0usize;
        let mut close = version != "HTTP/1.1";
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
                if name == "content-length" {
                    length = value.parse().unwrap_or(0);
                } else if name == "connection" && value.eq_ignore_ascii_case("close") {
                    close = true;
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let (status, text) = match path {
            "/missing" => ("404 Not Found", "not here\n".to_string()),
            "/error" => ("500 Internal Server Error", "broken on purpose\n".to_string()),
            _ if method == "POST" => ("200 OK", format!("got {length} bytes\n")),
            _ => ("200 OK", "hello\n".to_string()),
        };
        let connection = if close { "close" } else { "keep-alive" };
        let mut response =
            format!("HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n", text.len());
        if method != "HEAD" {
            response.push_str(&text);
        }
        out.write_all(response.as_bytes())?;
        if close {
            return Ok(());
        }
    }
}
