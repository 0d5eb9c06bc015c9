//! The kernel's socket tables, as the guard reads them to learn who listens on a port: a `sock_diag` dump's
//! datagram (`NETLINK_SOCK_DIAG` replies, seeded with ones captured from a host), `/proc/net/tcp` and `tcp6` (read as
//! text, any bytes that are not UTF-8 replaced), and an fd's `socket:[N]` link. None may panic; a dump yields at most
//! one listener per 16 bytes (a netlink header), a table at most one per line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use monitor::sources::sockets::{diag, parse_socket_link, parse_tcp_listeners};

fuzz_target!(|data: &[u8]| {
    let mut out = Vec::new();
    let _ = diag::parse(data, &mut out);
    assert!(out.len() <= data.len() / 16, "{} listeners from {} bytes", out.len(), data.len());
    let text = String::from_utf8_lossy(data);
    let listeners = parse_tcp_listeners(&text);
    assert!(listeners.len() <= text.lines().count());
    let _ = parse_socket_link(&text);
});
