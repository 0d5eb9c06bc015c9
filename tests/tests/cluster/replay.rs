//! An attacker on the network between two nodes: a request for a's cache, sent through b, is forwarded by b to a
//! with its signed hop header; the test captures that forward off the loopback interface (a packet socket, as a
//! host on the path would) and sends its bytes to a again. a refuses the replay with 401 `hop header replayed`
//! and its process does not serve it twice; the same bytes sent to b (which never saw them) get 503 and are not
//! forwarded, and sent to b again, 401. Root: the capture needs `CAP_NET_RAW`.

use super::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

const TOKENS: &str = "token-secret-of-the-replay-cluster-0123";

/// A packet socket on the loopback interface that sees every IPv4 packet sent over it.
struct Tap {
    fd: OwnedFd,
}

impl Tap {
    fn open() -> Tap {
        let proto = (libc::ETH_P_IP as u16).to_be();
        // SAFETY: socket takes no pointers; the result is a new fd or -1.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, i32::from(proto)) };
        assert!(fd >= 0, "packet socket: {}", std::io::Error::last_os_error());
        // SAFETY: a new fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: if_nametoindex reads a NUL-terminated string that lives for the call.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        assert!(lo > 0, "no loopback interface");
        // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto;
        addr.sll_ifindex = lo as i32;
        let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: binds our socket to an address struct that lives for the call, with its size.
        let r = unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) };
        assert_eq!(r, 0, "bind to lo: {}", std::io::Error::last_os_error());
        let tv = libc::timeval { tv_sec: 0, tv_usec: 100_000 };
        let size = std::mem::size_of::<libc::timeval>() as libc::socklen_t;
        // SAFETY: sets a receive timeout from a timeval that lives for the call, with its size.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&raw const tv).cast(), size) };
        let room: libc::c_int = 4 << 20;
        let size = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: as above, with an int; the kernel caps the size at its limit.
        unsafe { libc::setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUF, (&raw const room).cast(), size) };
        Tap { fd }
    }

    /// The payload of the first TCP segment to `dst` that holds `needle`, within `within`.
    fn capture(&self, dst: SocketAddr, needle: &[u8], within: Duration) -> Option<Vec<u8>> {
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 65_536];
        while Instant::now() < deadline {
            // SAFETY: receives at most `buf.len()` bytes into a live buffer we own.
            let n = unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            let Ok(n) = usize::try_from(n) else { continue };
            let holds = |p: &&[u8]| p.windows(needle.len()).any(|w| w.eq_ignore_ascii_case(needle));
            if let Some(p) = tcp_payload(&buf[..n], dst).filter(holds) {
                return Some(p.to_vec());
            }
        }
        None
    }
}

/// The TCP payload of an IPv4 packet to `dst`.
fn tcp_payload(ip: &[u8], dst: SocketAddr) -> Option<&[u8]> {
    let SocketAddr::V4(dst) = dst else { return None };
    let ihl = usize::from(ip.first()? & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?])).min(ip.len());
    if ip.get(9) != Some(&6) || ip.get(16..20)? != dst.ip().octets() {
        return None;
    }
    let tcp = ip.get(ihl..total)?;
    if tcp.get(2..4)? != dst.port().to_be_bytes() {
        return None;
    }
    let offset = usize::from(tcp.get(12)? >> 4) * 4;
    tcp.get(offset..)
}

/// Sends `raw` as it is on a new connection to `to` and reads one response.
fn send_raw(to: SocketAddr, raw: &[u8]) -> http::Response {
    let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    s.write_all(raw).expect("send");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(r) = http::parse_response(&got) {
            return r;
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => panic!("no whole response from {to}: {:?}", String::from_utf8_lossy(&got)),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn forwarded(n: &Launched) -> Option<String> {
    let m = http::get(n.web, "/metrics", Duration::from_secs(5)).expect("metrics");
    let text = String::from_utf8_lossy(&m.body).to_string();
    text.lines().find(|l| l.starts_with("monitor_cluster_forwarded_total")).map(str::to_string)
}

#[test]
fn a_forward_captured_between_two_nodes_and_sent_again_is_refused() {
    let test = "cluster::replay::a_forward_captured_between_two_nodes_and_sent_again_is_refused";
    if !monitor_tests::require_root(test) {
        return;
    }
    let _serial = one_at_a_time();
    let (a, b, _node_a, node_b) = fixture_pair((12, 13), TOKENS);
    let get = |front, headers: &[(&str, &str)]| {
        http::request(front, "GET", "/fhir/use?n=1", headers, Duration::from_secs(10)).expect("a response")
    };

    let started = http::get(a.front_addr(), "/fhir/start?cache=start", Duration::from_secs(10)).expect("start");
    let token = started.header("x-cache-id").expect("a signed X-Cache-Id").to_string();
    let owner = started.header("x-served-by").expect("X-Served-By").to_string();

    // Through b, watched on the wire: b forwards it to a with a hop header, and a's process answers.
    let tap = Tap::open();
    let r = get(b.front_addr(), &[("X-Cache-Id", &token)]);
    assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());
    let Some(forward) = tap.capture(a.front_addr(), b"x-monitor-hop:", Duration::from_secs(5)) else {
        panic!("no forward from b to {} seen on lo", a.front_addr());
    };
    let text = String::from_utf8_lossy(&forward).to_string();
    assert!(text.starts_with("GET /fhir/use?n=1 HTTP/1.1\r\n"), "{text}");
    let hop = text
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("x-monitor-hop")))
        .map(|(_, v)| v.trim())
        .expect("the hop header");
    assert!(hop.starts_with("b.") && hop.split('.').count() == 4, "<node>.<ms>.<nonce>.<mac>: {hop}");

    // The same bytes again to a, well within the hop's 30 s: refused, and a's process serves nothing.
    let r = send_raw(a.front_addr(), &forward);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.text(), "hop header replayed\n");
    assert_eq!(r.header("x-served-by"), None);

    // To b, which never had them: a hop is never forwarded again, so 503 and no forward; then a replay there too.
    let before = forwarded(&node_b);
    let r = send_raw(b.front_addr(), &forward);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("owner-node-unavailable"), "{}", r.text());
    assert_eq!(forwarded(&node_b), before, "b forwarded a captured hop");
    let r = send_raw(b.front_addr(), &forward);
    assert_eq!((r.status, r.text()), (401, "hop header replayed\n".to_string()));

    // Refusals of hop headers are authentication failures: a forged one is 401 too, with its reason.
    let forged = format!("b.{}.{}.{}", unix_ms(), "0".repeat(32), "0".repeat(64));
    let r = get(a.front_addr(), &[("X-Cache-Id", &token), ("X-Monitor-Hop", &forged)]);
    assert_eq!((r.status, r.text()), (401, "hop header signature does not match\n".to_string()));
    let r = get(a.front_addr(), &[("X-Cache-Id", &token), ("X-Monitor-Hop", "b.1.2.3")]);
    assert_eq!((r.status, r.text()), (401, "hop header malformed\n".to_string()));
    // And requests with a fresh hop still pass: b's next forward is served.
    let r = get(b.front_addr(), &[("X-Cache-Id", &token)]);
    assert_eq!((r.status, r.header("x-served-by")), (200, Some(owner.as_str())), "{}", r.text());
}

fn unix_ms() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis())
}
