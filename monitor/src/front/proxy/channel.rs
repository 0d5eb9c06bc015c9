//! A process's own admin endpoint (`[[process]] admin_path`, `[actions] admin_path`) is the agent's channel to it: the
//! agent POSTs its action changes there, straight to the process's loopback port. No client of the front door may
//! reach it, or a client could tell a worker to abort its work, or to serve while the group refuses. A request whose
//! path, the way a server might read it, lands on such a path is answered 403 and never forwarded.
//!
//! "The way a server might read it": `%`-escapes decoded (again, until nothing changes: some servers decode twice),
//! `\` read as `/`, runs of `/` as one, `.` and `..` segments resolved, and letters compared without case. Each step
//! can only make more paths match, never fewer.
//!
//! `[actions] post_url` is the agent's channel too when it points at a process of the group (a loopback host and
//! one of the processes' ports, [`post_url_path`]): a master that relays the changes to its workers hears them
//! there.

use crate::config::HttpUrl;

/// The path of `post_url` (without its query) when the URL points at one of the group's processes: a loopback host
/// (`127.0.0.0/8`, `::1`, `localhost`) and one of `ports`. A URL elsewhere is no path of the front door's.
pub(crate) fn post_url_path(url: &HttpUrl, ports: &[u16]) -> Option<String> {
    let host = url.host();
    let loopback =
        host.eq_ignore_ascii_case("localhost") || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let port: u16 = url.authority().rsplit_once(':')?.1.parse().ok()?;
    if !loopback || !ports.contains(&port) {
        return None;
    }
    let path = url.path();
    Some(path.split(['?', '#']).next().unwrap_or(path).to_string())
}

/// The channel paths, normalised.
#[derive(Debug, Clone, Default)]
pub(crate) struct Channel {
    paths: Vec<String>,
}

impl Channel {
    /// The processes' own admin paths (empty ones ignored).
    pub fn new(paths: &[String]) -> Channel {
        let mut paths: Vec<String> = paths.iter().map(|p| normalise(p)).filter(|p| p != "/").collect();
        paths.sort();
        paths.dedup();
        Channel { paths }
    }

    /// True when `path` (a request's path, without its query) lands on a channel path or below it.
    pub(crate) fn is_channel(&self, path: &str) -> bool {
        if self.paths.is_empty() {
            return false;
        }
        let p = normalise(path);
        self.paths.iter().any(|c| p == *c || p.strip_prefix(c.as_str()).is_some_and(|rest| rest.starts_with('/')))
    }
}

/// `path` decoded, with `\` as `/`, single slashes, dot segments resolved, lowercase.
pub(crate) fn normalise(path: &str) -> String {
    let mut bytes = path.as_bytes().to_vec();
    // Decoded until it stops changing (at most a few rounds: each one shortens the text).
    for _ in 0..8 {
        let next = percent_decode(&bytes);
        if next == bytes {
            break;
        }
        bytes = next;
    }
    let text = String::from_utf8_lossy(&bytes).to_lowercase().replace('\\', "/");
    let mut out: Vec<&str> = Vec::new();
    for seg in text.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            s => out.push(s),
        }
    }
    format!("/{}", out.join("/"))
}

fn percent_decode(b: &[u8]) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_of_the_admin_path_is_the_channel() {
        let c = Channel::new(&["/admin/memory".to_string()]);
        for p in [
            "/admin/memory",
            "/admin/memory/",
            "/admin/memory/x",
            "/ADMIN/Memory",
            "//admin//memory",
            "/x/../admin/memory",
            "/admin/./memory",
            "/%61dmin/memory",
            "/admin%2Fmemory",
            "/%2561dmin/memory",
            "\\admin\\memory",
            "/./admin/memory",
            "/../../admin/memory",
        ] {
            assert!(c.is_channel(p), "{p}");
        }
        for p in ["/", "/admin", "/admin/mem", "/admin/memoryx", "/r4/admin/memory", "/admin/%", "/%zz"] {
            assert!(!c.is_channel(p), "{p}");
        }
        assert!(!Channel::new(&[]).is_channel("/admin/memory"));
        assert!(!Channel::new(&["/".to_string()]).is_channel("/anything"), "a root admin path takes nothing");
    }

    #[test]
    fn post_url_is_a_channel_path_when_it_points_at_a_process_of_the_group() {
        let url = |u: &str| u.parse::<HttpUrl>().unwrap_or_else(|e| panic!("{u}: {e}"));
        let ports = [3000, 3001];
        let cases = [
            ("http://127.0.0.1:3000/admin/relay", Some("/admin/relay")),
            ("http://127.0.0.1:3001/admin/relay?from=monitor", Some("/admin/relay")),
            ("http://localhost:3000/relay", Some("/relay")),
            ("http://LOCALHOST:3000/relay", Some("/relay")),
            ("http://127.1.2.3:3000/relay", Some("/relay")),
            ("http://[::1]:3001/relay", Some("/relay")),
            ("http://127.0.0.1:3000", Some("/")),
            // Another port of this host (the front door itself, a relay of its own), or another host.
            ("http://127.0.0.1:8080/admin/relay", None),
            ("http://127.0.0.1/admin/relay", None),
            ("http://10.0.0.5:3000/admin/relay", None),
            ("http://relay.example:3000/admin/relay", None),
        ];
        for (u, want) in cases {
            assert_eq!(post_url_path(&url(u), &ports).as_deref(), want, "{u}");
        }
        // Its shapes are the channel's, as the admin paths' are; a root path takes nothing.
        let c = Channel::new(&[post_url_path(&url("http://127.0.0.1:3000/admin/relay"), &ports).expect("a path")]);
        for p in ["/admin/relay", "/ADMIN/Relay", "//admin//relay", "/admin%2Frelay", "/x/../admin/relay"] {
            assert!(c.is_channel(p), "{p}");
        }
        assert!(!Channel::new(&["/".to_string()]).is_channel("/admin/relay"));
    }

    #[test]
    fn normalising_never_panics_on_odd_bytes() {
        for p in ["%", "%4", "%%%", "/%ff%fe", "/..", "", "/a/b/../../../..", "/\u{130}"] {
            let n = normalise(p);
            assert!(n.starts_with('/'), "{p:?} -> {n:?}");
        }
    }
}
