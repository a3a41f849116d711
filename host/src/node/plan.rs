//! What a node decides, as pure functions over what it read: the policy
//! input's node states, one lease round, a drain, and one append step.
//! The I/O code (`round`, `drain`, `journal`) reads, calls these, applies.
//!
//! Round rules:
//! - a shard's *target* is the first node of its ranking (the policy's
//!   order of its replica nodes) that is live and not leaving;
//! - a free or expired lease is acquired by its target, unless the shard
//!   was retired by a split or is a split child whose parent is not retired
//!   yet (the store refuses both; the plan does not try);
//! - a finished split (parent inactive in the config) whose parent is not
//!   retired is seeded by the parent's holder, or by the first child's
//!   target when the parent has no live holder: one transaction retires the
//!   parent and grants every child to the seeder;
//! - a lease held by a live node stays with it until that holder hands it
//!   over; the holder hands a shard over when another node is its target,
//!   at most `max_handoffs` per round;
//! - nobody takes a live lease away: the epoch check makes a taker safe, but
//!   a handoff drains first, which only the holder can do.
//! - a round past its renew interval hands nothing more over once it has
//!   handed one shard over ([`in_time`]).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chitin_policy_sdk as sdk;
use uuid::Uuid;

use crate::lease::{LeaseRow, NodeRecord, NodeState};
use crate::topology::{ClusterConfig, ShardState};

use super::Lifecycle;

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
    /// Per leased shard, its replica nodes best first (from the placement policy).
    pub rankings: &'a [(String, Vec<String>)],
    /// Live registrations by node name.
    pub live: &'a HashMap<String, LiveNode>,
    /// Lease state of the shards [`leases_to_read`] names; one missing
    /// here has never been leased. The plan looks at no other shard's lease.
    pub leases: &'a HashMap<String, LeaseView>,
    /// Shards this node holds now.
    pub held: &'a HashSet<String>,
    /// The parent of each leased shard that has one.
    pub parents: &'a HashMap<String, String>,
    /// Shards retired by a split.
    pub retired: &'a HashSet<String>,
    /// Finished splits of the config (parent inactive): parent and children.
    pub splits: &'a [(String, Vec<String>)],
    pub max_handoffs: usize,
}

/// One action of a round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Acquire {
        shard: String,
    },
    Handover {
        shard: String,
        to: String,
        to_uuid: Uuid,
    },
    /// Retire `parent` and take its children.
    Seed {
        parent: String,
        children: Vec<String>,
    },
}

impl Action {
    /// The shard whose lease row the action locks first.
    pub fn shard(&self) -> &str {
        match self {
            Action::Acquire { shard } | Action::Handover { shard, .. } => shard,
            Action::Seed { parent, .. } => parent,
        }
    }
}

/// The state the policies see for config node `id`: this node's own
/// lifecycle when it is `me`, else its live registration's state (`down`
/// when it has none).
pub fn node_state(id: &str, me: &str, mine: Lifecycle, registry: &[NodeRecord]) -> sdk::NodeState {
    if id == me {
        return match mine {
            Lifecycle::Joining => sdk::NodeState::Joining,
            Lifecycle::Active => sdk::NodeState::Active,
            Lifecycle::Leaving | Lifecycle::Drained => sdk::NodeState::Leaving,
        };
    }
    registry.iter().find(|r| r.name == id && r.live).map_or(sdk::NodeState::Down, |r| r.state.into())
}

/// Live registrations other than `me`, by name.
pub fn live_peers(registry: &[NodeRecord], me: &str) -> HashMap<String, LiveNode> {
    registry
        .iter()
        .filter(|r| r.live && r.name != me)
        .map(|r| (r.name.clone(), LiveNode { uuid: r.id, leaving: r.state == NodeState::Leaving }))
        .collect()
}

/// The registry as a round or a drain plans with it: a live registration
/// that takes no leases (`refusing`: its components differ from the
/// cluster's, see `policy_hashes::refusing`) counts as leaving, so that no
/// policy ranks it or names it a drain's recipient and no handoff goes to
/// it. A lease handed to it would sit unserved until it expired.
pub fn refusing_as_leaving(registry: &[NodeRecord], refusing: &HashSet<Uuid>) -> Vec<NodeRecord> {
    registry
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if r.live && refusing.contains(&r.id) {
                r.state = NodeState::Leaving;
            }
            r
        })
        .collect()
}

/// The finished splits of `config`: each inactive shard with children, and
/// its children in config order.
pub fn finished_splits(config: &ClusterConfig) -> Vec<(String, Vec<String>)> {
    config
        .applications
        .iter()
        .flat_map(|app| {
            app.shards.iter().filter(|s| s.state == ShardState::Inactive).filter_map(|parent| {
                let children: Vec<String> =
                    app.shards.iter().filter(|c| c.parent_id.as_deref() == Some(&parent.id)).map(|c| c.id.clone()).collect();
                (!children.is_empty()).then(|| (parent.id.clone(), children))
            })
        })
        .collect()
}

/// Shards whose live lease the database gives this node but which its lease
/// table lacks: handed over by a peer (or outlived a late renewal here).
pub fn handed_to_me<'r>(rows: &'r [LeaseRow], me: Uuid, held: &HashSet<String>) -> Vec<&'r LeaseRow> {
    rows.iter().filter(|r| r.live && r.holder == Some(me) && !held.contains(&r.shard)).collect()
}

/// The first live, non-leaving node of `ranking` (this node counts as
/// leaving when it is).
pub fn target<'r>(input: &RoundInput<'_>, ranking: &'r [String]) -> Option<&'r str> {
    ranking
        .iter()
        .map(String::as_str)
        .find(|name| if *name == input.me { !input.leaving } else { input.live.get(*name).is_some_and(|n| !n.leaving) })
}

/// Whether the store can grant `shard` at all: not retired, and any parent
/// retired.
fn grantable(input: &RoundInput<'_>, shard: &str) -> bool {
    !input.retired.contains(shard) && input.parents.get(shard).is_none_or(|p| input.retired.contains(p))
}

/// The shards whose lease rows [`plan_round`] looks at: those this node is
/// the target of but does not hold (to acquire when free), and the parents
/// of finished splits not retired yet (to seed when free). Together with
/// the node's own rows this is what a round reads: in a steady cluster only
/// the shards it holds, never the whole lease table. Ignores `input.leases`.
pub fn leases_to_read(input: &RoundInput<'_>) -> Vec<String> {
    let parents = input.splits.iter().map(|(parent, _)| parent).filter(|p| !input.retired.contains(*p));
    let targets = input
        .rankings
        .iter()
        .filter(|(shard, ranking)| !input.held.contains(shard) && target(input, ranking) == Some(input.me))
        .map(|(shard, _)| shard);
    let mut shards: Vec<String> = parents.chain(targets).cloned().collect();
    shards.sort();
    shards.dedup();
    shards
}

/// The seeds, acquisitions and handoffs of one round, in that order and in
/// shard order.
pub fn plan_round(input: &RoundInput<'_>) -> Vec<Action> {
    let mut actions = Vec::new();
    for (parent, children) in input.splits {
        if input.retired.contains(parent) || children.is_empty() {
            continue;
        }
        let mine = input.held.contains(parent);
        let free = input.leases.get(parent).is_none_or(|l| l.live_holder.is_none());
        let first_child_target =
            input.rankings.iter().find(|(s, _)| *s == children[0]).and_then(|(_, ranking)| target(input, ranking));
        if mine || (free && first_child_target == Some(input.me)) {
            actions.push(Action::Seed { parent: parent.clone(), children: children.clone() });
        }
    }
    // Handovers go last: each waits for the shard's in-flight writes, and a
    // free shard (a dead peer's) must not wait behind them to be served.
    let mut handovers = Vec::new();
    for (shard, ranking) in input.rankings {
        let target = target(input, ranking);
        let live_holder = input.leases.get(shard).and_then(|l| l.live_holder);
        if input.held.contains(shard) {
            match target {
                Some(to) if to != input.me && handovers.len() < input.max_handoffs => {
                    handovers.push(Action::Handover { shard: shard.clone(), to: to.to_string(), to_uuid: input.live[to].uuid });
                }
                _ => {}
            }
        } else if live_holder.is_none() && target == Some(input.me) && grantable(input, shard) {
            actions.push(Action::Acquire { shard: shard.clone() });
        }
    }
    actions.extend(handovers);
    actions
}

/// Whether a round still starts an action when it has applied `applied`
/// actions and is `late` (past its renew interval): the round's budget.
/// Each statement may wait out one lock bound (half a TTL), and however
/// short each wait, many of them must not hold back the next heartbeat,
/// which renews every lease on liveness: a late round starts nothing more
/// but its first action, so that every round makes progress. The rest is
/// the next round's, which starts at once after a late one, heartbeat
/// first: so a heartbeat is never more than a renew interval plus one
/// statement after the last. Seeds and acquisitions, which serve shards
/// nobody serves, come first ([`plan_round`]). (A statement that waits out
/// its bound ends any round: see [`Node::round`](super::Node::round).)
pub fn in_time(applied: usize, late: bool) -> bool {
    applied == 0 || !late
}

/// `actions` with those on a shard of `waited` (their last try ran into a
/// lock bound) moved to the end, each part in its order: a round ends at
/// its first lock wait, so one row locked by a stuck session would
/// otherwise hold back every action planned after it, round after round.
pub fn defer_waited(actions: Vec<Action>, waited: &HashSet<String>) -> Vec<Action> {
    let (later, first): (Vec<Action>, Vec<Action>) = actions.into_iter().partition(|a| waited.contains(a.shard()));
    first.into_iter().chain(later).collect()
}

/// One handoff of a drain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DrainHandoff {
    pub shard: String,
    pub to: String,
    pub to_uuid: Uuid,
}

/// A shard a drain keeps, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    pub shard: String,
    pub why: String,
}

/// What a drain will do: rounds of at most the host's cap, and what it keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainPlan {
    pub rounds: Vec<Vec<DrainHandoff>>,
    pub kept: Vec<Kept>,
}

/// What a drain decides on.
#[derive(Clone, Debug)]
pub struct DrainInput<'a> {
    /// Shards this node holds.
    pub held: &'a HashSet<String>,
    /// Replica nodes of every leased shard.
    pub replicas: &'a HashMap<String, Vec<String>>,
    /// Live registrations by node name (this node excluded).
    pub live: &'a HashMap<String, LiveNode>,
    /// The host's cap on handoffs per round.
    pub cap: usize,
}

/// Held shards with another live, non-leaving replica node to go to; the
/// others are kept with their reason. Only the placeable shards are put to
/// the drain policy, so one shard with nowhere to go never makes it refuse
/// the rest.
pub fn drain_candidates(input: &DrainInput<'_>) -> (Vec<String>, Vec<Kept>) {
    let mut placeable = Vec::new();
    let mut kept = Vec::new();
    let mut held: Vec<&String> = input.held.iter().collect();
    held.sort();
    for shard in held {
        let replicas = input.replicas.get(shard.as_str());
        let eligible = replicas.is_some_and(|r| r.iter().any(|n| input.live.get(n).is_some_and(|l| !l.leaving)));
        if eligible {
            placeable.push(shard.clone());
        } else {
            let why = match replicas {
                None => "not a shard of the served config".to_string(),
                Some(_) => "no other live, non-leaving replica node".to_string(),
            };
            kept.push(Kept { shard: shard.clone(), why });
        }
    }
    (placeable, kept)
}

/// Checks the drain policy's answer and re-chunks it to the host's cap:
/// a handoff of a shard not held, a repeated shard, a target that is not a
/// live, non-leaving replica node of the shard is dropped (the shard, when
/// held, is kept with the reason); a placeable shard the policy left out is
/// kept too.
pub fn drain_plan(input: &DrainInput<'_>, placeable: &[String], policy: &[Vec<sdk::Handoff>]) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let mut planned: HashSet<&str> = HashSet::new();
    let mut flat: Vec<DrainHandoff> = Vec::new();
    for h in policy.iter().flatten() {
        let refuse = if !input.held.contains(&h.shard) {
            Some("the drain policy named a shard this node does not hold")
        } else if planned.contains(h.shard.as_str()) {
            continue;
        } else if !input.replicas.get(&h.shard).is_some_and(|r| r.contains(&h.target)) {
            Some("the drain policy's target is not a replica node of the shard")
        } else if input.live.get(&h.target).is_none_or(|l| l.leaving) {
            Some("the drain policy's target is not live, or is leaving")
        } else {
            None
        };
        match refuse {
            Some(why) => {
                if input.held.contains(&h.shard) && !planned.contains(h.shard.as_str()) {
                    planned.insert(&h.shard);
                    plan.kept.push(Kept { shard: h.shard.clone(), why: format!("{why} (`{}`)", h.target) });
                }
            }
            None => {
                planned.insert(&h.shard);
                flat.push(DrainHandoff { shard: h.shard.clone(), to: h.target.clone(), to_uuid: input.live[&h.target].uuid });
            }
        }
    }
    for shard in placeable {
        if !planned.contains(shard.as_str()) {
            plan.kept.push(Kept { shard: shard.clone(), why: "the drain policy named no recipient".into() });
        }
    }
    plan.rounds = flat.chunks(input.cap.max(1)).map(<[DrainHandoff]>::to_vec).collect();
    plan
}

/// Where an append goes when this node does not serve its shard now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendStep {
    /// The database says this node holds the shard (at `epoch`): take the
    /// lease up, then serve.
    Adopt { epoch: i64 },
    /// Nobody holds the shard because a split retired it: the child that
    /// took the stream's key serves it (this node's config is a version
    /// behind the split).
    FollowChild { child: String },
    /// Another node holds it: forward there (one hop).
    Forward { holder: String, address: String },
    /// Answer at once, not applied: the holder to go to, when there is one.
    Redirect { holder: Option<(String, String)> },
    /// No holder yet, or a handoff under way here: wait for a change of
    /// ownership, bounded by the takeover budget.
    Wait,
}

/// How long a forward waits for the holder, given what is `left` of its
/// lease (unknown: a full TTL). A holder that cannot answer before its lease
/// runs out (plus a renew interval, for a renewal in flight) has lost it by
/// then, and waiting longer only holds the client back: the outcome is
/// unknown and the client retries with the same request id. At most a TTL,
/// at least 100 ms.
pub fn forward_timeout(left: Option<Duration>, ttl: Duration, renew: Duration) -> Duration {
    left.map_or(ttl, |left| left + renew).clamp(Duration::from_millis(100), ttl)
}

/// What [`append_step`] decides on.
#[derive(Clone, Debug)]
pub struct AppendFacts {
    pub me: Uuid,
    /// This node takes work (not leaving).
    pub ready: bool,
    /// The request was forwarded to this node: it is never forwarded again
    /// and never waits here, so no request is parked at a former holder.
    pub forwarded: bool,
    /// The shard's live holder by the database.
    pub live_holder: Option<Uuid>,
    /// The lease row's epoch (0 without a row).
    pub epoch: i64,
    /// The live holder's name and address, when registered.
    pub holder_address: Option<(String, String)>,
    /// The child that took the stream's key, when the shard has no live
    /// holder because a split retired it (read only then).
    pub retired_child: Option<String>,
}

/// The serve/adopt/forward/redirect/wait choice of an append.
pub fn append_step(f: &AppendFacts) -> AppendStep {
    match f.live_holder {
        Some(h) if h == f.me => {
            if f.ready {
                AppendStep::Adopt { epoch: f.epoch }
            } else if f.forwarded {
                AppendStep::Redirect { holder: None }
            } else {
                AppendStep::Wait
            }
        }
        Some(_) => match (&f.holder_address, f.forwarded) {
            (Some(holder), true) => AppendStep::Redirect { holder: Some(holder.clone()) },
            (Some((name, address)), false) => AppendStep::Forward { holder: name.clone(), address: address.clone() },
            (None, true) => AppendStep::Redirect { holder: None },
            (None, false) => AppendStep::Wait,
        },
        None => match &f.retired_child {
            Some(child) => AppendStep::FollowChild { child: child.clone() },
            None if f.forwarded => AppendStep::Redirect { holder: None },
            None => AppendStep::Wait,
        },
    }
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
            liveness_epoch: None,
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
        parents: HashMap<String, String>,
        retired: HashSet<String>,
        splits: Vec<(String, Vec<String>)>,
    }

    /// A registration of `name` (its uuid from [`uuid`]).
    fn reg(name: &str, state: NodeState, live: bool) -> NodeRecord {
        NodeRecord {
            id: uuid(name),
            name: name.into(),
            address: String::new(),
            state,
            started_at: Default::default(),
            last_seen: Default::default(),
            live,
        }
    }

    fn uuid(name: &str) -> Uuid {
        Uuid::from_u128(name.bytes().fold(7u128, |h, b| h * 31 + u128::from(b)))
    }

    fn world(rankings: &[(&str, &[&str])], live: &[&str]) -> World {
        World {
            rankings: rankings.iter().map(|(s, r)| (s.to_string(), r.iter().map(|n| n.to_string()).collect())).collect(),
            live: live.iter().map(|n| (n.to_string(), LiveNode { uuid: uuid(n), leaving: false })).collect(),
            leases: HashMap::new(),
            held: HashSet::new(),
            parents: HashMap::new(),
            retired: HashSet::new(),
            splits: Vec::new(),
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
                parents: &self.parents,
                retired: &self.retired,
                splits: &self.splits,
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
    fn free_shards_are_acquired_before_any_handover() {
        // b holds s1, which a prefers; s2's preferred node c is dead.
        let w = world(&[("s1", &["a", "b"]), ("s2", &["c", "b"])], &["a", "b"]).held_by("s1", "b", true);
        assert_eq!(w.plan("b", false, 4), vec![acquire("s2"), handover("s1", "a")]);
    }

    #[test]
    fn actions_on_rows_that_waited_out_a_lock_go_last() {
        let seed = Action::Seed { parent: "p".into(), children: vec!["c".into()] };
        let planned = vec![acquire("s1"), acquire("s2"), seed.clone(), handover("s3", "a"), acquire("s4")];
        let waited = |shards: &[&str]| shards.iter().map(|s| s.to_string()).collect::<HashSet<String>>();
        for (shards, expected) in [
            (&[][..], planned.clone()),
            (&["s1"][..], vec![acquire("s2"), seed.clone(), handover("s3", "a"), acquire("s4"), acquire("s1")]),
            (&["s2", "p"][..], vec![acquire("s1"), handover("s3", "a"), acquire("s4"), acquire("s2"), seed.clone()]),
            (&["s9"][..], planned.clone()),
            (&["s1", "s2", "p", "s3", "s4"][..], planned.clone()),
        ] {
            assert_eq!(defer_waited(planned.clone(), &waited(shards)), expected, "waited {shards:?}");
        }
    }

    #[test]
    fn a_late_round_starts_only_its_first_action() {
        for (applied, late, starts) in [(0, false, true), (0, true, true), (3, false, true), (1, true, false), (5, true, false)] {
            assert_eq!(in_time(applied, late), starts, "after {applied}, late {late}");
        }
    }

    #[test]
    fn a_round_reads_the_leases_it_could_act_on_and_no_other() {
        // a holds s1; s2 is a's but held elsewhere (or free); s3 is b's;
        // s4's preferred node is dead, so a is next; p split into s5, s6.
        let mut w = world(
            &[
                ("s1", &["a", "b"]),
                ("s2", &["a", "b"]),
                ("s3", &["b", "a"]),
                ("s4", &["c", "a"]),
                ("s5", &["b", "a"]),
                ("s6", &["a", "b"]),
            ],
            &["a", "b"],
        )
        .held_by("s1", "a", true);
        w.splits = vec![("p".into(), vec!["s5".into(), "s6".into()])];
        let read = |w: &World, me: &str, leaving: bool| {
            leases_to_read(&RoundInput {
                me,
                my_uuid: uuid(me),
                leaving,
                rankings: &w.rankings,
                live: &w.live,
                leases: &w.leases,
                held: &w.held,
                parents: &w.parents,
                retired: &w.retired,
                splits: &w.splits,
                max_handoffs: 4,
            })
        };
        assert_eq!(read(&w, "a", false), ["p", "s2", "s4", "s6"]);
        assert_eq!(read(&w, "b", false), ["p", "s3", "s5"]);
        // A leaving node acquires nothing; a retired parent needs no seed.
        w.retired.insert("p".into());
        assert!(read(&w, "a", true).is_empty());
        // Every shard the plan acquires or seeds is one it read.
        let w = world(&[("s1", &["a"]), ("s2", &["b", "a"])], &["a"]);
        for action in w.plan("a", false, 4) {
            let Action::Acquire { shard } = action else { continue };
            assert!(read(&w, "a", false).contains(&shard), "{shard}");
        }
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

    #[test]
    fn policy_states_follow_lifecycle_and_registration() {
        let registry = [
            reg("j", NodeState::Joining, true),
            reg("a", NodeState::Active, true),
            reg("l", NodeState::Leaving, true),
            reg("d", NodeState::Down, false),
            reg("stale", NodeState::Active, false),
        ];
        use sdk::NodeState as S;
        let cases: &[(&str, Lifecycle, S)] = &[
            ("me", Lifecycle::Joining, S::Joining),
            ("me", Lifecycle::Active, S::Active),
            ("me", Lifecycle::Leaving, S::Leaving),
            ("me", Lifecycle::Drained, S::Leaving),
            ("j", Lifecycle::Active, S::Joining),
            ("a", Lifecycle::Active, S::Active),
            ("l", Lifecycle::Active, S::Leaving),
            ("d", Lifecycle::Active, S::Down),
            ("stale", Lifecycle::Active, S::Down),
            ("unregistered", Lifecycle::Active, S::Down),
        ];
        for (id, mine, want) in cases {
            assert_eq!(node_state(id, "me", *mine, &registry), *want, "{id} with me {mine:?}");
        }
    }

    #[test]
    fn finished_splits_are_the_inactive_shards_with_children() {
        use crate::topology::testutil::*;
        let mut c = base();
        start_split(&mut c, "A_00_3f", 2);
        start_split(&mut c, "A_40_7f", 2);
        finish_split(&mut c, "A_40_7f");
        assert_eq!(finished_splits(&c), vec![("A_40_7f".to_string(), vec!["A_40_7f_c0".to_string(), "A_40_7f_c1".to_string()])]);
    }

    #[test]
    fn split_children_wait_for_their_parent_and_retired_shards_stay_retired() {
        let mut w = world(&[("p", &["a"]), ("c0", &["a"]), ("c1", &["a"])], &["a"]);
        w.parents = [("c0".into(), "p".into()), ("c1".into(), "p".into())].into();
        // Splitting: the parent is acquired, the children are not.
        assert_eq!(w.plan("a", false, 4), vec![acquire("p")]);
        // Retired: the children are, the parent never again.
        w.retired.insert("p".into());
        assert_eq!(w.plan("a", false, 4), vec![acquire("c0"), acquire("c1")]);
    }

    #[test]
    fn a_finished_split_is_seeded_by_the_parents_holder_or_the_first_childs_target() {
        let seed = || Action::Seed { parent: "p".into(), children: vec!["c0".into(), "c1".into()] };
        let mut w = world(&[("c0", &["b", "a"]), ("c1", &["a", "b"])], &["a", "b"]);
        w.parents = [("c0".into(), "p".into()), ("c1".into(), "p".into())].into();
        w.splits = vec![("p".into(), vec!["c0".into(), "c1".into()])];
        // a holds the parent: a seeds, whoever the children's targets are;
        // b, seeing a live holder, does not.
        let held = w.clone_with_parent_held_by("a");
        assert_eq!(held.plan("a", false, 4), vec![seed()]);
        let mut seen_by_b = held.clone_with_parent_held_by("a");
        seen_by_b.held.clear();
        assert_eq!(seen_by_b.plan("b", false, 4), vec![]);
        // Nobody holds it: c0's target (b) seeds.
        assert_eq!(w.plan("b", false, 4), vec![seed()]);
        assert_eq!(w.plan("a", false, 4), vec![]);
        // Retired already: nothing to seed; the children are acquired by their targets.
        w.retired.insert("p".into());
        assert_eq!(w.plan("b", false, 4), vec![acquire("c0")]);
    }

    impl World {
        fn clone_with_parent_held_by(&self, node: &str) -> World {
            let mut w = World {
                rankings: self.rankings.clone(),
                live: self.live.clone(),
                leases: self.leases.clone(),
                held: HashSet::new(),
                parents: self.parents.clone(),
                retired: self.retired.clone(),
                splits: self.splits.clone(),
            };
            w.leases.insert("p".into(), LeaseView { live_holder: Some(uuid(node)) });
            w.held.insert("p".into());
            w
        }
    }

    fn drain_world() -> (HashSet<String>, HashMap<String, Vec<String>>, HashMap<String, LiveNode>) {
        let held: HashSet<String> = (0..10).map(|i| format!("s{i}")).chain(["lonely".to_string()]).collect();
        let mut replicas: HashMap<String, Vec<String>> =
            (0..10).map(|i| (format!("s{i}"), vec!["me".into(), "b".into(), "c".into(), "l".into()])).collect();
        replicas.insert("lonely".into(), vec!["me".into(), "gone".into()]);
        let live = ["b", "c", "l"].iter().map(|n| (n.to_string(), LiveNode { uuid: uuid(n), leaving: *n == "l" })).collect();
        (held, replicas, live)
    }

    #[test]
    fn a_drain_puts_only_placeable_shards_to_the_policy() {
        let (held, replicas, live) = drain_world();
        let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: 4 };
        let (placeable, kept) = drain_candidates(&input);
        assert_eq!(placeable.len(), 10);
        assert_eq!(kept, vec![Kept { shard: "lonely".into(), why: "no other live, non-leaving replica node".into() }]);
    }

    #[test]
    fn a_drain_is_rechunked_to_the_hosts_cap_whatever_the_policy_returns() {
        let (held, replicas, live) = drain_world();
        let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: 4 };
        let (placeable, _) = drain_candidates(&input);
        let one_round: Vec<sdk::Handoff> =
            placeable.iter().map(|s| sdk::Handoff { shard: s.clone(), source: "me".into(), target: "b".into() }).collect();
        let plan = drain_plan(&input, &placeable, &[one_round]);
        assert_eq!(plan.rounds.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 4, 2]);
        assert!(plan.kept.is_empty());
    }

    #[test]
    fn a_drain_refuses_bad_handoffs_and_keeps_what_the_policy_left_out() {
        let (held, replicas, live) = drain_world();
        let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: 4 };
        let (placeable, _) = drain_candidates(&input);
        let h = |s: &str, t: &str| sdk::Handoff { shard: s.into(), source: "me".into(), target: t.into() };
        let policy = vec![vec![h("s0", "b"), h("s0", "c"), h("not-held", "b"), h("s1", "x"), h("s2", "l"), h("s3", "c")]];
        let plan = drain_plan(&input, &placeable, &policy);
        let handed: Vec<(&str, &str)> = plan.rounds.iter().flatten().map(|d| (d.shard.as_str(), d.to.as_str())).collect();
        assert_eq!(handed, vec![("s0", "b"), ("s3", "c")]);
        let kept: HashMap<&str, &str> = plan.kept.iter().map(|k| (k.shard.as_str(), k.why.as_str())).collect();
        assert!(kept["s1"].contains("not a replica node"), "{kept:?}");
        assert!(kept["s2"].contains("leaving"), "{kept:?}");
        assert_eq!(kept["s4"], "the drain policy named no recipient");
        assert!(!kept.contains_key("not-held"));
        assert_eq!(plan.kept.len(), 2 + 6);
    }

    /// A peer whose components differ from the cluster's takes no leases:
    /// planned with `refusing_as_leaving` (the round does), a drain plan
    /// neither puts it to the policy as eligible nor hands it a shard (the
    /// node's drain plans with the same view, `Node::planning_registry`).
    #[test]
    fn a_drain_hands_nothing_to_a_peer_that_takes_no_leases() {
        let registry = [
            reg("me", NodeState::Leaving, true),
            reg("b", NodeState::Active, true),
            reg("m", NodeState::Active, true),
            reg("d", NodeState::Down, false),
        ];
        let refusing = HashSet::from([uuid("m"), uuid("d")]);
        let view = refusing_as_leaving(&registry, &refusing);
        // The drain policy sees it leaving (so the default names another
        // recipient); a registration that is down stays down.
        assert_eq!(node_state("m", "me", Lifecycle::Leaving, &view), sdk::NodeState::Leaving);
        assert_eq!(node_state("b", "me", Lifecycle::Leaving, &view), sdk::NodeState::Active);
        assert_eq!(node_state("d", "me", Lifecycle::Leaving, &view), sdk::NodeState::Down);
        let live = live_peers(&view, "me");
        let held: HashSet<String> = ["both".to_string(), "only-m".to_string()].into();
        let replicas: HashMap<String, Vec<String>> = [
            ("both".to_string(), vec!["me".into(), "m".into(), "b".into()]),
            ("only-m".to_string(), vec!["me".into(), "m".into()]),
        ]
        .into();
        let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: 4 };
        let (placeable, kept) = drain_candidates(&input);
        assert_eq!(placeable, ["both"]);
        assert_eq!(kept, vec![Kept { shard: "only-m".into(), why: "no other live, non-leaving replica node".into() }]);
        // A policy that names it anyway is refused for that shard.
        let h = |s: &str, t: &str| sdk::Handoff { shard: s.into(), source: "me".into(), target: t.into() };
        let plan = drain_plan(&input, &placeable, &[vec![h("both", "m")]]);
        assert!(plan.rounds.is_empty(), "{plan:?}");
        assert!(plan.kept[0].why.contains("leaving") && plan.kept[0].why.contains("`m`"), "{plan:?}");
        assert_eq!(
            drain_plan(&input, &placeable, &[vec![h("both", "b")]]).rounds,
            vec![vec![DrainHandoff { shard: "both".into(), to: "b".into(), to_uuid: uuid("b") }]]
        );
        // And a round of a node that is not leaving hands it nothing either.
        let leases = HashMap::from([("both".to_string(), LeaseView { live_holder: Some(uuid("me")) })]);
        let rankings = vec![("both".to_string(), vec!["m".to_string(), "b".to_string(), "me".to_string()])];
        let none = HashMap::new();
        let round = RoundInput {
            me: "me",
            my_uuid: uuid("me"),
            leaving: false,
            rankings: &rankings,
            live: &live,
            leases: &leases,
            held: &["both".to_string()].into(),
            parents: &none,
            retired: &HashSet::new(),
            splits: &[],
            max_handoffs: 4,
        };
        assert_eq!(plan_round(&round), vec![Action::Handover { shard: "both".into(), to: "b".into(), to_uuid: uuid("b") }]);
    }

    #[test]
    fn the_append_step_serves_forwards_redirects_or_waits() {
        let (me, peer) = (uuid("me"), uuid("peer"));
        let addr = Some(("peer".to_string(), "10.0.0.2:50051".to_string()));
        let forward = AppendStep::Forward { holder: "peer".into(), address: "10.0.0.2:50051".into() };
        let redirect_peer = AppendStep::Redirect { holder: addr.clone() };
        let none = AppendStep::Redirect { holder: None };
        let adopt = AppendStep::Adopt { epoch: 7 };
        // (ready, forwarded, live holder, address known) → step
        let cases: Vec<(bool, bool, Option<Uuid>, bool, AppendStep)> = vec![
            (true, false, Some(me), false, adopt.clone()),
            (true, true, Some(me), false, adopt),
            (false, false, Some(me), false, AppendStep::Wait),
            (false, true, Some(me), false, none.clone()),
            (true, false, Some(peer), true, forward.clone()),
            (false, false, Some(peer), true, forward),
            (true, true, Some(peer), true, redirect_peer),
            (true, false, Some(peer), false, AppendStep::Wait),
            (true, true, Some(peer), false, none.clone()),
            (true, false, None, false, AppendStep::Wait),
            (true, true, None, false, none),
        ];
        for (ready, forwarded, live_holder, known, want) in cases {
            let holder_address = if known { addr.clone() } else { None };
            let facts = AppendFacts { me, ready, forwarded, live_holder, epoch: 7, holder_address, retired_child: None };
            assert_eq!(append_step(&facts), want, "{facts:?}");
        }
    }

    /// A retired parent with nobody holding it sends the append to its
    /// child, forwarded or not, ready or not; a live holder comes first.
    #[test]
    fn the_append_step_follows_a_retired_parents_child() {
        let (me, peer) = (uuid("me"), uuid("peer"));
        let follow = AppendStep::FollowChild { child: "s-1".into() };
        // (ready, forwarded, live holder) → step, with the child known
        let cases = [
            (true, false, None, follow.clone()),
            (true, true, None, follow.clone()),
            (false, false, None, follow),
            (true, false, Some(me), AppendStep::Adopt { epoch: 3 }),
            (true, false, Some(peer), AppendStep::Wait),
        ];
        for (ready, forwarded, live_holder, want) in cases {
            let retired_child = Some("s-1".to_string());
            let facts = AppendFacts { me, ready, forwarded, live_holder, epoch: 3, holder_address: None, retired_child };
            assert_eq!(append_step(&facts), want, "{facts:?}");
        }
    }

    #[test]
    fn a_forward_waits_no_longer_than_the_holders_lease() {
        let (ttl, renew) = (Duration::from_secs(2), Duration::from_millis(500));
        let ms = Duration::from_millis;
        let cases: &[(Option<Duration>, Duration)] = &[
            (None, ttl),                // unknown expiry: a full TTL
            (Some(ms(1900)), ttl),      // a healthy holder: capped at the TTL
            (Some(ms(1000)), ms(1500)), // renewal overdue: what is left plus a renew interval
            (Some(Duration::ZERO), ms(500)),
        ];
        for (left, want) in cases {
            assert_eq!(forward_timeout(*left, ttl, renew), *want, "{left:?}");
        }
        assert_eq!(forward_timeout(Some(Duration::ZERO), ttl, Duration::ZERO), ms(100), "never below 100 ms");
    }
}
