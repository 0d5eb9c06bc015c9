//! The processes' names as the history's series know them: the configured name under `monitor run`, else the
//! command name, numbered (`bash#2`) where several share it, each number kept for a process's life.

use super::Published;
use crate::decision::policy::ProcId;
use crate::decision::snapshot::infer_roles;
use crate::feed::LauncherInfo;
use std::collections::HashMap;

/// A command name as a series label: the `memfd:` names of programs run from an anonymous file carry a number
/// that changes at each start (`memfd:sealed-91`), which is dropped so a restarted process keeps its series.
fn label_of(comm: &str) -> &str {
    match comm.strip_prefix("memfd:").and_then(|rest| rest.rsplit_once('-')) {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => &comm[..6 + base.len()],
        _ => comm,
    }
}

/// Stable numbers for processes that share a command name: each keeps its number (`bash#2`) for life, and a new
/// one takes the lowest number free, so a process that restarts takes its predecessor's series. A name stays
/// numbered while any of its numbers is held.
#[derive(Debug, Default)]
pub struct Slots {
    held: HashMap<String, Vec<Option<ProcId>>>,
}

impl Slots {
    /// The number of each process (`(label, id)`, in order) whose label is shared now or still holds numbers;
    /// None for the others. Numbers of processes that are gone are freed first.
    pub(crate) fn assign(&mut self, procs: &[(&str, ProcId)]) -> Vec<Option<usize>> {
        let live: std::collections::HashSet<ProcId> = procs.iter().map(|(_, id)| *id).collect();
        for slots in self.held.values_mut() {
            for s in slots.iter_mut() {
                if s.is_some_and(|id| !live.contains(&id)) {
                    *s = None;
                }
            }
            while slots.last().is_some_and(Option::is_none) {
                slots.pop();
            }
        }
        self.held.retain(|_, v| !v.is_empty());
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (label, _) in procs {
            *count.entry(label).or_default() += 1;
        }
        // The oldest first, so that numbers given at once follow start order.
        let mut order: Vec<usize> = (0..procs.len()).collect();
        order.sort_by_key(|&i| (procs[i].1.start_ticks, procs[i].1.pid));
        let mut out = vec![None; procs.len()];
        for i in order {
            let (label, id) = procs[i];
            if count[label] < 2 && !self.held.contains_key(label) {
                continue;
            }
            let slots = self.held.entry(label.to_string()).or_default();
            let k = match slots.iter().position(|s| *s == Some(id)) {
                Some(k) => k,
                None => match slots.iter().position(Option::is_none) {
                    Some(k) => {
                        slots[k] = Some(id);
                        k
                    }
                    None => {
                        slots.push(Some(id));
                        slots.len() - 1
                    }
                },
            };
            out[i] = Some(k + 1);
        }
        out
    }
}

/// Series names for a sample's processes: the launcher's name for a launched pid; otherwise the command name,
/// numbered `comm#1`, `comm#2`… when several share it, each keeping its number for life ([`Slots`]). Roles from
/// the launcher or the process tree.
pub fn names(p: &Published, launched: &[LauncherInfo], slots: &mut Slots) -> Vec<(String, String)> {
    named(p, launched, slots).into_iter().map(|(n, r, _)| (n, r)).collect()
}

/// [`names`] with a flag for the numbered ones (`comm#k`), whose number can pass to another process: a new pid
/// under such a name is not taken for a restart.
pub(super) fn named(p: &Published, launched: &[LauncherInfo], slots: &mut Slots) -> Vec<(String, String, bool)> {
    let procs = &p.snapshot.processes;
    let roles = infer_roles(procs);
    let member = |pid: u32| launched.iter().find(|m| m.pid == Some(pid));
    let unlaunched: Vec<(usize, (&str, ProcId))> = procs
        .iter()
        .enumerate()
        .filter(|(_, x)| member(x.pid).is_none())
        .map(|(i, x)| (i, (label_of(&x.name), ProcId { pid: x.pid, start_ticks: x.start_ticks })))
        .collect();
    let ids: Vec<(&str, ProcId)> = unlaunched.iter().map(|(_, x)| *x).collect();
    let numbers = slots.assign(&ids);
    let mut out: Vec<(String, String, bool)> = procs
        .iter()
        .zip(&roles)
        .map(|(x, role)| match member(x.pid) {
            Some(m) => (m.name.clone(), m.role.to_string(), false),
            None => (label_of(&x.name).to_string(), role.to_string(), false),
        })
        .collect();
    for ((i, (label, _)), n) in unlaunched.iter().zip(numbers) {
        if let Some(n) = n {
            out[*i] = (format!("{label}#{n}"), out[*i].1.clone(), true);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_process_takes_its_predecessors_number() {
        let id = |pid: u32, start_ticks: u64| ProcId { pid, start_ticks };
        let mut slots = Slots::default();
        // Two workers and a lone master: the workers are numbered in start order, the master is not.
        let n = slots.assign(&[("bash", id(10, 1)), ("nginx", id(11, 2)), ("bash", id(12, 3))]);
        assert_eq!(n, [Some(1), None, Some(2)]);
        // bash#1 dies: bash#2 keeps its number though it is alone now.
        assert_eq!(slots.assign(&[("nginx", id(11, 2)), ("bash", id(12, 3))]), [None, Some(2)]);
        // Its replacement takes #1, not #3; the order of the list does not matter.
        assert_eq!(slots.assign(&[("bash", id(12, 3)), ("bash", id(20, 9))]), [Some(2), Some(1)]);
        // Both gone: the name is free again, a lone newcomer is unnumbered.
        assert_eq!(slots.assign(&[("bash", id(30, 12))]), [None]);
    }

    #[test]
    fn memfd_names_drop_their_changing_number() {
        assert_eq!(label_of("memfd:sealed-91"), "memfd:sealed");
        assert_eq!(label_of("memfd:x-y-7"), "memfd:x-y");
        assert_eq!(label_of("memfd:sealed"), "memfd:sealed");
        assert_eq!(label_of("nginx-1"), "nginx-1", "only memfd names");
        assert_eq!(label_of("memfd:a-"), "memfd:a-");
    }
}
