//! systemd's end of the notification protocol, for tests that stand in for it: a datagram socket the agent is
//! given as `NOTIFY_SOCKET`, and the messages (`READY=1`, `STATUS=…`, `WATCHDOG=1`, `RELOADING=1`) read from it.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

/// A notification socket bound at `dir/notify.sock`, and its path for `NOTIFY_SOCKET`.
pub fn bind(dir: &Path) -> (UnixDatagram, String) {
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    (sock, path.display().to_string())
}

/// The notifications received within `limit`, each datagram's lines joined by a space, until `done` holds for
/// them.
pub fn receive_until(sock: &UnixDatagram, limit: Duration, done: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + limit;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while Instant::now() < deadline && !done(&got) {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(10));
        let _ = sock.set_read_timeout(Some(left));
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).trim().replace('\n', " "));
        }
    }
    got
}

/// How many of the notifications carry the assignment `what` (e.g. `READY=1`) as one of their words.
pub fn count(got: &[String], what: &str) -> usize {
    got.iter().filter(|m| m.split(' ').any(|w| w == what)).count()
}
