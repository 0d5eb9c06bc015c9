//! A process's own admin endpoint (`[[process]] admin_path`, `[actions] admin_path`) is the agent's channel to it: the
//! agent POSTs its action changes there, straight to the process's loopback port. No client of the front door may
//! reach it, or a client could tell a worker to abort its work, or to serve while the group refuses. A request whose
//! path, the way a server might read it, lands on such a path is answered 403 and never forwarded.
//!
//! "The way a server might read it": `%`-escapes decoded (again, until nothing changes: some servers decode twice),
//! `\` read as `/`, runs of `/` as one, `.` and `..` segments resolved, and letters compared without case. Each step
//! can only make more paths match, never fewer.

/// The channel paths, normalised.
#[derive(Debug, Clone, Default)]
pub struct Channel {
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
    pub fn is_channel(&self, path: &str) -> bool {
        if self.paths.is_empty() {
            return false;
        }
        let p = normalise(path);
        self.paths.iter().any(|c| p == *c || p.strip_prefix(c.as_str()).is_some_and(|rest| rest.starts_with('/')))
    }
}

/// `path` decoded, with `\` as `/`, single slashes, dot segments resolved, lowercase.
pub fn normalise(path: &str) -> String {
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
    fn normalising_never_panics_on_odd_bytes() {
        for p in ["%", "%4", "%%%", "/%ff%fe", "/..", "", "/a/b/../../../..", "/\u{130}"] {
            let n = normalise(p);
            assert!(n.starts_with('/'), "{p:?} -> {n:?}");
        }
    }
}
