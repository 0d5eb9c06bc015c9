//! `[cluster]`: several `monitor run` nodes that gossip their membership and forward requests for each other's
//! caches (docs/cluster.md). Absent: the node is alone, and nothing of the cluster runs.

use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;

/// `[cluster]`
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's name, unique in the cluster: letters, digits, `-` or `_`. It is the first field of the cache ids
    /// the node signs. Default: the host name up to its first dot.
    #[serde(default)]
    pub node: Option<String>,
    /// The UDP address gossip is received on. Default `0.0.0.0:7946`.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The address peers reach this node at: they send gossip to this address, and forward requests to the front
    /// door at this address's IP with `[proxy] listen`'s port. Default `listen`, which then must not be a wildcard
    /// (`0.0.0.0`, `::`).
    #[serde(default)]
    pub advertise: Option<SocketAddr>,
    /// Gossip addresses (`host:port`) of members to join at start; an unreachable seed is skipped. Default none:
    /// the node starts a cluster of its own that others join.
    #[serde(default)]
    pub seeds: Vec<String>,
    /// The shared cluster secret (at least 32 bytes): every gossip datagram and forwarded request carries an
    /// HMAC-SHA256 made with it. Give this or `secret_file`, not both.
    #[serde(default)]
    pub secret: Option<String>,
    /// A file holding the cluster secret (its trailing newline is not part of it), kept out of a world-readable
    /// config. Give this or `secret`, not both.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// HMAC-SHA256 key (at least 32 bytes) the front door signs cache ids with, as
    /// `<node>.<process>.<id>.<expiry>.<mac>`; the same on every node. Default: none (cache ids pass unsigned).
    #[serde(default)]
    pub token_secret: Option<String>,
    /// A member that answers no probe for this long is suspect (SWIM's probe period; a probe is sent every period
    /// and waits a third of it for the direct answer). Default 1000, at least 100.
    #[serde(default = "default_suspect_timeout_ms")]
    pub suspect_timeout_ms: u64,
    /// A suspect member that does not refute the suspicion within this long is dead. Default 5000, at least
    /// `suspect_timeout_ms`.
    #[serde(default = "default_dead_timeout_ms")]
    pub dead_timeout_ms: u64,
    /// What a request for a cache of a node that is dead, unknown or unreachable gets: `none` (503
    /// `owner-node-unavailable` with `Retry-After`) or `any` (served here, the cache rebuilt, with
    /// `X-Route-Fallback: owner-node-down`). Default `none`.
    #[serde(default)]
    pub fallback: Fallback,
}

/// `[cluster] fallback`
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fallback {
    /// Fail closed: 503 `owner-node-unavailable`.
    #[default]
    None,
    /// Serve here; the owner's cache is lost and rebuilt.
    Any,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([0, 0, 0, 0], 7946))
}

fn default_suspect_timeout_ms() -> u64 {
    1000
}

fn default_dead_timeout_ms() -> u64 {
    5000
}

/// The shortest secret accepted (bytes), for `secret`, `secret_file` and `token_secret`.
pub(crate) const MIN_SECRET_BYTES: usize = 32;

impl ClusterConfig {
    /// The node's name: `node`, else the host name up to its first dot.
    pub(crate) fn node_name(&self) -> String {
        match &self.node {
            Some(n) => n.clone(),
            None => host_name(),
        }
    }

    /// The gossip address peers use: `advertise`, else `listen`.
    pub fn gossip_addr(&self) -> SocketAddr {
        self.advertise.unwrap_or(self.listen)
    }

    /// The front door's address as peers forward to it: the gossip address's IP with the front door's port.
    pub fn front_addr(&self, proxy_listen: SocketAddr) -> SocketAddr {
        SocketAddr::new(self.gossip_addr().ip(), proxy_listen.port())
    }

    /// The cluster secret: `secret`, or the contents of `secret_file` less a trailing newline (a file others may
    /// read is refused: [`super::secret::read`]).
    pub(crate) fn secret_bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.secret, &self.secret_file) {
            (Some(s), None) => Ok(s.as_bytes().to_vec()),
            (None, Some(f)) => super::secret::read(f),
            (Some(_), Some(_)) => Err("give secret or secret_file, not both".into()),
            (None, None) => Err("needs secret or secret_file".into()),
        }
    }
}

/// The host name up to its first dot (`/proc/sys/kernel/hostname`), or `localhost` when it cannot be read.
/// The host name up to its first dot: a node's default name, and a single host's in its cache ids.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let short = name.trim().split('.').next().unwrap_or_default().to_string();
    if is_node_name(&short) {
        short
    } else {
        "localhost".into()
    }
}

/// Letters, digits, `-` or `_`: a node name has no dot, since it is the first field of a signed cache id.
pub(crate) fn is_node_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= 64 && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// `host:port` with a port.
pub(crate) fn is_host_port(s: &str) -> bool {
    match s.rsplit_once(':') {
        Some((host, port)) => !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::err;
    use crate::config::Config;
    use std::path::Path;

    const SECRET: &str = "secret = \"0123456789abcdef0123456789abcdef\"\n";

    fn ok(text: &str) -> ClusterConfig {
        match Config::from_toml(text, Path::new("m.toml")) {
            Ok(c) => c.cluster.expect("a [cluster]"),
            Err(e) => panic!("refused: {e}"),
        }
    }

    #[test]
    fn without_cluster_there_is_none() {
        assert_eq!(Config::from_toml("[proxy]\n", Path::new("m.toml")).expect("valid").cluster, None);
    }

    #[test]
    fn a_full_cluster_loads_and_defaults_are_documented_ones() {
        let c = ok(&format!(
            "[proxy]\nlisten = \"0.0.0.0:8080\"\n[cluster]\nnode = \"a-1\"\nlisten = \"0.0.0.0:7946\"\n\
             advertise = \"10.0.0.5:7946\"\nseeds = [\"10.0.0.6:7946\", \"b.example:7946\"]\n{SECRET}\
             token_secret = \"abcdefghijabcdefghijabcdefghij-tok\"\nsuspect_timeout_ms = 500\n\
             dead_timeout_ms = 2000\nfallback = \"any\"\n"
        ));
        assert_eq!(c.node_name(), "a-1");
        assert_eq!(c.gossip_addr(), "10.0.0.5:7946".parse().expect("addr"));
        assert_eq!(c.front_addr("0.0.0.0:8080".parse().expect("addr")), "10.0.0.5:8080".parse().expect("addr"));
        assert_eq!(c.fallback, Fallback::Any);
        assert_eq!((c.suspect_timeout_ms, c.dead_timeout_ms), (500, 2000));
        assert_eq!(c.secret_bytes().map(|b| b.len()), Ok(32));

        let d = ok(&format!("[proxy]\nlisten = \"127.0.0.2:8080\"\n[cluster]\nlisten = \"127.0.0.2:7946\"\n{SECRET}"));
        assert_eq!((d.suspect_timeout_ms, d.dead_timeout_ms, d.fallback), (1000, 5000, Fallback::None));
        assert!(d.seeds.is_empty() && d.token_secret.is_none());
        assert!(is_node_name(&d.node_name()), "{}", d.node_name());
    }

    #[test]
    fn the_secret_is_read_from_its_file_without_the_newline() {
        let dir = std::env::temp_dir().join(format!("monitor-cluster-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let long = dir.join("long");
        crate::config::secret::write_for_test(&long, "0123456789abcdef0123456789abcdef\n");
        let short = dir.join("short");
        crate::config::secret::write_for_test(&short, "0123456789abcdef0123456789abcde\n");
        let base = "[proxy]\nlisten = \"127.0.0.2:8080\"\n[cluster]\nlisten = \"127.0.0.2:7946\"\n";
        let c = ok(&format!("{base}secret_file = {:?}\n", long.display().to_string()));
        assert_eq!(c.secret_bytes(), Ok(b"0123456789abcdef0123456789abcdef".to_vec()));
        let e = err(&format!("{base}secret_file = {:?}\n", short.display().to_string()));
        assert!(e.starts_with("m.toml:5: cluster.secret_file: is 31 bytes"), "{e}");
        let e = err(&format!("{base}secret_file = {:?}\n", dir.join("missing").display().to_string()));
        assert!(e.starts_with("m.toml:5: cluster.secret_file:") && e.contains("missing"), "{e}");
        // One its group can read: refused, with the fix.
        std::fs::set_permissions(&long, std::os::unix::fs::PermissionsExt::from_mode(0o640)).expect("chmod");
        let e = err(&format!("{base}secret_file = {:?}\n", long.display().to_string()));
        let l = long.display();
        assert_eq!(
            e,
            format!("m.toml:5: cluster.secret_file: {l} is mode 0640 (readable by its group): run chmod 600 {l}")
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_values_name_key_and_line() {
        let base = "[proxy]\nlisten = \"127.0.0.2:8080\"\n[cluster]\nlisten = \"127.0.0.2:7946\"\n";
        let cases = [
            (format!("{base}node = \"a.b\"\n{SECRET}"), "m.toml:5: cluster.node: \"a.b\" must be"),
            (
                format!("{base}{SECRET}seeds = [\"10.0.0.1\"]\n"),
                "m.toml:6: cluster.seeds: \"10.0.0.1\" is not host:port",
            ),
            (format!("{base}secret = \"short\"\n"), "m.toml:5: cluster.secret: is 5 bytes, must be at least 32"),
            (base.to_string(), "m.toml:3: cluster: needs secret or secret_file"),
            (
                format!("{base}{SECRET}secret_file = \"/etc/hostname\"\n"),
                "m.toml:6: cluster.secret_file: give secret or secret_file, not both",
            ),
            (format!("{base}{SECRET}token_secret = \"x\"\n"), "m.toml:6: cluster.token_secret: must be at least 32"),
            (format!("{base}{SECRET}suspect_timeout_ms = 10\n"), "m.toml:6: cluster.suspect_timeout_ms: 10 is below"),
            (
                format!("{base}{SECRET}suspect_timeout_ms = 3000\ndead_timeout_ms = 2000\n"),
                "m.toml:7: cluster.dead_timeout_ms: 2000 is below suspect_timeout_ms (3000)",
            ),
            (
                format!("{base}{SECRET}suspect_timeout_ms = 6000\n"),
                "m.toml:6: cluster.suspect_timeout_ms: with cluster.dead_timeout_ms at its default, 5000 is below",
            ),
            (format!("{base}{SECRET}fallback = \"some\"\n"), "m.toml:6: cluster.fallback:"),
            (
                format!(
                    "[proxy]\nlisten = \"127.0.0.2:8080\"\ntoken_secret = \"0123456789abcdef0123456789abcdef\"\n[cluster]\n\
                     listen = \"127.0.0.2:7946\"\n{SECRET}token_secret = \"{}\"\n",
                    "t".repeat(32)
                ),
                "m.toml:3: proxy.token_secret: with [cluster] token_secret",
            ),
            (format!("{base}{SECRET}seed = []\n"), "m.toml:6: unknown field `seed`"),
            (format!("{base}{SECRET}listen = 5\n"), "m.toml:"),
            (
                format!("[cluster]\nlisten = \"0.0.0.0:7946\"\n{SECRET}"),
                "m.toml:2: cluster.listen: 0.0.0.0:7946 is not an address peers can reach",
            ),
            (
                format!("[proxy]\nlisten = \"127.0.0.1:8080\"\n[cluster]\nadvertise = \"127.0.0.2:7946\"\n{SECRET}"),
                "m.toml:2: proxy.listen: peers forward to 127.0.0.2:8080, but the front door listens on 127.0.0.1:8080",
            ),
        ];
        for (text, want) in cases {
            let e = err(&text);
            assert!(e.starts_with(want), "{text:?}: got {e:?}, want {want:?}");
        }
    }
}
