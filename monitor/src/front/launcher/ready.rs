//! Whether a started process is ready: its port must be held by the process itself (or one of its descendants),
//! and only then is its health path asked. A port held by another program is never probed (that program would get
//! the request) and the process is not marked ready, so nothing is routed there.

use crate::sources::sockets::{self, PortOwner};
use std::time::Duration;

/// The outcome of one readiness check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Check {
    /// Its port is its own and its health path answered 2xx.
    Ready,
    /// Not listening yet, or the health path did not answer 2xx in time.
    NotYet,
    /// Another program holds the port: what to say about it.
    Foreign(String),
}

/// Checks process `pid` of `name` on `127.0.0.1:<port>`: who holds the port, then (when it is the process's own) one
/// `GET <health>` within `timeout`.
pub async fn check(name: &str, pid: u32, port: u16, health: &str, timeout: Duration) -> Check {
    if pid == 0 {
        return Check::NotYet;
    }
    let owner = tokio::task::spawn_blocking(move || sockets::port_owner(pid, port)).await;
    match owner {
        Ok(PortOwner::Ours) => {}
        Ok(PortOwner::Nobody) => return Check::NotYet,
        Ok(PortOwner::Foreign(holders)) => return Check::Foreign(foreign(name, pid, port, &holders)),
        Err(e) => return Check::Foreign(format!("process {name} (pid {pid}): cannot tell who holds port {port}: {e}")),
    }
    if super::spawn::probe(port, health, timeout).await {
        Check::Ready
    } else {
        Check::NotYet
    }
}

/// The error text for a port held by someone else.
pub fn foreign(name: &str, pid: u32, port: u16, holders: &[sockets::Holder]) -> String {
    let by = if holders.is_empty() {
        "a process this one cannot see".to_string()
    } else {
        holders.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    format!(
        "process {name} (pid {pid}): port {port} is held by {by}, not by the process or its children: not ready, \
         nothing is routed to it"
    )
}

/// Logs a foreign holder once per occasion: again only when what is said changes.
#[derive(Debug, Default)]
pub(crate) struct Said(Option<String>);

impl Said {
    /// Logs `msg` at error level unless it was the last thing said.
    pub fn error(&mut self, msg: &str) {
        if self.0.as_deref() != Some(msg) {
            tracing::error!("{msg}");
            self.0 = Some(msg.to_string());
        }
    }

    /// What was said last (the holder of the port, while it lasts).
    pub fn last(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// Forgets what was said (the port is the process's own again).
    pub fn clear(&mut self) {
        self.0 = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::sockets::Holder;

    #[test]
    fn the_error_names_the_holders() {
        let h = [Holder { pid: 7, comm: Some("python3".into()) }, Holder { pid: 9, comm: None }];
        let m = foreign("tx1", 42, 8080, &h);
        assert!(m.contains("process tx1 (pid 42): port 8080 is held by pid 7 (python3), pid 9,"), "{m}");
        assert!(foreign("tx1", 42, 8080, &[]).contains("a process this one cannot see"));
    }

    #[tokio::test]
    async fn a_port_held_by_another_process_is_never_probed() {
        // A listener that records whether anything connected: held by this test process, checked for a child.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = l.local_addr().expect("addr").port();
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        let c = check("tx1", child.id(), port, "/health", Duration::from_millis(200)).await;
        assert!(matches!(&c, Check::Foreign(m) if m.contains(&format!("pid {}", std::process::id()))), "{c:?}");
        let accepted = tokio::time::timeout(Duration::from_millis(100), l.accept()).await;
        assert!(accepted.is_err(), "the foreign listener was connected to");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(check("tx1", 0, port, "/health", Duration::from_millis(200)).await, Check::NotYet);
    }
}
