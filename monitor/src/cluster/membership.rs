//! Drives the gossip crate (foca, sans-IO) over one tokio UDP socket: every datagram in is opened with the cluster
//! secret before the crate sees it, every datagram out is sealed; the crate's timers are kept here and handed back
//! when due. After each step the crate's member list is applied to the [`Members`] view, whose changes are logged
//! and published. Joins through the seeds at start; [`Membership::leave`] tells every live member, then the crate.

use super::identity::NodeId;
use super::load::{self, Load, Loads, Note};
use super::members::{self, Leave, Members, State};
use super::suspicions::Suspicions;
use super::wire::{Kind, Wire, WireError};
use super::ClusterError;
use crate::config::ClusterConfig;
use foca::{AccumulatingRuntime, Foca, OwnedNotification, PostcardCodec, Timer};
use rand::rngs::SmallRng;
use std::collections::HashSet;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

type Gossip = Foca<NodeId, PostcardCodec, SmallRng, load::Handler>;

/// What the driver needs, resolved from `[cluster]` once.
#[derive(Debug, Clone)]
pub struct Settings {
    pub this: NodeId,
    pub listen: SocketAddr,
    pub seeds: Vec<String>,
    pub secret: Vec<u8>,
    pub suspect: Duration,
    pub dead: Duration,
}

impl Settings {
    /// From `[cluster]`, the front door's and the API's listen addresses and the `[[process]]` names.
    pub fn new(
        c: &ClusterConfig,
        proxy_listen: SocketAddr,
        web_listen: SocketAddr,
        processes: Vec<String>,
    ) -> Result<Settings, ClusterError> {
        let secret = c.secret_bytes().map_err(ClusterError::Secret)?;
        let started_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let this = NodeId {
            name: c.node_name(),
            gossip: c.gossip_addr(),
            front: c.front_addr(proxy_listen),
            web: c.front_addr(web_listen),
            processes,
            started_ms,
            generation: 0,
        };
        Ok(Settings {
            this,
            listen: c.listen,
            seeds: c.seeds.clone(),
            secret,
            suspect: Duration::from_millis(c.suspect_timeout_ms),
            dead: Duration::from_millis(c.dead_timeout_ms),
        })
    }

    /// The crate's settings: SWIM's probe period is the suspect timeout (the direct probe waits a third of it),
    /// the suspicion lasts the dead timeout; members that left or died are announced to every few seconds so a
    /// healed partition joins up again.
    fn foca(&self) -> foca::Config {
        let mut c = foca::Config::new_lan(NonZeroU32::MIN.saturating_add(2));
        c.probe_period = self.suspect;
        c.probe_rtt = self.suspect / 3;
        c.suspect_to_down_after = self.dead;
        let every = |ms: u64, n: usize| {
            std::num::NonZeroUsize::new(n)
                .map(|num_members| foca::PeriodicParams { frequency: Duration::from_millis(ms), num_members })
        };
        c.periodic_announce = every(10_000, 1);
        c.periodic_announce_to_down_members = every(5_000, 2);
        c
    }
}

/// What the driver counts on the wire, for `/metrics`.
#[derive(Debug, Default)]
struct Counters {
    /// Datagrams dropped: their mac did not match, they were malformed, outside their time window, or replayed.
    rejected: AtomicU64,
    /// Bytes of the datagrams sent and received (UDP payloads, kind and mac included; not counting IP and UDP
    /// headers, 28 bytes a datagram over IPv4).
    sent: AtomicU64,
    received: AtomicU64,
}

/// A running membership.
pub struct Membership {
    view: watch::Receiver<Arc<Members>>,
    load: watch::Sender<Option<Load>>,
    commands: mpsc::Sender<Command>,
    counters: Arc<Counters>,
    left: std::sync::atomic::AtomicBool,
    /// Set when a clash shows up after the start (two nodes that joined at once): this node, the later, left.
    refused: Refused,
}

/// Why this node left the cluster on its own, shared by the driver and the handle.
type Refused = Arc<std::sync::Mutex<Option<String>>>;

enum Command {
    Leave(oneshot::Sender<()>),
}

/// How long the start waits for a seed to answer before the node goes on alone.
fn join_window(s: &Settings) -> Duration {
    (s.suspect * 3).max(Duration::from_secs(2))
}

impl Membership {
    /// Binds the gossip socket, starts the driver and joins through the seeds. With seeds, waits (at most three
    /// suspect timeouts, and at least 2 s) for the first member to answer, then refuses to go on if this node's
    /// names clash with a live member that started before it.
    pub async fn start(s: Settings) -> Result<Membership, ClusterError> {
        let socket = UdpSocket::bind(s.listen).await.map_err(|source| ClusterError::Bind { addr: s.listen, source })?;
        let mut seeds = Vec::new();
        for seed in &s.seeds {
            match tokio::time::timeout(Duration::from_secs(2), tokio::net::lookup_host(seed.as_str())).await {
                Ok(Ok(addrs)) => seeds.extend(addrs.filter(|a| *a != s.this.gossip)),
                Ok(Err(e)) => tracing::warn!(seed = %seed, "cluster seed skipped: {e}"),
                Err(_) => tracing::warn!(seed = %seed, "cluster seed skipped: no address within 2 s"),
            }
        }
        let (tx, mut view) = watch::channel(Arc::new(Members::new(s.this.clone())));
        let (commands, rx) = mpsc::channel(4);
        let counters = Arc::new(Counters::default());
        let window = join_window(&s);
        let (load, load_rx) = watch::channel(None);
        let refused = Refused::default();
        let driver = Driver::new(&s, socket, seeds.clone(), tx, counters.clone(), refused.clone());
        tokio::spawn(driver.run(rx, load_rx));
        let membership = Membership { view: view.clone(), load, commands, counters, left: Default::default(), refused };
        if !seeds.is_empty() {
            let joined = view.wait_for(|m| m.iter().any(|x| !x.this && x.state.is_live()));
            match tokio::time::timeout(window, joined).await {
                Ok(_) => {}
                Err(_) => tracing::warn!(seeds = ?s.seeds, "no cluster seed answered: going on alone until one does"),
            }
            // Gossip brings the rest of the members within a few periods of the first answer.
            tokio::time::sleep(s.suspect.min(Duration::from_secs(1))).await;
        }
        let clash = membership.members().clash();
        if let Some(c) = clash.filter(|c| c.refused) {
            membership.leave().await;
            return Err(ClusterError::NameClash { names: c.names, member: c.member, gossip: c.gossip });
        }
        tracing::info!(node = %s.this.name, gossip = %s.this.gossip, members = membership.members().iter().count(), "cluster membership started");
        Ok(membership)
    }

    /// The members as this node sees them now.
    pub fn members(&self) -> Arc<Members> {
        self.view.borrow().clone()
    }

    /// This node's load now: gossiped within [`LOAD_EVERY`] when it changed, and at least every
    /// [`LOAD_REFRESH`] (so members that join later learn it).
    pub(crate) fn set_load(&self, load: Load) {
        self.load.send_replace(Some(load));
    }

    /// A receiver of every new view.
    pub fn watch(&self) -> watch::Receiver<Arc<Members>> {
        self.view.clone()
    }

    /// [`Membership::leave`] was called.
    pub(crate) fn has_left(&self) -> bool {
        self.left.load(Ordering::Relaxed)
    }

    /// Why this node left the cluster by itself after its start (its names clash with a member that started
    /// before it), if it did.
    pub fn refused(&self) -> Option<String> {
        self.refused.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Datagrams dropped because their mac did not match the cluster secret, or they were malformed, outside
    /// their time window or replayed.
    pub fn rejected(&self) -> u64 {
        self.counters.rejected.load(Ordering::Relaxed)
    }

    /// Gossip bytes (UDP payloads) this node has sent and received, in that order, authentic or not.
    pub fn gossip_bytes(&self) -> (u64, u64) {
        (self.counters.sent.load(Ordering::Relaxed), self.counters.received.load(Ordering::Relaxed))
    }

    /// Leaves the cluster: every live member is told at once, then the crate spreads the leave. Returns once the
    /// notices are sent (at most a second); the driver stops.
    pub async fn leave(&self) {
        self.left.store(true, Ordering::Relaxed);
        let (done, sent) = oneshot::channel();
        if self.commands.send(Command::Leave(done)).await.is_ok() {
            let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
        }
    }
}

/// How long the front door keeps accepting after the leave notice is sent: a peer may have chosen this node for a
/// forward just before the notice reached it, and that forward still connects here. A notice on a LAN arrives in
/// well under a millisecond; the margin covers a loaded peer.
pub(crate) const LEAVE_LINGER: Duration = Duration::from_millis(250);

/// How often this node's load is looked at, and gossiped if it changed.
pub(crate) const LOAD_EVERY: Duration = Duration::from_secs(2);
/// A load is gossiped at least this often, changed or not.
pub(crate) const LOAD_REFRESH: Duration = Duration::from_secs(10);

/// The gossip address of the member a gossip payload says it is from (its header decoded as the crate does).
pub fn gossip_sender(payload: &[u8]) -> Option<SocketAddr> {
    foca::Codec::<NodeId>::decode_header(&mut PostcardCodec, payload).ok().map(|h| h.src.gossip)
}

/// The task that owns the socket and the crate.
struct Driver {
    gossip: Gossip,
    runtime: AccumulatingRuntime<NodeId>,
    socket: UdpSocket,
    wire: Wire,
    seeds: Vec<SocketAddr>,
    timers: Vec<(Instant, Timer<NodeId>)>,
    members: Members,
    left: HashSet<Leave>,
    /// Authentic datagrams since the last publish, by sender: noted once the crate has applied them (the first
    /// datagram of a member is what makes it one).
    heard: Vec<(SocketAddr, std::time::Instant)>,
    /// The latest load note of each node (this one's too), kept by the crate's handler.
    loads: Loads,
    /// This node's last note sent, and when.
    sent: Option<(Note, Instant)>,
    /// Set, with why, when a clash found after the start makes this node leave.
    refused: Refused,
    /// Members under suspicion, and since when: see [`Suspicions`].
    suspicions: Suspicions,
    /// How long a suspicion may last before the driver declares the member dead itself: the dead timeout plus a
    /// probe period, so the crate's own timer always goes first when it still runs.
    overdue_after: Duration,
    view: watch::Sender<Arc<Members>>,
    counters: Arc<Counters>,
    /// When a datagram outside its time window was last logged as a warning (a node whose clock is off).
    stale_warned: Option<Instant>,
}

impl Driver {
    fn new(
        s: &Settings,
        socket: UdpSocket,
        seeds: Vec<SocketAddr>,
        view: watch::Sender<Arc<Members>>,
        counters: Arc<Counters>,
        refused: Refused,
    ) -> Driver {
        let rng: SmallRng = rand::make_rng();
        let loads = Loads::default();
        let handler = load::Handler { loads: loads.clone() };
        Driver {
            gossip: Foca::with_custom_broadcast(s.this.clone(), s.foca(), rng, PostcardCodec, handler),
            runtime: AccumulatingRuntime::new(),
            socket,
            wire: Wire::new(&s.secret),
            seeds,
            timers: Vec::new(),
            members: Members::new(s.this.clone()),
            left: HashSet::new(),
            heard: Vec::new(),
            loads,
            sent: None,
            refused,
            suspicions: Suspicions::default(),
            overdue_after: s.dead + s.suspect,
            view,
            counters,
            stale_warned: None,
        }
    }

    async fn run(mut self, mut commands: mpsc::Receiver<Command>, load: watch::Receiver<Option<Load>>) {
        let mut loads = tokio::time::interval(LOAD_EVERY);
        let mut buf = vec![0u8; 65_536];
        // Announced to the seeds until a member answers (the seeds may start after this node).
        let mut announce = tokio::time::interval(Duration::from_secs(1));
        loop {
            let next = self.timers.iter().map(|(at, _)| *at).min();
            let sleep = tokio::time::sleep_until(next.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600)));
            tokio::select! {
                r = self.socket.recv_from(&mut buf) => match r {
                    Ok((n, from)) => {
                        self.counters.received.fetch_add(n as u64, Ordering::Relaxed);
                        self.datagram(&buf[..n], from)
                    }
                    Err(e) => {
                        tracing::warn!("cluster gossip socket: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                },
                _ = sleep => self.due_timers(),
                _ = announce.tick() => {
                    if self.gossip.num_members() == 0 {
                        for seed in self.seeds.clone() {
                            let r = self.gossip.announce(NodeId::seed(seed), &mut self.runtime);
                            self.note(r);
                        }
                    }
                }
                _ = loads.tick() => {
                    let now = load.borrow().clone();
                    if let Some(now) = now {
                        self.gossip_load(now);
                    }
                    self.expire_suspicions();
                }
                c = commands.recv() => {
                    match c {
                        Some(Command::Leave(done)) => {
                            self.leave().await;
                            let _ = done.send(());
                        }
                        None => {}
                    }
                    return;
                }
            }
            self.flush().await;
            if let Some(c) = self.members.clash().filter(|c| c.refused) {
                let why = format!(
                    "refused by the cluster: member {} ({}) already has {}",
                    c.member,
                    c.gossip,
                    c.names.join(", ")
                );
                tracing::error!("{why}: leaving the cluster");
                *self.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
                self.leave().await;
                return;
            }
        }
    }

    /// Hands this node's load to the crate when it changed or the last note is old.
    fn gossip_load(&mut self, load: Load) {
        let fresh = self.sent.as_ref().is_some_and(|(n, at)| n.load == load && at.elapsed() < LOAD_REFRESH);
        if fresh {
            return;
        }
        let this = self.members.this();
        let seq = self.sent.as_ref().map_or(0, |(n, _)| n.seq + 1);
        let note = Note { gossip: this.gossip, started_ms: this.started_ms, seq, load };
        if let Err(e) = self.gossip.add_broadcast(note.encode().as_bytes()) {
            tracing::debug!("cluster load note: {e}");
        }
        self.sent = Some((note, Instant::now()));
    }

    /// Declares dead the members whose suspicion outlived the crate's timer (see [`Suspicions`]).
    fn expire_suspicions(&mut self) {
        let now = Instant::now();
        let overdue = self.suspicions.overdue(now, self.overdue_after);
        if overdue.is_empty() {
            return;
        }
        for m in &overdue {
            tracing::info!(member = %m.id().name, gossip = %m.id().gossip, "cluster member still suspect after the dead timeout: declared dead");
        }
        let r = self.gossip.apply_many(overdue.into_iter(), true, &mut self.runtime);
        self.note(r);
    }

    fn note(&self, r: Result<(), foca::Error>) {
        if let Err(e) = r {
            tracing::debug!("cluster gossip: {e}");
        }
    }

    fn datagram(&mut self, data: &[u8], from: SocketAddr) {
        match self.wire.open(data, super::unix_ms()) {
            Ok((Kind::Gossip, payload)) => {
                // Heard from the member the datagram says it is from (its source address may differ from the one
                // it advertises, behind NAT or with a wildcard listen).
                match gossip_sender(payload) {
                    Some(gossip) => self.heard.push((gossip, Instant::now().into_std())),
                    None => tracing::debug!(%from, "cluster gossip datagram without a header"),
                }
                let r = self.gossip.handle_data(payload, &mut self.runtime);
                self.note(r);
            }
            Ok((Kind::Leave, payload)) => match members::parse_leave(payload) {
                Some(leave) => {
                    self.left.insert(leave);
                }
                None => tracing::debug!(%from, "cluster leave notice malformed"),
            },
            Err(e) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                // Authentic but out of time: a member's clock is off, and it stays out until it agrees. Said once a
                // minute at most.
                let warn =
                    e == WireError::Stale && self.stale_warned.is_none_or(|at| at.elapsed() > Duration::from_secs(60));
                if warn {
                    self.stale_warned = Some(Instant::now());
                    tracing::warn!(%from, "cluster datagram dropped: {e}");
                } else {
                    tracing::debug!(%from, "cluster datagram dropped: {e}");
                }
            }
        }
    }

    fn due_timers(&mut self) {
        let now = Instant::now();
        let (due, later): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.timers).into_iter().partition(|(at, _)| *at <= now);
        self.timers = later;
        let mut due: Vec<Timer<NodeId>> = due.into_iter().map(|(_, t)| t).collect();
        // The crate's order for events handled together.
        due.sort();
        for t in due {
            let r = self.gossip.handle_timer(t, &mut self.runtime);
            self.note(r);
        }
    }

    /// Sends what the crate wants sent, keeps its timers, logs its notifications and publishes the view.
    async fn flush(&mut self) {
        while let Some((to, data)) = self.runtime.to_send() {
            let sealed = self.wire.seal(Kind::Gossip, &data, super::unix_ms());
            match self.socket.send_to(&sealed, to.gossip).await {
                Ok(n) => _ = self.counters.sent.fetch_add(n as u64, Ordering::Relaxed),
                Err(e) => tracing::debug!(to = %to.gossip, "cluster gossip send: {e}"),
            }
        }
        let now = Instant::now();
        while let Some((after, t)) = self.runtime.to_schedule() {
            self.timers.push((now + after, t));
        }
        while let Some(n) = self.runtime.to_notify() {
            match n {
                OwnedNotification::Defunct => tracing::warn!("this node was declared dead by the cluster"),
                OwnedNotification::Rejoin(id) => tracing::info!(generation = id.generation, "rejoined the cluster"),
                OwnedNotification::Idle => tracing::info!("no other cluster member is alive"),
                _ => {}
            }
        }
        self.publish();
    }

    fn publish(&mut self) {
        self.suspicions.follow(self.gossip.iter_membership_state(), Instant::now());
        let seen: Vec<(NodeId, State)> = self
            .gossip
            .iter_membership_state()
            .map(|m| {
                let state = match m.state() {
                    foca::State::Alive => State::Alive,
                    foca::State::Suspect => State::Suspect,
                    foca::State::Down => State::Dead,
                };
                (m.id().clone(), state)
            })
            .collect();
        let changes = self.members.update(seen.iter().map(|(id, s)| (id, *s)), &self.left);
        let now_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.members.record(&changes, now_unix_ms);
        for c in &changes {
            let from = c.from.map(State::as_str).unwrap_or("unknown");
            tracing::info!(member = %c.node, gossip = %c.gossip, from, to = c.to.as_str(), "cluster member {}", c.what());
        }
        let heard = !self.heard.is_empty();
        for (from, at) in self.heard.drain(..) {
            self.members.heard(from, at);
        }
        let loaded = {
            let loads = self.loads.lock().unwrap_or_else(|p| p.into_inner());
            self.members.set_loads(loads.values())
        };
        if !changes.is_empty() || heard || loaded {
            self.view.send_replace(Arc::new(self.members.clone()));
        }
    }

    /// Tells every live member that this node leaves, then lets the crate spread it.
    async fn leave(&mut self) {
        let this = self.members.this().clone();
        let notice = self.wire.seal(Kind::Leave, &members::encode_leave(&this.name, this.started_ms), super::unix_ms());
        let live: Vec<SocketAddr> =
            self.members.iter().filter(|m| !m.this && m.state.is_live()).map(|m| m.id.gossip).collect();
        for to in &live {
            match self.socket.send_to(&notice, to).await {
                Ok(n) => _ = self.counters.sent.fetch_add(n as u64, Ordering::Relaxed),
                Err(e) => tracing::debug!(%to, "cluster leave notice: {e}"),
            }
        }
        let r = self.gossip.leave_cluster(&mut self.runtime);
        self.note(r);
        self.flush().await;
        tracing::info!(told = live.len(), "left the cluster");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef";

    /// A UDP port free on 127.0.0.1 now.
    fn free_port() -> u16 {
        let s = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
        s.local_addr().expect("addr").port()
    }

    fn settings(name: &str, procs: &[&str], seeds: &[SocketAddr], secret: &[u8]) -> Settings {
        let gossip = SocketAddr::from(([127, 0, 0, 1], free_port()));
        Settings {
            this: NodeId {
                name: name.into(),
                gossip,
                front: SocketAddr::from(([127, 0, 0, 1], 8080)),
                web: SocketAddr::from(([127, 0, 0, 1], 9464)),
                processes: procs.iter().map(|p| p.to_string()).collect(),
                started_ms: std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
                generation: 0,
            },
            listen: gossip,
            seeds: seeds.iter().map(|s| s.to_string()).collect(),
            secret: secret.to_vec(),
            suspect: Duration::from_millis(200),
            dead: Duration::from_millis(600),
        }
    }

    fn state_of(m: &Membership, node: &str) -> Option<State> {
        m.members().iter().find(|x| x.id.name == node).map(|x| x.state)
    }

    /// Waits (at most 5 s) until `m` sees `node` in `state`.
    async fn until(m: &Membership, node: &str, state: State) {
        let mut w = m.watch();
        let seen = w.wait_for(|v| v.iter().any(|x| x.id.name == node && x.state == state));
        if tokio::time::timeout(Duration::from_secs(5), seen).await.is_err() {
            panic!("{node} not {state:?} within 5 s: {:?}", state_of(m, node));
        }
    }

    #[tokio::test]
    async fn two_nodes_join_a_stranger_is_refused_a_clash_stops_and_a_leave_is_seen_at_once() {
        let a = Membership::start(settings("a", &["a0"], &[], SECRET)).await.expect("a starts");
        let load = Load { memory_ratio: 0.5, policy: "normal".into() };
        a.set_load(load.clone());
        let a_addr = a.members().this().gossip;
        let b = Membership::start(settings("b", &["b0", "b1"], &[a_addr], SECRET)).await.expect("b joins");
        until(&a, "b", State::Alive).await;
        until(&b, "a", State::Alive).await;
        let seen = b.members();
        let on_b = seen.iter().find(|x| x.id.name == "a").expect("a on b");
        assert_eq!(on_b.id.processes, ["a0"]);
        assert!(on_b.last_heard.is_some(), "b heard from a");
        let seen = a.members();
        let on_a = seen.iter().find(|x| x.id.name == "b").expect("b on a");
        assert!(on_a.last_heard.is_some(), "a heard from b: {on_a:?}");
        assert_eq!(a.members().owner("b1").map(|o| o.id.name.clone()), Some("b".into()));
        // a's load reaches b with the gossip, within a look at it and a few gossip rounds.
        let mut w = b.watch();
        let loaded = w.wait_for(|v| v.iter().any(|x| x.id.name == "a" && x.load.as_ref() == Some(&load)));
        assert!(tokio::time::timeout(LOAD_EVERY * 2, loaded).await.is_ok(), "a's load not on b: {:?}", b.members());

        // A node without the secret: its datagrams are dropped and counted, and it never becomes a member.
        let before = a.rejected();
        let stranger = Membership::start(settings("s", &["s0"], &[a_addr], b"another secret of thirty-two byt"))
            .await
            .expect("the stranger starts alone");
        assert!(a.rejected() > before, "a counted the stranger's datagrams");
        assert_eq!(state_of(&a, "s"), None);
        assert!(stranger.members().iter().all(|x| x.this), "the stranger knows nobody");

        // A node with a process name of b's, started later: refused, naming the names and the member.
        match Membership::start(settings("c", &["c0", "b1"], &[a_addr], SECRET)).await {
            Err(ClusterError::NameClash { names, member, .. }) => {
                assert_eq!((names, member.as_str()), (vec!["b1".to_string()], "b"))
            }
            Err(e) => panic!("another error: {e}"),
            Ok(_) => panic!("a clashing node was let in"),
        }

        // b leaves: a sees it left at once, well before the suspect and dead timeouts would have.
        let t = std::time::Instant::now();
        b.leave().await;
        until(&a, "b", State::Left).await;
        assert!(t.elapsed() < Duration::from_millis(200), "left after {:?}", t.elapsed());
    }

    #[tokio::test]
    async fn a_clash_found_after_the_start_makes_the_later_node_leave_and_say_why() {
        // a and c start alone with the same process name; b then joins both, and gossip brings them together.
        let a = Membership::start(settings("a", &["x0"], &[], SECRET)).await.expect("a starts");
        tokio::time::sleep(Duration::from_millis(5)).await;
        let c = Membership::start(settings("c", &["x0", "c1"], &[], SECRET)).await.expect("c starts alone");
        let seeds = [a.members().this().gossip, c.members().this().gossip];
        let _b = Membership::start(settings("b", &["b0"], &seeds, SECRET)).await.expect("b joins");
        until(&a, "c", State::Left).await;
        let why = c.refused().unwrap_or_default();
        assert!(why.contains("member a") && why.contains("already has x0"), "{why:?}");
        assert_eq!(a.refused(), None, "the earlier node stays");
        assert_eq!(state_of(&a, "b"), Some(State::Alive));
    }
}
