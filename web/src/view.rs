//! The plain view types the dashboard draws from. The agent fills them (from its history and its latest sample);
//! this crate never sees the agent's own types.

use serde::{Deserialize, Serialize};

/// The time ranges the home page offers (`?range=5m|1h|24h|7d`), and the span the data held fills (`?range=12m`: 1
/// to 1440 minutes), which the page opens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Range {
    FiveMinutes,
    #[default]
    Hour,
    Day,
    Week,
    /// This many whole minutes.
    Minutes(u16),
}

impl Range {
    /// Every preset range, shortest first.
    pub const ALL: [Range; 4] = [Range::FiveMinutes, Range::Hour, Range::Day, Range::Week];

    /// The query-string name: `5m`, `1h`, `24h`, `7d`, or `<N>m`.
    pub fn name(self) -> String {
        match self {
            Range::FiveMinutes => "5m".into(),
            Range::Hour => "1h".into(),
            Range::Day => "24h".into(),
            Range::Week => "7d".into(),
            Range::Minutes(m) => format!("{m}m"),
        }
    }

    /// In words, for the page's heading: `the last 12 minutes`.
    pub fn words(self) -> String {
        match self {
            Range::FiveMinutes => "the last 5 minutes".into(),
            Range::Hour => "the last hour".into(),
            Range::Day => "the last 24 hours".into(),
            Range::Week => "the last 7 days".into(),
            Range::Minutes(1) => "the last minute".into(),
            Range::Minutes(m) if m % 60 == 0 => format!("the last {} hours", m / 60),
            Range::Minutes(m) => format!("the last {m} minutes"),
        }
    }

    /// Parses a query-string name; None for anything else.
    pub fn parse(s: &str) -> Option<Range> {
        if let Some(r) = Range::ALL.into_iter().find(|r| r.name() == s) {
            return Some(r);
        }
        let m: u16 = s.strip_suffix('m')?.parse().ok()?;
        (1..=1440).contains(&m).then_some(Range::Minutes(m))
    }

    /// What the page opens on when `held` seconds of data are kept: the whole minutes they fill (at least one), so
    /// that the data spans the charts' width, up to a day; a day when they hold more.
    pub fn fitting(held: u64) -> Range {
        if held >= 86_400 {
            return Range::Day;
        }
        Range::Minutes((held / 60).max(1) as u16)
    }

    /// The span in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Range::FiveMinutes => 300,
            Range::Hour => 3600,
            Range::Day => 86_400,
            Range::Week => 7 * 86_400,
            Range::Minutes(m) => u64::from(m) * 60,
        }
    }
}

impl From<Range> for String {
    fn from(r: Range) -> String {
        r.name()
    }
}

impl TryFrom<String> for Range {
    type Error = String;
    fn try_from(s: String) -> Result<Range, String> {
        Range::parse(&s).ok_or_else(|| format!("unknown range {s:?}"))
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
    /// Listed processes of the group that could not be sampled.
    #[serde(default)]
    pub processes_unsampled: usize,
    /// What the group holds beyond the sampled processes (a lower bound).
    #[serde(default)]
    pub unattributed_bytes: u64,
    /// While aborting: the memory over the abort line is held beyond the sampled processes, some of which could not
    /// be sampled, and the last resort holds off.
    #[serde(default)]
    pub unseen: bool,
    /// Under `monitor run`, while aborting: the victim's requests in flight when it was chosen.
    #[serde(default)]
    pub victim_requests: Option<VictimRequestsNow>,
}

/// The abort victim's requests in flight when it was chosen (paths are clients' text: escaped where drawn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct VictimRequestsNow {
    pub pid: u32,
    /// In words: how many, and the oldest.
    pub summary: String,
    /// One line per request, the oldest first (at most 16), and one for those left out.
    pub lines: Vec<String>,
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
    /// Its anonymous memory (`RssAnon`): its part of the group's usage, what the guard measures.
    #[serde(default)]
    pub anon_bytes: u64,
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

/// A kill of the guard's last resort at `t_ms`, decided (shadow) or sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillMarker {
    pub t_ms: u64,
    /// The process killed, as the guard names it (a command name is any bytes: it is escaped where drawn).
    pub name: String,
    pub pid: u32,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why the SIGKILL was not sent, when it was not.
    #[serde(default)]
    pub error: Option<String>,
}

/// A recycle of the guard at `t_ms`: a graceful restart of a process that obeyed its abort but kept the group over
/// `refuse_at`, sent, decided (shadow) or found impossible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecycleMarker {
    pub t_ms: u64,
    /// The process recycled, as the guard names it (any bytes: it is escaped where drawn).
    pub name: String,
    pub pid: u32,
    /// Why, in words.
    pub reason: String,
    /// The signal sent (`TERM`, or the agent's `recycle_signal`), when one was.
    #[serde(default)]
    pub signal: Option<String>,
    /// False in shadow mode: decided, never sent.
    pub enforced: bool,
    /// Why it was not sent, when it was not.
    #[serde(default)]
    pub error: Option<String>,
}

/// A cluster member's change of state at `t_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberMarker {
    pub t_ms: u64,
    pub node: String,
    /// It joined or came back; false: it went suspect, dead or left.
    pub up: bool,
}

/// One process's series. Every vector has one value per bucket; `NaN` where there is no data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProcSeries {
    pub name: String,
    pub role: String,
    /// Peak resident bytes in the bucket.
    pub rss_bytes: Vec<f64>,
    /// Peak anonymous bytes (`RssAnon`) in the bucket: what the memory chart stacks, as the group's usage is made
    /// of it (resident file pages, shared between processes, are not).
    #[serde(default)]
    pub anon_bytes: Vec<f64>,
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
    /// The guard's kills in the range, oldest first (none from an agent that does not keep them).
    #[serde(default)]
    pub kills: Vec<KillMarker>,
    /// The guard's recycles in the range, oldest first (none from an agent that does not keep them).
    #[serde(default)]
    pub recycles: Vec<RecycleMarker>,
    /// Under `[cluster]`: the members' changes of state in the range, oldest first (the daily report marks them;
    /// the agent's history does not keep them, so the home page has none).
    #[serde(default)]
    pub members: Vec<MemberMarker>,
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
    /// Its front door's address, where peers forward requests for its caches (None: not told).
    #[serde(default)]
    pub front: Option<String>,
    /// Its group's figures as it last answered them (this node's: from its own latest sample); None: never had.
    #[serde(default)]
    pub figures: Option<Figures>,
    /// Seconds since those figures came.
    #[serde(default)]
    pub figures_age_s: Option<f64>,
    /// Seconds since it last answered (since it was first asked, when it never did), while its latest ask failed
    /// or it is no longer asked; None while it answers.
    #[serde(default)]
    pub no_answer_s: Option<f64>,
    /// Why its latest ask failed (or why it is no longer asked).
    #[serde(default)]
    pub error: Option<String>,
}

impl Peer {
    /// Its figures are not current: its latest ask failed, or it is no longer asked.
    pub fn stale(&self) -> bool {
        self.no_answer_s.is_some() || self.error.is_some()
    }
}

/// One node's group figures, from its `/api/v1/status` (and its front door's shed count).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub usage_bytes: u64,
    pub limit_bytes: u64,
    pub ratio: f64,
    /// `normal`, `refusing` or `aborting`.
    pub policy: String,
    /// Processes in the group.
    pub processes: u64,
    /// Launched processes that are ready (None: the node launches none, `monitor agent`).
    #[serde(default)]
    pub ready: Option<u64>,
    /// Requests its processes received, counted in the kernel since they started.
    pub requests_total: u64,
    /// Requests per second between its last two answers (None: one answer only, or a process restarted between
    /// them).
    #[serde(default)]
    pub requests_per_s: Option<f64>,
    pub inflight: u64,
    /// Requests its front door refused with 503 (None: not known).
    #[serde(default)]
    pub shed_total: Option<u64>,
}

/// The fleet row: the sums of the nodes whose figures are current.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetTotal {
    /// Nodes listed.
    pub nodes: usize,
    /// Nodes whose figures are current (summed below).
    pub answering: usize,
    /// Their sums; `ratio` is the summed usage over the summed limit and `policy` the worst state among them.
    pub figures: Figures,
}

impl FleetTotal {
    /// The sums over `peers`' current figures.
    pub fn of(peers: &[Peer]) -> FleetTotal {
        let mut t = FleetTotal { nodes: peers.len(), ..FleetTotal::default() };
        let f = &mut t.figures;
        f.policy = "normal".into();
        let rank = |p: &str| ["normal", "refusing", "aborting"].iter().position(|x| *x == p).unwrap_or(0);
        for x in peers.iter().filter(|p| !p.stale()) {
            let Some(g) = &x.figures else { continue };
            t.answering += 1;
            f.usage_bytes = f.usage_bytes.saturating_add(g.usage_bytes);
            f.limit_bytes = f.limit_bytes.saturating_add(g.limit_bytes);
            if rank(&g.policy) > rank(&f.policy) {
                f.policy.clone_from(&g.policy);
            }
            f.processes += g.processes;
            f.ready = sum(f.ready, g.ready);
            f.requests_total = f.requests_total.saturating_add(g.requests_total);
            f.requests_per_s = match (f.requests_per_s, g.requests_per_s) {
                (Some(a), Some(b)) => Some(a + b),
                (a, b) => a.or(b),
            };
            f.inflight += g.inflight;
            f.shed_total = sum(f.shed_total, g.shed_total);
        }
        if f.limit_bytes > 0 {
            f.ratio = f.usage_bytes as f64 / f.limit_bytes as f64;
        }
        t
    }
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.saturating_add(b)),
        (a, b) => a.or(b),
    }
}

/// `GET /api/v1/cluster/fleet`: every node with its figures, and the fleet's sums.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Fleet {
    /// The node that answers.
    pub node: String,
    pub nodes: Vec<Peer>,
    pub total: FleetTotal,
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
    /// Label the time axis with the UTC time of day (`00:00` to `24:00`: the daily report, whose `now_ms` is the
    /// day's end) instead of the time before now.
    #[serde(default)]
    pub clock: bool,
    /// Under `monitor run`: the route keys whose requests grew their process's memory, the most first.
    #[serde(default)]
    pub routes: Vec<RouteGrowth>,
}

/// One route key's memory per request since start (see the agent's `feed::growth`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RouteGrowth {
    /// The method and the path with its ids folded (a client's text: escaped where drawn).
    pub route: String,
    pub count: u64,
    /// Requests measured alone on their process.
    pub exact: u64,
    /// The 99th percentile of the growth, in bytes: of the exact measures when there are any, else of the shared.
    pub p99_bytes: u64,
    pub p99_exact: bool,
    /// Requests in flight when their process was told to abort or was killed.
    pub at_abort: u64,
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
