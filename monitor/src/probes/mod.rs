//! eBPF request counting (issue 3): loads the embedded object, keeps the tgid filter equal to the group,
//! reads per-process counters.
//!
//! Kernel side: `monitor-ebpf` (the raw `sys_exit` tracepoint, or per-syscall tracepoints as the fallback); map
//! types: `monitor-common`. See docs/probes.md.

mod attach;
mod counters;
mod object;

pub use attach::Hooks;
pub use counters::percentile;

use crate::snapshot::Traffic;
use aya::maps::{Array, HashMap as BpfHashMap, MapData, MapError, PerCpuHashMap, PerCpuValues};
use aya::programs::{ProgramError, RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfError, EbpfLoader};
use monitor_common::socks::{SockKey, SockState};
use monitor_common::stats::Counters;
use monitor_common::{filter, socks, stats};
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
    #[error("attaching `{name}` to tracepoint syscalls/{tracepoint}: {source}")]
    Attach { name: &'static str, tracepoint: &'static str, source: Box<ProgramError> },
    #[error("attaching `{name}` to raw tracepoint {tracepoint}: {source}")]
    AttachRaw { name: &'static str, tracepoint: &'static str, source: Box<ProgramError> },
    #[error("eBPF map `{name}`: {source}")]
    Map { name: &'static str, source: Box<MapError> },
    #[error("mounting tracefs at /sys/kernel/tracing: {0}")]
    Tracefs(#[source] std::io::Error),
    #[error("counting possible CPUs: {0}")]
    Cpus(#[source] std::io::Error),
}

fn map_err(name: &'static str) -> impl Fn(MapError) -> ProbeError {
    move |e| ProbeError::Map { name, source: Box::new(e) }
}

/// The loaded and attached probes. Dropping it detaches and unloads every program.
pub struct Probes {
    /// Bitmap of traced tgids: bit `tgid % 64` of word `tgid / 64`.
    filter: Array<MapData, u64>,
    stats: PerCpuHashMap<MapData, u32, Counters>,
    socks: BpfHashMap<MapData, SockKey, SockState>,
    /// The tgids in `filter` (we are its only writer).
    traced: BTreeSet<u32>,
    nr_cpus: usize,
    hooks: Hooks,
    /// Holds the programs and their links; declared last so the maps above are closed first.
    ebpf: Ebpf,
}

impl Probes {
    /// Loads the embedded object and attaches the programs: the raw `sys_exit` set where it loads
    /// ([`Hooks::preferred`]), otherwise the per-syscall tracepoints.
    pub fn load() -> Result<Probes, ProbeError> {
        Probes::attach(Hooks::preferred(), true)
    }

    /// Like [`Probes::load`] with the given hooks and no fallback (benchmarks and tests compare the two sets).
    pub fn load_with(hooks: Hooks) -> Result<Probes, ProbeError> {
        Probes::attach(hooks, false)
    }

    /// Which hooks the programs are attached to.
    pub fn hooks(&self) -> Hooks {
        self.hooks
    }

    fn attach(want: Hooks, fallback: bool) -> Result<Probes, ProbeError> {
        if object::OBJECT.is_empty() {
            return Err(ProbeError::NotBuilt(object::SKIPPED));
        }
        let nr_cpus = aya::util::nr_cpus().map_err(|(_, e)| ProbeError::Cpus(e))?;
        let words = filter::words(pid_max());
        let mut ebpf = EbpfLoader::new()
            .map_max_entries(filter::MAP, words)
            .load(object::OBJECT)
            .map_err(|e| ProbeError::Load(Box::new(e)))?;
        attach::ensure_tracefs()?;
        attach_tracepoints(&mut ebpf, attach::CLOSE)?;
        let hooks = match want {
            Hooks::RawSysExit => match attach_raw(&mut ebpf) {
                Ok(()) => Hooks::RawSysExit,
                Err(_) if fallback => {
                    attach_tracepoints(&mut ebpf, attach::TRACEPOINTS)?;
                    Hooks::Tracepoints
                }
                Err(e) => return Err(e),
            },
            Hooks::Tracepoints => {
                attach_tracepoints(&mut ebpf, attach::TRACEPOINTS)?;
                Hooks::Tracepoints
            }
        };
        let mut take = |name: &'static str| ebpf.take_map(name).ok_or(ProbeError::MissingMap(name));
        let filter = Array::try_from(take(filter::MAP)?).map_err(map_err(filter::MAP))?;
        let stats = PerCpuHashMap::try_from(take(stats::MAP)?).map_err(map_err(stats::MAP))?;
        let socks = BpfHashMap::try_from(take(socks::MAP)?).map_err(map_err(socks::MAP))?;
        Ok(Probes { filter, stats, socks, traced: BTreeSet::new(), nr_cpus, hooks, ebpf })
    }

    /// Makes the kernel's tgid filter equal to `pids`. New tgids start from zero counters; the counters and
    /// tracked sockets of tgids that left are dropped.
    pub fn sync_pids(&mut self, pids: &[u32]) -> Result<(), ProbeError> {
        let want: BTreeSet<u32> = pids.iter().copied().collect();
        let added: Vec<u32> = want.difference(&self.traced).copied().collect();
        let removed: BTreeSet<u32> = self.traced.difference(&want).copied().collect();
        if !removed.is_empty() {
            // Filter first, so the kernel stops counting before the counters go.
            let kept: BTreeSet<u32> = self.traced.difference(&removed).copied().collect();
            self.write_filter(&kept, &removed)?;
            self.traced = kept;
            for pid in &removed {
                remove_present_percpu(&mut self.stats, pid).map_err(map_err(stats::MAP))?;
            }
            self.forget_sockets(&removed)?;
        }
        if !added.is_empty() {
            // Counters first, so nothing the filter lets through is lost.
            for &pid in &added {
                let zeros = PerCpuValues::try_from(vec![Counters::ZERO; self.nr_cpus]).map_err(ProbeError::Cpus)?;
                self.stats.insert(pid, zeros, 0).map_err(map_err(stats::MAP))?;
            }
            self.write_filter(&want, &added)?;
            self.traced = want;
        }
        Ok(())
    }

    /// Rewrites the bitmap words holding `changed` so that exactly the tgids of `set` are on in them.
    fn write_filter<'a>(
        &mut self,
        set: &BTreeSet<u32>,
        changed: impl IntoIterator<Item = &'a u32>,
    ) -> Result<(), ProbeError> {
        let words: BTreeSet<u32> = changed.into_iter().map(|&p| filter::slot(p).0).collect();
        for w in words {
            let value = set
                .range(w * 64..w.saturating_mul(64).saturating_add(64))
                .fold(0u64, |acc, &p| acc | filter::slot(p).1);
            self.filter.set(w, value, 0).map_err(map_err(filter::MAP))?;
        }
        Ok(())
    }

    /// Per-tgid counters summed over CPUs, for every traced tgid.
    pub fn read(&mut self) -> Result<HashMap<u32, Traffic>, ProbeError> {
        let mut out = HashMap::with_capacity(self.traced.len());
        for &pid in &self.traced {
            match self.stats.get(&pid, 0) {
                Ok(per_cpu) => {
                    out.insert(pid, counters::traffic(&counters::sum(&per_cpu)));
                }
                Err(MapError::KeyNotFound) => {}
                Err(e) => return Err(map_err(stats::MAP)(e)),
            }
        }
        Ok(out)
    }

    /// The tgids currently traced.
    pub fn traced(&self) -> impl Iterator<Item = u32> + '_ {
        self.traced.iter().copied()
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
        Ok(())
    }
}

/// Loads each program and attaches it to its `syscalls/*` tracepoints.
fn attach_tracepoints(ebpf: &mut Ebpf, list: &[(&'static str, &[&'static str])]) -> Result<(), ProbeError> {
    for &(name, tracepoints) in list {
        let prog: &mut TracePoint = ebpf
            .program_mut(name)
            .ok_or(ProbeError::MissingProgram(name))?
            .try_into()
            .map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
        prog.load().map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
        for &tp in tracepoints {
            prog.attach("syscalls", tp).map_err(|e| ProbeError::Attach {
                name,
                tracepoint: tp,
                source: Box::new(e),
            })?;
        }
    }
    Ok(())
}

/// Loads the raw `sys_exit` program and attaches it; unloads it again when attaching fails.
fn attach_raw(ebpf: &mut Ebpf) -> Result<(), ProbeError> {
    let (name, tracepoint) = attach::RAW_EXIT;
    let prog: &mut RawTracePoint = ebpf
        .program_mut(name)
        .ok_or(ProbeError::MissingProgram(name))?
        .try_into()
        .map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
    prog.load().map_err(|e| ProbeError::Program { name, source: Box::new(e) })?;
    if let Err(e) = prog.attach(tracepoint) {
        let _ = prog.unload();
        return Err(ProbeError::AttachRaw { name, tracepoint, source: Box::new(e) });
    }
    Ok(())
}

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
