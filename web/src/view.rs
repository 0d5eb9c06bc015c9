//! The plain view types the dashboard draws from. The agent fills them (from its history and its latest sample);
//! this crate never sees the agent's own types.

use serde::{Deserialize, Serialize};

/// The time ranges the home page offers (`?range=5m|1h|24h|7d`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum Range {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[default]
    #[serde(rename = "1h")]
    Hour,
    #[serde(rename = "24h")]
    Day,
    #[serde(rename = "7d")]
    Week,
}

impl Range {
    /// Every range, shortest first.
    pub const ALL: [Range; 4] = [Range::FiveMinutes, Range::Hour, Range::Day, Range::Week];

    /// The query-string name: `5m`, `1h`, `24h`, `7d`.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::FiveMinutes => "5m",
            Range::Hour => "1h",
            Range::Day => "24h",
            Range::Week => "7d",
        }
    }

    /// Parses a query-string name; None for anything else.
    pub fn parse(s: &str) -> Option<Range> {
        Range::ALL.into_iter().find(|r| r.as_str() == s)
    }

    /// The smallest range that holds `held` seconds of data (the week for more).
    pub fn fitting(held: u64) -> Range {
        Range::ALL.into_iter().find(|r| r.seconds() >= held).unwrap_or(Range::Week)
    }

    /// The span in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Range::FiveMinutes => 300,
            Range::Hour => 3600,
            Range::Day => 86_400,
            Range::Week => 7 * 86_400,
        }
    }
}

/// The group right now.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GroupNow {
    pub cgroup: String,
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    /// `cgroup`, `host` or `config`.
    pub limit_source: String,
    pub ratio: f64,
    /// `normal`, `refusing` or `aborting`.
    pub state: String,
    pub refuse_at: f64,
    pub abort_at: f64,
    pub shadow: bool,
    /// Whether request counting runs, and why not.
    pub probes: String,
    /// Processes of the group the kernel's OOM killer has killed (None: the kernel does not count them).
    #[serde(default)]
    pub oom_kills: Option<u64>,
    /// The kernel wake-up sources armed besides the sampler's timer (`thresholds`, `events`, `pressure`).
    #[serde(default)]
    pub wakeups: Vec<String>,
    /// Each configured wake-up source that is off, with why (e.g. `events: cgroup v2 only`).
    #[serde(default)]
    pub wakeups_off: Vec<String>,
    /// The interval until the next timed sample, in milliseconds (0: not known).
    #[serde(default)]
    pub next_sample_ms: u64,
    /// The memory brake, when it is configured.
    #[serde(default)]
    pub brake: Option<BrakeNow>,
}

/// The memory brake: `memory.high` set at a fraction of the limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BrakeNow {
    /// The fraction of the limit it is set at.
    pub at: f64,
    /// The `memory.high` set, in bytes (None while it could not be set).
    pub high_bytes: Option<u64>,
    /// Why it is not set, when it is not.
    pub error: Option<String>,
}

/// One process in the status strip.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// The series name (the same as in the charts).
    pub name: String,
    /// `master`, `worker` or `process`.
    pub role: String,
    /// None while the process is down.
    pub pid: Option<u32>,
    /// What it does now: `serve`, `refuse`, `abort`, `down`…
    pub state: String,
    pub rss_bytes: u64,
    pub requests_total: u64,
    pub restarts: u64,
    /// When the launcher tries again (e.g. `in 4 s`), for a process that is down.
    pub next_retry: Option<String>,
}

/// A process restarted (or appeared again under its name) at `t_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Marker {
    pub t_ms: u64,
    pub name: String,
}

/// One process's series. Every vector has one value per bucket; `NaN` where there is no data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSeries {
    pub name: String,
    pub role: String,
    /// Peak resident bytes in the bucket.
    pub rss_bytes: Vec<f64>,
    pub requests_per_s: Vec<f64>,
    /// Peak requests in flight in the bucket.
    pub inflight: Vec<f64>,
    pub latency_p50_ms: Vec<f64>,
    pub latency_p99_ms: Vec<f64>,
    pub errors_5xx_per_s: Vec<f64>,
}

/// Time series over a range, already downsampled: bucket `i` covers `[start_ms + i*step_ms, start_ms + (i+1)*step_ms)`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub start_ms: u64,
    pub step_ms: u64,
    /// Peak group usage per bucket (`NaN`: no sample, e.g. the agent was down).
    pub usage_bytes: Vec<f64>,
    pub limit_bytes: Vec<f64>,
    /// The worst state in the bucket: 0 normal, 1 refusing, 2 aborting.
    pub state: Vec<u8>,
    /// Requests the front door refused with 503, per second.
    pub shed_per_s: Vec<f64>,
    pub procs: Vec<ProcSeries>,
    pub restarts: Vec<Marker>,
}

impl Series {
    /// How many buckets the series has.
    pub fn len(&self) -> usize {
        self.usage_bytes.len()
    }

    /// True with no buckets.
    pub fn is_empty(&self) -> bool {
        self.usage_bytes.is_empty()
    }
}

/// A node of the cluster the agent is in (this one too), as the home page lists it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Peer {
    pub node: String,
    /// `alive`, `suspect`, `dead` or `left`.
    pub state: String,
    /// Its home page.
    pub url: String,
    /// Its group's memory ratio and policy state, as it last told them (None: not heard yet).
    pub memory_ratio: Option<f64>,
    pub policy: Option<String>,
    /// This node.
    pub this: bool,
}

/// Everything the home page shows.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dashboard {
    pub now_ms: u64,
    pub range: Range,
    pub group: GroupNow,
    pub processes: Vec<ProcessStatus>,
    pub series: Series,
    /// Things the operator should know (e.g. "history is not persisted: database locked").
    pub notes: Vec<String>,
    /// In a cluster: every node, this one included (empty: not in a cluster, and the section is left out).
    #[serde(default)]
    pub peers: Vec<Peer>,
}

/// What the home page reads: the agent implements it over its history and latest sample.
pub trait Source: Send + Sync + 'static {
    /// The dashboard over `range`, downsampled to at most `buckets` buckets.
    fn dashboard(&self, range: Range, buckets: usize) -> Dashboard;

    /// How many seconds back the data goes (the page opens on the smallest range that holds it); None (the
    /// default) opens on the hour.
    fn held_seconds(&self) -> Option<u64> {
        None
    }

    /// A number that grows whenever what [`Source::dashboard`] returns may change (the agent: with each sample it
    /// publishes). A render made at revision `r` answers every request that arrives while the revision is still
    /// `r`; None (the default) renders for each request.
    fn revision(&self) -> Option<u64> {
        None
    }
}
