//! The members this node suspects, followed apart from the gossip crate's own timers (pure: the caller gives the
//! crate's member list and the time).

use super::identity::NodeId;
use std::collections::HashMap;
use std::time::Duration;
use tokio::time::Instant;

/// The members this node suspects, with the incarnation suspected and when the suspicion began.
///
/// The crate turns a suspicion into a death with a timer, and drops every pending timer when this node's own
/// identity changes: after a healed partition this node rejoins as its next generation, and a member it began to
/// suspect during the partition would stay suspect for ever unless it refutes (it may never hear of the
/// suspicion). The driver therefore declares dead, as the crate's timer would have, any member still suspect at
/// the same incarnation a margin after the dead timeout. The member hears it is dead, rejoins, and is alive again.
#[derive(Debug, Default)]
pub(crate) struct Suspicions {
    since: HashMap<NodeId, (foca::Incarnation, Instant)>,
}

impl Suspicions {
    /// Follows the crate's member list: a suspicion starts when a member is first seen suspect at an incarnation
    /// and ends when it is alive, dead, or suspect at another incarnation (which starts a new one).
    pub fn follow<'a>(&mut self, members: impl Iterator<Item = &'a foca::Member<NodeId>>, now: Instant) {
        let mut still = HashMap::new();
        for m in members.filter(|m| m.state() == foca::State::Suspect) {
            let since = match self.since.remove(m.id()) {
                Some((inc, at)) if inc == m.incarnation() => at,
                _ => now,
            };
            still.insert(m.id().clone(), (m.incarnation(), since));
        }
        self.since = still;
    }

    /// The members suspect for longer than `after`, as the crate's down update for each.
    pub(crate) fn overdue(&self, now: Instant, after: Duration) -> Vec<foca::Member<NodeId>> {
        self.since
            .iter()
            .filter(|(_, (_, at))| now.duration_since(*at) > after)
            .map(|(id, (inc, _))| foca::Member::new(id.clone(), *inc, foca::State::Down))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspicion_is_overdue_only_when_it_lasted_at_one_incarnation_past_the_limit() {
        let b = NodeId::test("b", 3, &["b0"], 1000);
        let c = NodeId::test("c", 4, &["c0"], 1000);
        let t0 = Instant::now();
        let limit = Duration::from_secs(3);
        let mut s = Suspicions::default();
        let members = |b_inc, b_state, c_inc, c_state| {
            [foca::Member::new(b.clone(), b_inc, b_state), foca::Member::new(c.clone(), c_inc, c_state)]
        };
        s.follow(members(0, foca::State::Suspect, 0, foca::State::Alive).iter(), t0);
        assert!(s.overdue(t0 + limit, limit).is_empty(), "not past the limit yet");
        // b refutes (alive at the next incarnation), then is suspected again: a new suspicion, a new start.
        s.follow(members(1, foca::State::Alive, 0, foca::State::Suspect).iter(), t0 + Duration::from_secs(1));
        s.follow(members(1, foca::State::Suspect, 0, foca::State::Suspect).iter(), t0 + Duration::from_secs(2));
        let due = s.overdue(t0 + Duration::from_millis(4500), limit);
        let due: Vec<_> = due.iter().map(|m| (m.id().name.as_str(), m.incarnation(), m.state())).collect();
        assert_eq!(due, [("c", 0, foca::State::Down)], "c suspect since 1 s; b since 2 s");
        // Suspect at another incarnation restarts the clock; dead ends it.
        s.follow(members(1, foca::State::Down, 1, foca::State::Suspect).iter(), t0 + Duration::from_secs(5));
        assert!(s.overdue(t0 + Duration::from_secs(7), limit).is_empty());
        assert_eq!(s.overdue(t0 + Duration::from_millis(8100), limit).len(), 1);
    }
}
