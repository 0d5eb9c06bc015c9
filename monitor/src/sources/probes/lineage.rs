//! Forked children and their parents (pure): which traced ancestor an exited child's counts fold into, and
//! whether a pid is still a live process (parsed from `/proc/<pid>/status`).

use std::collections::HashMap;

/// child -> parent, for every process the kernel started tracing at its fork and that has not yet been retired.
#[derive(Debug, Default)]
pub(crate) struct Lineage {
    parent: HashMap<u32, u32>,
}

impl Lineage {
    /// Records that `child` was forked by `parent`.
    pub fn record(&mut self, child: u32, parent: u32) {
        if child != parent {
            self.parent.insert(child, parent);
        }
    }

    /// The nearest ancestor of `pid` for which `kept` holds, walking up the recorded parents.
    pub(crate) fn ancestor(&self, pid: u32, kept: impl Fn(u32) -> bool) -> Option<u32> {
        let mut at = pid;
        // Bounded: a pid recycled into its own ancestry must not loop.
        for _ in 0..=self.parent.len() {
            at = *self.parent.get(&at)?;
            if kept(at) {
                return Some(at);
            }
        }
        None
    }

    /// Forgets `pid`. Its children now hang from its parent, so their counts still find an ancestor; when it has
    /// no recorded parent, they are forgotten too (nothing above to fold into).
    pub(crate) fn forget(&mut self, pid: u32) {
        match self.parent.remove(&pid) {
            Some(up) => self.parent.values_mut().filter(|p| **p == pid).for_each(|p| *p = up),
            None => self.parent.retain(|_, p| *p != pid),
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.parent.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.parent.is_empty()
    }
}

/// True when `/proc/<pid>/status` (`status`) is that of a live process: its own thread group leader
/// (`Tgid: pid`, not a thread of another process), not a zombie.
pub(crate) fn parse_live_process(status: &str, pid: u32) -> bool {
    let mut tgid = None;
    let mut zombie = false;
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("Tgid:") {
            tgid = v.trim().parse::<u32>().ok();
        } else if let Some(v) = line.strip_prefix("State:") {
            zombie = matches!(v.trim_start().chars().next(), Some('Z') | Some('X'));
        }
    }
    tgid == Some(pid) && !zombie
}

/// Reads `/proc/<pid>/status`: false when the process is gone, a zombie or a thread.
pub(crate) fn live_process(pid: u32) -> bool {
    crate::base::kernfile::read_lossy(format!("/proc/{pid}/status")).is_ok_and(|s| parse_live_process(&s, pid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ancestors_fold_up_past_retired_children() {
        let mut l = Lineage::default();
        l.record(11, 10);
        l.record(12, 11);
        l.record(13, 12);
        let kept = |p: u32| p == 10;
        assert_eq!(l.ancestor(13, kept), Some(10));
        assert_eq!(l.ancestor(11, |p| p == 11 || p == 10), Some(10));
        assert_eq!(l.ancestor(13, |p| p == 12 || p == 10), Some(12));
        assert_eq!(l.ancestor(10, kept), None);
        l.forget(12);
        assert_eq!(l.ancestor(13, |p| p == 11), Some(11));
        l.forget(11);
        assert_eq!(l.ancestor(13, kept), Some(10));
        assert_eq!(l.len(), 1);
        // A root with no recorded parent: its children have nowhere to go once it is forgotten.
        l.forget(10);
        assert_eq!(l.ancestor(13, |_| true), None);
        assert!(l.is_empty());
    }

    #[test]
    fn cycles_end() {
        let mut l = Lineage::default();
        l.record(1, 2);
        l.record(2, 1);
        assert_eq!(l.ancestor(1, |_| false), None);
    }

    #[test]
    fn live_processes() {
        let proc_ = "Name:\thttpd\nState:\tS (sleeping)\nTgid:\t42\nPid:\t42\n";
        assert!(parse_live_process(proc_, 42));
        let thread = "Name:\tpython3\nState:\tS (sleeping)\nTgid:\t40\nPid:\t42\n";
        assert!(!parse_live_process(thread, 42));
        let zombie = "Name:\thttpd\nState:\tZ (zombie)\nTgid:\t42\nPid:\t42\n";
        assert!(!parse_live_process(zombie, 42));
        assert!(!parse_live_process("", 42));
    }
}
