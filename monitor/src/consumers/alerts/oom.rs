//! `MonitorOomKill`: the kernel's OOM killer killed a process of the group, which the agent exists to prevent.
//! Read from the group's OOM kill count in every sample, in order. The first count seen is the baseline (kills from
//! before the agent started do not page); each growth after it is its own alert, labelled with the count it reached
//! (`oom_kill`), so a second kill pages again while the first is still held.
//!
//! The alert names the process the agent saw vanish: the kernel counts the kill when it sends SIGKILL, and the
//! process leaves the group once it has exited, in the same sample or a later one. So a growth waits up to
//! [`WAIT_MS`] for as many processes as it counts to vanish (those present in the sample before the growth and gone
//! since, the largest first) and fires as soon as they have, or without a name when none did. A victim's RSS is the
//! one last sampled before its teardown (a process being torn down reads as 0 bytes). It is an event, not
//! a state: the condition is held for [`HOLD_MS`] after the kill and then resolved like any other (after `quiet_s`).

use super::{names, Condition};
use crate::feed::Published;
use std::collections::{HashMap, HashSet};

/// How long a kill's condition is held after the agent saw it, in milliseconds (5 minutes).
pub(crate) const HOLD_MS: u64 = 5 * 60 * 1000;
/// How long a kill waits for its process to vanish before it fires without a name, in milliseconds.
pub(crate) const WAIT_MS: u64 = 2000;

/// A process as one sample saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    pid: u32,
    start_ticks: u64,
    name: String,
    rss_bytes: u64,
}

/// One growth of the count.
#[derive(Debug, Clone)]
struct Kill {
    /// The count it reached.
    count: u64,
    /// By how much it grew.
    new: u64,
    /// When the agent saw it (the watcher's clock).
    at_ms: u64,
    cgroup: String,
    /// The processes of the sample before the growth: its victims are among them.
    before: Vec<Seen>,
    /// Those of them seen vanishing since, largest first; at most `new`.
    victims: Vec<Seen>,
}

/// Follows the group's OOM kill count sample by sample (pure: the caller gives the time).
#[derive(Debug, Default)]
pub(crate) struct OomWatch {
    /// The last count seen (None before the first sample that has one).
    last: Option<u64>,
    last_seq: Option<u64>,
    /// The processes of the last sample.
    prev: Vec<Seen>,
    /// Kills still waiting for their process to vanish.
    pending: Vec<Kill>,
    /// Kills fired, held until [`HOLD_MS`] after them.
    held: Vec<Kill>,
}

impl OomWatch {
    /// Takes in the sample `p` (once per sample: a sample already seen, or the last good one repeated while the
    /// group cannot be read, changes nothing) and returns the `MonitorOomKill` conditions true at `now_ms`.
    pub(crate) fn conditions(&mut self, p: &Published, now_ms: u64) -> Vec<Condition> {
        if p.error.is_none() && self.last_seq != Some(p.snapshot.seq) {
            self.last_seq = Some(p.snapshot.seq);
            self.observe(p, now_ms);
        }
        let (ready, waiting): (Vec<Kill>, Vec<Kill>) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|k| k.victims.len() as u64 >= k.new || now_ms >= k.at_ms + WAIT_MS);
        self.pending = waiting;
        self.held.extend(ready);
        self.held.retain(|k| now_ms < k.at_ms + HOLD_MS);
        self.held.iter().map(condition).collect()
    }

    fn observe(&mut self, p: &Published, now_ms: u64) {
        let s = &p.snapshot;
        // The same processes with the same figures as the last sample (between two reads of every process's memory,
        // most samples far from the lines): nothing to rebuild, and nothing vanished.
        let same = self.prev.len() == s.processes.len()
            && self.prev.iter().zip(s.processes.iter()).all(|(q, x)| {
                (q.pid, q.start_ticks) == (x.pid, x.start_ticks)
                    && (x.rss_bytes == q.rss_bytes || x.rss_bytes == 0)
                    && q.name == x.name
            });
        let (now, mut vanished) = if same {
            (None, Vec::new())
        } else {
            let prev: HashMap<(u32, u64), &Seen> = self.prev.iter().map(|x| ((x.pid, x.start_ticks), x)).collect();
            // A process being torn down reads as 0 bytes: it keeps the last RSS it had.
            let now: Vec<Seen> = s
                .processes
                .iter()
                .map(|x| {
                    let last = prev.get(&(x.pid, x.start_ticks)).map_or(0, |q| q.rss_bytes);
                    let rss_bytes = if x.rss_bytes > 0 { x.rss_bytes } else { last };
                    Seen { pid: x.pid, start_ticks: x.start_ticks, name: x.name.clone(), rss_bytes }
                })
                .collect();
            let here: HashSet<(u32, u64)> = now.iter().map(|x| (x.pid, x.start_ticks)).collect();
            let vanished: Vec<(u32, u64)> =
                self.prev.iter().map(|x| (x.pid, x.start_ticks)).filter(|id| !here.contains(id)).collect();
            (Some(now), vanished)
        };
        if let Some(count) = s.group.oom_kills {
            match self.last {
                Some(last) if count > last => self.pending.push(Kill {
                    count,
                    new: count - last,
                    at_ms: now_ms,
                    cgroup: s.group.cgroup.display().to_string(),
                    before: match now {
                        Some(_) => std::mem::take(&mut self.prev),
                        None => self.prev.clone(),
                    },
                    victims: Vec::new(),
                }),
                // The first count is the baseline; a smaller one is a new group under the same path: a new baseline.
                _ => {}
            }
            self.last = Some(count);
        }
        if let Some(now) = now {
            self.prev = now;
        }
        // The oldest kill takes the largest (as the sample before it saw them) of its processes gone since.
        for k in &mut self.pending {
            let mut gone: Vec<&Seen> = k
                .before
                .iter()
                .filter(|x| vanished.contains(&(x.pid, x.start_ticks)))
                .filter(|x| !k.victims.iter().any(|v| v.pid == x.pid && v.start_ticks == x.start_ticks))
                .collect();
            gone.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
            let room = (k.new as usize).saturating_sub(k.victims.len());
            let taken: Vec<Seen> = gone.into_iter().take(room).cloned().collect();
            vanished.retain(|id| !taken.iter().any(|t| (t.pid, t.start_ticks) == *id));
            k.victims.extend(taken);
        }
    }
}

fn condition(k: &Kill) -> Condition {
    let mut c = Condition::new(names::OOM_KILL)
        .label("cgroup", k.cgroup.clone())
        .label("oom_kill", k.count.to_string())
        .annotate("oom_kills", k.count.to_string())
        .annotate("new_kills", k.new.to_string());
    let summary = match k.victims.first() {
        Some(v) => {
            c = c
                .annotate("pid", v.pid.to_string())
                .annotate("name", v.name.clone())
                .annotate("rss_bytes", v.rss_bytes.to_string());
            if k.victims.len() > 1 {
                let all: Vec<String> = k
                    .victims
                    .iter()
                    .map(|v| format!("{} (pid {}, {})", v.name, v.pid, crate::base::units::size(v.rss_bytes)))
                    .collect();
                c = c.annotate("vanished", all.join(", "));
            }
            format!(
                "the kernel's OOM killer killed {} (pid {}, {} resident when last sampled) in {}: {} OOM kill(s) in \
                 the group so far",
                v.name,
                v.pid,
                crate::base::units::size(v.rss_bytes),
                k.cgroup,
                k.count
            )
        }
        None => format!(
            "the kernel's OOM killer killed {} process(es) in {} ({} so far); the agent saw none of the group's \
             processes vanish",
            k.new, k.cgroup, k.count
        ),
    };
    c.annotate("summary", summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::policy::State;
    use crate::decision::snapshot::{ProcSample, Traffic};

    fn proc(pid: u32, name: &str, mib: u64) -> ProcSample {
        ProcSample {
            pid,
            name: name.into(),
            comm: name.into(),
            start_ticks: u64::from(pid) * 10,
            ppid: 1,
            rss_bytes: mib << 20,
            anon_bytes: mib << 20,
            traffic: Traffic::default(),
        }
    }

    /// Sample `seq` with this OOM count and these processes.
    fn sample(seq: u64, oom: Option<u64>, procs: &[(u32, &str, u64)]) -> Published {
        let mut p = Published::test(State::Normal);
        p.snapshot.seq = seq;
        p.snapshot.group.oom_kills = oom;
        p.snapshot.processes = procs.iter().map(|&(pid, n, m)| proc(pid, n, m)).collect::<Vec<_>>().into();
        p
    }

    fn ann<'a>(c: &'a Condition, k: &str) -> Option<&'a str> {
        c.annotations.get(k).map(String::as_str)
    }

    const BOTH: &[(u32, &str, u64)] = &[(10, "server", 40), (11, "grower", 240)];
    const SERVER: &[(u32, &str, u64)] = &[(10, "server", 40)];

    #[test]
    fn the_first_count_is_the_baseline() {
        let mut w = OomWatch::default();
        assert!(w.conditions(&sample(1, Some(3), BOTH), 0).is_empty(), "kills from before the agent do not page");
        assert!(w.conditions(&sample(2, Some(3), SERVER), 50).is_empty(), "a process exiting is no kill");
        assert!(w.conditions(&sample(3, None, SERVER), 100).is_empty());
    }

    #[test]
    fn a_kill_names_the_process_that_vanished_with_it() {
        let mut w = OomWatch::default();
        assert!(w.conditions(&sample(1, Some(0), BOTH), 0).is_empty());
        // The count grows and the grower is gone in the same sample: it fires at once, naming it.
        let c = w.conditions(&sample(2, Some(1), SERVER), 50);
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!(c.name, "MonitorOomKill");
        assert_eq!(c.labels.get("oom_kill").map(String::as_str), Some("1"));
        assert_eq!(c.labels.get("cgroup").map(String::as_str), Some("/g"));
        assert_eq!((ann(c, "pid"), ann(c, "name")), (Some("11"), Some("grower")));
        assert_eq!(ann(c, "rss_bytes"), Some((240u64 << 20).to_string().as_str()));
        assert_eq!(ann(c, "oom_kills"), Some("1"));
        assert!(ann(c, "summary").is_some_and(|s| s.contains("grower (pid 11, 240.0 MiB")), "{c:?}");
        // Held, unchanged, as later samples come, until 5 minutes after the kill.
        assert_eq!(w.conditions(&sample(3, Some(1), SERVER), 60_000), vec![c.clone()]);
        assert_eq!(w.conditions(&sample(3, Some(1), SERVER), 50 + HOLD_MS - 1).len(), 1);
        assert!(w.conditions(&sample(4, Some(1), SERVER), 50 + HOLD_MS).is_empty());
    }

    #[test]
    fn a_kill_counted_before_its_process_exits_waits_for_it() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        // Counted, the victim still listed (exiting): nothing yet.
        assert!(w.conditions(&sample(2, Some(1), BOTH), 50).is_empty());
        assert!(w.conditions(&sample(2, Some(1), BOTH), 1000).is_empty(), "a tick without a new sample");
        let c = w.conditions(&sample(3, Some(1), SERVER), 1050);
        assert_eq!(c.len(), 1);
        assert_eq!(ann(&c[0], "name"), Some("grower"));
    }

    #[test]
    fn the_victim_keeps_the_rss_it_had_before_it_was_torn_down() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        // Counted while the grower is torn down: listed with 0 bytes, then gone.
        assert!(w.conditions(&sample(2, Some(1), &[(10, "server", 40), (11, "grower", 0)]), 50).is_empty());
        let c = w.conditions(&sample(3, Some(1), SERVER), 100);
        assert_eq!(ann(&c[0], "rss_bytes"), Some((240u64 << 20).to_string().as_str()), "{c:?}");
        // Read as 0 already in the sample before the count grew: the RSS of the sample before that.
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        w.conditions(&sample(2, Some(0), &[(10, "server", 40), (11, "grower", 0)]), 50);
        let c = w.conditions(&sample(3, Some(1), SERVER), 100);
        assert_eq!(ann(&c[0], "rss_bytes"), Some((240u64 << 20).to_string().as_str()), "{c:?}");
    }

    #[test]
    fn a_process_started_after_the_kill_is_never_its_victim() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        assert!(w
            .conditions(&sample(2, Some(1), &[(10, "server", 40), (11, "grower", 0), (12, "x", 9)]), 50)
            .is_empty());
        assert!(w.conditions(&sample(3, Some(1), &[(10, "server", 40), (11, "grower", 0)]), 100).is_empty());
        let c = w.conditions(&sample(4, Some(1), SERVER), 150);
        assert_eq!(ann(&c[0], "name"), Some("grower"));
    }

    #[test]
    fn a_kill_whose_process_never_vanishes_fires_without_a_name() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        assert!(w.conditions(&sample(2, Some(1), BOTH), 50).is_empty());
        assert!(w.conditions(&sample(3, Some(1), BOTH), 50 + WAIT_MS - 1).is_empty());
        let c = w.conditions(&sample(4, Some(1), BOTH), 50 + WAIT_MS);
        assert_eq!(c.len(), 1);
        assert_eq!(ann(&c[0], "name"), None);
        assert!(ann(&c[0], "summary").is_some_and(|s| s.contains("saw none")), "{c:?}");
        // A process gone long after does not get named by a kill already told.
        let c = w.conditions(&sample(5, Some(1), SERVER), 60_000);
        assert_eq!(ann(&c[0], "name"), None);
    }

    #[test]
    fn each_growth_is_its_own_alert() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        let first = w.conditions(&sample(2, Some(1), SERVER), 50);
        assert_eq!(first.len(), 1);
        w.conditions(&sample(3, Some(1), &[(10, "server", 40), (12, "grower", 200)]), 10_000);
        let both = w.conditions(&sample(4, Some(2), SERVER), 10_050);
        assert_eq!(both.len(), 2, "the second kill pages again while the first is held");
        assert_ne!(both[0].fingerprint(), both[1].fingerprint());
        assert_eq!(both[1].labels.get("oom_kill").map(String::as_str), Some("2"));
        assert_eq!(ann(&both[1], "pid"), Some("12"));
        // The first expires first.
        let later = w.conditions(&sample(5, Some(2), SERVER), 50 + HOLD_MS);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].labels.get("oom_kill").map(String::as_str), Some("2"));
    }

    #[test]
    fn two_kills_in_one_sample_take_the_two_largest_gone() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(5), &[(1, "a", 10), (2, "b", 300), (3, "c", 200), (4, "d", 5)]), 0);
        let c = w.conditions(&sample(2, Some(7), &[(1, "a", 10)]), 50);
        assert_eq!(c.len(), 1);
        let c = &c[0];
        assert_eq!((ann(c, "new_kills"), ann(c, "oom_kills")), (Some("2"), Some("7")));
        assert_eq!(ann(c, "name"), Some("b"));
        assert_eq!(ann(c, "vanished"), Some("b (pid 2, 300.0 MiB), c (pid 3, 200.0 MiB)"));
    }

    #[test]
    fn a_smaller_count_is_a_new_group_and_a_new_baseline() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(4), BOTH), 0);
        assert!(w.conditions(&sample(2, Some(0), BOTH), 50).is_empty());
        assert_eq!(w.conditions(&sample(3, Some(1), SERVER), 100).len(), 1);
    }

    #[test]
    fn a_failed_sample_repeats_the_last_good_one_and_changes_nothing() {
        let mut w = OomWatch::default();
        w.conditions(&sample(1, Some(0), BOTH), 0);
        let mut stale = sample(1, Some(0), BOTH);
        stale.error = Some("gone".into());
        assert!(w.conditions(&stale, 50).is_empty());
        assert_eq!(w.conditions(&sample(2, Some(1), SERVER), 100).len(), 1);
    }
}
