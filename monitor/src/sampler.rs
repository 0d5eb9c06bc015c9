//! The sampler: reads the group (cgroup files, /proc, eBPF maps) every interval, runs the policy, and
//! publishes each Snapshot + Decision on a [`Feed`]: the latest for readers of the present (the API), and every
//! sample in order for those that must not miss a state that lasted one sample (alerts, actions, history). It
//! runs on its own thread so a sample never waits on the async runtime and its cost stays measurable.

use crate::base::pacing::{Pacer, Pacing};
use crate::config::live::Live;
use crate::config::Signal;
use crate::decision::policy::{decide, Decision, PolicyState, ProcId, State, Thresholds};
use crate::decision::snapshot::{GroupSample, LimitSource, ProcSample, Snapshot, VictimRequests};
use crate::feed::{BrakeStatus, Feed, ProbeStatus, Published, Wake, WakeSource, WakeupStatus};
use crate::guard::brake::Steering;
use crate::guard::{KillBook, KillRecord, RecycleRecord, Roster};
use crate::sources::cgroup::{CgroupError, Group, GroupReader};
use crate::sources::probes::{Probes, TraceRequest, Tracer};
use crate::sources::procs::ProcTable;
use crate::sources::wakeup::{Ready, Wakeups};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Descendant cgroups are re-listed this often (their processes belong to the group).
const RESCAN_EVERY: Duration = Duration::from_secs(1);

/// The group's processes are listed, and their request counters read, this often, or at the interval when it is
/// longer: the history's resolution (a point a second), so the page loses nothing ([`Sampler::list_due`]). Their
/// memory is read with them, and at every sample where a decision needs it ([`Sampler::memory_due`]).
const PROCS_EVERY: Duration = Duration::from_secs(1);

/// The sampler looks for a reloaded config at least this often, whatever its interval (the next sample then comes
/// at once, with the new config).
const CONFIG_POLL: Duration = Duration::from_secs(1);

/// Reads one sample of the group.
pub struct Sampler {
    reader: GroupReader,
    procs: ProcTable,
    probes: Option<Probes>,
    probe_status: ProbeStatus,
    synced_pids: Vec<u32>,
    /// This process (never traced; never the victim).
    agent_pid: u32,
    limit_override: Option<u64>,
    host_total: u64,
    start: Instant,
    seq: u64,
    pids: Vec<u32>,
    /// The processes as last read, shared by every snapshot until the next read.
    samples: Arc<Vec<ProcSample>>,
    last_rescan: Instant,
    /// The last sample failed: the group's files are opened anew before the next (a group removed and created
    /// again is a new directory; the files kept open belong to the old one).
    reopen: bool,
    /// Requests to trace a pid at once ([`Tracer`]), served between samples, and the eventfd that says one came.
    early: Option<(mpsc::Receiver<TraceRequest>, Arc<OwnedFd>)>,
    /// The kernel's wake-ups armed on the group.
    wakeups: Wakeups,
    /// The interval until the next timed sample.
    pacer: Pacer,
    /// The lines pacing and the v1 thresholds watch: refuse_at, abort_at and kill_at.
    lines: [f64; 3],
    /// The hysteresis: roles and the protected pids are read from this far below refuse_at.
    hysteresis: f64,
    /// Under `monitor run`: the launched processes (names, roles, `protect`); else roles are inferred.
    roster: Option<Roster>,
    /// Under `monitor run`: the configured name each launched process carries in the samples.
    names: crate::sources::launched::Names,
    /// Under `monitor run`: the front door's requests in flight on a process, read when the guard acts on it.
    in_flight: Option<crate::guard::InFlightOf>,
    /// The abort victim's requests in flight when it was chosen, published while the abort of it lasts.
    victim_requests: Option<Arc<VictimRequests>>,
    /// The last resort's kills, shared with the launcher, the front door and `/metrics`.
    kills: Arc<KillBook>,
    /// Where the kill's and the abort signal's reaction times are recorded.
    reactions: Option<Arc<crate::base::reaction::Reactions>>,
    /// `[actions] abort_signal`, sent from this thread ([`AbortSignal`]).
    abort: AbortSignal,
    /// The recycles the policy orders, carried out from this thread.
    recycler: crate::guard::recycle::Recycler,
    /// When the last sample was taken.
    last_sample: Instant,
    /// When the processes were last listed on the clock, not for a process that started ([`Listing`]).
    procs_read: Option<Instant>,
    /// The same, wall clock (Unix ms): [`Snapshot::counted_unix_ms`].
    counted_unix_ms: u64,
    /// The last decision was `aborting` ([`Sampler::memory_due`]).
    aborting: bool,
    /// A process was started (a [`Tracer`] request): the next sample lists the processes, then answers `acks`.
    relist: bool,
    acks: Vec<tokio::sync::oneshot::Sender<()>>,
    /// How often the processes are listed: [`PROCS_EVERY`], or `interval_ms` if longer.
    procs_every: Duration,
    /// The memory brake (`[policy] brake_at`): where it may be set, and where it is.
    brake: Steering,
}

/// Whether a sample lists the group's processes and reads their request counters ([`Sampler::list_due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Listing {
    NotDue,
    /// Its second has come: the next listing on the clock is a second after this one.
    OnTime,
    /// Only because a process started: the clock's listings keep their times, so one process start cannot
    /// postpone the counts of all the others past their second.
    Started,
}

impl Listing {
    /// `since`: the time since the last listing on the clock (None: none yet, or one is asked for at once);
    /// `every`: how often they come.
    fn of(relist: bool, since: Option<Duration>, every: Duration) -> Listing {
        // A timed sample that comes about when the listing is due counts as due though the clock reads a little
        // short of it.
        if since.is_none_or(|s| s >= every.mul_f64(0.9)) {
            Listing::OnTime
        } else if relist {
            Listing::Started
        } else {
            Listing::NotDue
        }
    }
}

/// The host's MemTotal in bytes (0 if /proc/meminfo cannot be read).
pub(crate) fn host_mem_total() -> u64 {
    use procfs::FromBufRead;
    std::fs::read("/proc/meminfo")
        .ok()
        .and_then(|b| procfs::Meminfo::from_buf_read(b.as_slice()).ok())
        .map(|m| m.mem_total)
        .unwrap_or(0)
}

/// Loads the eBPF probes if the config wants them, on the hooks it names (`auto`: the preferred set and its
/// fallbacks), or says why not in one line (the verifier's log can run to hundreds of lines: the status shows the
/// first, the debug log all). Logs the reason once.
pub fn load_probes(cfg: &crate::config::ProbesConfig) -> Result<Probes, String> {
    let probes = if cfg.enabled {
        let chosen = cfg.chosen_hooks();
        match chosen {
            Some(h) => Probes::load_with(h),
            None => Probes::load(),
        }
        .map_err(|e| {
            let full = e.to_string();
            tracing::debug!("eBPF load failed: {full}");
            let first = full.lines().next().unwrap_or_default();
            // Without the capabilities the probes need, say so (an object not built in is the reason as it is).
            let first = match e {
                crate::sources::probes::ProbeError::NotBuilt(_) => first.to_string(),
                _ => crate::sources::privileges::probes_reason(first, e.attach_errno()),
            };
            match chosen {
                Some(h) => format!("[probes] hooks = {:?}: {first}", h.name()),
                None => first.to_string(),
            }
        })
    } else {
        Err("disabled in the config ([probes] enabled = false)".to_string())
    };
    match &probes {
        Err(reason) => tracing::warn!("request counting is off: {reason}"),
        Ok(p) => {
            if let Some(why) = p.forks_off() {
                let why = crate::sources::privileges::forks_reason(why, p.forks_errno());
                tracing::warn!("forked children are not traced from their fork: {why}");
            }
        }
    }
    probes
}

impl Sampler {
    /// Opens the group. `probes` is the loaded eBPF side, or the reason it is not running.
    pub fn new(
        group: Group,
        limit_override: Option<u64>,
        probes: Result<Probes, String>,
    ) -> Result<Sampler, CgroupError> {
        Sampler::with_policy(group, limit_override, probes, &crate::config::PolicyConfig::default())
    }

    /// Opens the group, and arms the kernel wake-ups and pacing `policy` asks for.
    pub(crate) fn with_policy(
        group: Group,
        limit_override: Option<u64>,
        probes: Result<Probes, String>,
        policy: &crate::config::PolicyConfig,
    ) -> Result<Sampler, CgroupError> {
        let reader = GroupReader::open(group)?;
        let wakeups = Wakeups::arm(reader.group(), &policy.wakeups, policy.pacing);
        let brake = Steering::start(reader.group(), policy);
        let pacer = Pacer::new(Pacing {
            enabled: policy.pacing,
            max: Duration::from_millis(policy.interval_ms),
            min: Duration::from_millis(policy.min_interval_ms),
            assumed_rate: (policy.fill_rate_mib_s << 20) as f64,
        });
        let (probes, probe_status) = match probes {
            Ok(p) => {
                let status = ProbeStatus::on(p.hooks(), p.close_hook());
                (Some(p), status)
            }
            Err(reason) => (None, ProbeStatus::off(reason)),
        };
        Ok(Sampler {
            reader,
            procs: ProcTable::new(),
            probes,
            probe_status,
            synced_pids: Vec::new(),
            agent_pid: std::process::id(),
            limit_override,
            host_total: host_mem_total(),
            start: Instant::now(),
            seq: 0,
            pids: Vec::new(),
            samples: Arc::default(),
            last_rescan: Instant::now(),
            reopen: false,
            early: None,
            wakeups,
            pacer,
            lines: [policy.refuse_at, policy.abort_at, policy.kill_at],
            hysteresis: policy.hysteresis,
            roster: None,
            names: Default::default(),
            in_flight: None,
            victim_requests: None,
            kills: Arc::new(KillBook::default()),
            reactions: None,
            abort: AbortSignal::default(),
            recycler: Default::default(),
            last_sample: Instant::now(),
            procs_read: None,
            counted_unix_ms: 0,
            aborting: false,
            relist: false,
            acks: Vec::new(),
            procs_every: Duration::from_millis(policy.interval_ms).max(PROCS_EVERY),
            brake,
        })
    }

    pub fn group(&self) -> &Group {
        self.reader.group()
    }

    /// The kills of the last resort, for the launcher, the front door and `/metrics`.
    pub(crate) fn kill_book(&self) -> Arc<KillBook> {
        self.kills.clone()
    }

    /// Under `monitor run`: the launched processes, whose names the samples carry and whose roles and `protect` the
    /// last resort follows.
    pub(crate) fn set_roster(&mut self, roster: Roster) {
        self.roster = Some(roster);
    }

    /// Under `monitor run`: where the victim's requests in flight are read when the guard acts on it.
    pub(crate) fn set_in_flight(&mut self, in_flight: crate::guard::InFlightOf) {
        self.in_flight = Some(in_flight);
    }

    /// Process `pid`'s requests in flight now (None unless under `monitor run`).
    fn requests_of(&self, pid: u32) -> Option<VictimRequests> {
        let read = self.in_flight.as_ref()?;
        Some(VictimRequests::new(pid, crate::base::units::unix_ms(), read(pid)))
    }

    /// The abort victim's requests in flight, read once when it is chosen (before the abort is told: from then on
    /// they end) and kept while the abort of it lasts.
    fn victim_requests(&mut self, d: &Decision) -> Option<Arc<VictimRequests>> {
        let victim = d.victim.filter(|_| d.state == State::Aborting);
        match (victim, &self.victim_requests) {
            (None, _) => self.victim_requests = None,
            (Some(v), Some(held)) if held.pid == v.pid => {}
            (Some(v), _) => self.victim_requests = self.requests_of(v.pid).map(Arc::new),
        }
        self.victim_requests.clone()
    }

    /// Where the kill's reaction time is recorded (`monitor_reaction_seconds{action="kill"}`).
    pub(crate) fn set_reactions(&mut self, reactions: Arc<crate::base::reaction::Reactions>) {
        self.reactions = Some(reactions);
    }

    /// Near the lines (from `hysteresis` below the lowest), the processes' roles and the pids the last resort
    /// spares are read into `snap.protected`; far from them they are not needed and cost nothing.
    fn protect(&self, snap: &mut Snapshot) -> crate::guard::Known {
        if snap.group.ratio() < self.lines[0] - self.hysteresis {
            return crate::guard::Known::default();
        }
        let (known, protected) = crate::guard::known_and_protected(snap, self.roster.as_ref());
        snap.protected = protected;
        known
    }

    /// Carries out the kill `d` orders (outside shadow mode), on this thread, on the wake-up that decided it; records
    /// it in the kill book and logs it. Returns the record for the published sample.
    fn carry_out(
        &self,
        d: &Decision,
        snap: &Snapshot,
        known: &crate::guard::Known,
        wake: &Wake,
        kill_at: f64,
    ) -> Option<KillRecord> {
        let order = d.kill.as_ref()?;
        let (role, name) = known.of(snap, order.target.pid);
        let mut rec = KillRecord::of(order, snap, role, kill_at, d.shadow)?;
        if let Some(name) = name {
            rec.name = name;
        }
        // Read before the kill: once it is sent, the front door ends them.
        rec.requests = self.requests_of(rec.pid);
        rec.again = self.kills.again(&rec.name, rec.unix_ms);
        // In the book before the signal: the front door and the launcher may see the process die before this
        // thread runs again.
        self.kills.record(rec.clone());
        if d.shadow {
            tracing::warn!(
                pid = rec.pid,
                name = %rec.name,
                role = %rec.role,
                why = rec.why,
                ratio = format!("{:.3}", rec.ratio),
                "shadow: would kill (not enforced): {}",
                rec.reason
            );
            return Some(rec);
        }
        match crate::guard::kill(order, &self.reader.group().dir) {
            Ok(()) => {
                let at = crate::guard::mono_ns();
                rec.sent_mono_ns = Some(at);
                self.kills.sent(rec.pid, rec.start_ticks, at);
                if let Some(r) = &self.reactions {
                    r.record_since(crate::base::reaction::Kind::Kill, wake.at);
                }
                tracing::warn!(
                    pid = rec.pid,
                    name = %rec.name,
                    role = %rec.role,
                    rss_bytes = rec.rss_bytes,
                    anon_bytes = rec.anon_bytes,
                    ratio = format!("{:.3}", rec.ratio),
                    why = rec.why,
                    round = rec.round,
                    woken_by = wake.source.as_str(),
                    killed_again = rec.again,
                    "killed: {}{}",
                    rec.reason,
                    rec.again_words()
                );
            }
            Err(e) => {
                tracing::error!(pid = rec.pid, name = %rec.name, why = rec.why, "kill not sent: {e}");
                rec.error = Some(e.to_string());
                self.kills.failed(rec.pid, rec.start_ticks, e.to_string());
            }
        }
        Some(rec)
    }

    /// How long a recycled process's requests in flight are waited for (`[proxy] drain_timeout_s`), as applied.
    pub(crate) fn set_recycle_drain(&mut self, drain_timeout_s: u64) {
        self.recycler.drain = Duration::from_secs(drain_timeout_s);
    }

    /// Carries out (or goes on with) the recycle `d` orders: see [`crate::guard::recycle`].
    fn recycle(&mut self, d: &Decision, snap: &Snapshot, known: &crate::guard::Known) -> Option<RecycleRecord> {
        if d.recycle.is_none() && !self.recycler.is_pending() {
            return None;
        }
        let launched_pids: Vec<u32> =
            self.roster.as_ref().map(|r| r().iter().map(|l| l.pid).collect()).unwrap_or_default();
        let read = self.in_flight.clone();
        let in_flight = move |pid: u32| read.as_ref().map_or(0, |read| read(pid).len());
        let launched = |pid: u32| launched_pids.contains(&pid);
        let target = d.recycle.map_or(0, |r| r.target.pid);
        let role = known.of(snap, target).0;
        let look = crate::guard::recycle::Lookup { launched: &launched, in_flight: &in_flight, role };
        self.recycler.step(d, snap, &look, &self.kills)
    }

    /// `[actions] abort_signal` as applied (at start and on each reload).
    pub(crate) fn set_abort_signal(&mut self, cfg: &crate::config::ActionsConfig) {
        self.recycler.signal = cfg.recycle_signal.map(Signal::number);
        self.abort.signal = cfg.abort_signal.map(Signal::number);
    }

    /// Sends `[actions] abort_signal` to the victim `d` has just told to abort (outside shadow mode), on this thread,
    /// on the wake-up that chose it: the actions task would send it a scheduling round later, and a grower at full
    /// speed reaches `kill_at` within a few of them on a slow host. Returns the process signalled, for the published
    /// sample (the actions task then does not send it again); none when nothing was sent (the task tries then).
    fn signal_abort(&mut self, d: &Decision, snap: &Snapshot, wake: &Wake) -> Option<ProcId> {
        let (to, signal) = self.abort.due(d, snap)?;
        let name = crate::guard::signal_name(Some(signal));
        match crate::guard::signal(to, signal) {
            Ok(()) => {
                if let Some(r) = &self.reactions {
                    r.record_since(crate::base::reaction::Kind::Signal, wake.at);
                }
                tracing::info!(pid = to.pid, action = "abort", woken_by = wake.source.as_str(), "sent SIG{name}");
                Some(to)
            }
            Err(e) => {
                tracing::warn!(action = "abort", "SIG{name} not sent: {e}");
                None
            }
        }
    }

    /// A [`Tracer`] served by this sampler's thread: each process it is told of is traced at once (with the
    /// probes on) and listed by a sample taken at once, before the request is answered.
    pub(crate) fn tracer(&mut self) -> Tracer {
        let efd = match crate::sources::wakeup::eventfd::new() {
            Ok(fd) => Arc::new(fd),
            Err(e) => {
                tracing::warn!("eventfd: {e}: new processes are traced from their first sample");
                return Tracer::none();
            }
        };
        let (tx, rx) = mpsc::channel();
        self.early = Some((rx, efd.clone()));
        Tracer::new(tx, efd)
    }

    /// Traces `pid` at once (a [`Tracer`] request).
    fn trace_now(&mut self, pid: u32) {
        let Some(probes) = self.probes.as_mut() else { return };
        if let Err(e) = probes.trace_now(pid) {
            tracing::warn!(pid, "tracing a new process at once: {e} (it counts from the next sample)");
        }
    }

    /// Serves the [`Tracer`] requests waiting.
    fn serve_tracer(&mut self) {
        let Some((rx, efd)) = &self.early else { return };
        crate::sources::wakeup::eventfd::take(efd);
        let mut waiting = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(r) => waiting.push(r),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.early = None;
                    break;
                }
            }
        }
        for (pid, ack) in waiting {
            self.trace_now(pid);
            self.acks.push(ack);
            self.relist = true;
        }
    }

    /// Waits until `deadline` or a kernel wake-up, serving [`Tracer`] requests meanwhile; says what woke it (a
    /// timer wake-up at once when a request asks for the processes to be listed).
    fn wait(&mut self, deadline: Instant) -> Wake {
        loop {
            let other = self.early.as_ref().map(|(_, efd)| efd.as_raw_fd());
            match self.wakeups.wait(deadline, other, self.pacer_min(), self.last_sample) {
                Ready::Sample(wake) => return wake,
                Ready::Other => {
                    self.serve_tracer();
                    if self.relist {
                        return Wake::timer();
                    }
                }
            }
        }
    }

    /// The shortest interval pacing may choose: kernel wake-ups that can come in bursts are served no faster.
    fn pacer_min(&self) -> Duration {
        self.pacer.min()
    }

    /// Puts the group's own `memory.high` back (the sampler is stopping).
    pub(crate) fn release_brake(&mut self) {
        self.brake.release();
    }

    /// The brake, for the published sample.
    pub(crate) fn brake_status(&self) -> Option<BrakeStatus> {
        self.brake.status()
    }

    /// The sources armed, for the published sample.
    pub(crate) fn wakeup_status(&self) -> Arc<WakeupStatus> {
        self.wakeups.status().clone()
    }

    /// After a good sample: the brake follows the limit, the kernel thresholds follow it too, and pacing picks
    /// the next interval.
    fn paced(&mut self, snap: &Snapshot) -> Duration {
        let g = &snap.group;
        self.brake.steer(self.reader.group(), g.limit_bytes);
        self.wakeups.after_sample(g.limit_bytes, &self.lines);
        self.pacer.set_assumed(!self.wakeups.follows_usage());
        self.pacer.next(snap.mono_ms, g.usage_bytes, g.limit_bytes, &self.lines)
    }

    /// A reloaded `[policy]`: the lines pacing and the kernel thresholds follow, the configured limit, pacing's
    /// bounds, and the brake in or out of shadow mode (released in it, set again out of it). The kernel wake-ups,
    /// pacing on or off and `brake_at` stay as started.
    pub(crate) fn set_policy(&mut self, policy: &crate::config::PolicyConfig) {
        self.brake.set_policy(self.reader.group(), policy);
        self.lines = [policy.refuse_at, policy.abort_at, policy.kill_at];
        self.hysteresis = policy.hysteresis;
        self.limit_override = policy.limit_bytes;
        self.procs_every = Duration::from_millis(policy.interval_ms).max(PROCS_EVERY);
        self.pacer.set_bounds(
            Duration::from_millis(policy.interval_ms),
            Duration::from_millis(policy.min_interval_ms),
            (policy.fill_rate_mib_s << 20) as f64,
        );
    }

    /// A reloaded `[probes]`: the programs are detached, then attached again as it now says (or left off).
    pub(crate) fn set_probes(&mut self, cfg: &crate::config::ProbesConfig) {
        // Dropped first: the hooks are free again before the new programs attach to them.
        self.probes = None;
        self.synced_pids.clear();
        let (probes, status) = match load_probes(cfg) {
            Ok(p) => {
                tracing::info!(hooks = ?p.hooks(), close = ?p.close_hook(), "request counting is on");
                let status = ProbeStatus::on(p.hooks(), p.close_hook());
                (Some(p), status)
            }
            Err(reason) => (None, ProbeStatus::off(reason)),
        };
        self.probes = probes;
        self.probe_status = status;
        // The next sample lists the processes, so the new programs count them from then on.
        self.procs_read = None;
    }

    pub(crate) fn probe_status(&self) -> &ProbeStatus {
        &self.probe_status
    }

    /// One sample of the group. After a failed sample, the group's files are opened again first (one failed open
    /// while the group stays gone), so a group created again under the same path is watched again.
    pub fn sample(&mut self) -> Result<Snapshot, CgroupError> {
        if self.reopen {
            self.reader = GroupReader::open(self.reader.group().clone())?;
            self.last_rescan = Instant::now();
            self.reopen = false;
            // A group created again is a new cgroup: its wake-ups are armed anew, and the brake set on it anew.
            self.wakeups = self.wakeups.rearm(self.reader.group());
            self.brake.regroup();
        }
        self.last_sample = Instant::now();
        let snap = self.read();
        self.reopen = snap.is_err();
        if self.reopen {
            // The processes waiting to be listed are not: their requests are answered (dropped) now.
            self.acks.clear();
            // The files of a removed group report a change at every poll: its wake-ups would wake the sampler
            // without end. They are armed again when the group can be read again.
            self.wakeups.suspend();
        }
        snap
    }

    /// When `d` is a change that names a process, reads that process's comm afresh into `snap`, so that the log,
    /// alerts and actions name the program it runs now (comms are otherwise read again once a second); a configured
    /// name stays.
    pub(crate) fn name_victim(&mut self, d: &Decision, snap: &mut Snapshot) {
        let Some(v) = d.victim.filter(|_| d.changed) else { return };
        let Some(i) = snap.processes.iter().position(|p| p.pid == v.pid) else { return };
        let Some(comm) = self.procs.fresh_name(v.pid).filter(|n| *n != snap.processes[i].comm) else { return };
        let configured = self.names.configured(v);
        let p = &mut Arc::make_mut(&mut snap.processes)[i];
        if !configured {
            p.name.clone_from(&comm);
        }
        p.comm = comm;
        // The samples until the next read carry the new name too.
        self.samples = Arc::clone(&snap.processes);
    }

    /// One sample with the processes listed and read afresh, whatever [`Sampler::list_due`] says (what the sampler
    /// benchmark measures).
    pub fn sample_all(&mut self) -> Result<Snapshot, CgroupError> {
        self.procs_read = None;
        self.sample()
    }

    /// Whether this sample lists the group's processes and reads their memory and request counters (the probes'
    /// maps): once a second (or per `interval_ms` when longer: the history's resolution), and at once when `monitor
    /// run` starts a process ([`Tracer`]) or the probes are loaded again. Far from the lines a process that joins
    /// is listed within that second, and its memory counts in the group's from its first page.
    fn list_due(&self) -> Listing {
        Listing::of(self.relist, self.procs_read.map(|t| t.elapsed()), self.procs_every)
    }

    /// Whether this sample lists the processes and reads each one's memory (one `statm` read) whether or not a
    /// listing is due: at `ratio` of the limit from `abort_at` up, and while the last decision was `aborting`
    /// (which lasts down to `abort_at - hysteresis`), so that the abort chooses the largest, and the last resort
    /// weighs its victim's memory, among every process of the group on fresh figures. The request counters wait
    /// for the next timed listing. Below, the decisions (refusing or not, and the extra samples pacing and the
    /// kernel's wake-ups bring near the refuse line) need only the group's ratio.
    ///
    /// What a 1,000-process group costs far from the lines and while aborting: `cargo xtask bench agent-cpu`.
    fn memory_due(&self, ratio: f64) -> bool {
        ratio >= self.lines[1] || self.aborting
    }

    /// The decision just taken on this sampler's sample, for [`Sampler::memory_due`].
    pub(crate) fn decided(&mut self, d: &Decision) {
        self.aborting = d.state == crate::decision::policy::State::Aborting;
    }

    fn read(&mut self) -> Result<Snapshot, CgroupError> {
        if self.last_rescan.elapsed() >= RESCAN_EVERY {
            self.reader.rescan()?;
            self.last_rescan = Instant::now();
        }
        let mem = self.reader.memory()?;
        let (limit_bytes, limit_source) = match (self.limit_override, mem.limit_bytes) {
            (Some(l), _) => (l, LimitSource::Config),
            (None, Some(l)) => (l, LimitSource::Cgroup),
            (None, None) => (self.host_total, LimitSource::Host),
        };
        let ratio = if limit_bytes == 0 { 1.0 } else { mem.usage_bytes as f64 / limit_bytes as f64 };
        let listing = self.list_due();
        let timed = listing != Listing::NotDue;
        if timed || self.memory_due(ratio) {
            // Listed at every such sample: a process that joined since the last listing and grew at once is among
            // those the abort chooses from.
            self.reader.pids(&mut self.pids)?;
            let mut samples = Vec::with_capacity(self.pids.len());
            self.procs.sample(&self.pids, &mut samples);
            if let Some(roster) = &self.roster {
                let launched = roster();
                let name_of = |pid| launched.iter().find(|l| l.pid == pid).map(|l| l.name.as_str());
                self.names.apply(name_of, &mut samples);
            }
            if timed {
                // Taken before the read: every request a process had received by then is in the counts.
                self.counted_unix_ms = crate::base::units::unix_ms();
                self.add_traffic(&mut samples);
                if listing == Listing::OnTime {
                    self.procs_read = Some(Instant::now());
                }
                self.relist = false;
                for ack in self.acks.drain(..) {
                    let _ = ack.send(());
                }
            } else {
                carry_traffic(&self.samples, &mut samples);
            }
            self.samples = Arc::new(samples);
        }
        self.seq += 1;
        let group = self.reader.group();
        Ok(Snapshot {
            seq: self.seq,
            unix_ms: crate::base::units::unix_ms(),
            mono_ms: self.start.elapsed().as_millis() as u64,
            counted_unix_ms: self.counted_unix_ms,
            group: GroupSample {
                cgroup: group.dir.clone(),
                version: group.version,
                usage_bytes: mem.usage_bytes,
                shmem_bytes: mem.shmem_bytes,
                kernel_bytes: mem.kernel_bytes,
                oom_group: mem.oom_group,
                limit_bytes,
                limit_source,
                oom_kills: mem.oom_kills,
                pressure: mem.pressure,
                processes_listed: self.pids.len(),
                processes_sampled: self.samples.len(),
                unattributed_bytes: crate::decision::snapshot::unattributed(
                    mem.usage_bytes,
                    mem.kernel_bytes,
                    &self.samples,
                ),
            },
            processes: Arc::clone(&self.samples),
            agent_pid: self.agent_pid,
            protected: Vec::new(),
        })
    }

    fn add_traffic(&mut self, samples: &mut [ProcSample]) {
        let Some(probes) = self.probes.as_mut() else { return };
        let result = (|| {
            // The agent itself is never traced, even in its own group (`cgroup = "auto"`).
            let me = self.agent_pid;
            let changed = !self.synced_pids.iter().copied().eq(self.pids.iter().copied().filter(|&p| p != me));
            if changed || probes.has_pinned() {
                self.synced_pids.clear();
                self.synced_pids.extend(self.pids.iter().copied().filter(|&p| p != me));
                probes.sync_pids(&self.synced_pids)?;
            }
            probes.read()
        })();
        match result {
            Ok(mut traffic) => {
                for p in samples {
                    if let Some(t) = traffic.remove(&p.pid) {
                        p.traffic = t;
                    }
                }
            }
            Err(e) => {
                tracing::warn!("eBPF probes stopped: {e}");
                self.probe_status = ProbeStatus::off(format!("stopped: {e}"));
                self.probes = None;
            }
        }
    }
}

/// Gives each process of `now` the request counters it had in `before` (both in pid order): between two listings
/// the counters are the last listing's.
fn carry_traffic(before: &[ProcSample], now: &mut [ProcSample]) {
    let mut old = before.iter().peekable();
    for p in now {
        while old.next_if(|o| o.pid < p.pid).is_some() {}
        if let Some(o) = old.next_if(|o| o.pid == p.pid && o.start_ticks == p.start_ticks) {
            p.traffic = o.traffic.clone();
        }
    }
}

/// Runs the sampler until `stop` is set, publishing on `feed`, with the policy and probes `config` holds (a new
/// config is looked for at least every second, and sampled with at once). The first sample must already be
/// published (see [`first`] and [`Feed::new`]), so consumers always have a value.
pub fn spawn(
    mut sampler: Sampler,
    mut config: Live,
    mut state: PolicyState,
    feed: Feed,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("sampler".into()).spawn(move || {
        let mut applied = config.now();
        let mut thresholds = Arc::new(applied.policy.thresholds());
        let mut interval = Duration::from_millis(applied.policy.interval_ms);
        let mut next = Instant::now() + interval;
        let mut failing = false;
        let mut obeying = Obedience::default();
        // systemd's watchdog is fed from this loop: a sampler that hangs stops feeding it.
        let mut watchdog = crate::base::notify::Watchdog::from_env();
        while !stop.load(Ordering::Relaxed) {
            let due = watchdog.period().map_or(next, |p| next.min(Instant::now() + p));
            // A reloaded config is looked for at least every CONFIG_POLL, so a long interval does not delay it.
            let poll = Instant::now() + CONFIG_POLL;
            let wake = sampler.wait(due.min(poll));
            watchdog.tick(Instant::now());
            let reloaded = config.changed();
            if reloaded.is_none() && wake.source == WakeSource::Timer && Instant::now() < due && !sampler.relist {
                // Woken only to look for a new config, and there is none: no sample yet.
                continue;
            }
            if let Some(cfg) = reloaded {
                if cfg.policy != applied.policy {
                    sampler.set_policy(&cfg.policy);
                    thresholds = Arc::new(cfg.policy.thresholds());
                    interval = Duration::from_millis(cfg.policy.interval_ms);
                }
                if cfg.probes != applied.probes {
                    sampler.set_probes(&cfg.probes);
                }
                sampler.set_abort_signal(&cfg.actions);
                sampler.set_recycle_drain(cfg.proxy.drain_timeout_s);
                applied = cfg;
            }
            match sampler.sample() {
                Ok(mut snap) => {
                    let recovered = std::mem::replace(&mut failing, false);
                    if recovered {
                        tracing::info!(cgroup = %sampler.group().dir.display(), "group readable again");
                    }
                    let known = sampler.protect(&mut snap);
                    let was_halted = state.kill.halted;
                    let (s, decision) = decide(&state, &snap, &thresholds);
                    state = s;
                    sampler.decided(&decision);
                    sampler.name_victim(&decision, &mut snap);
                    let victim_requests = sampler.victim_requests(&decision);
                    let abort_signalled = sampler.signal_abort(&decision, &snap, &wake);
                    let kill = sampler.carry_out(&decision, &snap, &known, &wake, thresholds.kill_at);
                    let recycle = sampler.recycle(&decision, &snap, &known);
                    log_decision(&decision, &snap, &wake, victim_requests.as_deref());
                    obeying.log(&decision, &snap, &thresholds);
                    if decision.kills_halted != was_halted {
                        log_halt(decision.kills_halted, &decision);
                    }
                    if decision.changed || recovered {
                        crate::base::notify::status(&status_line(&snap, &decision));
                    }
                    let paced = sampler.paced(&snap);
                    next = sampler.last_sample + paced;
                    let probes = sampler.probe_status().clone();
                    feed.publish(Arc::new(Published {
                        snapshot: snap,
                        decision,
                        probes,
                        error: None,
                        wake,
                        wakeups: sampler.wakeup_status(),
                        brake: sampler.brake_status(),
                        next_sample_ms: paced.as_millis() as u64,
                        kill,
                        recycle,
                        abort_signalled,
                        victim_requests,
                        thresholds: thresholds.clone(),
                        interval_ms: interval.as_millis() as u64,
                    }));
                }
                Err(e) => {
                    if !failing {
                        tracing::error!("sample failed: {e}");
                        crate::base::notify::status(&format!("the group cannot be read: {e}"));
                        failing = true;
                    }
                    next = Instant::now() + interval;
                    let mut p = (*feed.current()).clone();
                    p.error = Some(e.to_string());
                    p.thresholds = thresholds.clone();
                    p.interval_ms = interval.as_millis() as u64;
                    p.wake = wake;
                    p.kill = None;
                    p.recycle = None;
                    p.abort_signalled = None;
                    feed.publish(Arc::new(p));
                }
            }
        }
        sampler.release_brake();
    })
}

/// The group's state in a line, for `systemctl status`: `normal at 45% of 512.0 MiB`.
pub fn status_line(snap: &Snapshot, d: &Decision) -> String {
    let state = match d.state {
        crate::decision::policy::State::Normal => "normal",
        crate::decision::policy::State::Refusing => "refusing new requests",
        crate::decision::policy::State::Aborting => "aborting the largest",
    };
    let shadow = if d.shadow { " (shadow)" } else { "" };
    format!("{state}{shadow} at {:.0}% of {}", d.ratio * 100.0, crate::base::units::size(snap.group.limit_bytes))
}

/// Takes the first sample synchronously (so start-up fails fast on an unreadable group) and decides on it.
pub fn first(
    sampler: &mut Sampler,
    thresholds: &Thresholds,
    interval_ms: u64,
) -> Result<(PolicyState, Published), CgroupError> {
    let mut snap = sampler.sample()?;
    let known = sampler.protect(&mut snap);
    let (state, decision) = decide(&PolicyState::default(), &snap, thresholds);
    sampler.name_victim(&decision, &mut snap);
    let wake = Wake::timer();
    let kill = sampler.carry_out(&decision, &snap, &known, &wake, thresholds.kill_at);
    let victim_requests = sampler.victim_requests(&decision);
    log_decision(&decision, &snap, &wake, victim_requests.as_deref());
    let probes = sampler.probe_status().clone();
    let next = sampler.paced(&snap);
    let published = Published {
        snapshot: snap,
        decision,
        probes,
        error: None,
        wake: Wake::timer(),
        wakeups: sampler.wakeup_status(),
        brake: sampler.brake_status(),
        next_sample_ms: next.as_millis() as u64,
        kill,
        recycle: None,
        abort_signalled: None,
        victim_requests,
        thresholds: Arc::new(thresholds.clone()),
        interval_ms,
    };
    Ok((state, published))
}

/// A sampler opened on the group, with its first sample taken and decided on.
pub struct Started {
    pub sampler: Sampler,
    pub state: PolicyState,
    pub first: Published,
}

/// Opens the group with the config's probes, limit and thresholds, takes the first sample (start-up fails fast
/// on an unreadable group) and logs what is watched. Shared by `monitor agent` and `monitor run`.
pub fn start(group: Group, cfg: &crate::config::Config) -> Result<Started, CgroupError> {
    let v2 = group.version == crate::decision::snapshot::CgroupVersion::V2;
    crate::sources::privileges::warn_missing(cfg, &group.dir, v2);
    let probes = load_probes(&cfg.probes);
    let mut sampler = Sampler::with_policy(group, cfg.policy.limit_bytes, probes, &cfg.policy)?;
    sampler.set_abort_signal(&cfg.actions);
    sampler.set_recycle_drain(cfg.proxy.drain_timeout_s);
    let (state, first) = first(&mut sampler, &cfg.policy.thresholds(), cfg.policy.interval_ms)?;
    let g = &first.snapshot.group;
    tracing::info!(
        cgroup = %g.cgroup.display(),
        version = ?g.version,
        limit_bytes = g.limit_bytes,
        limit_source = ?g.limit_source,
        processes = first.snapshot.processes.len(),
        "watching group"
    );
    Ok(Started { sampler, state, first })
}

/// Which abort the sampler signals itself: the victim of each enforced abort, once, when it is chosen (or chosen
/// again after the group left aborting): what the actions task's [`Plan`](crate::consumers::actions::Plan) would
/// send it.
#[derive(Debug, Default)]
struct AbortSignal {
    /// `[actions] abort_signal`.
    signal: Option<i32>,
    /// The victim last told, while aborting.
    told: Option<ProcId>,
}

impl AbortSignal {
    /// The process to signal after decision `d` on `snap`, and the signal: the victim, when it is new, is a process
    /// of the sample other than the agent, and a signal is configured. A victim chosen while no signal was
    /// configured counts as told, as the actions task counts it (a signal configured later goes with the next
    /// change).
    fn due(&mut self, d: &Decision, snap: &Snapshot) -> Option<(ProcId, i32)> {
        if d.state != State::Aborting || d.shadow {
            self.told = None;
            return None;
        }
        let victim = d.victim?;
        if self.told == Some(victim) {
            return None;
        }
        self.told = Some(victim);
        let listed = snap.processes.iter().any(|p| p.pid == victim.pid && p.start_ticks == victim.start_ticks);
        (listed && victim.pid != snap.agent_pid).then_some((victim, self.signal?))
    }
}

/// Logs the last resort halting (its kills freed nothing) and resuming.
fn log_halt(halted: bool, d: &Decision) {
    if halted {
        tracing::error!(
            ratio = format!("{:.3}", d.ratio),
            "the last resort stopped: {} kills did not bring the group below abort_at; the memory is held by what no \
             kill frees (tmpfs, shared memory, the kernel)",
            crate::decision::policy::kill::MAX_KILLS
        );
    } else {
        tracing::info!(
            ratio = format!("{:.3}", d.ratio),
            "the last resort may kill again: the group fell below abort_at"
        );
    }
}

/// What the log last said of the abort victim's obeying: it is said when it turns (still growing, stopped
/// growing), once the victim's first growth window is over.
#[derive(Default)]
struct Obedience {
    said: Option<(ProcId, bool)>,
}

impl Obedience {
    fn log(&mut self, d: &Decision, snap: &Snapshot, t: &crate::decision::policy::Thresholds) {
        let (Some(victim), Some(g)) = (d.victim, d.victim_growth) else {
            self.said = None;
            return;
        };
        if g.over_ms < crate::decision::policy::kill::growth_window_ms(t.kill_after_ms) {
            return;
        }
        let tol = crate::decision::policy::kill::tolerance(snap.group.limit_bytes);
        let growing = g.growing(tol);
        if self.said == Some((victim, growing)) {
            return;
        }
        self.said = Some((victim, growing));
        let name = snap.processes.iter().find(|p| p.pid == victim.pid).map(|p| p.name.as_str());
        if growing {
            tracing::warn!(victim_pid = victim.pid, victim_name = name, "abort victim {}", g.describe(tol));
        } else {
            tracing::info!(victim_pid = victim.pid, victim_name = name, "abort victim obeyed: {}", g.describe(tol));
        }
    }
}

/// Logs a decision once, when it changes, with what woke the sampler for it.
fn log_decision(d: &Decision, snap: &Snapshot, wake: &Wake, requests: Option<&VictimRequests>) {
    if !d.changed {
        return;
    }
    // Each a quoted string in the line: a path is a client's text.
    let requests = requests.map(|r| (r.summary(), r.lines().replace('\n', "; ")));
    let victim = d.victim.and_then(|v| snap.processes.iter().find(|p| p.pid == v.pid));
    tracing::warn!(
        state = d.state.as_str(),
        ratio = format!("{:.3}", d.ratio),
        usage_bytes = snap.group.usage_bytes,
        limit_bytes = snap.group.limit_bytes,
        victim_pid = victim.map(|v| v.pid),
        victim_name = victim.map(|v| v.name.as_str()),
        victim_comm = victim.map(|v| v.comm.as_str()),
        victim_rss_bytes = victim.map(|v| v.rss_bytes),
        shadow = d.shadow,
        unsampled = snap.group.processes_unsampled(),
        unattributed_bytes = snap.group.unattributed_bytes,
        unseen = d.unseen,
        woken_by = wake.source.as_str(),
        victim_in_flight = requests.as_ref().map(|r| r.0.as_str()),
        victim_requests = requests.as_ref().map(|r| r.1.as_str()),
        "decision changed"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PolicyConfig;
    use crate::decision::snapshot::CgroupVersion;
    use monitor_tests::hog::Hog;
    use monitor_tests::{spawn_in_cgroup, Hierarchy, MIB};
    use std::process::Command;

    /// A listing for a process that started does not move the clock's listings: every process's counts stay
    /// within their second.
    #[test]
    fn a_process_start_does_not_postpone_the_timed_listing() {
        let (ms, every) = (Duration::from_millis, Duration::from_secs(1));
        assert_eq!(Listing::of(false, None, every), Listing::OnTime);
        assert_eq!(Listing::of(true, None, every), Listing::OnTime);
        assert_eq!(Listing::of(false, Some(ms(500)), every), Listing::NotDue);
        assert_eq!(Listing::of(true, Some(ms(500)), every), Listing::Started);
        assert_eq!(Listing::of(false, Some(ms(900)), every), Listing::OnTime, "a timed sample a little early");
        assert_eq!(Listing::of(true, Some(ms(1000)), every), Listing::OnTime);
    }

    /// The sampler signals each victim once while the abort lasts, as the actions task's plan would: a new victim
    /// or a new abort is told again; shadow mode, the agent, a process not in the sample and an unset signal are
    /// not.
    #[test]
    fn the_abort_signal_goes_to_each_new_victim_once() {
        let proc = ProcSample::test;
        let id = |pid: u32| ProcId { pid, start_ticks: u64::from(pid) * 10 };
        let sample = |state: State, victim: Option<u32>| {
            let mut p = Published::test(state);
            p.snapshot.processes = vec![proc(1), proc(2), proc(3)].into();
            p.snapshot.agent_pid = 3;
            p.decision.victim = victim.map(id);
            p
        };
        let mut a = AbortSignal { signal: Some(12), told: None };
        let mut due = |state, victim| {
            let p = sample(state, victim);
            a.due(&p.decision, &p.snapshot).map(|(to, sig)| (to.pid, sig))
        };
        assert_eq!(due(State::Refusing, None), None);
        assert_eq!(due(State::Aborting, Some(1)), Some((1, 12)));
        assert_eq!(due(State::Aborting, Some(1)), None, "told once while the abort lasts");
        assert_eq!(due(State::Aborting, Some(2)), Some((2, 12)), "a new victim");
        assert_eq!(due(State::Refusing, None), None);
        assert_eq!(due(State::Aborting, Some(2)), Some((2, 12)), "a new abort");
        assert_eq!(due(State::Aborting, Some(3)), None, "never the agent");
        assert_eq!(due(State::Aborting, Some(4)), None, "not in the sample");

        let mut shadow = sample(State::Aborting, Some(1));
        shadow.decision.shadow = true;
        let mut a = AbortSignal { signal: Some(12), told: None };
        assert_eq!(a.due(&shadow.decision, &shadow.snapshot), None, "shadow mode tells nothing");
        // Chosen while no signal was set: counts as told, so a signal set by a reload goes with the next change.
        let p = sample(State::Aborting, Some(1));
        a.signal = None;
        assert_eq!(a.due(&p.decision, &p.snapshot), None);
        a.signal = Some(12);
        assert_eq!(a.due(&p.decision, &p.snapshot), None);
    }

    fn rss_of(snap: &Snapshot, pid: u32) -> Option<u64> {
        snap.processes.iter().find(|p| p.pid == pid).map(|p| p.rss_bytes)
    }

    /// A real group: far from the lines a process's growth shows in the group's figure at once and in its own at
    /// the next read, and a process that joins waits for the next listing unless `monitor run` tells of it; past
    /// the abort line, and while aborting, every sample reads them.
    #[test]
    fn processes_are_read_once_a_second_far_from_the_lines_at_each_sample_near_them_and_when_one_starts() {
        let test = "processes_are_read_once_a_second_far_from_the_lines_at_each_sample_near_them_and_when_one_starts";
        if !monitor_tests::require_group(test) {
            return;
        }
        let cg = monitor_tests::Group::here("sampler-procs", Some(1 << 30));
        let mut hog = Hog::spawn(monitor_tests::bins::alloc_hog(), cg.path(), 8, false);
        let (version, mount) = match cg.hierarchy() {
            Hierarchy::V1 => (CgroupVersion::V1, "/sys/fs/cgroup/memory"),
            Hierarchy::V2 => (CgroupVersion::V2, "/sys/fs/cgroup"),
        };
        let group = Group { version, dir: cg.path().to_path_buf(), mount: mount.into() };
        // An interval no test run reaches: only the ratio and the list of processes make a read due.
        let far = PolicyConfig { interval_ms: 3_600_000, ..PolicyConfig::default() };
        let mut sampler = Sampler::with_policy(group, None, Err("off".into()), &far).expect("open the group");
        let pid = hog.pid();

        let first = sampler.sample().expect("sample");
        let before = rss_of(&first, pid).expect("the hog is sampled");
        hog.set_mib(72);
        let grown = sampler.sample().expect("sample");
        assert!(
            grown.group.usage_bytes >= first.group.usage_bytes + 48 * MIB,
            "the group's memory is read at every sample: {} then {}",
            first.group.usage_bytes,
            grown.group.usage_bytes
        );
        assert_eq!(rss_of(&grown, pid), Some(before), "far from the lines, the processes wait for their read");
        let sleeper = spawn_in_cgroup(Command::new("sleep").arg("60"), cg.path());
        let unlisted = sampler.sample().expect("sample");
        assert_eq!(rss_of(&unlisted, sleeper.pid()), None, "a process that joins waits for the next read");

        // `monitor run` tells of each process it starts: the sampler wakes at once and lists it before it answers.
        let tracer = sampler.tracer();
        let told = sleeper.pid();
        let telling = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().expect("runtime");
            let t0 = Instant::now();
            rt.block_on(tracer.trace(told));
            t0.elapsed()
        });
        let t0 = Instant::now();
        let wake = sampler.wait(t0 + Duration::from_secs(30));
        assert!(t0.elapsed() < Duration::from_secs(10), "woken by the request: {:?}", t0.elapsed());
        assert_eq!(wake.source, WakeSource::Timer);
        let joined = sampler.sample().expect("sample");
        let answered = telling.join().expect("the telling thread");
        assert!(answered < Duration::from_secs(1), "answered after the sample, not at the 1 s timeout: {answered:?}");
        assert!(
            rss_of(&joined, sleeper.pid()).is_some(),
            "a process started is listed at once: {:?}",
            joined.processes
        );
        let since = rss_of(&joined, pid).expect("the hog is sampled");
        assert!(since >= before + 48 * MIB, "and, with it, every other is read: {before} then {since}");

        // The hog grows by 24 MiB, and the limit is set so that the group is then at about 89%: refusing, short of
        // abort_at. The decisions there need only the group's ratio.
        let refusing =
            PolicyConfig { limit_bytes: Some((joined.group.usage_bytes + 24 * MIB) * 100 / 89), ..far.clone() };
        sampler.set_policy(&refusing);
        hog.set_mib(96);
        let short = sampler.sample().expect("sample");
        let r = short.group.ratio();
        assert!(r >= refusing.refuse_at && r < refusing.abort_at, "ratio {r}");
        assert_eq!(rss_of(&short, pid), Some(since), "refusing, the processes wait for their read");

        // The hog grows by 24 MiB more, and the limit is set so that the group is then at about 95%: past abort_at,
        // where every sample reads each process.
        let near = PolicyConfig { limit_bytes: Some((joined.group.usage_bytes + 48 * MIB) * 100 / 95), ..far.clone() };
        sampler.set_policy(&near);
        hog.set_mib(120);
        let fresh = sampler.sample().expect("sample");
        assert!(fresh.group.ratio() >= near.abort_at, "ratio {}", fresh.group.ratio());
        let after = rss_of(&fresh, pid).expect("the hog is sampled");
        assert!(after >= since + 40 * MIB, "past the abort line every sample reads them: {since} then {after}");

        // A process that joins there is listed at the next sample: the abort chooses among every process.
        let late = spawn_in_cgroup(Command::new("sleep").arg("60"), cg.path());
        let listed = sampler.sample().expect("sample");
        assert!(rss_of(&listed, late.pid()).is_some(), "past the abort line, one that joins is listed at once");

        // Aborting lasts down to abort_at - hysteresis, and so do the reads: the hog gives back 24 MiB.
        sampler.aborting = true;
        hog.set_mib(96);
        let aborting = sampler.sample().expect("sample");
        let fell = rss_of(&aborting, pid).expect("the hog is sampled");
        assert!(fell + 16 * MIB <= after, "while aborting every sample reads them: {after} then {fell}");
        sampler.aborting = false;
        hog.set_mib(110);
        let normal = sampler.sample().expect("sample");
        assert!(normal.group.ratio() < near.abort_at, "ratio {}", normal.group.ratio());
        assert_eq!(rss_of(&normal, pid), Some(fell), "no longer aborting, short of abort_at: no read");
    }

    fn traffic(requests_total: u64) -> crate::decision::snapshot::Traffic {
        crate::decision::snapshot::Traffic { requests_total, ..Default::default() }
    }

    fn proc(pid: u32, start_ticks: u64, requests: u64) -> ProcSample {
        ProcSample {
            pid,
            name: "p".into(),
            comm: "p".into(),
            start_ticks,
            ppid: 1,
            rss_bytes: 0,
            anon_bytes: 0,
            traffic: traffic(requests),
        }
    }

    #[test]
    fn between_listings_each_process_keeps_its_counters_and_a_new_one_starts_at_zero() {
        let before = [proc(3, 1, 30), proc(5, 1, 50), proc(9, 1, 90)];
        // 3 is gone, 4 is new, 5 is the same, 9 is another process under the same pid.
        let mut now = [proc(4, 2, 0), proc(5, 1, 0), proc(9, 7, 0)];
        carry_traffic(&before, &mut now);
        let got: Vec<(u32, u64)> = now.iter().map(|p| (p.pid, p.traffic.requests_total)).collect();
        assert_eq!(got, [(4, 0), (5, 50), (9, 0)]);
    }
}
