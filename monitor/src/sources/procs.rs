//! Per-process memory from /proc: RSS and RssAnon from `statm` (resident - shared is exactly the kernel's MM_ANONPAGES,
//! the `RssAnon` of `status`, at a sixth of the cost: 1.5 µs a read against 8.9 µs, `cargo xtask bench sampler`),
//! name, start time and parent from `stat` (read once per process), the name again from `comm` at most once every
//! [`NAME_EVERY`] (a process keeps its pid and start time across `execve`, and a shell script that ends in
//! `exec server` becomes the server), and at once for a process a decision names ([`ProcTable::fresh_name`]).
//! The hot files stay open between samples: an
//! open `/proc/<pid>` file is bound to that process, so a reused pid can never be read through it (the read fails
//! with ESRCH and the entry is dropped).
//! Open files are kept for as many processes as the file-descriptor limit allows with room to spare for the rest
//! of the agent; the processes past that (or met when fds run out) are read by open-read-close at each sample, their
//! start time checked each time, so that no listed process is left out for want of a descriptor.
//! Memory is read where it lives: a process whose main thread exited (`pthread_exit` in `main`, or a zombie leader
//! with live threads) has no memory on its leader, whose `statm` reads a size of 0 (a process with memory always has
//! some size), and is read from one of its live threads (`/proc/<pid>/task/<tid>/statm`: the threads share one
//! address space), kept open as the leader's would be. Its pid, start time and name stay the leader's. A listed
//! process none of whose threads has memory is left out of the sample: counted as listed but not sampled, never as
//! a process of 0 bytes.

use crate::base::kernfile::pread_record;
use crate::decision::snapshot::{ProcSample, Traffic};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How soon a process's name may be read again from `/proc/<pid>/comm`: a little under the second between two reads
/// of the processes far from the lines ([`crate::sampler`]), so that each of those reads may read it, and a process
/// that execs is named after its new program within about a second. The name is read only when the process's size
/// (`statm`'s first field) changed since it was last read, as it does at an exec, which replaces the whole address
/// space; and at least every [`NAME_ANYWAY`]. A group of idle processes then costs no `/proc/<pid>/comm` open a
/// second.
pub(crate) const NAME_EVERY: Duration = Duration::from_millis(800);
/// The longest a name goes unread (see [`NAME_EVERY`]).
pub(crate) const NAME_ANYWAY: Duration = Duration::from_secs(10);

/// `/proc/<pid>/statm` fields, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Statm {
    pub size: u64,
    pub resident: u64,
    pub shared: u64,
}

impl Statm {
    /// Anonymous resident pages: `resident` counts anon + file + shmem pages, `shared` file + shmem.
    pub(crate) fn anon_pages(&self) -> u64 {
        self.resident.saturating_sub(self.shared)
    }
}

/// Parses `statm` (`size resident shared text lib data dt`; only the first three are used).
pub fn parse_statm(text: &str) -> Result<Statm, String> {
    let mut it = text.split_ascii_whitespace().map(|f| f.parse::<u64>());
    let mut next = |name: &str| match it.next() {
        Some(Ok(v)) => Ok(v),
        Some(Err(_)) => Err(format!("statm: {name} is not a number")),
        None => Err(format!("statm: no {name} field")),
    };
    Ok(Statm { size: next("size")?, resident: next("resident")?, shared: next("shared")? })
}

/// `RssAnon` from `/proc/<pid>/status`, in bytes. A kernel thread has no such line: 0. Not on the hot path (statm
/// gives the same number); kept to check that equality.
pub fn parse_status_rss_anon(text: &str) -> Result<u64, String> {
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("RssAnon:") {
            let mut it = rest.split_ascii_whitespace();
            let n: u64 = it
                .next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("status: RssAnon is not a number: {rest:?}"))?;
            return match it.next() {
                Some("kB") => Ok(n.saturating_mul(1024)),
                other => Err(format!("status: RssAnon unit is {other:?}, expected kB")),
            };
        }
    }
    Ok(0)
}

/// What `/proc/<pid>/stat` gives once per process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatInfo {
    pub comm: String,
    pub ppid: u32,
    /// Field 22, clock ticks after boot.
    pub start_ticks: u64,
}

/// The start time of process `pid` (`/proc/<pid>/stat` field 22, clock ticks since boot).
pub fn start_ticks(pid: u32) -> Result<u64, String> {
    let text = crate::base::kernfile::read_lossy(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    parse_stat(&text).map(|s| s.start_ticks)
}

/// Parses `/proc/<pid>/stat`. The command name is in parentheses and may itself contain spaces and `)`, so the
/// fields are counted from the last `)`. The name is the process's own choice (`prctl(PR_SET_NAME)`): its control
/// characters are escaped here ([`crate::base::text::escape_controls`]), so that no log line, table or alert
/// downstream prints a newline or an escape sequence of its making.
pub fn parse_stat(text: &str) -> Result<StatInfo, String> {
    let open = text.find('(').ok_or("stat: no '('")?;
    let close = text.rfind(')').ok_or("stat: no ')'")?;
    if close < open {
        return Err("stat: ')' before '('".into());
    }
    let comm = crate::base::text::escape_controls(&text[open + 1..close]).into_owned();
    // After ") ": field 3 (state) is index 0, ppid (4) is 1, starttime (22) is 19.
    let rest: Vec<&str> = text[close + 1..].split_ascii_whitespace().collect();
    let field = |i: usize, name: &str| -> Result<u64, String> {
        rest.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| format!("stat: bad or missing {name}"))
    };
    Ok(StatInfo { comm, ppid: field(1, "ppid")? as u32, start_ticks: field(19, "starttime")? })
}

/// The pids of `pid` and all its descendants, from the parent links of every process under `proc_root`.
pub(crate) fn with_descendants(proc_root: &Path, pid: u32) -> std::collections::HashSet<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir(proc_root) {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            let Ok(text) = crate::base::kernfile::read_lossy(e.path().join("stat")) else { continue };
            if let Ok(s) = parse_stat(&text) {
                children.entry(s.ppid).or_default().push(p);
            }
        }
    }
    let mut out = std::collections::HashSet::from([pid]);
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            if out.insert(c) {
                todo.push(c);
            }
        }
    }
    out
}

struct Entry {
    /// `statm` kept open; None: opened, read and closed at each sample.
    statm: Option<File>,
    /// The thread whose `statm` is read: the process's pid, or another of its threads when the leader has no memory.
    tid: u32,
    stat: StatInfo,
    /// When `stat.comm` was read.
    named: Instant,
    /// The process's size in pages (`statm`'s first field) at the last read.
    size: u64,
    /// `size` when `stat.comm` was last read: a change is an exec to look for (see [`NAME_EVERY`]).
    named_size: u64,
}

impl Entry {
    /// Whether the name is due to be read again at `now` (see [`NAME_EVERY`]).
    fn name_due(&self, now: Instant) -> bool {
        let since = now.saturating_duration_since(self.named);
        since >= NAME_EVERY && (self.size != self.named_size || since >= NAME_ANYWAY)
    }
}

/// Why a process could not be read. A process that exits mid-sample is [`ReadError::Gone`] and is dropped silently.
#[derive(Debug)]
pub(crate) enum ReadError {
    Gone,
    Other(String),
}

/// True for "too many open files" (this process's limit or the system's).
fn out_of_fds(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

/// What [`raise_fd_limit`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit the process started with.
    pub was: u64,
    /// The soft limit now (the hard limit when raising worked).
    pub now: u64,
    pub hard: u64,
}

/// The soft `RLIMIT_NOFILE` this process started with, once [`raise_fd_limit`] raised it: what children are
/// given back (a program using `select()` breaks on descriptors past 1024).
static STARTED_WITH: std::sync::OnceLock<u64> = std::sync::OnceLock::new();

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (the agent keeps about one descriptor per process of the
/// group). Called once at start.
pub fn raise_fd_limit() -> std::io::Result<FdLimit> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let was = lim.rlim_cur;
    let _ = STARTED_WITH.set(was);
    // An unlimited hard limit still stops at the kernel's fs.nr_open.
    let target = if lim.rlim_max == libc::RLIM_INFINITY {
        std::fs::read_to_string("/proc/sys/fs/nr_open").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(1 << 20)
    } else {
        lim.rlim_max
    };
    if lim.rlim_cur < target {
        let raised = libc::rlimit { rlim_cur: target, rlim_max: lim.rlim_max };
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(FdLimit { was, now: target.max(was), hard: lim.rlim_max })
}

/// The soft `RLIMIT_NOFILE` to give a child back: the one this process started with, when it raised its own.
pub(crate) fn child_fd_limit() -> Option<u64> {
    STARTED_WITH.get().copied()
}

/// This process's soft `RLIMIT_NOFILE` (None when it cannot be read, or is unlimited).
fn soft_fd_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the struct we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// How many `statm` files to keep open under a soft limit of `soft` descriptors: a quarter of them (at least 128)
/// stays free for the rest of the agent (its API connections, the cgroup files, the stats database, the probes).
pub(crate) fn keep_budget(soft: Option<u64>) -> usize {
    match soft {
        Some(soft) => usize::try_from(soft.saturating_sub((soft / 4).max(128))).unwrap_or(usize::MAX),
        None => usize::MAX,
    }
}

fn classify(e: std::io::Error) -> ReadError {
    match e.raw_os_error() {
        Some(libc::ESRCH) | Some(libc::ENOENT) => ReadError::Gone,
        _ => ReadError::Other(e.to_string()),
    }
}

/// The group's processes with their open files, sampled each tick.
pub struct ProcTable {
    proc_root: PathBuf,
    page_size: u64,
    entries: HashMap<u32, Entry>,
    /// How many entries keep their `statm` open, and how many may.
    kept: usize,
    keep_budget: usize,
    /// Set when processes are read by open-read-close (said once while it lasts).
    said_overflow: bool,
    /// Listed processes that could not be read, already logged (said again only if they fail anew after a good read).
    unreadable: Vec<u32>,
    buf: Vec<u8>,
}

impl ProcTable {
    /// A table reading `/proc`.
    pub fn new() -> ProcTable {
        ProcTable::with_root(Path::new("/proc"))
    }

    /// A table reading another proc root (tests).
    pub(crate) fn with_root(proc_root: &Path) -> ProcTable {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        ProcTable {
            proc_root: proc_root.to_path_buf(),
            page_size: if page > 0 { page as u64 } else { 4096 },
            entries: HashMap::new(),
            kept: 0,
            keep_budget: keep_budget(soft_fd_limit()),
            said_overflow: false,
            unreadable: Vec::new(),
            buf: Vec::with_capacity(4096),
        }
    }

    /// Sets the number of `statm` files kept open (tests; the default follows the fd limit).
    pub fn set_keep_budget(&mut self, n: usize) {
        self.keep_budget = n;
    }

    fn open(&mut self, pid: u32) -> Result<Entry, ReadError> {
        let dir = self.proc_root.join(pid.to_string());
        // Open the hot files first, then read stat: if the pid was reused in between, the start time we record
        // belongs to the process those files are bound to only if stat is read after them. A later failing read
        // on the open files drops the entry, so at worst one sample is attributed to the newcomer.
        let statm = if self.kept < self.keep_budget {
            match File::open(dir.join("statm")) {
                Ok(f) => Some(f),
                Err(e) if out_of_fds(&e) => None,
                Err(e) => return Err(classify(e)),
            }
        } else {
            None
        };
        let text = crate::base::kernfile::read_lossy(dir.join("stat")).map_err(classify)?;
        let stat = parse_stat(&text).map_err(ReadError::Other)?;
        if statm.is_some() {
            self.kept += 1;
        } else if !self.said_overflow {
            self.said_overflow = true;
            tracing::info!(
                kept_open = self.kept,
                "more processes than file descriptors to keep: the others are read by open-read-close"
            );
        }
        Ok(Entry { statm, tid: pid, stat, named: Instant::now(), size: 0, named_size: 0 })
    }

    fn forget(&mut self, e: &Entry) {
        if e.statm.is_some() {
            self.kept = self.kept.saturating_sub(1);
        }
    }

    /// Reads the process's `statm` (see [`ProcTable::read_statm`]), from another of its threads when the one read
    /// has no memory or has exited (see [`ProcTable::from_thread`]); RSS and anon in bytes.
    fn read_entry(
        buf: &mut Vec<u8>,
        e: &mut Entry,
        page: u64,
        proc_root: &Path,
        pid: u32,
    ) -> Result<(u64, u64), ReadError> {
        let statm = match Self::read_statm(buf, e, proc_root, pid) {
            Ok(statm) if statm.size > 0 => statm,
            Ok(_) => Self::from_thread(buf, e, proc_root, pid)?,
            Err(ReadError::Gone) if e.tid != pid => Self::from_thread(buf, e, proc_root, pid)?,
            Err(err) => return Err(err),
        };
        e.size = statm.size;
        Ok((statm.resident.saturating_mul(page), statm.anon_pages().saturating_mul(page)))
    }

    /// The `statm` of thread `tid` of the process whose directory is `dir` (`<root>/<pid>`): the process's own
    /// (`<pid>/statm`) for its pid, else the thread's (`<pid>/task/<tid>/statm`).
    fn statm_path(dir: &Path, pid: u32, tid: u32) -> PathBuf {
        if tid == pid {
            dir.join("statm")
        } else {
            dir.join("task").join(tid.to_string()).join("statm")
        }
    }

    /// Reads `statm` of an entry's thread: through its open file, or (none kept) opened anew with the process's start
    /// time checked: a pid that now names another process gets that process's name and start time.
    fn read_statm(buf: &mut Vec<u8>, e: &mut Entry, proc_root: &Path, pid: u32) -> Result<Statm, ReadError> {
        match &e.statm {
            Some(f) => pread_record(f, buf).map_err(classify)?,
            None => {
                let dir = proc_root.join(pid.to_string());
                let f = File::open(Self::statm_path(&dir, pid, e.tid)).map_err(classify)?;
                pread_record(&f, buf).map_err(classify)?;
                drop(f);
                let text = crate::base::kernfile::read_lossy(dir.join("stat")).map_err(classify)?;
                let stat = parse_stat(&text).map_err(ReadError::Other)?;
                if stat.start_ticks != e.stat.start_ticks || stat.comm != e.stat.comm {
                    e.stat = stat;
                }
                e.named = Instant::now();
            }
        }
        if buf.is_empty() {
            return Err(ReadError::Gone);
        }
        parse_statm(&String::from_utf8_lossy(buf)).map_err(ReadError::Other)
    }

    /// The process's `statm` read from another of its threads (`<pid>/task/<tid>/statm`), when the entry's thread has
    /// no memory (a leader that exited alone) or has exited: the first other thread whose `statm` has a size, which
    /// becomes the entry's thread, its file kept open in place of the last one when the entry keeps one. The process
    /// is [`ReadError::Gone`] when no thread has memory, or when its pid now names another process (its start time
    /// is read after the thread's file is opened, as in [`ProcTable::open`]).
    fn from_thread(buf: &mut Vec<u8>, e: &mut Entry, proc_root: &Path, pid: u32) -> Result<Statm, ReadError> {
        let dir = proc_root.join(pid.to_string());
        let tasks = std::fs::read_dir(dir.join("task")).map_err(classify)?;
        for task in tasks {
            let task = task.map_err(classify)?;
            let Some(tid) = task.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if tid == e.tid {
                continue;
            }
            let f = match File::open(Self::statm_path(&dir, pid, tid)) {
                Ok(f) => f,
                Err(err) => match classify(err) {
                    ReadError::Gone => continue,
                    other => return Err(other),
                },
            };
            match pread_record(&f, buf) {
                Ok(()) if !buf.is_empty() => {}
                Ok(()) => continue,
                Err(err) => match classify(err) {
                    ReadError::Gone => continue,
                    other => return Err(other),
                },
            }
            let statm = parse_statm(&String::from_utf8_lossy(buf)).map_err(ReadError::Other)?;
            if statm.size == 0 {
                continue;
            }
            let text = crate::base::kernfile::read_lossy(dir.join("stat")).map_err(classify)?;
            if parse_stat(&text).map_err(ReadError::Other)?.start_ticks != e.stat.start_ticks {
                return Err(ReadError::Gone);
            }
            e.tid = tid;
            if e.statm.is_some() {
                e.statm = Some(f);
            }
            return Ok(statm);
        }
        Err(ReadError::Gone)
    }

    /// Samples `pids` (sorted) into `out`. Entries of processes no longer listed are closed; processes that exit
    /// during the sample, and those none of whose threads has memory, are left out without an error. Other read
    /// errors are logged once per process and the process is left out of this sample.
    pub fn sample(&mut self, pids: &[u32], out: &mut Vec<ProcSample>) {
        out.clear();
        let before = self.entries.len();
        self.entries.retain(|pid, _| pids.binary_search(pid).is_ok());
        if self.entries.len() != before {
            self.kept = self.entries.values().filter(|e| e.statm.is_some()).count();
        }
        if !self.unreadable.is_empty() {
            self.unreadable.retain(|pid| pids.binary_search(pid).is_ok());
        }
        let now = Instant::now();
        for &pid in pids {
            let mut entry = match self.entries.remove(&pid) {
                Some(e) => e,
                None => match self.open(pid) {
                    Ok(e) => e,
                    Err(ReadError::Gone) => continue,
                    Err(ReadError::Other(msg)) => {
                        self.cannot_read(pid, &msg);
                        continue;
                    }
                },
            };
            match Self::read_entry(&mut self.buf, &mut entry, self.page_size, &self.proc_root, pid) {
                Ok((rss, anon)) => {
                    if entry.name_due(now) {
                        self.rename(pid, &mut entry, now);
                    }
                    out.push(ProcSample {
                        pid,
                        name: entry.stat.comm.clone(),
                        comm: entry.stat.comm.clone(),
                        start_ticks: entry.stat.start_ticks,
                        ppid: entry.stat.ppid,
                        rss_bytes: rss,
                        anon_bytes: anon,
                        traffic: Traffic::default(),
                    });
                    self.entries.insert(pid, entry);
                    if !self.unreadable.is_empty() {
                        self.unreadable.retain(|&p| p != pid);
                    }
                }
                // The process exited (or the pid now names another process: its next listing reopens it).
                Err(ReadError::Gone) => self.forget(&entry),
                Err(ReadError::Other(msg)) => {
                    self.forget(&entry);
                    self.cannot_read(pid, &msg);
                }
            }
        }
    }

    /// Reads `pid`'s name again from `/proc/<pid>/comm` (it changes at `execve`), escaped as [`parse_stat`] escapes
    /// it; kept as it was when the file cannot be read (the process is exiting: the next sample drops it).
    fn rename(&mut self, pid: u32, entry: &mut Entry, now: Instant) {
        let path = self.proc_root.join(pid.to_string()).join("comm");
        if let Ok(f) = File::open(path) {
            if pread_record(&f, &mut self.buf).is_ok() && !self.buf.is_empty() {
                let name = String::from_utf8_lossy(&self.buf);
                let name = name.strip_suffix('\n').unwrap_or(&name);
                let name = crate::base::text::escape_controls(name);
                if *name != entry.stat.comm {
                    entry.stat.comm = name.to_string();
                }
            }
        }
        entry.named = now;
        entry.named_size = entry.size;
    }

    /// The name of `pid` read now (for a process a decision names, whose exec may be newer than [`NAME_EVERY`]), and
    /// kept for the next samples; `None` when `pid` is not in the table.
    pub(crate) fn fresh_name(&mut self, pid: u32) -> Option<String> {
        let mut entry = self.entries.remove(&pid)?;
        self.rename(pid, &mut entry, Instant::now());
        let name = entry.stat.comm.clone();
        self.entries.insert(pid, entry);
        Some(name)
    }

    /// Logs that a listed process cannot be read, once while it stays so (it is tried again at every sample).
    fn cannot_read(&mut self, pid: u32, msg: &str) {
        if !self.unreadable.contains(&pid) {
            tracing::warn!(pid, "cannot read process: {msg} (left out of the samples while this lasts)");
            self.unreadable.push(pid);
        }
    }

    /// How many processes have open entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// How many of them keep their `statm` open.
    #[cfg(test)]
    pub(crate) fn kept_open(&self) -> usize {
        self.kept
    }

    /// True when no process is tracked.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl Default for ProcTable {
    fn default() -> Self {
        ProcTable::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATM: &str = include_str!("../../../tests/fixtures/proc/python-64m.statm");
    const STATUS: &str = include_str!("../../../tests/fixtures/proc/python-64m.status");
    const STAT: &str = include_str!("../../../tests/fixtures/proc/python-64m.stat");
    #[test]
    fn captured_python_process() {
        assert_eq!(parse_statm(STATM), Ok(Statm { size: 20526, resident: 19808, shared: 1706 }));
        assert_eq!(parse_status_rss_anon(STATUS), Ok(72408 * 1024));
        // statm's resident - shared is status's RssAnon, to the page.
        let statm = parse_statm(STATM).expect("statm");
        assert_eq!(statm.anon_pages() * 4096, 72408 * 1024);
        let s = parse_stat(STAT).expect("stat");
        assert_eq!(s.comm, "python3");
        assert!(s.start_ticks > 0 && s.ppid > 0, "{s:?}");
    }

    /// A `/proc` tree captured from two `thread-holder` processes (tests/src/bin/thread-holder.rs): 15053, whose
    /// main thread exited while thread 15055 holds 64 MiB, and 15059, exited whole and not yet reaped (no thread).
    fn holders() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/proc/thread-holder")
    }

    /// `file` of the captured holders' tree.
    fn holder_file(file: &str) -> String {
        let path = holders().join(file);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_leader_that_exited_alone_has_no_memory_and_its_thread_has_it_all() {
        let leader = parse_statm(&holder_file("15053/statm")).expect("leader statm");
        assert_eq!(leader, Statm { size: 0, resident: 0, shared: 0 });
        assert_eq!(parse_statm(&holder_file("15053/task/15053/statm")), Ok(leader));
        assert_eq!(parse_status_rss_anon(&holder_file("15053/status")), Ok(0), "no RssAnon line on the leader");
        let thread = parse_statm(&holder_file("15053/task/15055/statm")).expect("thread statm");
        assert_eq!(thread, Statm { size: 34042, resident: 16901, shared: 480 });
        // The thread's statm is the whole process's: its anon is its status's RssAnon (64 MiB and the program).
        assert_eq!(parse_status_rss_anon(&holder_file("15053/task/15055/status")), Ok(65684 * 1024));
        assert_eq!(thread.anon_pages() * 4096, 65684 * 1024);
        let (leader, thread) =
            (parse_stat(&holder_file("15053/stat")), parse_stat(&holder_file("15053/task/15055/stat")));
        let (leader, thread) = (leader.expect("leader stat"), thread.expect("thread stat"));
        assert_eq!((leader.comm.as_str(), thread.comm.as_str()), ("thread-holder", "holder"));
        assert_eq!(parse_statm(&holder_file("15059/statm")), Ok(Statm { size: 0, resident: 0, shared: 0 }));
    }

    /// Copies the tree at `from` into `to`.
    fn copy_tree(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("{}: {e}", to.display()));
        let dir = std::fs::read_dir(from).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
        for e in dir.flatten() {
            let (src, dst) = (e.path(), to.join(e.file_name()));
            if src.is_dir() {
                copy_tree(&src, &dst);
            } else {
                std::fs::copy(&src, &dst).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
            }
        }
    }

    #[test]
    fn a_process_whose_leader_exited_is_read_from_a_live_thread() {
        let thread = parse_statm(&holder_file("15053/task/15055/statm")).expect("thread statm");
        for budget in [usize::MAX, 0] {
            let mut t = ProcTable::with_root(&holders());
            t.set_keep_budget(budget);
            let mut out = Vec::new();
            for _ in 0..2 {
                t.sample(&[15053, 15059], &mut out);
                assert_eq!(out.len(), 1, "the exited 15059 is left out, unsampled: {out:?}");
                let p = &out[0];
                assert_eq!((p.pid, p.name.as_str(), p.start_ticks), (15053, "thread-holder", 39190), "the leader's");
                assert_eq!(p.anon_bytes, thread.anon_pages() * t.page_size, "budget {budget}");
                assert_eq!(p.rss_bytes, thread.resident * t.page_size);
                assert!(p.anon_bytes >= 64 << 20, "{p:?}");
                assert_eq!(
                    (t.len(), t.kept_open()),
                    (1, budget.min(1)),
                    "the thread's file kept in the leader's place"
                );
            }
        }
    }

    #[test]
    fn when_the_thread_read_exits_another_is_read_and_with_none_left_the_process_is_left_out() {
        let thread = parse_statm(&holder_file("15053/task/15055/statm")).expect("thread statm");
        for budget in [usize::MAX, 0] {
            let root = monitor_tests::temp_dir("procs-threads");
            copy_tree(&holders(), &root);
            let task = root.join("15053/task");
            let mut t = ProcTable::with_root(&root);
            t.set_keep_budget(budget);
            let mut out = Vec::new();
            t.sample(&[15053], &mut out);
            assert_eq!(out.iter().map(|p| p.anon_bytes).collect::<Vec<_>>(), [thread.anon_pages() * t.page_size]);
            // Thread 15055 exits (its open file reads nothing, its directory goes); 15056 holds the memory now.
            copy_tree(&task.join("15055"), &task.join("15056"));
            std::fs::write(task.join("15056/statm"), "34042 20000 480 77 0 17024 0\n").expect("statm");
            std::fs::write(task.join("15055/statm"), "").expect("statm");
            if budget == 0 {
                std::fs::remove_dir_all(task.join("15055")).expect("rm");
            }
            t.sample(&[15053], &mut out);
            assert_eq!(out.len(), 1, "budget {budget}: {out:?}");
            assert_eq!((out[0].pid, out[0].anon_bytes), (15053, (20000 - 480) * t.page_size), "budget {budget}");
            // Every thread has let go of the memory: listed, not sampled, not a process of 0 bytes.
            std::fs::write(task.join("15056/statm"), "0 0 0 0 0 0 0\n").expect("statm");
            t.sample(&[15053], &mut out);
            assert!(out.is_empty(), "budget {budget}: {out:?}");
            assert_eq!(t.len(), 0);
            // A pid whose files now belong to another process (another start time) is not read through a thread.
            std::fs::write(task.join("15056/statm"), "34042 20000 480 77 0 17024 0\n").expect("statm");
            t.sample(&[15053], &mut out);
            assert_eq!(out.len(), 1, "budget {budget}: {out:?}");
            let stat = std::fs::read_to_string(root.join("15053/stat")).expect("stat");
            std::fs::write(root.join("15053/stat"), stat.replace(" 39190 ", " 39999 ")).expect("stat");
            std::fs::write(task.join("15056/statm"), "").expect("statm");
            copy_tree(&task.join("15056"), &task.join("15057"));
            std::fs::write(task.join("15057/statm"), "34042 20000 480 77 0 17024 0\n").expect("statm");
            t.sample(&[15053], &mut out);
            // Kept open: the entry is dropped (the next listing opens the newcomer). Opened anew each sample: the
            // newcomer's start time comes with its memory.
            let starts: Vec<u64> = out.iter().map(|p| p.start_ticks).collect();
            assert_eq!(starts, if budget == 0 { vec![39999] } else { vec![] }, "budget {budget}: {out:?}");
            let _ = std::fs::remove_dir_all(&root);
        }
    }

    #[test]
    fn stat_with_parens_and_spaces_in_name() {
        let t = "42 (a) b (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10 1 1 1 1 1 1 0 0 0 0";
        let s = parse_stat(t).expect("stat");
        assert_eq!(s, StatInfo { comm: "a) b (c".into(), ppid: 7, start_ticks: 12345 });
        assert!(parse_stat("42 (x S 1").is_err());
        assert!(parse_stat("42 (x) S").is_err());
    }

    #[test]
    fn a_name_with_control_characters_is_read_escaped() {
        let t =
            "42 (a\nkilled: x\x1b) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10 1 1 1 1 1 1 0 0 0 0";
        let s = parse_stat(t).expect("stat");
        assert_eq!(s.comm, "a\\nkilled: x\\e");
    }

    #[test]
    fn bad_input_is_an_error() {
        assert!(parse_statm("").is_err());
        assert!(parse_statm("1 x 3").is_err());
        assert!(parse_status_rss_anon("RssAnon: lots kB").is_err());
        assert!(parse_status_rss_anon("RssAnon: 12 MB").is_err());
        assert_eq!(parse_status_rss_anon("Name: kthreadd\n"), Ok(0));
    }

    /// Kills and reaps the child on drop.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    fn name_in(t: &mut ProcTable, pid: u32) -> String {
        let mut out = Vec::new();
        t.sample(&[pid], &mut out);
        out.first().map(|p| p.name.clone()).unwrap_or_else(|| panic!("pid {pid} not sampled"))
    }

    /// Polls `f` every 20 ms for up to `secs`; its last answer.
    fn within(secs: u64, mut f: impl FnMut() -> bool) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        f()
    }

    #[test]
    fn a_name_is_read_again_after_most_of_a_second_when_the_size_moved_and_after_ten_when_it_did_not() {
        let t0 = Instant::now();
        let stat = parse_stat("7 (sh) S 1 7 7 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 42 0 0").expect("stat");
        let mut e = Entry { statm: None, tid: 7, stat, named: t0, size: 730, named_size: 730 };
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        assert!(!e.name_due(at(500)) && !e.name_due(at(5_000)), "an unchanged size waits for NAME_ANYWAY");
        assert!(e.name_due(at(10_000)));
        e.size = 1_200; // an exec replaced the address space
        assert!(!e.name_due(at(799)), "never sooner than NAME_EVERY");
        assert!(e.name_due(at(800)));
    }

    #[test]
    fn a_process_that_execs_is_named_after_its_new_program() {
        // The shell waits, then becomes `sleep` (same pid, same start time).
        let c = std::process::Command::new("sh").args(["-c", "sleep 0.3; exec sleep 30"]).spawn().expect("spawn sh");
        let child = Child(c);
        let pid = child.0.id();
        let mut t = ProcTable::new();
        assert_eq!(name_in(&mut t, pid), "sh");
        let exec_done = || std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep");
        assert!(within(5, exec_done), "the shell did not exec sleep within 5 s");
        // Fresh when asked for (a decision names it), and kept for the next samples.
        let mut fresh = ProcTable::new();
        assert_eq!(name_in(&mut fresh, pid), "sleep", "a new entry reads stat after the exec");
        let started = Instant::now();
        let mut names = Vec::new();
        assert!(
            within(3, || {
                names.push(name_in(&mut t, pid));
                names.last().is_some_and(|n| n == "sleep")
            }),
            "still {:?} after {:?}",
            names.last(),
            started.elapsed()
        );
        assert!(started.elapsed() <= NAME_EVERY + Duration::from_millis(500), "renamed after {:?}", started.elapsed());
        let mut u = ProcTable::new();
        let c2 = std::process::Command::new("sh").args(["-c", "sleep 0.2; exec sleep 30"]).spawn().expect("spawn sh");
        let child2 = Child(c2);
        let pid2 = child2.0.id();
        assert_eq!(name_in(&mut u, pid2), "sh");
        let exec2 = || std::fs::read_to_string(format!("/proc/{pid2}/comm")).is_ok_and(|c| c.trim() == "sleep");
        assert!(within(5, exec2), "the second shell did not exec sleep within 5 s");
        assert_eq!(u.fresh_name(pid2).as_deref(), Some("sleep"), "fresh_name reads comm now");
        assert_eq!(name_in(&mut u, pid2), "sleep", "and the samples keep it");
        assert_eq!(u.fresh_name(1), None, "not in the table");
    }

    #[test]
    fn samples_this_process_and_drops_vanished_pids() {
        let me = std::process::id();
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let gone = child.id();
        child.wait().expect("wait");
        let mut t = ProcTable::new();
        let mut out = Vec::new();
        let mut pids = vec![me, gone, u32::MAX - 1];
        pids.sort_unstable();
        t.sample(&pids, &mut out);
        assert_eq!(out.len(), 1, "{out:?}");
        assert_eq!(out[0].pid, me);
        assert!(out[0].rss_bytes > 0 && out[0].anon_bytes > 0 && out[0].anon_bytes <= out[0].rss_bytes);
        // The statm-derived anon equals status's RssAnon (allow a few pages for this test process moving).
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let rss_anon = parse_status_rss_anon(&status).expect("RssAnon");
        assert!(out[0].anon_bytes.abs_diff(rss_anon) <= 64 * 4096, "{} vs {rss_anon}", out[0].anon_bytes);
        assert_eq!(t.len(), 1);
        t.sample(&[], &mut out);
        assert!(out.is_empty() && t.is_empty());
    }

    #[test]
    fn a_process_named_with_bytes_that_are_not_utf8_is_sampled() {
        // Any process may name itself with any bytes (prctl PR_SET_NAME): it must not hide from the guard.
        let script = "import ctypes,sys,time\nctypes.CDLL(None).prctl(15, b'\\xff\\xfe\\xfd\\x80hide', 0, 0, 0)\n\
                      print('named', flush=True)\ntime.sleep(30)\n";
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut line = String::new();
        let out_pipe = child.stdout.take().expect("stdout");
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(out_pipe), &mut line);
        assert_eq!(line.trim(), "named");
        let pid = child.id();
        let raw = std::fs::read(format!("/proc/{pid}/stat")).expect("stat");
        assert!(std::str::from_utf8(&raw).is_err(), "the name is not UTF-8: {raw:?}");
        let mut t = ProcTable::new();
        let mut out = Vec::new();
        t.sample(&[pid], &mut out);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(out.len(), 1, "sampled despite its name");
        assert!(out[0].name.ends_with("hide") && out[0].name.contains('\u{fffd}'), "{:?}", out[0].name);
        assert!(out[0].rss_bytes > 0);
        assert!(start_ticks(pid).is_ok() || std::fs::metadata(format!("/proc/{pid}")).is_err());
    }

    #[test]
    fn an_exited_process_behind_an_open_entry_is_dropped() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        let pid = child.id();
        let mut t = ProcTable::new();
        let mut out = Vec::new();
        t.sample(&[pid], &mut out);
        assert_eq!(out.len(), 1);
        child.kill().expect("kill");
        child.wait().expect("wait");
        // Still listed (as a stale cgroup.procs read could be): the open files say the process is gone.
        t.sample(&[pid], &mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn past_the_fds_to_keep_every_process_is_still_sampled() {
        let mut kids: Vec<std::process::Child> =
            (0..3).map(|_| std::process::Command::new("sleep").arg("30").spawn().expect("spawn")).collect();
        let mut pids: Vec<u32> = kids.iter().map(|c| c.id()).chain([std::process::id()]).collect();
        pids.sort_unstable();
        let mut t = ProcTable::new();
        t.set_keep_budget(1);
        let mut out = Vec::new();
        for _ in 0..3 {
            t.sample(&pids, &mut out);
            assert_eq!(out.iter().map(|p| p.pid).collect::<Vec<_>>(), pids);
            assert!(out.iter().all(|p| p.rss_bytes > 0 && p.start_ticks > 0), "{out:?}");
            assert_eq!((t.len(), t.kept_open()), (4, 1));
        }
        // One read by open-read-close exits: dropped like any other, and the fd kept stays one.
        let gone = kids.iter().map(|c| c.id()).max().unwrap_or(0);
        for k in &mut kids {
            if k.id() == gone {
                let _ = k.kill();
                let _ = k.wait();
            }
        }
        t.sample(&pids, &mut out);
        assert!(!out.iter().any(|p| p.pid == gone) && out.len() == 3, "{out:?}");
        for k in &mut kids {
            let _ = k.kill();
            let _ = k.wait();
        }
        // Raising: the soft limit ends at the hard one (or nr_open), children get the one it started with.
        let l = raise_fd_limit().expect("getrlimit");
        assert!(l.now >= l.was && soft_fd_limit().is_none_or(|s| s == l.now), "{l:?}");
        assert_eq!(child_fd_limit(), Some(l.was));
        assert_eq!(keep_budget(Some(1024)), 768);
        assert_eq!(keep_budget(Some(256)), 128);
        assert_eq!(keep_budget(Some(100)), 0);
        assert_eq!(keep_budget(None), usize::MAX);
    }

    #[test]
    fn descendants_follow_parent_links() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().expect("spawn");
        let all = with_descendants(Path::new("/proc"), std::process::id());
        assert!(all.contains(&std::process::id()) && all.contains(&child.id()), "{all:?}");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// A log writer for tests: what `tracing` writes, kept in memory.
    #[derive(Clone, Default)]
    struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_process_that_cannot_be_read_is_said_once_while_it_lasts() {
        let root = monitor_tests::temp_dir("procs-unreadable");
        let dir = root.join("4242");
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("statm"), "100 50 10 1 0 40 0\n").expect("statm");
        std::fs::write(dir.join("stat"), "not a stat line").expect("stat");
        let log = Captured::default();
        let writer = log.clone();
        let subscriber = tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).finish();
        let mut t = ProcTable::with_root(&root);
        let mut out = Vec::new();
        let said = || String::from_utf8_lossy(&log.0.lock().unwrap_or_else(|e| e.into_inner())).matches("4242").count();
        tracing::subscriber::with_default(subscriber, || {
            for _ in 0..20 {
                t.sample(&[4242], &mut out);
            }
            assert!(out.is_empty());
            assert_eq!(said(), 1, "once, not per sample");
            // Gone from the group, then back and still unreadable: a new occasion, said again.
            t.sample(&[], &mut out);
            t.sample(&[4242], &mut out);
            assert_eq!(said(), 2);
        });
        let _ = std::fs::remove_dir_all(&root);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(s in "\\PC{0,300}") {
            let _ = parse_statm(&s);
            let _ = parse_status_rss_anon(&s);
            let _ = parse_stat(&s);
        }
    }
}
