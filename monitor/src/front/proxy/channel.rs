//! A process's own admin endpoint (`[[process]] admin_path`, `[actions] admin_path`) is the agent's channel to it: the
//! agent POSTs its action changes there, straight to the process's loopback port. No client of the front door may
//! reach it, or a client could tell a worker to abort its work, or to serve while the group refuses. A request whose
//! path, read any way a server might read it ([`paths::Readings`]: `;` parameters cut, escapes decoded, `\` as `/`,
//! runs of `/` as one, dot segments resolved, letters in any case), lands on such a path or below it is answered 403
//! and never forwarded.
//!
//! `[actions] post_url` is the agent's channel too when it points at a process of the group (a loopback host and
//! one of the processes' ports, [`post_url_path`]): a master that relays the changes to its workers hears them
//! there.

use crate::config::paths::{self, Readings};
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

/// The channel paths, each as its strongest reading ([`paths::strongest`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Channel {
    paths: Vec<String>,
}

impl Channel {
    /// The processes' own admin paths (empty ones ignored).
    pub fn new(admin: &[String]) -> Channel {
        let mut strong: Vec<String> = admin.iter().map(|p| paths::strongest(p)).filter(|p| p != "/").collect();
        strong.sort();
        strong.dedup();
        Channel { paths: strong }
    }

    /// True when any reading of a request's path lands on a channel path or below it, in any case.
    pub(crate) fn is_channel(&self, readings: &Readings<'_>) -> bool {
        !self.paths.is_empty() && readings.any_under(&self.paths)
    }
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
            "/admin/memory;x",
            "/admin;x/memory",
            "/admin/memory;jsessionid=1/",
            "/admin/x/..;/memory",
            "/admin%3Bx/memory",
            "/%2e%2e/admin/memory",
        ] {
            assert!(c.is_channel(&Readings::of(p)), "{p}");
        }
        for p in
            ["/", "/admin", "/admin/mem", "/admin/memoryx", "/r4/admin/memory", "/admin/%", "/%zz", "/admin/memoryx;"]
        {
            assert!(!c.is_channel(&Readings::of(p)), "{p}");
        }
        assert!(!Channel::new(&[]).is_channel(&Readings::of("/admin/memory")));
        assert!(
            !Channel::new(&["/".to_string()]).is_channel(&Readings::of("/anything")),
            "a root admin path takes nothing"
        );
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
            assert!(c.is_channel(&Readings::of(p)), "{p}");
        }
        assert!(!Channel::new(&["/".to_string()]).is_channel(&Readings::of("/admin/relay")));
    }

    /// The front door's three verdicts on a path, as `handle` makes them: the channel (403), exempt from the refusal
    /// (a health path or an admin pattern), master-only.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    struct Verdict {
        channel: bool,
        exempt: bool,
        master: bool,
    }

    struct Door {
        channel: Channel,
        health: Vec<String>,
        table: crate::config::route::Table,
    }

    impl Door {
        fn new() -> Door {
            use crate::config::route::{Role, Table};
            let admin = ["/admin/memory".to_string(), "/admin/relay".to_string()];
            let d = crate::config::ProxyConfig::default();
            let procs = [("m0".to_string(), Role::Master), ("tx1".to_string(), Role::Worker)];
            let table = Table::new(&procs, &d.master_paths, &d.tx_paths, true)
                .and_then(|t| t.with_admin_paths(&["^/ops/".to_string()], &admin))
                .expect("a valid table");
            Door { channel: Channel::new(&admin), health: vec!["/health".to_string()], table }
        }

        fn verdict(&self, path: &str) -> Verdict {
            use crate::config::route::{Live, Request, Route, Rule};
            let r = Readings::of(path);
            let req = Request { path: &r, ..Request::default() };
            let up = |_| Live { ready: true, serving: true, outstanding: 0 };
            // The channel is answered first: nothing else is decided for it.
            let channel = self.channel.is_channel(&r);
            Verdict {
                channel,
                exempt: !channel && (r.all_under(&self.health) || self.table.is_admin(&r)),
                master: !channel && matches!(self.table.select(&req, up, 0), Route::To { rule: Rule::MasterOnly, .. }),
            }
        }
    }

    const CHANNEL: Verdict = Verdict { channel: true, exempt: false, master: false };
    const EXEMPT: Verdict = Verdict { channel: false, exempt: true, master: false };
    const MASTER: Verdict = Verdict { channel: false, exempt: false, master: true };
    const PLAIN: Verdict = Verdict { channel: false, exempt: false, master: false };

    /// Each shape of a path the front door guards, and its verdicts.
    #[test]
    fn every_spelling_gets_the_verdict_of_the_path_a_server_reads() {
        let door = Door::new();
        let cases: &[(&str, Verdict)] = &[
            ("/admin/memory", CHANNEL),
            ("/admin/memory;x", CHANNEL),
            ("/admin;x/memory", CHANNEL),
            ("/admin/memory;jsessionid=1/", CHANNEL),
            ("/admin/memory;jsessionid=1/x", CHANNEL),
            ("/admin/x/..;/memory", CHANNEL),
            ("/admin%3Bx/memory", CHANNEL),
            ("/admin/%6Demory", CHANNEL),
            ("/admin/%256Demory", CHANNEL),
            ("/%2e%2e/admin/memory", CHANNEL),
            ("/ADMIN/Memory", CHANNEL),
            ("//admin//memory", CHANNEL),
            ("\\admin\\memory", CHANNEL),
            ("/x/../admin/memory", CHANNEL),
            ("/admin/./relay", CHANNEL),
            ("/Admin/Relay;x", CHANNEL),
            // Read without resolving its dots, it is below the admin path: some server may serve it there.
            ("/admin/memory/../../r4/heavy", CHANNEL),
            ("/admin/memoryx/../../r4/heavy", PLAIN),
            ("/admin/memoryx", PLAIN),
            ("/health", EXEMPT),
            ("/health/live", EXEMPT),
            ("/health/", EXEMPT),
            ("/healthx", PLAIN),
            ("/HEALTH", PLAIN),
            ("/health;x", PLAIN),
            ("/health;x/../r4/heavy", PLAIN),
            ("/health/../r4/heavy", PLAIN),
            ("/health/..;/r4/heavy", PLAIN),
            ("/health/%2e%2e/r4/heavy", PLAIN),
            ("/health%2F..%2Fr4/heavy", PLAIN),
            ("/ops/reload", EXEMPT),
            ("/ops/../r4/heavy", PLAIN),
            ("/opsx/reload", PLAIN),
            ("/r4/ConceptMap/$closure", MASTER),
            ("/r4/ConceptMap/%24closure", MASTER),
            ("/r4/ConceptMap/%2524closure", MASTER),
            ("/r4/ConceptMap/$CLOSURE", MASTER),
            ("/r4/ConceptMap/$clo%73ure", MASTER),
            ("/info/vsac", MASTER),
            ("/INFO/vsac", MASTER),
            ("/r4;x/../info/vsac", MASTER),
            ("/r4/x/..;/..;/info/vsac", MASTER),
            ("/%69nfo/vsac", MASTER),
            ("/syndication;x/feed", MASTER),
            ("/r4/heavy", PLAIN),
            ("/r4/info/vsac", PLAIN),
        ];
        for (path, want) in cases {
            assert_eq!(door.verdict(path), *want, "{path}");
        }
    }

    /// A re-spelling of `path`: one of the changes a client can make that some server reads as the same path. The
    /// leading `/` stays as it is (a request target starts with it), and nothing is put inside a `%XX` escape: what
    /// is inserted goes at a segment's boundary, a raw `/`.
    fn respell(path: &str, op: u8, at: usize) -> String {
        let b = path.as_bytes();
        let at = at % (b.len() + 1);
        // The segment boundaries (each `/`), and the letters.
        let slashes: Vec<usize> = (0..b.len()).filter(|&i| b[i] == b'/').collect();
        if slashes.first() != Some(&0) {
            return path.to_string();
        }
        let boundary = |k: usize| slashes[k % slashes.len()];
        let end_of_segment = |i: usize| (i + 1..b.len()).find(|&j| b[j] == b'/').unwrap_or(b.len());
        match op % 5 {
            // `;x` at the end of a segment.
            0 => {
                let e = end_of_segment(boundary(at));
                format!("{};x{}", &path[..e], &path[e..])
            }
            // A byte %-escaped (not the leading `/`).
            1 if b.len() > 1 => {
                let i = 1 + at % (b.len() - 1);
                format!("{}%{:02X}{}", &path[..i], b[i], &path[i + 1..])
            }
            // `./` after a `/`.
            2 => {
                let i = boundary(at) + 1;
                format!("{}./{}", &path[..i], &path[i..])
            }
            // `x/../` after a `/`.
            3 => {
                let i = boundary(at) + 1;
                format!("{}x/../{}", &path[..i], &path[i..])
            }
            // A letter's case turned.
            _ => {
                let mut v = b.to_vec();
                if let Some(i) = (0..v.len()).map(|k| (at + k) % v.len()).find(|&i| v[i].is_ascii_alphabetic()) {
                    v[i] ^= 0x20;
                }
                String::from_utf8(v).unwrap_or_else(|_| path.to_string())
            }
        }
    }

    proptest::proptest! {
        /// No re-spelling turns a denied path allowed, a master-only path to a worker, or a refused path exempt.
        #[test]
        fn no_re_spelling_flips_a_verdict(
            base in proptest::sample::select(vec![
                "/admin/memory", "/admin/relay/x", "/admin/memory/", "/r4/heavy", "/r4/ConceptMap/$closure",
                "/info/vsac", "/syndication", "/health/live", "/healthx", "/ops/reload", "/r4/info",
            ]),
            ops in proptest::collection::vec((0u8..5, 0usize..64), 1..6),
        ) {
            let door = Door::new();
            let before = door.verdict(base);
            let mut path = base.to_string();
            for (op, at) in ops {
                path = respell(&path, op, at);
                let now = door.verdict(&path);
                proptest::prop_assert!(!before.channel || now.channel, "{} -> {}: left the channel", base, path);
                proptest::prop_assert!(!before.master || now.master, "{} -> {}: left the master", base, path);
                proptest::prop_assert!(before.exempt || !now.exempt, "{} -> {}: became exempt", base, path);
            }
        }
    }
}
