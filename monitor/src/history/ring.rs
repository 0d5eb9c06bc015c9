//! Pure aggregation of published samples into per-second points and per-minute rows. No I/O: the consumer task
//! feeds it every sample, keeps the seconds of the last hour and the minutes of the last week, and sends each
//! finished minute to the store.

use crate::decision::policy::State;
use std::collections::HashMap;

/// The most series names held at once. A week of minutes of a steady group names a few hundred; a group whose
/// processes take ever new names (`memfd:` programs, names set by the processes themselves) would otherwise grow
/// the table, and every minute's copy of it, forever. At the cap, the indexes whose names no kept second or minute
/// and no live process uses are handed out again ([`Labels::release`]); while none is, new names share
/// [`OVERFLOW`].
pub const LABELS_MAX: usize = 4096;
/// The index of the names that come while the table is full and no index is free: one series, named
/// [`OVERFLOW_NAME`]. Never another name's index.
pub const OVERFLOW: u16 = (LABELS_MAX - 1) as u16;
/// The series name of [`OVERFLOW`] (longer than a command name can be, so no process is named so).
pub const OVERFLOW_NAME: &str = "(names past the cap)";

/// Series names and roles, interned: a point refers to its process by index. At most [`LABELS_MAX`] indexes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Labels {
    /// (name, role) by index; a released index keeps its last name until it is handed out again.
    names: Vec<(String, String)>,
    /// The index of each name held.
    index: HashMap<String, u16>,
    /// Released indexes, handed out before new ones.
    free: Vec<u16>,
}

impl Labels {
    /// The index of `name`, added with `role` if new (a known name keeps its first role unless it was `process`):
    /// a released index if there is one, else a new one below [`OVERFLOW`], else [`OVERFLOW`].
    pub fn intern(&mut self, name: &str, role: &str) -> u16 {
        if let Some(&i) = self.index.get(name) {
            if let Some(entry) = self.names.get_mut(i as usize) {
                if entry.1 == "process" && role != "process" {
                    entry.1 = role.to_string();
                }
            }
            return i;
        }
        let entry = (name.to_string(), role.to_string());
        let i = match self.free.pop() {
            Some(i) => {
                self.names[i as usize] = entry;
                i
            }
            None if self.names.len() < OVERFLOW as usize => {
                self.names.push(entry);
                (self.names.len() - 1) as u16
            }
            None => {
                if self.names.len() == OVERFLOW as usize {
                    self.names.push((OVERFLOW_NAME.to_string(), "process".to_string()));
                }
                return OVERFLOW;
            }
        };
        self.index.insert(name.to_string(), i);
        i
    }

    /// The index of `name`, if it holds one.
    pub fn lookup(&self, name: &str) -> Option<u16> {
        self.index.get(name).copied()
    }

    /// How many new names would get an index of their own (the rest get [`OVERFLOW`]).
    pub fn room(&self) -> usize {
        self.free.len() + (OVERFLOW as usize).saturating_sub(self.names.len())
    }

    /// Releases every index `used` does not mark (by index; [`OVERFLOW`] aside), for new names to take; returns
    /// them. The caller marks every index a kept second or minute, a live process or an open row still refers to,
    /// and forgets what else it keeps by the released ones.
    pub fn release(&mut self, used: &[bool]) -> Vec<u16> {
        let mut freed = Vec::new();
        for i in 0..self.names.len().min(OVERFLOW as usize) {
            let l = i as u16;
            if used.get(i).copied().unwrap_or(false) || self.index.get(&self.names[i].0) != Some(&l) {
                continue;
            }
            self.index.remove(&self.names[i].0);
            freed.push(l);
        }
        // Handed out lowest first.
        self.free.extend(freed.iter().rev());
        freed
    }

    /// (name, role) of an index; ("?", "process") for an unknown one.
    pub fn get(&self, i: u16) -> (&str, &str) {
        self.names.get(i as usize).map(|(n, r)| (n.as_str(), r.as_str())).unwrap_or(("?", "process"))
    }

    /// The names held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// The indexes taken, released ones included: at most [`LABELS_MAX`].
    pub fn slots(&self) -> usize {
        self.names.len()
    }
}

/// One process during one second.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcSecond {
    pub label: u16,
    /// Peak resident bytes.
    pub rss: u64,
    /// Peak anonymous bytes (`RssAnon`): what the group's usage is made of.
    pub anon: u64,
    /// Requests started during the second.
    pub requests: u32,
    /// 5xx responses during the second.
    pub err5xx: u32,
    pub inflight: u32,
    pub p50_us: u32,
    pub p99_us: u32,
}

/// The group during one second.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Second {
    /// Unix seconds.
    pub t: u64,
    pub usage: u64,
    pub limit: u64,
    /// The worst state: 0 normal, 1 refusing, 2 aborting.
    pub state: u8,
    /// Entries into refusing or aborting from normal.
    pub refusals: u32,
    /// Victims chosen (each abort round).
    pub aborts: u32,
    /// Requests shed by the front door.
    pub shed: u32,
    pub procs: Vec<ProcSecond>,
    /// Processes that restarted (a new pid under the same name) during the second.
    pub restarted: Vec<u16>,
}

/// One process during one minute (what the store keeps). The agent holds a week of these for every process (10,080
/// per process), so the counts are as wide as a minute needs and no wider: 48 bytes, where u64 counts took 64
/// (`cargo xtask bench web` reads the agent's memory with the week loaded). A count past its type's range (over
/// 4 billion requests, 65,535 restarts in a minute) saturates.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcMinute {
    pub label: u16,
    pub restarts: u16,
    pub rss_max: u64,
    pub rss_mean: u64,
    pub anon_max: u64,
    pub requests: u32,
    pub err5xx: u32,
    pub inflight_max: u32,
    /// The worst second's p50 and p99.
    pub p50_us: u32,
    pub p99_us: u32,
}

/// The group during one minute.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Minute {
    /// Unix seconds of the minute's start.
    pub t: u64,
    pub usage_max: u64,
    pub usage_mean: u64,
    pub limit: u64,
    pub state_max: u8,
    pub refusing_s: u32,
    pub aborting_s: u32,
    pub refusals: u32,
    pub aborts: u32,
    pub shed: u64,
    pub procs: Vec<ProcMinute>,
}

/// The numeric state of the page's spans.
pub(crate) fn state_code(s: State) -> u8 {
    match s {
        State::Normal => 0,
        State::Refusing => 1,
        State::Aborting => 2,
    }
}

/// One process of one sample, already named.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ProcInput {
    pub label: u16,
    /// The name is a number among namesakes (`comm#2`): a new pid under it is not a restart.
    pub numbered: bool,
    pub pid: u32,
    pub start_ticks: u64,
    pub rss: u64,
    pub anon: u64,
    pub requests_total: u64,
    pub err5xx_total: u64,
    pub inflight: u64,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
}

/// One sample, reduced to what the history keeps.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Input {
    pub unix_ms: u64,
    pub usage: u64,
    pub limit: u64,
    pub state: u8,
    /// The decision changed with this sample and chose a (new) victim.
    pub new_victim: bool,
    pub shed_total: u64,
    pub procs: Vec<ProcInput>,
}

/// The minute being filled: the group's row (usage summed), each process's row with its RSS sum and count, and
/// how many seconds it holds.
type OpenMinute = (Minute, HashMap<u16, (ProcMinute, u64, u64)>, u64);

/// Turns samples into seconds and seconds into minutes.
#[derive(Debug, Default)]
pub(crate) struct Aggregator {
    cur: Option<Second>,
    minute: Option<OpenMinute>,
    counters: HashMap<(u32, u64), (u64, u64)>,
    ids: HashMap<u16, (u32, u64)>,
    /// Where each label's row is in the current second's `procs`, plus one (0: none yet), indexed by label.
    rows: Vec<u32>,
    last_state: u8,
    last_shed: Option<u64>,
}

fn sat32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

impl Aggregator {
    /// Adds one sample; returns the second (and the minute) it finished, if any.
    pub fn push(&mut self, s: &Input) -> (Option<Second>, Option<Minute>) {
        let t = s.unix_ms / 1000;
        let mut done = (None, None);
        if self.cur.as_ref().is_some_and(|c| c.t != t) {
            if let Some(sec) = self.take_second() {
                done.1 = self.add_second(&sec);
                done.0 = Some(sec);
            }
        }
        let cur = self.cur.get_or_insert_with(|| Second { t, ..Second::default() });
        cur.usage = cur.usage.max(s.usage);
        cur.limit = s.limit;
        cur.state = cur.state.max(s.state);
        if self.last_state == 0 && s.state > 0 {
            cur.refusals += 1;
        }
        self.last_state = s.state;
        if s.new_victim {
            cur.aborts += 1;
        }
        let shed_prev = self.last_shed.unwrap_or(s.shed_total);
        cur.shed += sat32(s.shed_total.saturating_sub(shed_prev));
        self.last_shed = Some(s.shed_total);
        for p in &s.procs {
            let id = (p.pid, p.start_ticks);
            let (req0, err0) = self.counters.insert(id, (p.requests_total, p.err5xx_total)).unwrap_or((0, 0));
            if let Some(old) = self.ids.insert(p.label, id) {
                if old != id && !p.numbered && !cur.restarted.contains(&p.label) {
                    cur.restarted.push(p.label);
                }
            }
            let l = p.label as usize;
            if self.rows.len() <= l {
                self.rows.resize(l + 1, 0);
            }
            let idx = match self.rows[l] {
                0 => {
                    cur.procs.push(ProcSecond { label: p.label, ..ProcSecond::default() });
                    self.rows[l] = cur.procs.len() as u32;
                    cur.procs.len() - 1
                }
                r => r as usize - 1,
            };
            let ps = &mut cur.procs[idx];
            ps.rss = ps.rss.max(p.rss);
            ps.anon = ps.anon.max(p.anon);
            ps.requests = ps.requests.saturating_add(sat32(p.requests_total.saturating_sub(req0)));
            ps.err5xx = ps.err5xx.saturating_add(sat32(p.err5xx_total.saturating_sub(err0)));
            ps.inflight = ps.inflight.max(sat32(p.inflight));
            if let Some(v) = p.p50_us {
                ps.p50_us = sat32(v);
            }
            if let Some(v) = p.p99_us {
                ps.p99_us = sat32(v);
            }
        }
        // The counters of processes gone since the last sample are dropped (each id is in the sample once, so more
        // ids kept than processes sampled means some are gone).
        if self.counters.len() > s.procs.len() {
            let here: std::collections::HashSet<(u32, u64)> = s.procs.iter().map(|p| (p.pid, p.start_ticks)).collect();
            self.counters.retain(|id, _| here.contains(id));
        }
        done
    }

    /// Folds a finished second into the current minute; returns the minute it finished, if any.
    fn add_second(&mut self, sec: &Second) -> Option<Minute> {
        let mt = sec.t - sec.t % 60;
        let mut finished = None;
        if self.minute.as_ref().is_some_and(|(m, _, _)| m.t != mt) {
            finished = self.minute.take().map(Self::close_minute);
        }
        let (m, procs, n) =
            self.minute.get_or_insert_with(|| (Minute { t: mt, ..Minute::default() }, HashMap::new(), 0));
        *n += 1;
        m.usage_max = m.usage_max.max(sec.usage);
        m.usage_mean += sec.usage; // a sum until the minute closes
        m.limit = sec.limit;
        m.state_max = m.state_max.max(sec.state);
        m.refusing_s += u32::from(sec.state == 1);
        m.aborting_s += u32::from(sec.state == 2);
        m.refusals += sec.refusals;
        m.aborts += sec.aborts;
        m.shed += sec.shed as u64;
        for p in &sec.procs {
            let (pm, sum, cnt) =
                procs.entry(p.label).or_insert_with(|| (ProcMinute { label: p.label, ..ProcMinute::default() }, 0, 0));
            pm.rss_max = pm.rss_max.max(p.rss);
            pm.anon_max = pm.anon_max.max(p.anon);
            *sum += p.rss;
            *cnt += 1;
            pm.requests = pm.requests.saturating_add(p.requests);
            pm.err5xx = pm.err5xx.saturating_add(p.err5xx);
            pm.inflight_max = pm.inflight_max.max(p.inflight);
            pm.p50_us = pm.p50_us.max(p.p50_us);
            pm.p99_us = pm.p99_us.max(p.p99_us);
            pm.restarts = pm.restarts.saturating_add(u16::from(sec.restarted.contains(&p.label)));
        }
        finished
    }

    fn close_minute((mut m, procs, n): OpenMinute) -> Minute {
        m.usage_mean /= n.max(1);
        m.procs = procs
            .into_values()
            .map(|(mut pm, sum, cnt)| {
                pm.rss_mean = sum / cnt.max(1);
                pm
            })
            .collect();
        m.procs.sort_by_key(|p| p.label);
        m
    }

    /// Takes the current second, its rows forgotten.
    fn take_second(&mut self) -> Option<Second> {
        let sec = self.cur.take()?;
        for p in &sec.procs {
            if let Some(r) = self.rows.get_mut(p.label as usize) {
                *r = 0;
            }
        }
        Some(sec)
    }

    /// Marks in `used` (by index) the labels of the second and the minute being filled.
    pub fn mark_used(&self, used: &mut [bool]) {
        let mut mark = |l: u16| {
            if let Some(u) = used.get_mut(l as usize) {
                *u = true;
            }
        };
        if let Some(c) = &self.cur {
            c.procs.iter().for_each(|p| mark(p.label));
            c.restarted.iter().for_each(|&l| mark(l));
        }
        if let Some((_, procs, _)) = &self.minute {
            procs.keys().for_each(|&l| mark(l));
        }
    }

    /// Forgets the processes last seen under labels released: a new name under one is no restart.
    pub fn forget(&mut self, released: &[u16]) {
        for l in released {
            self.ids.remove(l);
        }
    }

    /// Closes the current second and minute (at shutdown), returning what they held.
    pub fn flush(&mut self) -> (Option<Second>, Option<Minute>) {
        let sec = self.take_second();
        let mut minute = sec.as_ref().and_then(|s| self.add_second(s));
        if minute.is_none() {
            minute = self.minute.take().map(Self::close_minute);
        }
        (sec, minute)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_minute_is_40_bytes() {
        // The agent holds a week of them per process: 64 processes take 26 MB at this size, 36 MB at 56 bytes.
        assert_eq!(std::mem::size_of::<ProcMinute>(), 48);
    }

    fn proc(label: u16, pid: u32, rss: u64, req: u64, err: u64) -> ProcInput {
        ProcInput {
            label,
            numbered: false,
            pid,
            start_ticks: pid as u64 * 10,
            rss,
            anon: rss / 2,
            requests_total: req,
            err5xx_total: err,
            inflight: 1,
            p50_us: Some(100),
            p99_us: Some(900),
        }
    }

    fn input(ms: u64, usage: u64, state: u8, procs: Vec<ProcInput>) -> Input {
        Input { unix_ms: ms, usage, limit: 1000, state, new_victim: false, shed_total: ms / 100, procs }
    }

    #[test]
    fn samples_become_seconds_with_deltas_and_peaks() {
        let mut a = Aggregator::default();
        assert_eq!(a.push(&input(10_000, 100, 0, vec![proc(0, 7, 50, 10, 1)])), (None, None));
        a.push(&input(10_500, 300, 1, vec![proc(0, 7, 80, 25, 3)]));
        let (sec, min) = a.push(&input(11_000, 200, 0, vec![proc(0, 7, 60, 30, 3)]));
        let sec = sec.expect("second 10 closed");
        assert!(min.is_none());
        assert_eq!((sec.t, sec.usage, sec.state, sec.refusals), (10, 300, 1, 1));
        // The first sample of a pid counts from zero: 10 + 15.
        assert_eq!((sec.procs[0].rss, sec.procs[0].requests, sec.procs[0].err5xx), (80, 25, 3));
        assert_eq!(sec.procs[0].anon, 40, "the peak anon");
        assert_eq!(sec.shed, 5);
    }

    #[test]
    fn a_new_pid_under_a_name_is_a_restart_and_counts_from_zero() {
        let mut a = Aggregator::default();
        a.push(&input(1_000, 1, 0, vec![proc(0, 7, 1, 100, 0)]));
        a.push(&input(2_000, 1, 0, vec![proc(0, 8, 1, 5, 0)]));
        let (sec, _) = a.push(&input(3_000, 1, 0, vec![proc(0, 8, 1, 6, 0)]));
        let sec = sec.expect("second 2");
        assert_eq!(sec.restarted, vec![0]);
        assert_eq!(sec.procs[0].requests, 5);
    }

    #[test]
    fn seconds_become_minutes() {
        let mut a = Aggregator::default();
        let mut minutes = Vec::new();
        for s in 0..130u64 {
            let state = if (60..70).contains(&s) { 2 } else { 0 };
            let (_, m) = a.push(&input(s * 1000, s, state, vec![proc(0, 7, s, s * 2, 0)]));
            minutes.extend(m);
        }
        assert_eq!(minutes.len(), 2);
        let m = &minutes[1];
        assert_eq!((m.t, m.usage_max, m.usage_mean, m.aborting_s, m.refusals), (60, 119, 89, 10, 1));
        assert_eq!((m.procs[0].rss_max, m.procs[0].requests, m.procs[0].restarts), (119, 120, 0));
        assert_eq!(m.procs[0].anon_max, 59, "the peak anon");
        let (sec, last) = a.flush();
        assert_eq!(sec.map(|s| s.t), Some(129));
        assert_eq!(last.map(|m| m.t), Some(120));
    }

    #[test]
    fn labels_intern_and_upgrade_the_role() {
        let mut l = Labels::default();
        assert_eq!(l.intern("node", "process"), 0);
        assert_eq!(l.intern("tx1", "worker"), 1);
        assert_eq!(l.intern("node", "master"), 0);
        assert_eq!(l.get(0), ("node", "master"));
        assert_eq!(l.get(9), ("?", "process"));
    }

    #[test]
    fn past_the_cap_a_new_name_gets_the_overflow_never_another_names_index() {
        let mut l = Labels::default();
        for i in 0..OVERFLOW {
            assert_eq!(l.intern(&format!("p{i}"), "process"), i);
        }
        assert_eq!(l.room(), 0);
        assert_eq!(l.intern("late", "worker"), OVERFLOW);
        assert_eq!(l.intern("later", "worker"), OVERFLOW);
        assert_eq!(l.get(OVERFLOW), (OVERFLOW_NAME, "process"));
        assert_eq!(l.intern("p7", "process"), 7, "a name held keeps its index");
        assert_eq!(l.slots(), LABELS_MAX);
        // Released: the indexes nothing uses go to the next names, the rest stay their names'.
        let mut used = vec![true; LABELS_MAX];
        used[3] = false;
        used[9] = false;
        assert_eq!(l.release(&used), vec![3, 9]);
        assert_eq!(l.intern("new1", "process"), 3);
        assert_eq!(l.intern("new2", "process"), 9);
        assert_eq!(l.intern("new3", "process"), OVERFLOW);
        assert_eq!((l.get(3).0, l.get(9).0, l.get(4).0), ("new1", "new2", "p4"));
        assert_eq!(l.lookup("p3"), None, "a released name is no longer held");
        assert_eq!(l.intern("p3", "process"), OVERFLOW, "and comes back as any new name");
    }

    /// 70,000 names over time, a few hundred alive at once and those of the last few rounds still kept: the
    /// table stays at its cap, and every name kept maps to an index of its own that names it.
    #[test]
    fn seventy_thousand_names_over_time_keep_the_table_at_its_cap_and_each_live_name_its_own_index() {
        let mut l = Labels::default();
        let (batch, kept_rounds) = (350usize, 8usize);
        let mut rounds: std::collections::VecDeque<Vec<String>> = Default::default();
        let mut n = 0;
        while n < 70_000 {
            let names: Vec<String> = (n..n + batch).map(|i| format!("comm{i}")).collect();
            n += batch;
            if l.room() < batch {
                let mut used = vec![false; LABELS_MAX];
                for name in rounds.iter().flatten() {
                    if let Some(i) = l.lookup(name) {
                        used[i as usize] = true;
                    }
                }
                l.release(&used);
            }
            let idx: Vec<u16> = names.iter().map(|name| l.intern(name, "process")).collect();
            for (name, &i) in names.iter().zip(&idx) {
                assert_ne!(i, OVERFLOW, "{name}: room was released");
                assert_eq!(l.get(i).0, name, "{name} maps back to itself");
            }
            rounds.push_back(names);
            if rounds.len() > kept_rounds {
                rounds.pop_front();
            }
            assert!(l.slots() <= LABELS_MAX, "{} slots", l.slots());
            let mut seen = std::collections::HashSet::new();
            for name in rounds.iter().flatten() {
                let i = l.lookup(name).unwrap_or_else(|| panic!("{name} kept but not held"));
                assert!(seen.insert(i), "{name} shares index {i}");
                assert_eq!(l.get(i).0, name);
            }
        }
        assert!(l.len() <= LABELS_MAX);
    }
}
