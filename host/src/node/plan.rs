//! What a node does with leases in one round: a pure function over what it
//! read from the database and what the `placement` policy ranked.
//!
//! The rules:
//! - a shard's *target* is the first node of its ranking (the policy's
//!   order of its replica nodes) that is live and not leaving;
//! - a free or expired lease is acquired by its target;
//! - a lease held by a live node stays with it until that holder hands it
//!   over; the holder hands a shard over when another node is its target,
//!   at most `max_handoffs` per round;
//! - nobody takes a live lease away: the epoch check makes a taker safe, but
//!   a handoff drains first, which only the holder can do.

use std::collections::{HashMap, HashSet};

use uuid::Uuid;

/// A live registration as the planner needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveNode {
    pub uuid: Uuid,
    pub leaving: bool,
}

/// One shard's lease as read from the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The holder, when the lease is held and unexpired.
    pub live_holder: Option<Uuid>,
}

/// Everything one round decides on.
#[derive(Clone, Debug)]
pub struct RoundInput<'a> {
    /// This node's name and registration.
    pub me: &'a str,
    pub my_uuid: Uuid,
    /// This node is leaving: it takes nothing and hands everything over.
    pub leaving: bool,
    /// Per shard, its replica nodes best first (from the placement policy).
    pub rankings: &'a [(String, Vec<String>)],
    /// Live registrations by node name.
    pub live: &'a HashMap<String, LiveNode>,
    /// Lease state per shard; a shard missing here has never been leased.
    pub leases: &'a HashMap<String, LeaseView>,
    /// Shards this node holds now.
    pub held: &'a HashSet<String>,
    pub max_handoffs: usize,
}

/// One action of a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Acquire { shard: String },
    Handover { shard: String, to: String, to_uuid: Uuid },
}

/// Shards whose live lease the database gives this node but which its lease
/// table lacks: handed over by a peer (or outlived a late renewal here).
pub fn handed_to_me<'r>(rows: &'r [crate::lease::LeaseRow], me: Uuid, held: &HashSet<String>) -> Vec<&'r crate::lease::LeaseRow> {
    rows.iter().filter(|r| r.live && r.holder == Some(me) && !held.contains(&r.shard)).collect()
}

/// The first live, non-leaving node of `ranking` (this node counts as
/// leaving when it is).
pub fn target<'r>(input: &RoundInput<'_>, ranking: &'r [String]) -> Option<&'r str> {
    ranking.iter().map(String::as_str).find(|name| {
        if *name == input.me {
            !input.leaving
        } else {
            input.live.get(*name).is_some_and(|n| !n.leaving)
        }
    })
}

/// The acquisitions and handoffs of one round, in shard order.
pub fn plan_round(input: &RoundInput<'_>) -> Vec<Action> {
    let mut actions = Vec::new();
    let mut handoffs = 0;
    for (shard, ranking) in input.rankings {
        let target = target(input, ranking);
        let live_holder = input.leases.get(shard).and_then(|l| l.live_holder);
        if input.held.contains(shard) {
            match target {
                Some(to) if to != input.me && handoffs < input.max_handoffs => {
                    handoffs += 1;
                    actions.push(Action::Handover {
                        shard: shard.clone(),
                        to: to.to_string(),
                        to_uuid: input.live[to].uuid,
                    });
                }
                _ => {}
            }
        } else if live_holder.is_none() && target == Some(input.me) {
            actions.push(Action::Acquire { shard: shard.clone() });
        }
    }
    actions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_live_leases_of_mine_that_i_do_not_serve_are_taken_up() {
        let (me, peer) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let row = |shard: &str, holder: Option<Uuid>, live: bool| crate::lease::LeaseRow {
            shard: shard.into(),
            holder,
            holder_name: None,
            epoch: 3,
            expires_at: None,
            live,
        };
        let rows = [
            row("handed", Some(me), true),
            row("served", Some(me), true),
            row("expired", Some(me), false),
            row("theirs", Some(peer), true),
            row("free", None, false),
        ];
        let held: HashSet<String> = ["served".to_string()].into();
        let picked: Vec<&str> = handed_to_me(&rows, me, &held).iter().map(|r| r.shard.as_str()).collect();
        assert_eq!(picked, ["handed"]);
    }

    struct World {
        rankings: Vec<(String, Vec<String>)>,
        live: HashMap<String, LiveNode>,
        leases: HashMap<String, LeaseView>,
        held: HashSet<String>,
    }

    fn uuid(name: &str) -> Uuid {
        Uuid::from_u128(name.bytes().fold(7u128, |h, b| h * 31 + u128::from(b)))
    }

    fn world(rankings: &[(&str, &[&str])], live: &[&str]) -> World {
        World {
            rankings: rankings
                .iter()
                .map(|(s, r)| (s.to_string(), r.iter().map(|n| n.to_string()).collect()))
                .collect(),
            live: live
                .iter()
                .map(|n| (n.to_string(), LiveNode { uuid: uuid(n), leaving: false }))
                .collect(),
            leases: HashMap::new(),
            held: HashSet::new(),
        }
    }

    impl World {
        fn held_by(mut self, shard: &str, node: &str, mine: bool) -> Self {
            self.leases.insert(shard.into(), LeaseView { live_holder: Some(uuid(node)) });
            if mine {
                self.held.insert(shard.into());
            }
            self
        }

        fn plan(&self, me: &str, leaving: bool, max: usize) -> Vec<Action> {
            plan_round(&RoundInput {
                me,
                my_uuid: uuid(me),
                leaving,
                rankings: &self.rankings,
                live: &self.live,
                leases: &self.leases,
                held: &self.held,
                max_handoffs: max,
            })
        }
    }

    fn acquire(s: &str) -> Action {
        Action::Acquire { shard: s.into() }
    }

    fn handover(s: &str, to: &str) -> Action {
        Action::Handover { shard: s.into(), to: to.into(), to_uuid: uuid(to) }
    }

    #[test]
    fn a_free_lease_goes_to_its_first_live_node() {
        let w = world(&[("s1", &["a", "b"]), ("s2", &["b", "a"])], &["a", "b"]);
        assert_eq!(w.plan("a", false, 4), vec![acquire("s1")]);
        assert_eq!(w.plan("b", false, 4), vec![acquire("s2")]);
    }

    #[test]
    fn a_dead_preferred_node_is_skipped() {
        let w = world(&[("s1", &["a", "b", "c"])], &["b", "c"]);
        assert_eq!(w.plan("b", false, 4), vec![acquire("s1")]);
        assert_eq!(w.plan("c", false, 4), vec![]);
    }

    #[test]
    fn a_live_lease_is_not_taken_but_handed_over_by_its_holder() {
        // b held s1 while a was away; a is back and preferred.
        let w = world(&[("s1", &["a", "b"])], &["a", "b"]).held_by("s1", "b", false);
        assert_eq!(w.plan("a", false, 4), vec![]);
        let w = world(&[("s1", &["a", "b"])], &["a", "b"]).held_by("s1", "b", true);
        assert_eq!(w.plan("b", false, 4), vec![handover("s1", "a")]);
    }

    #[test]
    fn handoffs_are_capped_per_round() {
        let shards: Vec<(String, &[&str])> = (0..10).map(|i| (format!("s{i}"), &["a", "b"][..])).collect();
        let refs: Vec<(&str, &[&str])> = shards.iter().map(|(s, r)| (s.as_str(), *r)).collect();
        let mut w = world(&refs, &["a", "b"]);
        for (s, _) in &shards {
            w = w.held_by(s, "b", true);
        }
        let plan = w.plan("b", false, 4);
        assert_eq!(plan.len(), 4);
        assert!(plan.iter().all(|a| matches!(a, Action::Handover { to, .. } if to == "a")));
    }

    #[test]
    fn a_leaving_node_hands_everything_over_and_takes_nothing() {
        let w = world(&[("s1", &["a", "b"]), ("s2", &["a", "b"])], &["a", "b"]).held_by("s1", "a", true);
        assert_eq!(w.plan("a", true, 4), vec![handover("s1", "b")]);
    }

    #[test]
    fn a_leaving_peer_is_no_target() {
        let mut w = world(&[("s1", &["a", "b"])], &["a", "b"]);
        w.live.get_mut("a").unwrap().leaving = true;
        assert_eq!(w.plan("b", false, 4), vec![acquire("s1")]);
    }

    #[test]
    fn with_no_other_live_node_a_holder_keeps_its_shard() {
        let w = world(&[("s1", &["a", "b"])], &["a"]).held_by("s1", "a", true);
        assert_eq!(w.plan("a", true, 4), vec![]);
        assert_eq!(w.plan("a", false, 4), vec![]);
    }
}
