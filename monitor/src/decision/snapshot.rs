//! The data the sampler publishes each tick: the group's memory and every process's RSS and traffic.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which cgroup hierarchy the group lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CgroupVersion {
    V1,
    V2,
}

impl CgroupVersion {
    /// `v1` or `v2`, as the status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            CgroupVersion::V1 => "v1",
            CgroupVersion::V2 => "v2",
        }
    }
}

impl std::fmt::Display for CgroupVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Where the group's limit came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LimitSource {
    /// `memory.max` (v2, smallest up the tree) or `hierarchical_memory_limit` (v1).
    Cgroup,
    /// No limit anywhere: the host's MemTotal.
    Host,
    /// `policy.limit_bytes` from the config.
    Config,
}

impl LimitSource {
    /// `cgroup`, `host` or `config`, as the status shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitSource::Cgroup => "cgroup",
            LimitSource::Host => "host",
            LimitSource::Config => "config",
        }
    }
}

impl std::fmt::Display for LimitSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// The group as a whole.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSample {
    pub cgroup: PathBuf,
    pub version: CgroupVersion,
    /// What no reclaim frees without swap: v2 `memory.stat` `anon + shmem` and the kernel memory reclaim does not
    /// free; v1 `total_rss + total_shmem` and `memory.kmem.usage_in_bytes`. The shmem part (tmpfs files, shared
    /// memory) and the kernel part (page tables, kernel stacks, slab) are charged to the limit like anon, so the
    /// kernel's OOM killer counts them: shmem is usually near 0, the kernel part grows with the processes (64 MB
    /// for 1,000 sleeping ones on v1).
    pub usage_bytes: u64,
    /// The shmem part of `usage_bytes`.
    pub shmem_bytes: u64,
    /// The kernel part of `usage_bytes`.
    pub kernel_bytes: u64,
    /// cgroup v2 `memory.oom.group`: true when a kernel OOM kill takes the whole group (None on v1 or unknown).
    pub oom_group: Option<bool>,
    pub limit_bytes: u64,
    pub limit_source: LimitSource,
    /// How many processes of the group the kernel's OOM killer has killed since the group was created (v2
    /// `memory.events` `oom_kill`, v1 `memory.oom_control` `oom_kill`); None where the kernel does not count them.
    pub oom_kills: Option<u64>,
    /// How many processes the group's `cgroup.procs` listed (with the cgroups below it) for this sample.
    pub processes_listed: usize,
    /// How many of them were sampled: fewer only when a process exited during the sample or could not be read
    /// (said in the log).
    pub processes_sampled: usize,
    /// What the group holds beyond the sampled processes ([`unattributed`]): shmem no process maps, and the
    /// private memory of listed processes that could not be sampled.
    pub unattributed_bytes: u64,
    /// The time the group's tasks stalled on memory (v2 `memory.pressure`); None where the kernel does not say
    /// (cgroup v1, a kernel without PSI).
    pub pressure: Option<Pressure>,
}

/// Memory pressure stall totals (PSI), in microseconds since the group was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Pressure {
    /// Time at least one task stalled on memory.
    pub some_us: u64,
    /// Time every task stalled on memory at once.
    pub full_us: u64,
}

impl GroupSample {
    /// usage / limit; 0 when the limit is 0 (never divides by zero).
    pub fn ratio(&self) -> f64 {
        if self.limit_bytes == 0 {
            0.0
        } else {
            self.usage_bytes as f64 / self.limit_bytes as f64
        }
    }

    /// Listed processes that could not be sampled.
    pub fn processes_unsampled(&self) -> usize {
        self.processes_listed.saturating_sub(self.processes_sampled)
    }
}

/// What the group holds beyond `processes` (its usage, less its `kernel_bytes` part, less their private memory, 0
/// when they hold more): shmem that no process maps, and the anon of listed processes that were not sampled. Pages a
/// forked child still shares copy-on-write with its parent count in both processes' anon and once in the group, so
/// the figure is a lower bound.
pub(crate) fn unattributed(usage_bytes: u64, kernel_bytes: u64, processes: &[ProcSample]) -> u64 {
    let sampled = processes.iter().fold(0u64, |sum, p| sum.saturating_add(p.anon_bytes));
    usage_bytes.saturating_sub(kernel_bytes).saturating_sub(sampled)
}

/// Request counters of one process, from the eBPF probes (all zero when probes are off).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Traffic {
    pub accepts_total: u64,
    pub requests_total: u64,
    /// Responses by status class: index 0 = 1xx … 4 = 5xx.
    pub responses_by_class: [u64; 5],
    pub responses_total: u64,
    pub inflight: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    /// Latency percentiles in microseconds (from the log2 histogram), None before the first response.
    pub latency_p50_us: Option<u64>,
    pub latency_p99_us: Option<u64>,
    /// The log2 latency histogram in microseconds: bucket i counts latencies in [2^i, 2^(i+1)) µs.
    pub latency_hist_us: Vec<u64>,
}

/// One process of the group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcSample {
    pub pid: u32,
    /// What every consumer names the process by: under `monitor run` the configured `[[process]] name` of a process
    /// the launcher started (set by the sampler, for the process's life), else its `comm`.
    pub name: String,
    /// `/proc/<pid>/comm`: the program's own name, kept beside a configured `name`.
    pub comm: String,
    /// Start time in clock ticks since boot (`/proc/<pid>/stat` field 22): with the pid, identifies the process.
    pub start_ticks: u64,
    /// Parent pid (from `/proc/<pid>/stat`): tells a master from its workers.
    pub ppid: u32,
    /// Resident set (statm resident × page size).
    pub rss_bytes: u64,
    /// `RssAnon` from `/proc/<pid>/status`.
    pub anon_bytes: u64,
    pub traffic: Traffic,
}

#[cfg(test)]
impl ProcSample {
    /// For unit tests: process `pid` named `p<pid>`, started at tick `pid * 10`, a child of pid 1, one byte resident
    /// and anonymous, no traffic.
    pub(crate) fn test(pid: u32) -> ProcSample {
        ProcSample {
            pid,
            name: format!("p{pid}"),
            comm: format!("p{pid}"),
            start_ticks: u64::from(pid) * 10,
            ppid: 1,
            rss_bytes: 1,
            anon_bytes: 1,
            traffic: Traffic::default(),
        }
    }
}

/// One request the front door had in flight on a process when the guard acted on it (`monitor run` only): what the
/// decision log, the abort and kill alerts, the status and the home page name as the victim's work. Nothing of its
/// body is kept.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub method: String,
    /// The path, without the query unless `[proxy] in_flight_query` is set; at most [`InFlight::PATH_MAX`] bytes.
    pub path: String,
    /// The request's cache id (`[proxy] cache_id_header`), as the process got it.
    pub cache_id: Option<String>,
    /// Since the request went to the process, in milliseconds.
    pub age_ms: u64,
    /// The request body's length as its head declares it (`Content-Length`; 0 for a chunked body).
    pub bytes_in: u64,
    /// The response body's bytes passed to the client so far.
    pub bytes_out: u64,
}

impl InFlight {
    /// The longest path kept: a client's path is its own to choose, the log and the alerts are not.
    pub const PATH_MAX: usize = 256;
    /// The most requests kept per action, the oldest first: the rest are only counted.
    pub const LIST_MAX: usize = 16;

    /// `GET /heavy 1.2 s (in 0 B, out 10240 B, cache w1.abc)`: one request in a line.
    pub fn line(&self) -> String {
        let cache = self.cache_id.as_deref().map(|c| format!(", cache {c}")).unwrap_or_default();
        format!(
            "{} {} {:.1} s (in {} B, out {} B{cache})",
            self.method,
            self.path,
            self.age_ms as f64 / 1000.0,
            self.bytes_in,
            self.bytes_out
        )
    }
}

/// A process's requests in flight when the guard acted on it: at most [`InFlight::LIST_MAX`], the oldest first,
/// and how many there were in all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct VictimRequests {
    pub pid: u32,
    /// When they were read, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    pub total: usize,
    pub requests: Vec<InFlight>,
}

impl VictimRequests {
    /// `requests`, sorted oldest first and cut to [`InFlight::LIST_MAX`].
    pub fn new(pid: u32, unix_ms: u64, mut requests: Vec<InFlight>) -> VictimRequests {
        let total = requests.len();
        requests.sort_by_key(|r| std::cmp::Reverse(r.age_ms));
        requests.truncate(InFlight::LIST_MAX);
        VictimRequests { pid, unix_ms, total, requests }
    }

    /// One line per request, and one for those left out: what an alert's annotation and the log carry.
    pub fn lines(&self) -> String {
        let mut out: Vec<String> = self.requests.iter().map(InFlight::line).collect();
        if self.total > self.requests.len() {
            out.push(format!("and {} more", self.total - self.requests.len()));
        }
        out.join("\n")
    }

    /// In words: `2 requests in flight, the oldest GET /heavy for 1.2 s`, or `no request in flight`.
    pub fn summary(&self) -> String {
        match self.requests.first() {
            None => "no request in flight".into(),
            Some(r) => format!(
                "{} request{} in flight, the oldest {} {} for {:.1} s",
                self.total,
                if self.total == 1 { "" } else { "s" },
                r.method,
                r.path,
                r.age_ms as f64 / 1000.0
            ),
        }
    }
}

/// One sample of the whole group.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Snapshot {
    /// Sample number since the agent started.
    pub seq: u64,
    /// Wall clock, milliseconds since the Unix epoch.
    pub unix_ms: u64,
    /// Monotonic milliseconds since the agent started (what the policy's timers use).
    pub mono_ms: u64,
    /// Wall clock (Unix ms) when the last read of the processes' request counters began: they are read once a
    /// second, so they may be that much older than `unix_ms`, and they hold every request a process had received
    /// by this time. 0 before the first read.
    pub counted_unix_ms: u64,
    pub group: GroupSample,
    /// Shared by the samples between two reads of the processes ([`crate::sampler`]).
    pub processes: std::sync::Arc<Vec<ProcSample>>,
    /// The agent's own pid. With `cgroup = "auto"` the agent is a member of the group it guards: it is listed,
    /// but it is never the process told to abort, and the probes never trace it (its own front door's traffic
    /// is not the group's).
    pub agent_pid: u32,
    /// The pids the guard's last resort spares while another process's death would relieve the group: the masters
    /// (launched as such under `monitor run`, else inferred from the process tree) and `[[process]] protect = true`.
    pub protected: Vec<u32>,
}

/// A process's role as the status shows it: under `monitor run` the config's `Role` of a launched process, else
/// inferred from the process tree ([`infer_roles`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessRole {
    Master,
    Worker,
    /// Neither: no parent in the group and no children in it.
    Process,
}

impl ProcessRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessRole::Master => "master",
            ProcessRole::Worker => "worker",
            ProcessRole::Process => "process",
        }
    }
}

impl std::fmt::Display for ProcessRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// Roles inferred from the process tree: a process whose parent is outside the group and that has children in
/// it is the `master`; a process whose parent is in the group is a `worker`; any other is a `process`.
pub(crate) fn infer_roles(procs: &[ProcSample]) -> Vec<ProcessRole> {
    // Sets, not scans: a group of hundreds of processes is read ten times a second.
    let pids: std::collections::HashSet<u32> = procs.iter().map(|p| p.pid).collect();
    let parents: std::collections::HashSet<u32> = procs.iter().map(|p| p.ppid).collect();
    procs
        .iter()
        .map(|p| {
            if pids.contains(&p.ppid) {
                ProcessRole::Worker
            } else if parents.contains(&p.pid) {
                ProcessRole::Master
            } else {
                ProcessRole::Process
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(pid: u32, anon: u64) -> ProcSample {
        ProcSample {
            pid,
            name: format!("p{pid}"),
            comm: format!("p{pid}"),
            start_ticks: 1,
            ppid: 1,
            rss_bytes: anon,
            anon_bytes: anon,
            traffic: Traffic::default(),
        }
    }

    #[test]
    fn unattributed_is_the_usage_no_sampled_process_holds() {
        let mib = 1 << 20;
        // A 512 MiB group: the sampled hold 60 and 40 MiB; 300 MiB belong to nobody sampled.
        assert_eq!(unattributed(400 * mib, 0, &[proc(1, 60 * mib), proc(2, 40 * mib)]), 300 * mib);
        // Pages shared copy-on-write after a fork count in both processes: never below 0.
        assert_eq!(unattributed(100 * mib, 0, &[proc(1, 80 * mib), proc(2, 80 * mib)]), 0);
        assert_eq!(unattributed(7, 0, &[]), 7);
        assert_eq!(unattributed(u64::MAX, 0, &[proc(1, u64::MAX), proc(2, u64::MAX)]), 0);
        // The kernel's part of the usage is no process's.
        assert_eq!(unattributed(400 * mib, 64 * mib, &[proc(1, 60 * mib), proc(2, 40 * mib)]), 236 * mib);
    }
}
