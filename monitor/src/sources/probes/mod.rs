//! eBPF request counting: loads the embedded object, keeps the tgid filter equal to the group,
//! reads per-process counters.
//!
//! Kernel side: `monitor-ebpf` (socket-layer raw tracepoints; the raw `sys_exit` tracepoint or per-syscall
//! tracepoints as the fallbacks); map types: `monitor-common`. See docs/probes.md.

mod attach;
mod bitmap;
mod counters;
mod lineage;
pub mod object;
mod tracer;

pub use crate::config::{CloseHook, Hooks};
pub use attach::tracefs_reachable;
pub use counters::percentile;
pub use tracer::{TraceRequest, Tracer};

use crate::decision::snapshot::Traffic;
use aya::maps::{HashMap as BpfHashMap, Map, MapData, MapError, PerCpuArray, PerCpuHashMap, PerCpuValues};
use aya::programs::{ProgramError, RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfError, EbpfLoader};
use monitor_common::socks::{SkKey, SockKey, SockState};
use monitor_common::stats::{slot_of, Counters, Slot};
use monitor_common::{filter, forked, socks, stats};
use std::collections::{BTreeSet, HashMap};

/// Why the probes are not running, or what failed while they ran.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("eBPF object not built into this binary ({0})")]
    NotBuilt(&'static str),
    #[error("loading the eBPF object (needs root or CAP_BPF+CAP_PERFMON): {0}")]
    Load(#[source] Box<EbpfError>),
    #[error("eBPF program `{0}` is missing from the object")]
    MissingProgram(&'static str),
    #[error("eBPF map `{0}` is missing from the object")]
    MissingMap(&'static str),
    #[error("loading eBPF program `{name}`: {source}")]
    Program { name: &'static str, source: Box<ProgramError> },
    #[error("attaching `{name}` to tracepoint {category}/{tracepoint}: {source}")]
    Attach { name: &'static str, category: &'static str, tracepoint: &'static str, source: Box<ProgramError> },
    #[error("attaching `{name}` to raw tracepoint {tracepoint}: {source}")]
    AttachRaw { name: &'static str, tracepoint: &'static str, source: Box<ProgramError> },
    #[error("eBPF map `{name}`: {source}")]
    Map { name: &'static str, source: Box<MapError> },
    #[error(
        "tracefs is mounted at {} but not readable (root's, mode 0700): CAP_DAC_READ_SEARCH reads it ({source})",
        at.display()
    )]
    TracefsUnreadable { at: std::path::PathBuf, source: std::io::Error },
    #[error("mounting tracefs at /sys/kernel/tracing (needs CAP_SYS_ADMIN, or tracefs mounted beforehand): {0}")]
    Tracefs(#[source] std::io::Error),
    #[error(
        "monitor runs in a PID namespace of its own (a container's): the probes count by the kernel's pids, not the \
         ones monitor sees there. Share the host's PID namespace (podman --pid=host, Kubernetes hostPID) for the \
         probes"
    )]
    PidNamespace,
    #[error("counting possible CPUs: {0}")]
    Cpus(#[source] std::io::Error),
    #[error("eBPF map `{0}` is not an array")]
    NotArray(&'static str),
    #[error("mapping the eBPF map `{name}` into memory: {source}")]
    Mmap { name: &'static str, source: std::io::Error },
}

impl ProbeError {
    /// The errno of the system call behind an attach failure (`perf_event_open` for a tracepoint,
    /// `bpf(BPF_RAW_TRACEPOINT_OPEN)` for a raw one), found down its chain of sources.
    pub(crate) fn attach_errno(&self) -> Option<i32> {
        let mut e: Option<&(dyn std::error::Error + 'static)> = match self {
            ProbeError::Attach { source, .. } | ProbeError::AttachRaw { source, .. } => Some(source.as_ref()),
            _ => None,
        };
        while let Some(err) = e {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                return io.raw_os_error();
            }
            e = err.source();
        }
        None
    }

    /// True when `perf_event_open` refused a tracepoint for want of privilege (EACCES or EPERM: above
    /// `kernel.perf_event_paranoid = 2` without CAP_SYS_ADMIN), where a raw tracepoint may still attach.
    pub(crate) fn perf_refused(&self) -> bool {
        matches!(self, ProbeError::Attach { .. })
            && matches!(self.attach_errno(), Some(libc::EACCES) | Some(libc::EPERM))
    }
}

fn map_err(name: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |e| ProbeError::Map { name, source: Box::new(e) }
}

/// The loaded and attached probes. Dropping it detaches and unloads every program.
pub struct Probes {
    /// Bitmap of traced tgids: bit `tgid % 64` of word `tgid / 64`, shared with the kernel's `fork` program.
    filter: bitmap::Bitmap,
    stats: PerCpuHashMap<MapData, u32, Counters>,
    /// Counter slots (`STATS_SLOTS`), and the claim on each slot user space gave out.
    slots: PerCpuArray<MapData, Slot>,
    claimed: HashMap<u32, Claim>,
    /// How many times [`Probes::read`] ran: claims are dated with it.
    reads: u64,
    socks: BpfHashMap<MapData, SockKey, SockState>,
    socks_by_sk: BpfHashMap<MapData, SkKey, SockState>,
    /// Children the `fork` program started tracing, with their parent (drained every read).
    forked: BpfHashMap<MapData, forked::Key, forked::Value>,
    /// How many entries the kernel wrote to `forked`, and that count when it was last drained.
    fork_count: bitmap::Counter,
    forks_drained: u64,
    /// The tgids user space put in `filter`: the group's pids at the last sync.
    traced: BTreeSet<u32>,
    /// Tgids traced ahead of the sync ([`Probes::trace_now`]), with when: kept while they are not (yet) in the
    /// synced pids, up to [`PIN_GRACE`].
    pinned: HashMap<u32, std::time::Instant>,
    /// Live children the kernel traces from their fork that are not (yet) in `traced`.
    children: BTreeSet<u32>,
    /// Parent of every forked child not yet retired.
    lineage: lineage::Lineage,
    /// Counts of exited forked children, folded into their nearest ancestor still traced (see docs/probes.md).
    folded: HashMap<u32, Counters>,
    /// Why forks are not followed (children then count from the next sync on), or `None` when they are.
    /// Why forks are not followed, and the errno of the attach that failed.
    forks_off: Option<(String, Option<i32>)>,
    nr_cpus: usize,
    hooks: Hooks,
    /// Where `close` is hooked (the syscall sets), `None` with the socket set.
    close: Option<CloseHook>,
    /// Holds the programs and their links; declared last so the maps above are closed first.
    ebpf: Ebpf,
}

/// A counter slot given to a tgid, and its `STATS` entry as last read.
struct Claim {
    pid: u32,
    /// [`Probes::reads`] when the slot was given.
    at: u64,
    /// The tgid's `STATS` entry: what it counted before it held the slot (a forked child counts there from its
    /// fork until it is given one). Once the slot is its, the kernel counts in the slot and the entry stops
    /// changing; but a program that looked at the slot just before it was given may still add to the entry.
    hash: Counters,
}

/// A slot holder's `STATS` entry is read again once every this many reads: once a second where the sampler reads
/// the counters at every sample of the default 100 ms (near the lines), every ten seconds where it reads them once
/// a second (far from them).
const HASH_REREAD: u64 = 10;

impl Claim {
    /// Whether the entry is read at read number `reads`: at the first reads after the claim, until any program
    /// that missed the claim has long finished, then once every [`HASH_REREAD`] reads, so that even a count such a
    /// program added late shows up.
    fn hash_due(&self, reads: u64) -> bool {
        reads <= self.at + 2 || reads.is_multiple_of(HASH_REREAD)
    }
}

/// The initial PID namespace's inode number (the kernel's `PROC_PID_INIT_INO`).
const INIT_PID_NS: u64 = 0xEFFF_FFFC;

/// Whether this process runs in a PID namespace other than the initial one (as a container's processes do): the
/// programs see every process by its pid in the initial namespace, the agent by its pid in its own.
fn in_child_pid_namespace() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").is_ok_and(|m| m.ino() != INIT_PID_NS)
}

impl Probes {
    /// Loads the embedded object and attaches the programs: the first set of [`Hooks::preferred`] and its
    /// fallbacks that attaches (socket tracepoints, raw `sys_exit`, per-syscall tracepoints).
    pub fn load() -> Result<Probes, ProbeError> {
        Probes::attach(Hooks::preferred(), true, None)
    }

    /// Like [`Probes::load`] with the given hooks and no fallback (`[probes] hooks` naming a set; benchmarks and
    /// tests compare the sets). The raw `sys_exit` set still hooks `close` on the raw `sys_enter` when the
    /// `close` tracepoint is refused.
    pub fn load_with(hooks: Hooks) -> Result<Probes, ProbeError> {
        Probes::attach(hooks, false, None)
    }

    /// Like [`Probes::load_with`], with `close` hooked where `close` says, tracepoint refused or not (tests run
    /// the raw `sys_enter` hook on hosts that allow both).
    pub fn load_with_close(hooks: Hooks, close: CloseHook) -> Result<Probes, ProbeError> {
        Probes::attach(hooks, false, Some(close))
    }

    /// Which hooks the programs are attached to.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    /// Where `close` is hooked: the syscall sets' `close` tracepoint, or the raw `sys_enter` where that is
    /// refused; `None` with the socket set, which sees sockets close in `inet_sock_set_state`.
    pub fn close_hook(&self) -> Option<CloseHook> {
        self.close
    }

    fn attach(want: Hooks, fallback: bool, close: Option<CloseHook>) -> Result<Probes, ProbeError> {
        if object::OBJECT.is_empty() {
            return Err(ProbeError::NotBuilt(object::SKIPPED));
        }
        if in_child_pid_namespace() {
            return Err(ProbeError::PidNamespace);
        }
        let nr_cpus = aya::util::nr_cpus().map_err(|(_, e)| ProbeError::Cpus(e))?;
        let words = filter::words(pid_max());
        attach::ensure_tracefs()?;
        // Where `pid` and `clone_flags` sit in task_newtask's record depends on the kernel: read it from tracefs.
        let pid_at = attach::field_offset("task", "task_newtask", "pid").unwrap_or(0);
        let flags_at = attach::field_offset("task", "task_newtask", "clone_flags").unwrap_or(0);
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(filter::MAP, words)
            .override_global("NEWTASK_PID_OFFSET", &pid_at, true)
            .override_global("NEWTASK_FLAGS_OFFSET", &flags_at, true)
            .load(object::OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        let mut hooks = want;
        let close = loop {
            match attach_set(&mut ebpf, hooks, close) {
                Ok(close) => break close,
                Err(e) => match hooks.fallback() {
                    Some(next) if fallback => {
                        tracing::info!("eBPF hooks {hooks:?} unavailable ({e}); trying {next:?}");
                        hooks = next;
                    }
                    _ => return Err(e),
                },
            }
        };
        if let Some(c) = close {
            tracing::info!(hooks = hooks.name(), close = c.name(), "eBPF hooks attached");
        }
        let forks_off = if pid_at == 0 || flags_at == 0 {
            Some(("no pid or clone_flags field in task/task_newtask's format".to_string(), None))
        } else {
            attach_forks(&mut ebpf).err().map(|e| {
                // Loaded but not attached: unloaded, so that the loaded programs are the ones that run.
                unload(&mut ebpf, attach::FORK.iter().map(|&(name, _, _)| name));
                (e.to_string(), e.attach_errno())
            })
        };
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        let Map::Array(filter) = take(filter::MAP)? else {
            return Err(ProbeError::NotArray(filter::MAP));
        };
        let filter =
            bitmap::Bitmap::map(filter, words).map_err(|source| ProbeError::Mmap { name: filter::MAP, source })?;
        let stats = PerCpuHashMap::try_from(take(stats::MAP)?).map_err(map_err(stats::MAP))?;
        let slots = PerCpuArray::try_from(take(stats::SLOTS_MAP)?).map_err(map_err(stats::SLOTS_MAP))?;
        let socks = BpfHashMap::try_from(take(socks::MAP)?).map_err(map_err(socks::MAP))?;
        let socks_by_sk = BpfHashMap::try_from(take(socks::BY_SK_MAP)?).map_err(map_err(socks::BY_SK_MAP))?;
        let forked = BpfHashMap::try_from(take(forked::MAP)?).map_err(map_err(forked::MAP))?;
        let Map::Array(fork_count) = take(forked::COUNT_MAP)? else {
            return Err(ProbeError::NotArray(forked::COUNT_MAP));
        };
        let fork_count =
            bitmap::Counter::map(fork_count).map_err(|source| ProbeError::Mmap { name: forked::COUNT_MAP, source })?;
        Ok(Probes {
            filter,
            stats,
            slots,
            claimed: HashMap::new(),
            reads: 0,
            socks,
            socks_by_sk,
            forked,
            fork_count,
            forks_drained: 0,
            traced: BTreeSet::new(),
            pinned: HashMap::new(),
            children: BTreeSet::new(),
            lineage: lineage::Lineage::default(),
            folded: HashMap::new(),
            forks_off,
            nr_cpus,
            hooks,
            close,
            ebpf,
        })
    }

    /// `None` when the children a traced process forks are traced from their fork; otherwise why not (they then
    /// count from the sync after they appear in the group).
    pub fn forks_off(&self) -> Option<&str> {
        self.forks_off.as_ref().map(|(why, _)| why.as_str())
    }

    /// The errno of the fork-following program's failed attach, when that is why forks are not followed.
    pub(crate) fn forks_errno(&self) -> Option<i32> {
        self.forks_off.as_ref().and_then(|(_, errno)| *errno)
    }

    /// Makes the tgids user space traces equal to `pids`. New tgids start from zero counters, except forked
    /// children the kernel already traces, which keep theirs. Tgids that left are retired: their counters and
    /// tracked sockets are dropped, or, for a forked child, folded into its nearest ancestor still traced.
    pub fn sync_pids(&mut self, pids: &[u32]) -> Result<(), ProbeError> {
        // Learn the children first, so one that left folds into its parent.
        self.collect_forks()?;
        let want: BTreeSet<u32> = pids.iter().copied().collect();
        // A pid traced ahead of the sync stays until it shows up in the group, or is gone, or its grace is over.
        self.pinned.retain(|p, since| !want.contains(p) && since.elapsed() < PIN_GRACE && lineage::live_process(*p));
        let added: Vec<u32> = want.difference(&self.traced).copied().collect();
        let removed: BTreeSet<u32> =
            self.traced.difference(&want).copied().filter(|p| !self.pinned.contains_key(p)).collect();
        if !removed.is_empty() {
            self.traced.retain(|p| !removed.contains(p));
            for &pid in &removed {
                self.retire(pid)?;
            }
            self.forget_sockets(&removed)?;
        }
        for pid in added {
            self.add(pid)?;
        }
        Ok(())
    }

    /// Traces `pid` at once, ahead of the next sync: a process the launcher just started, so that everything it
    /// serves counts, its first health checks included. It stays traced while it is not (yet) among the synced
    /// pids, for up to [`PIN_GRACE`].
    pub fn trace_now(&mut self, pid: u32) -> Result<(), ProbeError> {
        self.collect_forks()?;
        if !self.traced.contains(&pid) {
            self.add(pid)?;
        }
        self.pinned.insert(pid, std::time::Instant::now());
        Ok(())
    }

    /// True while a pid traced ahead of the sync waits to show up in the group (the caller should keep syncing).
    pub fn has_pinned(&self) -> bool {
        !self.pinned.is_empty()
    }

    /// Starts tracing `pid`: counters first, so nothing the filter lets through is lost (a child the kernel traces
    /// from its fork already has them; NOEXIST also keeps those of a child forked since `collect_forks`), then its
    /// counter slot, then the filter bit.
    fn add(&mut self, pid: u32) -> Result<(), ProbeError> {
        if !self.children.remove(&pid) {
            let zeros = PerCpuValues::try_from(vec![Counters::ZERO; self.nr_cpus]).map_err(ProbeError::Cpus)?;
            match self.stats.insert(pid, zeros, BPF_NOEXIST) {
                Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::EEXIST) => {}
                r => r.map_err(map_err(stats::MAP))?,
            }
        }
        self.claim(pid)?;
        self.filter.set(pid);
        self.traced.insert(pid);
        Ok(())
    }

    /// Drains `FORKED`: each child the kernel started tracing joins the lineage, and `children` unless user space
    /// already traces it.
    fn collect_forks(&mut self) -> Result<(), ProbeError> {
        // Read before the drain: an entry written after it is counted after it, and drained next time.
        let count = self.fork_count.load();
        if count == self.forks_drained {
            return Ok(());
        }
        self.forks_drained = count;
        let entries: Vec<(u32, u32)> = self.forked.iter().filter_map(Result::ok).collect();
        for (child, parent) in entries {
            remove_present(&mut self.forked, &child).map_err(map_err(forked::MAP))?;
            self.lineage.record(child, parent);
            if !self.traced.contains(&child) {
                self.children.insert(child);
                self.claim(child)?;
            }
        }
        Ok(())
    }

    /// Retires the forked children that are no longer live processes (exited, or a thread after all).
    fn reap_children(&mut self) -> Result<(), ProbeError> {
        let gone: BTreeSet<u32> = self.children.iter().copied().filter(|&c| !lineage::live_process(c)).collect();
        if gone.is_empty() {
            return Ok(());
        }
        for &pid in &gone {
            self.children.remove(&pid);
            self.retire(pid)?;
        }
        self.forget_sockets(&gone)
    }

    /// Stops tracing `pid` (already out of `traced` and `children`) and takes its final counters: folded into its
    /// nearest ancestor still traced when it was forked by one, dropped otherwise. Its sockets are the caller's.
    fn retire(&mut self, pid: u32) -> Result<(), ProbeError> {
        // Filter first, so the kernel stops counting before the counters are read.
        self.filter.clear(pid);
        let mut last = self.counters_of(pid)?;
        remove_present_percpu(&mut self.stats, &pid).map_err(map_err(stats::MAP))?;
        self.release(pid)?;
        if let Some(f) = self.folded.remove(&pid) {
            counters::add(&mut last, &f);
        }
        let (traced, children) = (&self.traced, &self.children);
        if let Some(to) = self.lineage.ancestor(pid, |p| traced.contains(&p) || children.contains(&p)) {
            counters::add(self.folded.entry(to).or_default(), &last);
        }
        self.lineage.forget(pid);
        Ok(())
    }

    /// Per-tgid counters summed over CPUs, for every traced tgid, with the counts of its exited forked children.
    /// Also learns of new forked children and retires those that exited.
    pub fn read(&mut self) -> Result<HashMap<u32, Traffic>, ProbeError> {
        self.reads += 1;
        self.collect_forks()?;
        self.reap_children()?;
        let Probes { traced, children, stats, slots, claimed, reads, folded, .. } = self;
        let mut out = HashMap::with_capacity(traced.len() + children.len());
        for &pid in traced.iter().chain(children.iter()) {
            let mut c = counters_in(stats, slots, claimed, *reads, pid, false)?;
            if let Some(f) = folded.get(&pid) {
                counters::add(&mut c, f);
            }
            out.insert(pid, counters::traffic(&c));
        }
        Ok(out)
    }

    /// The kernel's counters of `pid` now, its `STATS` entry read afresh (see [`counters_in`]).
    fn counters_of(&mut self, pid: u32) -> Result<Counters, ProbeError> {
        counters_in(&self.stats, &self.slots, &mut self.claimed, self.reads, pid, true)
    }

    /// Gives `pid` its counter slot when no other traced tgid holds it: the slot is written, zeroed and naming
    /// `pid`, on every CPU, and the kernel counts there from then on (an array lookup instead of a hash lookup).
    fn claim(&mut self, pid: u32) -> Result<(), ProbeError> {
        let i = slot_of(pid);
        if self.claimed.contains_key(&i) {
            return Ok(());
        }
        let held = Slot { tgid: pid, ..Slot::FREE };
        let values = PerCpuValues::try_from(vec![held; self.nr_cpus]).map_err(ProbeError::Cpus)?;
        self.slots.set(i, values, 0).map_err(map_err(stats::SLOTS_MAP))?;
        self.claimed.insert(i, Claim { pid, at: self.reads, hash: Counters::ZERO });
        Ok(())
    }

    /// Frees `pid`'s slot, if it holds one (its counters were read by the caller).
    fn release(&mut self, pid: u32) -> Result<(), ProbeError> {
        let i = slot_of(pid);
        if self.claimed.get(&i).is_none_or(|c| c.pid != pid) {
            return Ok(());
        }
        let values = PerCpuValues::try_from(vec![Slot::FREE; self.nr_cpus]).map_err(ProbeError::Cpus)?;
        self.slots.set(i, values, 0).map_err(map_err(stats::SLOTS_MAP))?;
        self.claimed.remove(&i);
        Ok(())
    }

    /// The tgids currently traced.
    pub fn traced(&self) -> impl Iterator<Item = u32> + '_ {
        self.traced.iter().copied()
    }

    /// How many sockets the kernel programs track now (`SOCKS` and `SOCK_BY_SK` entries): a closed socket leaves.
    pub fn tracked_sockets(&self) -> usize {
        self.socks.keys().filter(Result::is_ok).count() + self.socks_by_sk.keys().filter(Result::is_ok).count()
    }

    /// Kernel ids of the loaded programs (as `bpftool prog list` shows them).
    pub fn program_ids(&self) -> Vec<u32> {
        self.ebpf.programs().filter_map(|(_, p)| p.info().ok()).map(|i| i.id()).collect()
    }

    /// Per program: (name, time spent in it, times it ran). The kernel only counts while BPF statistics are
    /// enabled (`aya::sys::enable_stats` or `kernel.bpf_stats_enabled=1`).
    pub fn run_stats(&self) -> Vec<(String, std::time::Duration, u64)> {
        self.ebpf
            .programs()
            .filter_map(|(name, p)| p.info().ok().map(|i| (name.to_string(), i.run_time(), i.run_count())))
            .collect()
    }

    /// Drops the tracked sockets of tgids that left the group.
    fn forget_sockets(&mut self, gone: &BTreeSet<u32>) -> Result<(), ProbeError> {
        let stale: Vec<SockKey> = self.socks.keys().filter_map(Result::ok).filter(|k| gone.contains(&k.tgid)).collect();
        for k in stale {
            remove_present(&mut self.socks, &k).map_err(map_err(socks::MAP))?;
        }
        let stale: Vec<SkKey> = self
            .socks_by_sk
            .iter()
            .filter_map(Result::ok)
            .filter(|(_, s)| gone.contains(&s.owner))
            .map(|(k, _)| k)
            .collect();
        for k in stale {
            remove_present(&mut self.socks_by_sk, &k).map_err(map_err(socks::BY_SK_MAP))?;
        }
        Ok(())
    }
}

/// Loads each program and attaches it to its `syscalls/*` tracepoints.
fn attach_tracepoints(ebpf: &mut Ebpf, list: &[(&'static str, &[&'static str])]) -> Result<(), ProbeError> {
    for &(name, tracepoints) in list {
        for &tp in tracepoints {
            attach_one(ebpf, name, "syscalls", tp)?;
        }
    }
    Ok(())
}

/// Loads the fork-following programs and attaches them ([`attach::FORK`]).
fn attach_forks(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    for &(name, category, tp) in attach::FORK {
        attach_one(ebpf, name, category, tp)?;
    }
    Ok(())
}

/// Loads `name` (once) and attaches it to the tracepoint `category/tp`.
fn attach_one(ebpf: &mut Ebpf, name: &'static str, category: &'static str, tp: &'static str) -> Result<(), ProbeError> {
    let prog: &mut TracePoint = ebpf
        .program_mut(name)
        .ok_or(ProbeError::MissingProgram(name))?
        .try_into()
        .map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
    if prog.fd().is_err() {
        prog.load().map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
    }
    prog.attach(category, tp).map_err(|e| ProbeError::Attach {
        name,
        category,
        tracepoint: tp,
        source: Box::new(e),
    })?;
    Ok(())
}

/// Attaches one set of hooks, and says where the syscall sets hooked `close`. When one of its programs fails to
/// load or attach, every loaded program is unloaded again (with its links), so that a fallback set starts clean:
/// sets are tried before anything else is loaded (the fork-following program comes after), so the loaded programs
/// are exactly this set's.
fn attach_set(ebpf: &mut Ebpf, hooks: Hooks, close: Option<CloseHook>) -> Result<Option<CloseHook>, ProbeError> {
    let r = match hooks {
        Hooks::Sock => attach_raw(ebpf, attach::SOCK).map(|()| None),
        Hooks::RawSysExit => {
            attach_close(ebpf, close, true).and_then(|c| attach_raw(ebpf, attach::RAW_EXIT).map(|()| Some(c)))
        }
        Hooks::Tracepoints => attach_close(ebpf, close, false)
            .and_then(|c| attach_tracepoints(ebpf, attach::TRACEPOINTS).map(|()| Some(c))),
    };
    if r.is_err() {
        unload_all(ebpf);
    }
    r
}

/// Hooks `close` at entry, first of a syscall set, so that no socket is tracked before the program that forgets
/// it runs: on the `close` tracepoint, or on the raw `sys_enter` when `forced` says so or, with `raw_fallback`,
/// when `perf_event_open` refuses the tracepoint (the raw one attaches with CAP_BPF and CAP_PERFMON alone).
fn attach_close(ebpf: &mut Ebpf, forced: Option<CloseHook>, raw_fallback: bool) -> Result<CloseHook, ProbeError> {
    if forced != Some(CloseHook::RawSysEnter) {
        match attach_tracepoints(ebpf, attach::CLOSE) {
            Ok(()) => return Ok(CloseHook::Tracepoint),
            Err(e) if forced.is_none() && raw_fallback && e.perf_refused() => {
                tracing::info!("`close` goes on the raw sys_enter tracepoint (every syscall entry): {e}");
                unload(ebpf, attach::CLOSE.iter().map(|&(name, _)| name));
            }
            Err(e) => return Err(e),
        }
    }
    attach_raw(ebpf, attach::RAW_CLOSE)?;
    Ok(CloseHook::RawSysEnter)
}

/// Unloads every loaded program (and detaches its links).
fn unload_all(ebpf: &mut Ebpf) {
    let names: Vec<String> = ebpf.programs().map(|(name, _)| name.to_string()).collect();
    unload(ebpf, names.iter().map(String::as_str));
}

/// Unloads the named programs that are loaded (and detaches their links).
fn unload<'a>(ebpf: &mut Ebpf, names: impl IntoIterator<Item = &'a str>) {
    for name in names {
        let Some(prog) = ebpf.program_mut(name) else { continue };
        if prog.fd().is_err() {
            continue;
        }
        let r = match prog {
            aya::programs::Program::RawTracePoint(p) => p.unload(),
            aya::programs::Program::TracePoint(p) => p.unload(),
            _ => Ok(()),
        };
        if let Err(e) = r {
            tracing::warn!("unloading eBPF program {name}: {e}");
        }
    }
}

/// Loads each program and attaches it to its raw tracepoint.
fn attach_raw(ebpf: &mut Ebpf, list: &[(&'static str, &'static str)]) -> Result<(), ProbeError> {
    for &(name, tracepoint) in list {
        let prog: &mut RawTracePoint = ebpf
            .program_mut(name)
            .ok_or(ProbeError::MissingProgram(name))?
            .try_into()
            .map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
        prog.load().map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
        prog.attach(tracepoint).map_err(|e| ProbeError::AttachRaw { name, tracepoint, source: Box::new(e) })?;
    }
    Ok(())
}

/// How long a pid traced ahead of the sync ([`Probes::trace_now`]) stays traced while the group's pid list does not
/// show it (a process placed in the group before it execs shows up at once; this only covers slow cases).
const PIN_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// `BPF_NOEXIST` (include/uapi/linux/bpf.h): an update that fails with EEXIST instead of replacing.
const BPF_NOEXIST: u64 = 1;

/// The kernel's `pid_max` (tgids are below it), or the 64-bit default when it cannot be read.
fn pid_max() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(4_194_304)
}

/// Removes a key, treating "already gone" as done.
fn remove_present<K: aya::Pod, V: aya::Pod>(m: &mut BpfHashMap<MapData, K, V>, k: &K) -> Result<(), MapError> {
    match m.remove(k) {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

fn remove_present_percpu(m: &mut PerCpuHashMap<MapData, u32, Counters>, k: &u32) -> Result<(), MapError> {
    match m.remove(k) {
        Err(MapError::KeyNotFound) => Ok(()),
        Err(MapError::SyscallError(e)) if e.io_error.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        r => r,
    }
}

/// The kernel's counters of `pid`, summed over CPUs: its `STATS` entry plus its slot when it holds one. The
/// `STATS` entry of a slot holder is read only when [`Claim::hash_due`] says at read number `reads` (always when
/// `fresh`): one map lookup a sample instead of two.
fn counters_in(
    stats_map: &PerCpuHashMap<MapData, u32, Counters>,
    slots: &PerCpuArray<MapData, Slot>,
    claimed: &mut HashMap<u32, Claim>,
    reads: u64,
    pid: u32,
    fresh: bool,
) -> Result<Counters, ProbeError> {
    let hash = || match stats_map.get(&pid, 0) {
        Ok(per_cpu) => Ok(counters::sum(&per_cpu)),
        Err(MapError::KeyNotFound) => Ok(Counters::ZERO),
        Err(e) => Err(map_err(stats::MAP)(e)),
    };
    let i = slot_of(pid);
    let Some(claim) = claimed.get_mut(&i).filter(|c| c.pid == pid) else { return hash() };
    if fresh || claim.hash_due(reads) {
        claim.hash = hash()?;
    }
    let mut c = claim.hash;
    let per_cpu = slots.get(&i, 0).map_err(map_err(stats::SLOTS_MAP))?;
    for slot in per_cpu.iter().filter(|s| s.tgid == pid) {
        counters::add(&mut c, &slot.counters);
    }
    Ok(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_holders_hash_entry_is_read_right_after_the_claim_then_once_a_second() {
        let c = Claim { pid: 7, at: 5, hash: Counters::ZERO };
        let due: Vec<u64> = (5..=31).filter(|&r| c.hash_due(r)).collect();
        assert_eq!(due, [5, 6, 7, 10, 20, 30]);
    }
}
