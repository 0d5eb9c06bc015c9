//! Network namespaces a test creates for hosts of its own: a [`Lan`] is a bridge in the test's namespace and one
//! namespace per host, each joined to the bridge by a veth pair, with an address in a private /24 (10.213.x.0/24)
//! that only this machine routes; programs run in a host's network with [`Host::prefix`]. The test reaches every host from its own namespace through the bridge's address
//! (`.1`); nothing leaves the machine. Names carry the test process's pid and a counter, so runs at once do not
//! meet. Dropping the [`Lan`] kills every process left in its namespaces, deletes them and the bridge, even when
//! the test panics.

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Runs `ip`/`nft` with `args`, panicking with its stderr when it fails.
fn must(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).stdin(Stdio::null()).output();
    match out {
        Ok(o) if o.status.success() => {}
        Ok(o) => panic!("{program} {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim()),
        Err(e) => panic!("cannot run {program}: {e}"),
    }
}

/// Runs a cleanup command, ignoring its failure (the thing may be gone already).
fn quietly(program: &str, args: &[&str]) {
    let _ = Command::new(program).args(args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null()).status();
}

/// One host: a namespace with its loopback up and `eth0` on the bridge.
pub struct Host {
    /// The namespace's name, under /run/netns.
    pub ns: String,
    pub ip: Ipv4Addr,
    /// The root-namespace end of its veth pair.
    veth: String,
}

impl Host {
    /// The words that run a program in this namespace's network: `nsenter --net=/run/netns/<ns>`, which execs it
    /// (the pid is the program's). Not `ip netns exec`, which also mounts a sysfs of its own over /sys and so hides
    /// the cgroup hierarchies under /sys/fs/cgroup that `monitor run` reads.
    pub fn prefix(&self) -> Vec<String> {
        vec!["nsenter".into(), format!("--net=/run/netns/{}", self.ns)]
    }

    /// The pids of every process in this namespace.
    pub fn pids(&self) -> Vec<i32> {
        let out = Command::new("ip").args(["netns", "pids", &self.ns]).stderr(Stdio::null()).output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).split_whitespace().filter_map(|p| p.parse().ok()).collect())
            .unwrap_or_default()
    }

    /// SIGKILLs every process in this namespace.
    pub fn kill_all(&self) {
        for pid in self.pids() {
            // SAFETY: kill has no memory-safety preconditions; the processes are in a namespace this test made.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }

    /// Drops every IPv4 packet to or from `peers` in this namespace (nft table `inet partition`), both ways, so
    /// neither gossip nor forwards pass; the test's own namespace still reaches the host.
    pub fn cut_off_from(&self, peers: &[Ipv4Addr]) {
        let set = peers.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
        let rules = format!(
            "table inet partition {{\n\
             chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} drop; }}\n\
             chain output {{ type filter hook output priority 0; ip daddr {{ {set} }} drop; }}\n\
             }}\n"
        );
        self.nft_file("partition", &rules);
    }

    /// Removes the rules of [`Host::cut_off_from`].
    pub fn heal(&self) {
        must("ip", &["netns", "exec", &self.ns, "nft", "delete", "table", "inet", "partition"]);
    }

    /// Refuses TCP connections from `peers` to `port` in this namespace (a reset, as a firewall's reject; nft
    /// table `inet refuse`): everything else passes, gossip (UDP) included.
    pub fn refuse_tcp_from(&self, peers: &[Ipv4Addr], port: u16) {
        let set = peers.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(", ");
        let rules = format!(
            "table inet refuse {{\n\
             chain input {{ type filter hook input priority 0; ip saddr {{ {set} }} tcp dport {port} reject with tcp reset; }}\n\
             }}\n"
        );
        self.nft_file("refuse", &rules);
    }

    /// Removes the rules of [`Host::refuse_tcp_from`].
    pub fn accept_tcp(&self) {
        must("ip", &["netns", "exec", &self.ns, "nft", "delete", "table", "inet", "refuse"]);
    }

    /// Loads nft `rules` into this namespace through a file of its own.
    fn nft_file(&self, name: &str, rules: &str) {
        let file = std::env::temp_dir().join(format!("monitor-{}-{name}.nft", self.ns));
        if let Err(e) = std::fs::write(&file, rules) {
            panic!("writing {}: {e}", file.display());
        }
        let path = file.display().to_string();
        must("ip", &["netns", "exec", &self.ns, "nft", "-f", &path]);
        let _ = std::fs::remove_file(&file);
    }
}

/// A bridge and the hosts on it; all removed on drop.
pub struct Lan {
    bridge: String,
    /// The test's own address on the bridge.
    pub gateway: Ipv4Addr,
    pub hosts: Vec<Host>,
}

impl Lan {
    /// A bridge with `n` hosts (at most 250), at `.2`, `.3` … of a /24 of its own. Needs root and `ip`.
    pub fn new(n: usize) -> Lan {
        assert!(n <= 250, "{n} hosts do not fit a /24");
        let pid = std::process::id();
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        // Interface names are at most 15 bytes: `mb` + 4 hex of the pid + 2 hex of the counter (+ 2 hex of the host).
        let tag = format!("{:04x}{:02x}", pid & 0xffff, k & 0xff);
        let net = u8::try_from((pid.wrapping_mul(7).wrapping_add(k)) % 250).unwrap_or(0);
        let gateway = Ipv4Addr::new(10, 213, net, 1);
        let mut lan = Lan { bridge: format!("mb{tag}"), gateway, hosts: Vec::new() };
        must("ip", &["link", "add", &lan.bridge, "type", "bridge"]);
        must("ip", &["addr", "add", &format!("{gateway}/24"), "dev", &lan.bridge]);
        must("ip", &["link", "set", &lan.bridge, "up"]);
        for i in 0..n {
            let ns = format!("monitor-{pid}-{k}-{i}");
            let veth = format!("mv{tag}{i:02x}");
            let ip = Ipv4Addr::new(10, 213, net, u8::try_from(i + 2).unwrap_or(u8::MAX));
            must("ip", &["netns", "add", &ns]);
            // Pushed before it is set up, so a failure below still removes it.
            lan.hosts.push(Host { ns: ns.clone(), ip, veth: veth.clone() });
            must("ip", &["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &ns]);
            must("ip", &["link", "set", &veth, "master", &lan.bridge]);
            must("ip", &["link", "set", &veth, "up"]);
            must("ip", &["-n", &ns, "addr", "add", &format!("{ip}/24"), "dev", "eth0"]);
            must("ip", &["-n", &ns, "link", "set", "eth0", "up"]);
            must("ip", &["-n", &ns, "link", "set", "lo", "up"]);
        }
        lan
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for h in &self.hosts {
            h.kill_all();
        }
        for h in &self.hosts {
            quietly("ip", &["netns", "del", &h.ns]);
            quietly("ip", &["link", "del", &h.veth]);
        }
        quietly("ip", &["link", "del", &self.bridge]);
    }
}
