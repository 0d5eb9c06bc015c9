//! Who listens on a TCP port: socket inodes from `/proc/<pid>/fd` matched against the LISTEN entries of
//! `/proc/<pid>/net/tcp` and `tcp6`. The launcher uses it to mark a process ready only when the port it is probed
//! on is held by that process (or one of its descendants), never by another program; the agent's actions use it to
//! find the port a process serves its admin path on. Read on demand, never per sample.

pub mod diag;

use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

/// `TCP_LISTEN` as the tables print it.
const LISTEN: &str = "0A";

/// The socket inodes among the open files of `pid` (empty when it is gone or has none).
pub(crate) fn socket_inodes(proc_root: &Path, pid: u32) -> std::io::Result<HashSet<u64>> {
    let fds = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd"))?;
    Ok(fds
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|l| parse_socket_link(l.to_str()?))
        .collect())
}

/// Takes out of `left` the socket inodes `pid` holds, reading its fds in order and stopping once `left` is empty
/// (a server opens its listener early: a process with thousands of connections is not read through).
pub(crate) fn take_held(proc_root: &Path, pid: u32, left: &mut HashSet<u64>) {
    let Ok(fds) = std::fs::read_dir(proc_root.join(pid.to_string()).join("fd")) else { return };
    let mut fds: Vec<(u32, std::path::PathBuf)> =
        fds.flatten().filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path()))).collect();
    fds.sort_unstable_by_key(|(n, _)| *n);
    for (_, path) in fds {
        if left.is_empty() {
            return;
        }
        if let Some(inode) = std::fs::read_link(&path).ok().and_then(|l| parse_socket_link(l.to_str()?)) {
            left.remove(&inode);
        }
    }
}

/// The inode of a `socket:[N]` fd link.
pub fn parse_socket_link(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
}

/// The TCP addresses `pid` listens on, sorted (an unspecified address as loopback, the way a local client reaches
/// it): its socket fds matched against the LISTEN entries of its network namespace. Empty when the process is gone
/// or listens on nothing.
pub(crate) fn listening_addrs(pid: u32) -> Vec<SocketAddr> {
    let Ok(inodes) = socket_inodes(Path::new("/proc"), pid) else { return Vec::new() };
    let mut out: Vec<SocketAddr> = ["tcp", "tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).ok())
        .flat_map(|text| parse_tcp_listeners(&text))
        .filter(|(inode, _)| inodes.contains(inode))
        .map(|(_, a)| a)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The LISTEN entries of a `/proc/net/tcp` or `tcp6` table, as (socket inode, address); an unspecified address
/// (`0.0.0.0`, `::`) is given as loopback. Lines that do not parse are skipped.
pub fn parse_tcp_listeners(text: &str) -> Vec<(u64, SocketAddr)> {
    parse_listen_entries(text)
        .into_iter()
        .map(|(inode, a)| {
            let ip = match a.ip() {
                IpAddr::V4(v) if v.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
                IpAddr::V6(v) if v.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
                ip => ip,
            };
            (inode, SocketAddr::new(ip, a.port()))
        })
        .collect()
}

/// The LISTEN entries of a tcp table as printed (an unspecified address stays unspecified).
pub(crate) fn parse_listen_entries(text: &str) -> Vec<(u64, SocketAddr)> {
    let addr = |field: &str| -> Option<SocketAddr> {
        let (ip, port) = field.split_once(':')?;
        let port = u16::from_str_radix(port, 16).ok()?;
        // Each 32-bit word is printed as the host (little-endian) reads the address's bytes.
        let word = |i: usize| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok().map(u32::to_le_bytes);
        let ip = match ip.len() {
            8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
            32 => {
                let mut b = [0u8; 16];
                for i in 0..4 {
                    b[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
                }
                IpAddr::V6(Ipv6Addr::from(b))
            }
            _ => return None,
        };
        Some(SocketAddr::new(ip, port))
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_ascii_whitespace().collect();
            if f.get(3) != Some(&LISTEN) {
                return None;
            }
            Some((f.get(9)?.parse().ok()?, addr(f.get(1)?)?))
        })
        .collect()
}

/// True when a listener bound to `a` takes the connections a local client makes to `127.0.0.1:<port>`.
pub(crate) fn reaches_loopback_v4(a: &SocketAddr) -> bool {
    match a.ip() {
        IpAddr::V4(v) => v == Ipv4Addr::LOCALHOST || v.is_unspecified(),
        // `::` takes IPv4 too unless the socket is v6-only, which the table does not say: counted.
        IpAddr::V6(v) => v.is_unspecified() || v.to_ipv4_mapped() == Some(Ipv4Addr::LOCALHOST),
    }
}

/// A process holding a socket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// `/proc/<pid>/comm`, when readable.
    pub comm: Option<String>,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.comm {
            Some(c) => write!(f, "pid {} ({c})", self.pid),
            None => write!(f, "pid {}", self.pid),
        }
    }
}

/// Who holds the port a local client reaches at `127.0.0.1:<port>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PortOwner {
    /// Nothing listens there.
    Nobody,
    /// Every listener there is held by the process or one of its descendants.
    Ours,
    /// A listener there belongs to another process: the holders found (empty when not visible, e.g. another
    /// user's process without the right to read its fds).
    Foreign(Vec<Holder>),
}

/// The processes under `proc_root` that hold one of `inodes` open.
pub(crate) fn holders(proc_root: &Path, inodes: &HashSet<u64>) -> Vec<Holder> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir(proc_root) else { return out };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        let Ok(mine) = socket_inodes(proc_root, pid) else { continue };
        if !mine.is_disjoint(inodes) {
            let comm = crate::base::kernfile::read_lossy(e.path().join("comm")).ok().map(|c| c.trim_end().to_string());
            out.push(Holder { pid, comm });
        }
    }
    out.sort_by_key(|h| h.pid);
    out
}

/// Who holds `127.0.0.1:<port>` as this process's network namespace sees it, against the process `pid`: the
/// listeners there are matched with the sockets of `pid` first, then with those of its descendants (a server whose
/// workers or a child listen for it); a listener held by none of them is foreign and its holders are named. The
/// listeners come from the kernel's socket diagnostics, or from `/proc/self/net/tcp{,6}` where those fail.
pub fn port_owner(pid: u32, port: u16) -> PortOwner {
    let listeners = diag::listeners().unwrap_or_else(|_| {
        ["tcp", "tcp6"]
            .iter()
            .filter_map(|f| std::fs::read_to_string(format!("/proc/self/net/{f}")).ok())
            .flat_map(|text| parse_listen_entries(&text))
            .collect()
    });
    port_owner_in(Path::new("/proc"), &listeners, pid, port)
}

/// [`port_owner`] with the namespace's listeners given, as (inode, address), and another proc root (tests).
pub(crate) fn port_owner_in(proc_root: &Path, listeners: &[(u64, SocketAddr)], pid: u32, port: u16) -> PortOwner {
    let listeners: HashSet<u64> = listeners
        .iter()
        .copied()
        .filter(|(_, a)| a.port() == port && reaches_loopback_v4(a))
        .map(|(inode, _)| inode)
        .collect();
    if listeners.is_empty() {
        return PortOwner::Nobody;
    }
    let mut left = listeners;
    take_held(proc_root, pid, &mut left);
    if !left.is_empty() {
        for p in crate::sources::procs::with_descendants(proc_root, pid) {
            if p != pid {
                take_held(proc_root, p, &mut left);
            }
            if left.is_empty() {
                break;
            }
        }
    }
    if left.is_empty() {
        PortOwner::Ours
    } else {
        PortOwner::Foreign(holders(proc_root, &left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured in a network namespace of their own: python's http.server on 127.0.0.1:8000 with one accepted
    /// connection (and its client), and another on [::1]:8443.
    const NET_TCP: &str = include_str!("../../../../tests/fixtures/proc/net-tcp");
    const NET_TCP6: &str = include_str!("../../../../tests/fixtures/proc/net-tcp6");

    #[test]
    fn tcp_tables_give_the_listeners_only() {
        assert_eq!(parse_tcp_listeners(NET_TCP), [(1_477_120, "127.0.0.1:8000".parse().expect("addr"))]);
        assert_eq!(parse_tcp_listeners(NET_TCP6), [(1_477_115, "[::1]:8443".parse().expect("addr"))]);
        let any = "  sl  local_address rem_address   st\n   0: 00000000:0050 00000000:0000 0A 0:0 0:0 0 0 0 42 1\n";
        assert_eq!(parse_tcp_listeners(any), [(42, "127.0.0.1:80".parse().expect("addr"))]);
        assert_eq!(parse_listen_entries(any), [(42, "0.0.0.0:80".parse().expect("addr"))]);
        assert_eq!(parse_tcp_listeners("header\n   0: garbage\n"), []);
    }

    #[test]
    fn which_listeners_take_loopback_connections() {
        let yes = ["127.0.0.1:1", "0.0.0.0:1", "[::]:1", "[::ffff:127.0.0.1]:1"];
        let no = ["10.0.0.5:1", "[::1]:1", "127.0.0.2:1"];
        for a in yes {
            assert!(reaches_loopback_v4(&a.parse().expect("addr")), "{a}");
        }
        for a in no {
            assert!(!reaches_loopback_v4(&a.parse().expect("addr")), "{a}");
        }
        assert_eq!(parse_socket_link("socket:[1477120]"), Some(1_477_120));
        assert_eq!(parse_socket_link("pipe:[12]"), None);
        assert_eq!(parse_socket_link("socket:[x]"), None);
    }

    #[test]
    fn a_process_listening_is_found_by_its_sockets() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let mine = l.local_addr().expect("addr");
        assert!(listening_addrs(std::process::id()).contains(&mine));
        assert_eq!(listening_addrs(u32::MAX), [], "no such process");
    }

    #[test]
    fn a_port_is_ours_nobodys_or_foreign_with_its_holder_named() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = l.local_addr().expect("addr").port();
        let me = std::process::id();
        assert_eq!(port_owner(me, port), PortOwner::Ours);
        // Held by this test process: foreign to a child of ours, named with its pid and comm.
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        match port_owner(child.id(), port) {
            PortOwner::Foreign(h) => {
                assert!(h.iter().any(|h| h.pid == me && h.comm.is_some()), "{h:?}");
                assert!(h[0].to_string().starts_with("pid "), "{}", h[0]);
            }
            other => panic!("{other:?}"),
        }
        let _ = child.kill();
        let _ = child.wait();
        drop(l);
        assert_eq!(port_owner(me, port), PortOwner::Nobody);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_listen_entries(&s);
            let _ = parse_socket_link(&s);
        }
    }
}
