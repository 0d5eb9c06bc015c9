//! The configured names of the processes `monitor run` launched, applied to the samples: the process the launcher
//! started as `[[process]] name = "tx1"` is `tx1` in every sample that lists it, for its whole life, so that every
//! consumer (the actions' POSTs, the decision log, the alerts, the status, the page and the stats database) names it
//! so; its `comm` stays in [`ProcSample::comm`]. The processes it forks itself (a master's workers) keep their
//! `comm`.

use crate::decision::policy::ProcId;
use crate::decision::snapshot::ProcSample;
use std::collections::HashMap;

/// The configured name of each launched process seen so far, by its pid and start time: a process keeps its name
/// after the launcher has let go of its pid (it was killed and is exiting, or is being restarted) for as long as
/// it is listed.
#[derive(Debug, Default)]
pub(crate) struct Names {
    given: HashMap<ProcId, String>,
}

impl Names {
    /// Names each process of `samples` (one listing of the group) that the launcher started (`launched`: the
    /// configured name of a pid it holds now) or that was named so before; forgets the processes the listing no
    /// longer holds.
    pub(crate) fn apply<'a>(&mut self, launched: impl Fn(u32) -> Option<&'a str>, samples: &mut [ProcSample]) {
        let mut seen = HashMap::with_capacity(self.given.len());
        for p in samples.iter_mut() {
            let id = ProcId { pid: p.pid, start_ticks: p.start_ticks };
            let name = match self.given.remove(&id) {
                Some(name) => name,
                None => match launched(p.pid) {
                    Some(name) => name.to_string(),
                    None => continue,
                },
            };
            if p.name != name {
                p.name.clone_from(&name);
            }
            seen.insert(id, name);
        }
        self.given = seen;
    }

    /// Whether the process `id` carries a configured name (its `name` is then not its `comm`).
    pub(crate) fn configured(&self, id: ProcId) -> bool {
        self.given.contains_key(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher's pids and names, as `apply` asks them.
    fn roster<'a>(held: &'a [(u32, &'a str)]) -> impl Fn(u32) -> Option<&'a str> {
        move |pid| held.iter().find(|(p, _)| *p == pid).map(|(_, n)| *n)
    }

    fn sample(pid: u32, start_ticks: u64, comm: &str) -> ProcSample {
        ProcSample { name: comm.into(), comm: comm.into(), start_ticks, ..ProcSample::test(pid) }
    }

    fn names(samples: &[ProcSample]) -> Vec<(&str, &str)> {
        samples.iter().map(|p| (p.name.as_str(), p.comm.as_str())).collect()
    }

    #[test]
    fn a_launched_process_carries_its_configured_name_for_life_and_its_children_their_comm() {
        let mut n = Names::default();
        // tx1 (pid 10) forked a worker of its own (pid 11): only the pid the launcher started is tx1.
        let mut s = vec![sample(10, 100, "node"), sample(11, 110, "node"), sample(12, 120, "node")];
        n.apply(roster(&[(10, "tx1"), (12, "tx2")]), &mut s);
        assert_eq!(names(&s), [("tx1", "node"), ("node", "node"), ("tx2", "node")]);
        assert!(n.configured(ProcId { pid: 10, start_ticks: 100 }));
        assert!(!n.configured(ProcId { pid: 11, start_ticks: 110 }));
        // tx2 was killed: the launcher holds no pid for it while it exits, and it is still tx2 while it is listed.
        let mut s = vec![sample(10, 100, "node"), sample(12, 120, "node")];
        n.apply(roster(&[(10, "tx1")]), &mut s);
        assert_eq!(names(&s), [("tx1", "node"), ("tx2", "node")]);
        // Gone, then its pid reused by another program: that one is not tx2.
        let mut s = vec![sample(10, 100, "node")];
        n.apply(roster(&[(10, "tx1")]), &mut s);
        let mut s = vec![sample(10, 100, "node"), sample(12, 900, "bash")];
        n.apply(roster(&[(10, "tx1")]), &mut s);
        assert_eq!(names(&s), [("tx1", "node"), ("bash", "bash")]);
        // The restarted tx2 is tx2 from the first listing the launcher holds its pid in.
        let mut s = vec![sample(10, 100, "node"), sample(12, 900, "bash"), sample(13, 950, "fixture-backend")];
        n.apply(roster(&[(10, "tx1"), (13, "tx2")]), &mut s);
        assert_eq!(names(&s), [("tx1", "node"), ("bash", "bash"), ("tx2", "fixture-backend")]);
    }

    #[test]
    fn without_a_launcher_every_process_keeps_its_comm() {
        let mut n = Names::default();
        let mut s = vec![sample(10, 100, "node"), sample(11, 110, "nginx")];
        n.apply(roster(&[]), &mut s);
        assert_eq!(names(&s), [("node", "node"), ("nginx", "nginx")]);
        assert!(!n.configured(ProcId { pid: 10, start_ticks: 100 }));
    }
}
