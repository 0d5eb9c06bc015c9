//! The group's cgroup: finding it (`--cgroup PATH` or `auto`), and reading its memory and its processes.
//!
//! Pure parsers live in [`v1`], [`v2`] and [`mounts`]; [`GroupReader`] keeps the files open and re-reads them with
//! `pread`, so a sample costs close to the raw reads.

pub mod kill;
pub mod mounts;
pub mod v1;
pub mod v2;

use crate::base::kernfile::{pread_all, pread_record};
use crate::decision::snapshot::CgroupVersion;
use std::fs::File;
use std::path::{Path, PathBuf};

pub use mounts::Mounts;

/// Everything that can go wrong finding or reading the group.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cgroup {0} does not exist")]
    NotFound(PathBuf),
    #[error("{0} is not inside a cgroup hierarchy with a memory controller (mounted: {1})")]
    NotMemoryHierarchy(PathBuf, String),
    #[error("cgroup {0} has no memory controller (no memory.stat)")]
    NoMemoryController(PathBuf),
    #[error(
        "no memory controller is mounted (neither cgroup v1 'memory' nor cgroup2 with 'memory' in cgroup.controllers)"
    )]
    NoController,
    #[error("cannot find this process's memory cgroup in /proc/self/cgroup")]
    NoOwnCgroup,
    #[error(
        "this process's cgroup {own} is not under the memory hierarchy mounted at {mount} (the mount shows cgroup \
         {root}; /.. is outside this cgroup namespace). Mount the cgroup filesystem inside the namespace, as \
         container runtimes do, or give the group's path",
        mount = .mount.display()
    )]
    OwnCgroupNotMounted { own: String, mount: PathBuf, root: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: {msg}")]
    Parse { path: PathBuf, msg: String },
}

impl CgroupError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        // A file of the group vanished (ENOENT on open), or the group was removed under a file kept open (kernfs
        // answers ENODEV): either way the group itself is gone.
        if source.kind() == std::io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ENODEV) {
            CgroupError::NotFound(path.parent().unwrap_or(path).to_path_buf())
        } else {
            CgroupError::Io { path: path.to_path_buf(), source }
        }
    }
}

/// The group: a cgroup directory in a hierarchy that has the memory controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub version: CgroupVersion,
    /// Absolute path of the group's directory.
    pub dir: PathBuf,
    /// The hierarchy's mount point (the root of the tree the limit walk stops at).
    pub mount: PathBuf,
}

/// Finds the group from a `--cgroup` value: `auto` (this process's own memory cgroup, from `/proc/self/cgroup`),
/// an absolute path inside a memory hierarchy, or a path relative to the memory controller's mount.
/// Checks that the directory exists and has `memory.stat`.
pub fn resolve(spec: &str, mounts: &Mounts, proc_self_cgroup: &str) -> Result<Group, CgroupError> {
    let group = locate(spec, mounts, proc_self_cgroup)?;
    if !group.dir.is_dir() {
        return Err(CgroupError::NotFound(group.dir));
    }
    if !group.dir.join("memory.stat").is_file() {
        return Err(CgroupError::NoMemoryController(group.dir));
    }
    Ok(group)
}

/// The pure part of [`resolve`]: which hierarchy and directory a spec names (no filesystem access).
pub fn locate(spec: &str, mounts: &Mounts, proc_self_cgroup: &str) -> Result<Group, CgroupError> {
    if spec == "auto" {
        let own = mounts::parse_proc_cgroup(proc_self_cgroup);
        let found = [
            (&mounts.v1_memory, &mounts.v1_memory_root, &own.v1_memory, CgroupVersion::V1),
            (&mounts.v2_memory, &mounts.v2_root, &own.v2, CgroupVersion::V2),
        ];
        for (mount, root, own, version) in found {
            if let (Some(mount), Some(own)) = (mount, own) {
                // Inside a cgroup namespace the path is the namespace's, and the mount shows the group at its root.
                let Some(rel) = mounts::under_root(own, root) else {
                    return Err(CgroupError::OwnCgroupNotMounted {
                        own: own.clone(),
                        mount: mount.clone(),
                        root: root.clone(),
                    });
                };
                return Ok(Group { version, dir: join_rel(mount, rel), mount: mount.clone() });
            }
        }
        return Err(CgroupError::NoOwnCgroup);
    }
    let path = Path::new(spec);
    if path.is_absolute() {
        let clean = normalize(path);
        let candidates = [(&mounts.v1_memory, CgroupVersion::V1), (&mounts.v2_memory, CgroupVersion::V2)];
        for (mount, version) in candidates {
            if let Some(mount) = mount {
                if clean.starts_with(mount) {
                    return Ok(Group { version, dir: clean, mount: mount.clone() });
                }
            }
        }
        if !clean.exists() {
            return Err(CgroupError::NotFound(clean));
        }
        return Err(CgroupError::NotMemoryHierarchy(clean, mounts.describe()));
    }
    match (&mounts.v1_memory, &mounts.v2_memory) {
        (Some(mount), _) => Ok(Group { version: CgroupVersion::V1, dir: join_rel(mount, spec), mount: mount.clone() }),
        (None, Some(mount)) => {
            Ok(Group { version: CgroupVersion::V2, dir: join_rel(mount, spec), mount: mount.clone() })
        }
        (None, None) => Err(CgroupError::NoController),
    }
}

fn join_rel(mount: &Path, rel: &str) -> PathBuf {
    normalize(&mount.join(rel.trim_start_matches('/')))
}

/// Removes `.` and `..` and trailing slashes without touching the filesystem (`..` never climbs above `/`).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for c in path.components() {
        match c {
            std::path::Component::Normal(s) => out.push(s),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Parses `cgroup.procs`: one pid a line. Blank lines are ignored; anything else is an error. A 0 is a process
/// outside this PID namespace (cgroup v2 lists it so, as a container's group lists the runtime's helper): it has no
/// pid here, and is skipped (its memory still counts in the group's).
pub fn parse_procs(text: &str, out: &mut Vec<u32>) -> Result<(), String> {
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        match t.parse().map_err(|_| format!("not a pid: {t:?}"))? {
            0 => {}
            pid => out.push(pid),
        }
    }
    Ok(())
}

/// The group's memory at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// What no reclaim frees without swap: anon (v2 `anon`, v1 `total_rss`), shmem (`shmem`, `total_shmem`) and
    /// kernel memory ([`v2::parse_kernel`], v1 `memory.kmem.usage_in_bytes`).
    pub usage_bytes: u64,
    /// The shmem part of the usage: tmpfs files, shared memory, shared anonymous mappings.
    pub shmem_bytes: u64,
    /// The kernel part of the usage: page tables, kernel stacks, unreclaimable slab (on v1 the reclaimable slab
    /// too: v1 does not tell them apart).
    pub kernel_bytes: u64,
    /// None when no cgroup up the tree sets a limit.
    pub limit_bytes: Option<u64>,
    /// The kernel's count of OOM kills in the group (None where the kernel has no such count).
    pub oom_kills: Option<u64>,
    /// The group's memory stall totals (v2 with PSI; None otherwise).
    pub pressure: Option<crate::decision::snapshot::Pressure>,
    /// v2 `memory.oom.group` as last read (at the start and each rescan); None on v1 or without the file.
    pub oom_group: Option<bool>,
}

struct OpenFile {
    path: PathBuf,
    file: File,
}

impl OpenFile {
    fn open(path: PathBuf) -> Result<OpenFile, CgroupError> {
        match File::open(&path) {
            Ok(file) => Ok(OpenFile { path, file }),
            Err(e) => Err(CgroupError::io(&path, e)),
        }
    }

    /// The whole text of a file the kernel writes in one piece (every cgroup file but the pid lists).
    fn read<'a>(&self, buf: &'a mut Vec<u8>) -> Result<&'a str, CgroupError> {
        pread_record(&self.file, buf).map_err(|e| CgroupError::io(&self.path, e))?;
        self.text(buf)
    }

    /// The whole text of a pid list (`cgroup.procs`), which the kernel hands out in pieces.
    fn read_list<'a>(&self, buf: &'a mut Vec<u8>) -> Result<&'a str, CgroupError> {
        self.read_from(&self.file, buf)
    }

    /// Reads the file through a new open: cgroup v1's `cgroup.procs` serves an open file the pid list it built at
    /// the file's first read, for as long as that list is in use (its destruction is pushed back one second at each
    /// read), so a kept fd re-read with pread would never see a process join or leave.
    fn read_fresh<'a>(&self, buf: &'a mut Vec<u8>) -> Result<&'a str, CgroupError> {
        let file = File::open(&self.path).map_err(|e| CgroupError::io(&self.path, e))?;
        self.read_from(&file, buf)
    }

    /// The whole text of `file` (this pid list, opened once or anew).
    fn read_from<'a>(&self, file: &File, buf: &'a mut Vec<u8>) -> Result<&'a str, CgroupError> {
        pread_all(file, buf).map_err(|e| CgroupError::io(&self.path, e))?;
        self.text(buf)
    }

    fn text<'a>(&self, buf: &'a [u8]) -> Result<&'a str, CgroupError> {
        std::str::from_utf8(buf).map_err(|_| CgroupError::Parse { path: self.path.clone(), msg: "not UTF-8".into() })
    }
}

/// Keeps the group's files open and samples them.
pub struct GroupReader {
    group: Group,
    stat: OpenFile,
    /// v2: `memory.max` of the group and each ancestor below the mount that has one.
    max_files: Vec<OpenFile>,
    /// `cgroup.procs` of the group and of every descendant cgroup.
    procs_files: Vec<OpenFile>,
    /// Where the kernel counts the group's OOM kills: v2 `memory.events`, v1 `memory.oom_control` (None when the
    /// file is missing).
    oom_file: Option<OpenFile>,
    /// v2 `memory.pressure` (None on v1, or when the kernel has no PSI).
    pressure_file: Option<OpenFile>,
    /// v1 `memory.kmem.usage_in_bytes` (None on v2, where `memory.stat` has it, or on a kernel without it).
    kmem_file: Option<OpenFile>,
    /// v2 `memory.oom.group`, read at the start and each rescan.
    oom_group: Option<bool>,
    buf: Vec<u8>,
}

impl GroupReader {
    /// Opens the group's files. Fails if the group has no memory controller.
    pub fn open(group: Group) -> Result<GroupReader, CgroupError> {
        let stat = OpenFile::open(group.dir.join("memory.stat")).map_err(|e| match e {
            CgroupError::NotFound(_) if group.dir.is_dir() => CgroupError::NoMemoryController(group.dir.clone()),
            other => other,
        })?;
        let mut max_files = Vec::new();
        if group.version == CgroupVersion::V2 {
            for dir in v2::dirs_up_to(&group.dir, &group.mount) {
                let path = dir.join("memory.max");
                if path.exists() {
                    max_files.push(OpenFile::open(path)?);
                }
            }
        }
        let oom_name = match group.version {
            CgroupVersion::V1 => "memory.oom_control",
            CgroupVersion::V2 => "memory.events",
        };
        let oom_file = OpenFile::open(group.dir.join(oom_name)).ok();
        let pressure_file = match group.version {
            CgroupVersion::V2 => OpenFile::open(group.dir.join("memory.pressure")).ok(),
            CgroupVersion::V1 => None,
        };
        let kmem_file = match group.version {
            CgroupVersion::V1 => OpenFile::open(group.dir.join("memory.kmem.usage_in_bytes")).ok(),
            CgroupVersion::V2 => None,
        };
        let mut reader = GroupReader {
            group,
            stat,
            max_files,
            procs_files: Vec::new(),
            oom_file,
            pressure_file,
            kmem_file,
            oom_group: None,
            buf: Vec::with_capacity(8192),
        };
        reader.rescan()?;
        Ok(reader)
    }

    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Re-lists the descendant cgroups (their `cgroup.procs` belong to the group too).
    pub fn rescan(&mut self) -> Result<(), CgroupError> {
        let mut dirs = vec![self.group.dir.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(entries) = std::fs::read_dir(&dirs[i]) {
                for entry in entries.flatten() {
                    if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                        dirs.push(entry.path());
                    }
                }
            }
            i += 1;
        }
        let mut files = Vec::with_capacity(dirs.len());
        for (n, dir) in dirs.into_iter().enumerate() {
            match OpenFile::open(dir.join("cgroup.procs")) {
                Ok(f) => files.push(f),
                // A child cgroup removed between the listing and the open is not an error; the group itself is.
                Err(e) if n == 0 => return Err(e),
                Err(_) => {}
            }
        }
        self.procs_files = files;
        self.oom_group = match self.group.version {
            CgroupVersion::V2 => v2::read_oom_group(&self.group.dir),
            CgroupVersion::V1 => None,
        };
        Ok(())
    }

    /// Usage, limit and OOM kills of the group.
    pub fn memory(&mut self) -> Result<Memory, CgroupError> {
        let oom_kills = self.oom_kills()?;
        // A kernel booted with psi=0 keeps the file but refuses to read it: no pressure, not an error.
        let pressure = self
            .pressure_file
            .as_ref()
            .and_then(|f| f.read(&mut self.buf).ok())
            .and_then(|text| v2::parse_pressure(text).ok());
        let kernel_bytes = match &self.kmem_file {
            Some(f) => {
                let text = f.read(&mut self.buf)?;
                v1::parse_kmem(text).map_err(|msg| CgroupError::Parse { path: f.path.clone(), msg })?
            }
            None => 0,
        };
        let text = self.stat.read(&mut self.buf)?;
        match self.group.version {
            CgroupVersion::V1 => {
                let stat = v1::parse_memory_stat(text).map_err(|msg| self.parse_err(msg))?;
                Ok(Memory {
                    usage_bytes: stat.total_rss + stat.total_shmem + kernel_bytes,
                    shmem_bytes: stat.total_shmem,
                    kernel_bytes,
                    limit_bytes: stat.limit_bytes,
                    oom_kills,
                    pressure,
                    oom_group: None,
                })
            }
            CgroupVersion::V2 => {
                let parsed =
                    v2::parse_anon(text).and_then(|anon| Ok((anon, v2::parse_shmem(text)?, v2::parse_kernel(text)?)));
                let (anon, shmem_bytes, kernel_bytes) = parsed.map_err(|msg| self.parse_err(msg))?;
                let usage_bytes = anon + shmem_bytes + kernel_bytes;
                let mut limit: Option<u64> = None;
                for f in &self.max_files {
                    let text = f.read(&mut self.buf)?;
                    let max =
                        v2::parse_memory_max(text).map_err(|msg| CgroupError::Parse { path: f.path.clone(), msg })?;
                    limit = v2::min_limit(limit, max);
                }
                Ok(Memory {
                    usage_bytes,
                    shmem_bytes,
                    kernel_bytes,
                    limit_bytes: limit,
                    oom_kills,
                    pressure,
                    oom_group: self.oom_group,
                })
            }
        }
    }

    /// The `oom_kill` count of the group's OOM file (both versions name it so); None without the file or the key
    /// (v1 before Linux 4.13).
    fn oom_kills(&mut self) -> Result<Option<u64>, CgroupError> {
        let Some(f) = &self.oom_file else { return Ok(None) };
        let text = f.read(&mut self.buf)?;
        v2::keyed(text, "oom_kill").map_err(|msg| CgroupError::Parse { path: f.path.clone(), msg })
    }

    /// The pids of the group and its descendants, sorted and unique.
    pub fn pids(&mut self, out: &mut Vec<u32>) -> Result<(), CgroupError> {
        out.clear();
        let fresh = self.group.version == CgroupVersion::V1;
        for (n, f) in self.procs_files.iter().enumerate() {
            let text = match if fresh { f.read_fresh(&mut self.buf) } else { f.read_list(&mut self.buf) } {
                Ok(t) => t,
                Err(e) if n == 0 => return Err(e),
                Err(_) => continue, // a descendant removed since the last rescan
            };
            parse_procs(text, out).map_err(|msg| CgroupError::Parse { path: f.path.clone(), msg })?;
        }
        out.sort_unstable();
        out.dedup();
        Ok(())
    }

    fn parse_err(&self, msg: String) -> CgroupError {
        CgroupError::Parse { path: self.stat.path.clone(), msg }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1_mounts() -> Mounts {
        Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-host.mountinfo"))
    }

    #[test]
    fn auto_on_v1_host_takes_the_memory_line() {
        let g = locate("auto", &v1_mounts(), include_str!("../../../../tests/fixtures/proc/v1-host.cgroup"))
            .expect("locate");
        assert_eq!(g.version, CgroupVersion::V1);
        assert_eq!(g.dir, PathBuf::from("/sys/fs/cgroup/memory/monitor-capture-1061/child"));
        assert_eq!(g.mount, PathBuf::from("/sys/fs/cgroup/memory"));
    }

    #[test]
    fn auto_on_v2_host_takes_the_0_line() {
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v2-only.mountinfo"));
        let g = locate("auto", &m, include_str!("../../../../tests/fixtures/proc/v2-only.cgroup")).expect("locate");
        assert_eq!(g.version, CgroupVersion::V2);
        assert_eq!(g.dir, PathBuf::from("/sys/fs/cgroup/system.slice/app.service"));
    }

    #[test]
    fn auto_in_a_cgroup_namespace_is_the_namespace_root() {
        // Captured under `unshare --cgroup --mount` from a group limited to 100 MiB, with the memory hierarchy
        // mounted anew inside: the group is the mount's root, which is the namespace's (the container's) group.
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-cgroupns.mountinfo"));
        let own = include_str!("../../../../tests/fixtures/proc/v1-cgroupns.cgroup");
        let g = locate("auto", &m, own).expect("locate");
        assert_eq!((g.version, g.dir), (CgroupVersion::V1, PathBuf::from("/sys/fs/cgroup/memory")));
        // With only the host's mount (made outside the namespace) the group cannot be named: a clear error.
        let m = Mounts::parse(include_str!("../../../../tests/fixtures/proc/v1-cgroupns-host-mount.mountinfo"));
        let e = locate("auto", &m, own).expect_err("outside the namespace");
        assert!(e.to_string().contains("Mount the cgroup filesystem inside the namespace"), "{e}");
    }

    #[test]
    fn relative_and_absolute_specs() {
        let mut m = v1_mounts();
        m.v2_memory = None; // as Mounts::read() finds on this host: cgroup2 without the memory controller
        let g = locate("a/b", &m, "").expect("relative");
        assert_eq!(g.dir, PathBuf::from("/sys/fs/cgroup/memory/a/b"));
        let g = locate("/sys/fs/cgroup/memory/a/../c/", &m, "").expect("absolute");
        assert_eq!(g.dir, PathBuf::from("/sys/fs/cgroup/memory/c"));
        // The v2 hierarchy here has no memory controller, so a path in it is not a memory hierarchy.
        assert!(matches!(locate("/sys/fs/cgroup/unified/x", &m, ""), Err(CgroupError::NotFound(_))));
        assert!(matches!(locate("/tmp", &m, ""), Err(CgroupError::NotMemoryHierarchy(..))));
    }

    #[test]
    fn escaping_the_mount_is_not_allowed() {
        let m = v1_mounts();
        let g = locate("../../etc", &m, "").expect("relative");
        assert!(!g.dir.starts_with("/sys/fs/cgroup/memory"), "{g:?}");
        // resolve() then refuses it because it has no memory.stat (and it is not a cgroup).
        assert!(resolve("../../etc", &m, "").is_err());
    }

    #[test]
    fn a_file_gone_or_on_a_removed_group_means_the_group_is_gone() {
        let file = Path::new("/sys/fs/cgroup/memory/g/memory.stat");
        for e in [std::io::Error::from(std::io::ErrorKind::NotFound), std::io::Error::from_raw_os_error(libc::ENODEV)] {
            let err = CgroupError::io(file, e);
            assert_eq!(err.to_string(), "cgroup /sys/fs/cgroup/memory/g does not exist");
        }
        let denied = CgroupError::io(file, std::io::Error::from_raw_os_error(libc::EACCES));
        assert!(matches!(denied, CgroupError::Io { .. }), "{denied}");
    }

    #[test]
    fn procs_parse() {
        let mut v = Vec::new();
        parse_procs("1\n22\n\n333\n", &mut v).expect("parse");
        assert_eq!(v, vec![1, 22, 333]);
        assert!(parse_procs("1\nx\n", &mut v).is_err());
        assert!(parse_procs("-1\n", &mut v).is_err());
        let mut v = Vec::new();
        parse_procs("0\n1\n12\n", &mut v).expect("parse");
        assert_eq!(v, vec![1, 12], "a process outside the PID namespace has no pid here");
    }

    proptest::proptest! {
        #[test]
        fn procs_parser_never_panics(s in "\\PC{0,200}") {
            let mut v = Vec::new();
            let _ = parse_procs(&s, &mut v);
        }

        #[test]
        fn procs_read_back(pids in proptest::collection::vec(1u32.., 0..50)) {
            let text: String = pids.iter().map(|p| format!("{p}\n")).collect();
            let mut v = Vec::new();
            parse_procs(&text, &mut v).expect("parse");
            proptest::prop_assert_eq!(v, pids);
        }
    }

    #[test]
    fn reader_on_v2_fixture_tree_takes_smallest_limit() {
        let root = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/v2/nested"));
        let root = normalize(&root);
        let group = Group {
            version: CgroupVersion::V2,
            dir: root.join("system.slice/app.service/workers"),
            mount: root.clone(),
        };
        let mut r = GroupReader::open(group).expect("open");
        let m = r.memory().expect("memory");
        assert_eq!(
            m,
            Memory {
                // anon, and the kernel memory reclaim does not free (kernel less slab_reclaimable).
                usage_bytes: 41996288 + 774208,
                shmem_bytes: 0,
                kernel_bytes: 774208,
                limit_bytes: Some(402653184),
                oom_kills: Some(2),
                pressure: None,
                oom_group: Some(false)
            }
        );
        let mut pids = Vec::new();
        r.pids(&mut pids).expect("pids");
        assert_eq!(pids, vec![4301, 4302, 4303]);

        // The app.service level sees its own and its child's processes.
        let group = Group { version: CgroupVersion::V2, dir: root.join("system.slice/app.service"), mount: root };
        let mut r = GroupReader::open(group).expect("open");
        r.pids(&mut pids).expect("pids");
        assert_eq!(pids, vec![4242, 4243, 4301, 4302, 4303]);
        assert_eq!(r.memory().expect("memory").limit_bytes, Some(402653184));
    }

    #[test]
    fn reader_on_v2_unlimited_and_missing_controller() {
        let base = normalize(&PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/v2")));
        let group =
            Group { version: CgroupVersion::V2, dir: base.join("unlimited/a/b"), mount: base.join("unlimited") };
        let mut r = GroupReader::open(group).expect("open");
        assert_eq!(r.memory().expect("memory").limit_bytes, None);

        let group = Group { version: CgroupVersion::V2, dir: base.join("missing/nomem"), mount: base.join("missing") };
        assert!(matches!(GroupReader::open(group), Err(CgroupError::NoMemoryController(_))));
        let group = Group { version: CgroupVersion::V2, dir: base.join("missing/gone"), mount: base.join("missing") };
        assert!(matches!(GroupReader::open(group), Err(CgroupError::NotFound(_))));
    }
}
