//! The pure planner: a request becomes a list of configs.
//!
//! Each planned config is the next version of the one before it (the version
//! grows by exactly one per step) and passes
//! [`validate_transition`](crate::topology::validate_transition) against it;
//! the planner checks every step before it returns a plan, so a [`Plan`] is
//! safe to roll out step by step with at most two versions live.
//!
//! - [`add_node`]: one step, the node added (no replicas yet).
//! - [`move_shard`]: add the new replica (one step), then, after the bake,
//!   remove the old one (a second step). A replica move never adds and
//!   removes in one step and existing replicas never move.
//! - [`split_shard`]: the parent goes `active → splitting` with `activating`
//!   children that exactly cover its range, one replica on each of the
//!   parent's nodes; then the children go `activating → active` and the
//!   parent `splitting → inactive`. Children are named like any shard,
//!   `<app>_<lower>_<upper>` with the shortened bounds
//!   ([`ops::shard_id`]); replica ids as [`ops::replica_id`] makes them.
//! - [`rebalance`]: the `placement` policy's moves in rounds of at most
//!   `max_per_round`; each round adds its new replicas in one step and
//!   removes the old ones in the next.
//!
//! Nothing here does I/O; the policies come in as functions.

use std::collections::{HashMap, HashSet};
use std::fmt;

use chitin_policy_sdk::{RebalanceRequest, ReplicaMove, SplitRequest};
use serde::{Deserialize, Serialize};

use crate::topology::model::{ClusterConfig, Metadata, Replica, Shard, ShardState};
use crate::topology::ops;
use crate::topology::policy_view;
use crate::topology::rules::Violation;
use crate::topology::transition::{TransitionReport, validate_transition};
use crate::topology::validate::validate;

/// The children counts `split-shard --children` accepts.
pub const CHILDREN_CHOICES: [u32; 2] = [2, 4];

/// What the operator asked for. It names a control sequence in its
/// checkpoint: running the same request again resumes it, and a different
/// one is refused while it is unfinished.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Sequence {
    AddNode {
        node_id: String,
        node_address: String,
        #[serde(default)]
        rebalance: bool,
    },
    MoveShard {
        shard_id: String,
        from_node: String,
        to_node: String,
    },
    SplitShard {
        shard_id: String,
        /// `--split-at` as 8 hex digits, when given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        split_at: Option<String>,
        children: u32,
    },
    Rebalance,
}

impl Sequence {
    /// The `chitin cluster` verb.
    pub fn verb(&self) -> &'static str {
        match self {
            Sequence::AddNode { .. } => "add-node",
            Sequence::MoveShard { .. } => "move-shard",
            Sequence::SplitShard { .. } => "split-shard",
            Sequence::Rebalance => "rebalance",
        }
    }
}

/// The command line that starts (and resumes) the sequence, without `--config`.
impl fmt::Display for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.verb())?;
        match self {
            Sequence::AddNode { node_id, node_address, rebalance } => {
                write!(f, " --node-id {node_id} --node-address {node_address}")?;
                if *rebalance {
                    write!(f, " --rebalance")?;
                }
            }
            Sequence::MoveShard { shard_id, from_node, to_node } => {
                write!(f, " --shard-id {shard_id} --from-node {from_node} --to-node {to_node}")?
            }
            Sequence::SplitShard { shard_id, split_at, children } => {
                write!(f, " --shard-id {shard_id}")?;
                match split_at {
                    Some(at) => write!(f, " --split-at {at}")?,
                    None => write!(f, " --children {children}")?,
                }
            }
            Sequence::Rebalance => {}
        }
        Ok(())
    }
}

/// One planned version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    /// The config of this step; its version is the previous one plus one.
    pub config: ClusterConfig,
    /// What the step changes, for progress lines.
    pub description: String,
    /// Wait the bake time after the previous step converged before pushing
    /// this one (a removal after an add, a split's completion).
    pub bake_before: bool,
}

/// The planned versions of one control sequence, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The config the plan starts from.
    pub base: ClusterConfig,
    pub steps: Vec<Step>,
}

impl Plan {
    /// The config after the last step (the base when there is no step).
    pub fn last(&self) -> &ClusterConfig {
        self.steps.last().map_or(&self.base, |s| &s.config)
    }

    /// `self` followed by `next`, which must start where `self` ends.
    pub fn then(mut self, next: Plan) -> Plan {
        debug_assert_eq!(self.last(), &next.base);
        self.steps.extend(next.steps);
        self
    }

    /// Every config, the base first.
    pub fn configs(&self) -> impl Iterator<Item = &ClusterConfig> {
        std::iter::once(&self.base).chain(self.steps.iter().map(|s| &s.config))
    }
}

/// Why a request cannot be planned. Each message names what is wrong and
/// how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(
        "the config (version {version}) breaks {} rule(s): {}; fix it first (`chitin config validate`)",
        .violations.len(), join(.violations)
    )]
    InvalidBase { version: u64, violations: Vec<Violation> },
    #[error("no shard `{shard}` in the config (version {version}); `chitin config show --shards FILE` lists the shards")]
    UnknownShard { shard: String, version: u64 },
    #[error("no node `{node}` in the config (version {version}; nodes: {known}); add it first with `chitin cluster add-node`")]
    UnknownNode { node: String, version: u64, known: String },
    #[error("node `{node}` is already in the config (version {version}) at {address}; pick another --node-id")]
    NodeExists { node: String, version: u64, address: String },
    #[error("{0}; nothing planned")]
    AddNode(String),
    #[error("shard `{shard}` is {state}; only an active shard {action}{hint}")]
    ShardNotActive { shard: String, state: ShardState, action: &'static str, hint: &'static str },
    #[error("--from-node and --to-node are both `{node}`; a move needs two different nodes")]
    SameNode { node: String },
    #[error("node `{node}` hosts no replica of shard `{shard}` (its replicas are on {nodes}); pick one of them as --from-node")]
    NoReplicaOnSource { shard: String, node: String, nodes: String },
    #[error("node `{node}` already hosts replica `{replica}` of shard `{shard}`; pick a --to-node without a replica of it")]
    TargetHostsReplica { shard: String, node: String, replica: String },
    #[error("--split-at `{text}` is not 8 hex digits; give the first key of the second child, e.g. 08000000")]
    BadSplitAt { text: String },
    #[error("--children {children}: a split makes {}; drop --children for the default of 2", choices())]
    BadChildren { children: u32 },
    #[error("--split-at makes exactly 2 children, but --children {children} was given; drop one of them")]
    SplitAtWithChildren { children: u32 },
    #[error("a split needs at least one split point (2 children); shard `{shard}` got none")]
    NoSplitPoints { shard: String },
    #[error(
        "split point {point:08x} is outside shard `{shard}` {range}; it is the first key of a child, so it must satisfy lower < point <= upper"
    )]
    SplitPointOutOfRange { shard: String, point: u32, range: String },
    #[error("split points {points} of shard `{shard}` are not strictly increasing")]
    SplitPointsUnordered { shard: String, points: String },
    #[error("child `{child}` of shard `{shard}` would take the id of an existing shard; this config cannot be split there")]
    ChildIdTaken { shard: String, child: String },
    #[error("the {slot} policy failed: {message}")]
    Policy { slot: &'static str, message: String },
    #[error("the placement policy's rebalance plan has an unusable move ({index}: {what}): {why}")]
    BadMove { index: usize, what: String, why: String },
    #[error("--max-handoffs-per-round must be at least 1")]
    ZeroPerRound,
    #[error(
        "step {step} (version {version}) would break {} rule(s): {}; nothing was pushed",
        .report.len(), report_text(.report)
    )]
    InvalidStep { step: usize, version: u64, report: TransitionReport },
}

fn join(v: &[Violation]) -> String {
    v.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

fn report_text(r: &TransitionReport) -> String {
    r.all().map(|(scope, v)| format!("{v} ({})", scope.as_str())).collect::<Vec<_>>().join("; ")
}

fn choices() -> String {
    let c: Vec<String> = CHILDREN_CHOICES.iter().map(|c| c.to_string()).collect();
    format!("{} children", c.join(" or "))
}

fn list<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let v: Vec<String> = items.into_iter().map(|s| format!("`{s}`")).collect();
    if v.is_empty() { "no nodes".into() } else { v.join(", ") }
}

/// Builds a plan step by step, checking each transition.
struct Builder {
    base: ClusterConfig,
    current: ClusterConfig,
    steps: Vec<Step>,
}

impl Builder {
    fn new(base: &ClusterConfig) -> Result<Builder, PlanError> {
        let violations = validate(base);
        if !violations.is_empty() {
            return Err(PlanError::InvalidBase { version: base.version, violations });
        }
        Ok(Builder { base: base.clone(), current: base.clone(), steps: Vec::new() })
    }

    /// Adds the next version: a copy of the current config changed by `change`.
    fn step(
        &mut self,
        description: String,
        bake_before: bool,
        change: impl FnOnce(&mut ClusterConfig) -> Result<(), PlanError>,
    ) -> Result<(), PlanError> {
        let mut next = self.current.clone();
        next.version = self.current.version + 1;
        change(&mut next)?;
        let report = validate_transition(&self.current, &next);
        if !report.is_valid() {
            return Err(PlanError::InvalidStep { step: self.steps.len() + 1, version: next.version, report });
        }
        self.current = next.clone();
        self.steps.push(Step { config: next, description, bake_before });
        Ok(())
    }

    fn finish(self) -> Plan {
        Plan { base: self.base, steps: self.steps }
    }
}

fn find_shard<'a>(config: &'a ClusterConfig, id: &str) -> Result<(usize, usize, &'a Shard), PlanError> {
    config
        .applications
        .iter()
        .enumerate()
        .find_map(|(a, app)| app.shards.iter().position(|s| s.id == id).map(|i| (a, i, &app.shards[i])))
        .ok_or_else(|| PlanError::UnknownShard { shard: id.to_owned(), version: config.version })
}

fn known_node(config: &ClusterConfig, id: &str) -> Result<(), PlanError> {
    if config.node(id).is_some() {
        return Ok(());
    }
    Err(PlanError::UnknownNode {
        node: id.to_owned(),
        version: config.version,
        known: config.nodes.iter().map(|n| n.id.as_str()).collect::<Vec<_>>().join(", "),
    })
}

fn taken_replica_ids(config: &ClusterConfig) -> HashSet<String> {
    config.shards().flat_map(|(_, s)| s.replicas.iter().map(|r| r.id.clone())).collect()
}

fn shard_mut<'a>(config: &'a mut ClusterConfig, id: &str) -> &'a mut Shard {
    config
        .applications
        .iter_mut()
        .flat_map(|a| a.shards.iter_mut())
        .find(|s| s.id == id)
        .expect("the planner only changes shards it found")
}

/// Why a shard's replicas cannot move, if they cannot.
fn check_movable(shard: &Shard) -> Result<(), PlanError> {
    let hint = match shard.state {
        ShardState::Active => return Ok(()),
        ShardState::Splitting => {
            "; a splitting shard's children must stay on its nodes, so finish the split first (re-run its `split-shard`)"
        }
        ShardState::Activating => {
            "; an activating child stays on its parent's nodes until the split finishes (re-run its `split-shard`)"
        }
        ShardState::Inactive => "; an inactive shard serves nothing, move its children instead",
    };
    Err(PlanError::ShardNotActive { shard: shard.id.clone(), state: shard.state, action: "moves its replicas", hint })
}

/// Plans `add-node`: one step adding the node, with no replicas.
pub fn add_node(config: &ClusterConfig, id: &str, address: &str, metadata: Vec<Metadata>) -> Result<Plan, PlanError> {
    let mut b = Builder::new(config)?;
    if let Some(n) = config.node(id) {
        return Err(PlanError::NodeExists { node: id.to_owned(), version: config.version, address: n.grpc_address.clone() });
    }
    let next = ops::add_node(config, id, address, metadata).map_err(|e| match e {
        ops::OpsError::Invalid(report) => PlanError::AddNode(report_text(&report)),
        other => PlanError::AddNode(other.to_string()),
    })?;
    b.step(format!("add node `{id}` ({address})"), false, |c| {
        *c = next;
        Ok(())
    })?;
    Ok(b.finish())
}

/// Plans `add-node --rebalance`: [`add_node`], then [`rebalance`] with the
/// moves `policy` proposes for the config that has the new node.
pub fn add_node_and_rebalance<E: std::error::Error>(
    config: &ClusterConfig,
    id: &str,
    address: &str,
    metadata: Vec<Metadata>,
    max_per_round: u32,
    policy: impl FnOnce(RebalanceRequest) -> Result<Vec<ReplicaMove>, E>,
) -> Result<Plan, PlanError> {
    let added = add_node(config, id, address, metadata)?;
    let with_node = added.last().clone();
    let moves = policy(rebalance_request(&with_node)).map_err(|e| policy_error("placement", &e))?;
    Ok(added.then(rebalance(&with_node, &moves, max_per_round)?))
}

/// Plans `move-shard`: add a replica of `shard` on `to` (one step), then
/// remove the replica on `from` (a later step, baked).
pub fn move_shard(config: &ClusterConfig, shard: &str, from: &str, to: &str) -> Result<Plan, PlanError> {
    let mut b = Builder::new(config)?;
    let (_, _, s) = find_shard(config, shard)?;
    known_node(config, from)?;
    known_node(config, to)?;
    if from == to {
        return Err(PlanError::SameNode { node: from.to_owned() });
    }
    check_movable(s)?;
    let Some(old) = s.replicas.iter().find(|r| r.node_id == from) else {
        return Err(PlanError::NoReplicaOnSource {
            shard: shard.to_owned(),
            node: from.to_owned(),
            nodes: list(s.replicas.iter().map(|r| r.node_id.as_str())),
        });
    };
    if let Some(r) = s.replicas.iter().find(|r| r.node_id == to) {
        return Err(PlanError::TargetHostsReplica { shard: shard.to_owned(), node: to.to_owned(), replica: r.id.clone() });
    }
    let new_id = ops::replica_id(shard, to, &taken_replica_ids(config));
    let old_id = old.id.clone();
    b.step(format!("add replica `{new_id}` of `{shard}` on `{to}`"), false, |c| {
        shard_mut(c, shard).replicas.push(Replica { id: new_id.clone(), node_id: to.to_owned(), metadata: vec![] });
        Ok(())
    })?;
    b.step(format!("remove replica `{old_id}` of `{shard}` from `{from}`"), true, |c| {
        shard_mut(c, shard).replicas.retain(|r| r.id != old_id);
        Ok(())
    })?;
    Ok(b.finish())
}

/// Parses `--split-at`: exactly 8 hex digits (an optional `0x` prefix aside).
pub fn parse_split_at(text: &str) -> Result<u32, PlanError> {
    let t = text.strip_prefix("0x").unwrap_or(text);
    if t.len() != 8 || !t.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(PlanError::BadSplitAt { text: text.to_owned() });
    }
    Ok(u32::from_str_radix(t, 16).expect("checked hex"))
}

/// The `split` policy's request for `shard`, after the checks every split
/// needs: the shard exists and is active, `children` is allowed, and an
/// explicit point comes with 2 children.
pub fn split_request(config: &ClusterConfig, shard: &str, at: Option<u32>, children: u32) -> Result<SplitRequest, PlanError> {
    let (a, _, s) = find_shard(config, shard)?;
    if s.state != ShardState::Active {
        let hint = match s.state {
            ShardState::Splitting => "; this one is already splitting: re-run the `split-shard` that started it to finish it",
            ShardState::Inactive => "; this one was split already, split one of its children",
            _ => "; an activating child becomes active when its parent's split finishes",
        };
        return Err(PlanError::ShardNotActive { shard: s.id.clone(), state: s.state, action: "splits", hint });
    }
    if at.is_some() && children != 2 {
        return Err(PlanError::SplitAtWithChildren { children });
    }
    if !CHILDREN_CHOICES.contains(&children) {
        return Err(PlanError::BadChildren { children });
    }
    Ok(SplitRequest { shard: policy_view::shard(&config.applications[a].name, s), children, at, load: None, samples: vec![] })
}

/// The split points for `split-shard`: `policy` (the `split` policy's
/// `split-points`) answers the request of [`split_request`].
pub fn choose_split_points<E: std::error::Error>(
    config: &ClusterConfig,
    shard: &str,
    at: Option<u32>,
    children: u32,
    policy: impl FnOnce(SplitRequest) -> Result<Vec<u32>, E>,
) -> Result<Vec<u32>, PlanError> {
    let req = split_request(config, shard, at, children)?;
    policy(req).map_err(|e| policy_error("split", &e))
}

/// Plans `split-shard` at `points` (the first key of every child but the
/// first): the parent starts splitting with `points.len() + 1` activating
/// children on its nodes; after the bake the children become active and the
/// parent inactive.
pub fn split_shard(config: &ClusterConfig, shard: &str, points: &[u32]) -> Result<Plan, PlanError> {
    let mut b = Builder::new(config)?;
    let (a, _, s) = find_shard(config, shard)?;
    split_request(config, shard, None, 2)?; // the state check
    if points.is_empty() {
        return Err(PlanError::NoSplitPoints { shard: shard.to_owned() });
    }
    if points.windows(2).any(|w| w[0] >= w[1]) {
        return Err(PlanError::SplitPointsUnordered {
            shard: shard.to_owned(),
            points: points.iter().map(|p| format!("{p:08x}")).collect::<Vec<_>>().join(", "),
        });
    }
    for &p in points {
        if p <= s.lower || p > s.upper {
            return Err(PlanError::SplitPointOutOfRange { shard: shard.to_owned(), point: p, range: s.range_string() });
        }
    }
    let app = &config.applications[a].name;
    let mut ranges = Vec::with_capacity(points.len() + 1);
    let mut lower = s.lower;
    for &p in points {
        ranges.push((lower, p - 1));
        lower = p;
    }
    ranges.push((lower, s.upper));

    let existing: HashSet<&str> = config.shards().map(|(_, s)| s.id.as_str()).collect();
    let mut taken = taken_replica_ids(config);
    let nodes: Vec<String> = s.replicas.iter().map(|r| r.node_id.clone()).collect();
    let mut children = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        let id = ops::shard_id(app, lo, hi);
        if existing.contains(id.as_str()) || children.iter().any(|c: &Shard| c.id == id) {
            return Err(PlanError::ChildIdTaken { shard: shard.to_owned(), child: id });
        }
        let replicas = nodes
            .iter()
            .map(|n| {
                let rid = ops::replica_id(&id, n, &taken);
                taken.insert(rid.clone());
                Replica { id: rid, node_id: n.clone(), metadata: vec![] }
            })
            .collect();
        children.push(Shard {
            id,
            lower: lo,
            upper: hi,
            state: ShardState::Activating,
            parent_id: Some(shard.to_owned()),
            replicas,
            metadata: vec![],
        });
    }
    let names = list(children.iter().map(|c| c.id.as_str()));
    let ids: HashSet<String> = children.iter().map(|c| c.id.clone()).collect();
    b.step(format!("start splitting `{shard}` into {names} (activating)"), false, |c| {
        shard_mut(c, shard).state = ShardState::Splitting;
        c.applications[a].shards.extend(children);
        Ok(())
    })?;
    b.step(format!("activate {names}; retire `{shard}` (inactive)"), true, |c| {
        for s in &mut c.applications[a].shards {
            if s.id == shard {
                s.state = ShardState::Inactive;
            } else if ids.contains(&s.id) {
                s.state = ShardState::Active;
            }
        }
        Ok(())
    })?;
    Ok(b.finish())
}

/// The `placement` policy's `rebalance` request for a config: every node
/// active, no holders or load known.
pub fn rebalance_request(config: &ClusterConfig) -> RebalanceRequest {
    RebalanceRequest {
        nodes: policy_view::nodes(config),
        shards: policy_view::shards(config),
        replicas: policy_view::replicas(config),
        holders: vec![],
        load: vec![],
    }
}

/// Plans `rebalance`: `moves` (the `placement` policy's answer to
/// [`rebalance_request`]) in rounds of at most `max_per_round` moves, never
/// two moves of one shard in a round. A round is two steps: add every new
/// replica of the round, then (baked) remove every old one.
pub fn rebalance(config: &ClusterConfig, moves: &[ReplicaMove], max_per_round: u32) -> Result<Plan, PlanError> {
    if max_per_round == 0 {
        return Err(PlanError::ZeroPerRound);
    }
    let mut b = Builder::new(config)?;
    let bad = |index: usize, m: &ReplicaMove, why: String| PlanError::BadMove {
        index: index + 1,
        what: format!("replica `{}` of `{}` from `{}` to `{}`", m.replica, m.shard, m.source, m.target),
        why,
    };
    // Check every move against the config as it evolves.
    let mut sim = config.clone();
    let mut seen = HashSet::new();
    for (i, m) in moves.iter().enumerate() {
        let (_, _, s) = find_shard(&sim, &m.shard).map_err(|e| bad(i, m, e.to_string()))?;
        check_movable(s).map_err(|e| bad(i, m, e.to_string()))?;
        known_node(&sim, &m.target).map_err(|e| bad(i, m, e.to_string()))?;
        if !seen.insert(m.replica.as_str()) {
            return Err(bad(i, m, "the replica is moved twice".into()));
        }
        match s.replicas.iter().find(|r| r.id == m.replica) {
            None => return Err(bad(i, m, format!("shard `{}` has no replica `{}`", m.shard, m.replica))),
            Some(r) if r.node_id != m.source => {
                return Err(bad(i, m, format!("the replica is on `{}`, not on `{}`", r.node_id, m.source)));
            }
            Some(_) => {}
        }
        if let Some(r) = s.replicas.iter().find(|r| r.node_id == m.target) {
            return Err(bad(i, m, format!("node `{}` already hosts replica `{}` of it", m.target, r.id)));
        }
        let s = shard_mut(&mut sim, &m.shard);
        s.replicas.retain(|r| r.id != m.replica);
        s.replicas.push(Replica { id: String::new(), node_id: m.target.clone(), metadata: vec![] });
    }

    // Rounds: in order, at most `max_per_round`, one move per shard.
    let mut rounds: Vec<Vec<&ReplicaMove>> = Vec::new();
    let mut left: Vec<&ReplicaMove> = moves.iter().collect();
    while !left.is_empty() {
        let mut round = Vec::new();
        let mut shards = HashSet::new();
        left.retain(|m| {
            if round.len() < max_per_round as usize && shards.insert(m.shard.as_str()) {
                round.push(*m);
                false
            } else {
                true
            }
        });
        rounds.push(round);
    }
    let total = rounds.len();
    let mut taken = taken_replica_ids(config);
    for (k, round) in rounds.into_iter().enumerate() {
        let added: Vec<(String, String, String)> = round
            .iter()
            .map(|m| {
                let id = ops::replica_id(&m.shard, &m.target, &taken);
                taken.insert(id.clone());
                (m.shard.clone(), id, m.target.clone())
            })
            .collect();
        let what: Vec<String> = round.iter().map(|m| format!("`{}` {}→{}", m.shard, m.source, m.target)).collect();
        let what = what.join(", ");
        b.step(format!("rebalance round {}/{total}: add {} replica(s): {what}", k + 1, added.len()), false, |c| {
            for (shard, id, node) in &added {
                shard_mut(c, shard).replicas.push(Replica { id: id.clone(), node_id: node.clone(), metadata: vec![] });
            }
            Ok(())
        })?;
        let removed: HashMap<&str, &str> = round.iter().map(|m| (m.replica.as_str(), m.shard.as_str())).collect();
        b.step(format!("rebalance round {}/{total}: remove {} replica(s): {what}", k + 1, removed.len()), true, |c| {
            for (replica, shard) in &removed {
                shard_mut(c, shard).replicas.retain(|r| r.id != *replica);
            }
            Ok(())
        })?;
    }
    Ok(b.finish())
}

fn policy_error(slot: &'static str, e: &dyn std::error::Error) -> PlanError {
    let mut message = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        message.push_str(": ");
        message.push_str(&c.to_string());
        cur = c.source();
    }
    PlanError::Policy { slot, message }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::base;
    use chitin_policy_sdk::PolicyError;

    /// The example cluster: 3 nodes, `journal` with 8 shards on all three.
    fn example() -> ClusterConfig {
        ClusterConfig::from_json(include_str!("../../../examples/cluster/cluster_config.json")).unwrap()
    }

    fn with_fourth(c: &ClusterConfig) -> ClusterConfig {
        add_node(c, "node-04", "127.0.0.1:50054", vec![]).unwrap().last().clone()
    }

    /// Every step bumps the version by one and is a valid transition.
    fn check_chain(p: &Plan) {
        let mut prev = &p.base;
        for (i, s) in p.steps.iter().enumerate() {
            assert_eq!(s.config.version, prev.version + 1, "step {}", i + 1);
            let r = validate_transition(prev, &s.config);
            assert!(r.is_valid(), "step {}: {r:?}", i + 1);
            prev = &s.config;
        }
    }

    fn shard<'a>(c: &'a ClusterConfig, id: &str) -> &'a Shard {
        c.shards().map(|(_, s)| s).find(|s| s.id == id).unwrap_or_else(|| panic!("no shard {id}"))
    }

    fn nodes_of(c: &ClusterConfig, id: &str) -> Vec<String> {
        let mut v: Vec<String> = shard(c, id).replicas.iter().map(|r| r.node_id.clone()).collect();
        v.sort();
        v
    }

    #[test]
    fn add_node_is_one_step() {
        let c = example();
        let p = add_node(&c, "node-04", "127.0.0.1:50054", vec![Metadata::new("zone", "z4")]).unwrap();
        check_chain(&p);
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.last().version, 2);
        assert_eq!(p.last().nodes.len(), 4);
        assert_eq!(p.last().nodes[3].metadata, vec![Metadata::new("zone", "z4")]);
        assert_eq!(p.last().replica_count(), c.replica_count());
    }

    #[test]
    fn move_adds_then_removes() {
        let c = with_fourth(&example());
        let p = move_shard(&c, "journal_00_1f", "node-01", "node-04").unwrap();
        check_chain(&p);
        assert_eq!(p.steps.len(), 2);
        let (add, remove) = (&p.steps[0], &p.steps[1]);
        assert!(!add.bake_before && remove.bake_before);
        assert_eq!(nodes_of(&add.config, "journal_00_1f"), ["node-01", "node-02", "node-03", "node-04"]);
        assert_eq!(nodes_of(&remove.config, "journal_00_1f"), ["node-02", "node-03", "node-04"]);
        // Existing replicas keep their ids and nodes.
        let before = &shard(&c, "journal_00_1f").replicas;
        let after = &shard(&remove.config, "journal_00_1f").replicas;
        for r in before.iter().filter(|r| r.node_id != "node-01") {
            assert!(after.contains(r));
        }
        let new = after.iter().find(|r| r.node_id == "node-04").unwrap();
        assert!(new.id.starts_with("journal_00_1f_") && new.id.len() == "journal_00_1f_".len() + 8);
        assert!(add.description.contains("node-04") && remove.description.contains("node-01"));
        // Deterministic.
        assert_eq!(move_shard(&c, "journal_00_1f", "node-01", "node-04").unwrap(), p);
    }

    #[test]
    fn split_in_two_at_a_point() {
        let c = example();
        let p = split_shard(&c, "journal_00_1f", &[0x1000_0000]).unwrap();
        check_chain(&p);
        assert_eq!(p.steps.len(), 2);
        let start = &p.steps[0].config;
        assert_eq!(shard(start, "journal_00_1f").state, ShardState::Splitting);
        for (id, lo, hi) in [("journal_00_0f", 0, 0x0fff_ffff), ("journal_10_1f", 0x1000_0000, 0x1fff_ffff)] {
            let k = shard(start, id);
            assert_eq!((k.lower, k.upper, k.state), (lo, hi, ShardState::Activating));
            assert_eq!(k.parent_id.as_deref(), Some("journal_00_1f"));
            assert_eq!(nodes_of(start, id), nodes_of(&c, "journal_00_1f"));
            assert!(k.replicas.iter().all(|r| r.id.starts_with(&format!("{id}_"))));
        }
        let end = &p.steps[1].config;
        assert!(p.steps[1].bake_before);
        assert_eq!(shard(end, "journal_00_1f").state, ShardState::Inactive);
        assert_eq!(shard(end, "journal_00_0f").state, ShardState::Active);
        assert_eq!(shard(end, "journal_10_1f").state, ShardState::Active);
        // The result round-trips through JSON with the same ids.
        assert_eq!(ClusterConfig::from_json(&end.to_json()).unwrap(), *end);
    }

    #[test]
    fn split_ids_follow_the_config() {
        // (shard, points, children ids)
        let cases: &[(&str, &[u32], &[&str])] = &[
            ("journal_20_3f", &[0x3000_0000], &["journal_20_2f", "journal_30_3f"]),
            (
                "journal_20_3f",
                &[0x2800_0000, 0x3000_0000, 0x3800_0000],
                &["journal_20_27", "journal_28_2f", "journal_30_37", "journal_38_3f"],
            ),
            ("journal_e0_ff", &[0xe000_0100], &["journal_e00000_e00000", "journal_e00001_ffffff"]),
            ("journal_e0_ff", &[0xe800_0000], &["journal_e0_e7", "journal_e8_ff"]),
        ];
        for (id, points, want) in cases {
            let p = split_shard(&example(), id, points).unwrap();
            check_chain(&p);
            let kids: Vec<&str> = p.steps[0]
                .config
                .shards()
                .filter(|(_, s)| s.parent_id.as_deref() == Some(*id))
                .map(|(_, s)| s.id.as_str())
                .collect();
            assert_eq!(&kids, want, "{id} at {points:x?}");
        }
    }

    #[test]
    fn split_then_split_a_child_then_move_it() {
        let c = example();
        let p1 = split_shard(&c, "journal_00_1f", &[0x1000_0000]).unwrap();
        let p2 = split_shard(p1.last(), "journal_00_0f", &[0x0800_0000]).unwrap();
        check_chain(&p2);
        assert_eq!(p2.base.version, 3);
        assert_eq!(p2.last().version, 5);
        let c4 = with_fourth(p2.last());
        let p3 = move_shard(&c4, "journal_08_0f", "node-02", "node-04").unwrap();
        check_chain(&p3);
    }

    #[test]
    fn policy_split_points() {
        let policy = |req: SplitRequest| -> Result<Vec<u32>, PolicyError> {
            Ok(match req.at {
                Some(at) => vec![at],
                None => {
                    let w = (u64::from(req.shard.upper) - u64::from(req.shard.lower) + 1) / u64::from(req.children);
                    (1..req.children).map(|i| (u64::from(req.shard.lower) + w * u64::from(i)) as u32).collect()
                }
            })
        };
        let c = example();
        assert_eq!(choose_split_points(&c, "journal_00_1f", None, 2, policy).unwrap(), vec![0x1000_0000]);
        assert_eq!(
            choose_split_points(&c, "journal_00_1f", None, 4, policy).unwrap(),
            vec![0x0800_0000, 0x1000_0000, 0x1800_0000]
        );
        assert_eq!(choose_split_points(&c, "journal_00_1f", Some(0x0400_0000), 2, policy).unwrap(), vec![0x0400_0000]);
        let failing = |_| Err::<Vec<u32>, _>(PolicyError::InvalidSplit("no".into()));
        assert!(matches!(
            choose_split_points(&c, "journal_00_1f", None, 2, failing),
            Err(PlanError::Policy { slot: "split", message }) if message.contains("no")
        ));
    }

    #[test]
    fn parse_split_at_table() {
        let cases: &[(&str, Option<u32>)] = &[
            ("08000000", Some(0x0800_0000)),
            ("0x08000000", Some(0x0800_0000)),
            ("FFFFFFFF", Some(u32::MAX)),
            ("08", None),
            ("0800000", None),
            ("080000000", None),
            ("0800000g", None),
            ("", None),
        ];
        for (text, want) in cases {
            match (parse_split_at(text), want) {
                (Ok(v), Some(w)) => assert_eq!(v, *w, "{text}"),
                (Err(PlanError::BadSplitAt { .. }), None) => {}
                (got, _) => panic!("{text}: {got:?}"),
            }
        }
    }

    /// One refused request: the error variant and a piece of its message.
    type Refusal = (&'static str, Box<dyn Fn(&ClusterConfig) -> Result<Plan, PlanError>>, &'static str);

    #[test]
    fn refusals() {
        let split_started = {
            let c = example();
            split_shard(&c, "journal_00_1f", &[0x1000_0000]).unwrap().steps[0].config.clone()
        };
        let split_done = {
            let c = example();
            split_shard(&c, "journal_00_1f", &[0x1000_0000]).unwrap().last().clone()
        };
        let cases: Vec<Refusal> = vec![
            ("node exists", Box::new(|c| add_node(c, "node-01", "x:1", vec![])), "already in the config"),
            ("address taken", Box::new(|c| add_node(c, "node-09", "127.0.0.1:50051", vec![])), "node-address-duplicate"),
            ("unknown shard", Box::new(|c| move_shard(c, "nope", "node-01", "node-02")), "no shard `nope`"),
            ("unknown source", Box::new(|c| move_shard(c, "journal_00_1f", "node-09", "node-02")), "no node `node-09`"),
            ("unknown target", Box::new(|c| move_shard(c, "journal_00_1f", "node-01", "node-09")), "add it first"),
            ("same node", Box::new(|c| move_shard(c, "journal_00_1f", "node-01", "node-01")), "two different nodes"),
            (
                "target hosts",
                Box::new(|c| move_shard(c, "journal_00_1f", "node-01", "node-02")),
                "already hosts replica `journal_00_1f_00000001`",
            ),
            (
                "source lacks",
                Box::new(|c| {
                    let c = with_fourth(c);
                    move_shard(&c, "journal_00_1f", "node-04", "node-01")
                }),
                "hosts no replica",
            ),
            (
                "move splitting",
                Box::new(move |_| {
                    let c = with_fourth(&split_started);
                    move_shard(&c, "journal_00_1f", "node-01", "node-04")
                }),
                "is splitting; only an active shard moves its replicas",
            ),
            ("split unknown", Box::new(|c| split_shard(c, "nope", &[1])), "no shard `nope`"),
            ("split no points", Box::new(|c| split_shard(c, "journal_00_1f", &[])), "at least one split point"),
            ("split at lower", Box::new(|c| split_shard(c, "journal_00_1f", &[0])), "lower < point <= upper"),
            ("split outside", Box::new(|c| split_shard(c, "journal_00_1f", &[0x2000_0000])), "outside shard"),
            (
                "split unordered",
                Box::new(|c| split_shard(c, "journal_00_1f", &[0x1000_0000, 0x0800_0000])),
                "not strictly increasing",
            ),
            (
                "split inactive",
                Box::new(move |_| split_shard(&split_done, "journal_00_1f", &[0x1000_0000])),
                "is inactive; only an active shard splits",
            ),
            (
                "split children",
                Box::new(|c| split_request(c, "journal_00_1f", None, 3).map(|_| unreachable!())),
                "2 or 4 children",
            ),
            (
                "split at and children",
                Box::new(|c| split_request(c, "journal_00_1f", Some(0x0800_0000), 4).map(|_| unreachable!())),
                "exactly 2 children",
            ),
            (
                "invalid base",
                Box::new(|c| {
                    let mut c = c.clone();
                    c.nodes.truncate(2);
                    add_node(&c, "node-04", "x:4", vec![])
                }),
                "breaks",
            ),
            ("zero per round", Box::new(|c| rebalance(c, &[], 0)), "at least 1"),
        ];
        let c = example();
        for (name, plan, needle) in cases {
            match plan(&c) {
                Ok(p) => panic!("{name}: planned {} step(s)", p.steps.len()),
                Err(e) => assert!(e.to_string().contains(needle), "{name}: `{e}` lacks `{needle}`"),
            }
        }
    }

    fn mv(shard: &str, replica: &str, source: &str, target: &str) -> ReplicaMove {
        ReplicaMove { shard: shard.into(), replica: replica.into(), source: source.into(), target: target.into() }
    }

    #[test]
    fn rebalance_in_rounds() {
        let c = with_fourth(&base());
        // Six moves to n4; two touch the same shard.
        let moves = vec![
            mv("A_00_3f", "A_00_3f_n1", "n1", "n4"),
            mv("A_40_7f", "A_40_7f_n2", "n2", "n4"),
            mv("A_80_bf", "A_80_bf_n3", "n3", "n4"),
        ];
        let p = rebalance(&c, &moves, 2).unwrap();
        check_chain(&p);
        // 3 moves, 2 per round: 2 rounds of add + remove.
        assert_eq!(p.steps.len(), 4);
        assert_eq!(p.steps.iter().map(|s| s.bake_before).collect::<Vec<_>>(), [false, true, false, true]);
        assert_eq!(p.steps[0].config.replica_count(), c.replica_count() + 2);
        assert_eq!(p.steps[1].config.replica_count(), c.replica_count());
        assert_eq!(p.steps[2].config.replica_count(), c.replica_count() + 1);
        for s in ["A_00_3f", "A_40_7f", "A_80_bf"] {
            assert!(nodes_of(p.last(), s).contains(&"n4".to_owned()));
        }
        assert_eq!(nodes_of(p.last(), "A_c0_ff"), ["n1", "n2", "n3"]);
        // One per round.
        assert_eq!(rebalance(&c, &moves, 1).unwrap().steps.len(), 6);
        // Nothing to do.
        assert!(rebalance(&c, &[], 4).unwrap().steps.is_empty());
    }

    #[test]
    fn rebalance_keeps_one_move_per_shard_per_round() {
        let mut c = with_fourth(&base());
        c = add_node(&c, "n5", "n5.internal:7000", vec![]).unwrap().last().clone();
        let moves = vec![mv("A_00_3f", "A_00_3f_n1", "n1", "n4"), mv("A_00_3f", "A_00_3f_n2", "n2", "n5")];
        let p = rebalance(&c, &moves, 4).unwrap();
        check_chain(&p);
        assert_eq!(p.steps.len(), 4);
        assert_eq!(nodes_of(p.last(), "A_00_3f"), ["n3", "n4", "n5"]);
    }

    #[test]
    fn rebalance_refuses_bad_moves() {
        let c = with_fourth(&base());
        let cases = [
            (mv("X", "X_n1", "n1", "n4"), "no shard `X`"),
            (mv("A_00_3f", "A_00_3f_n9", "n1", "n4"), "has no replica"),
            (mv("A_00_3f", "A_00_3f_n1", "n2", "n4"), "is on `n1`, not on `n2`"),
            (mv("A_00_3f", "A_00_3f_n1", "n1", "n2"), "already hosts"),
            (mv("A_00_3f", "A_00_3f_n1", "n1", "n9"), "no node `n9`"),
        ];
        for (m, needle) in cases {
            let e = rebalance(&c, &[m], 4).unwrap_err();
            assert!(matches!(e, PlanError::BadMove { .. }) && e.to_string().contains(needle), "{e}");
        }
        let twice = [mv("A_00_3f", "A_00_3f_n1", "n1", "n4"), mv("A_00_3f", "A_00_3f_n1", "n1", "n4")];
        assert!(rebalance(&c, &twice, 4).unwrap_err().to_string().contains("moved twice"));
    }

    #[test]
    fn add_node_then_rebalance() {
        let c = example();
        let policy = |req: RebalanceRequest| -> Result<Vec<ReplicaMove>, PolicyError> {
            assert!(req.nodes.iter().any(|n| n.id == "node-04"));
            Ok(vec![
                mv("journal_00_1f", "journal_00_1f_00000000", "node-01", "node-04"),
                mv("journal_20_3f", "journal_20_3f_00000001", "node-02", "node-04"),
            ])
        };
        let p = add_node_and_rebalance(&c, "node-04", "127.0.0.1:50054", vec![], 4, policy).unwrap();
        check_chain(&p);
        assert_eq!(p.steps.len(), 3);
        assert_eq!(p.last().version, 4);
        let failing = |_| Err::<Vec<ReplicaMove>, _>(PolicyError::Unsupported("nope".into()));
        let e = add_node_and_rebalance(&c, "node-04", "127.0.0.1:50054", vec![], 4, failing).unwrap_err();
        assert!(e.to_string().contains("placement policy failed: unsupported: nope"), "{e}");
    }

    /// With the default policies' own logic (the native build of the embedded
    /// component): add a fourth node and rebalance, split in two and in four.
    #[test]
    fn with_the_default_policies() {
        use chitin_default_policies::{placement, split};
        let c = example();
        let p = add_node_and_rebalance(&c, "node-04", "127.0.0.1:50054", vec![], 4, |r| placement::rebalance(&r)).unwrap();
        check_chain(&p);
        // 24 replicas over 4 nodes: 6 move to node-04, in 2 rounds of at most 4.
        assert_eq!(p.steps.len(), 1 + 2 * 2);
        let on4 = p.last().shards().flat_map(|(_, s)| &s.replicas).filter(|r| r.node_id == "node-04").count();
        assert_eq!(on4, 6);
        for s in &p.steps[1..] {
            let per_round = s.description.matches('→').count();
            assert!(per_round <= 4, "{}", s.description);
        }
        let two = choose_split_points(&c, "journal_00_1f", None, 2, |r| split::split_points(&r)).unwrap();
        assert_eq!(two, vec![0x1000_0000]);
        let four = choose_split_points(&c, "journal_00_1f", None, 4, |r| split::split_points(&r)).unwrap();
        check_chain(&split_shard(&c, "journal_00_1f", &four).unwrap());
        let at = choose_split_points(&c, "journal_00_1f", Some(0x0800_0000), 2, |r| split::split_points(&r)).unwrap();
        assert_eq!(at, vec![0x0800_0000]);
        let e = choose_split_points(&c, "journal_00_1f", Some(0x2000_0000), 2, |r| split::split_points(&r)).unwrap_err();
        assert!(e.to_string().contains("outside"), "{e}");
    }

    #[test]
    fn sequences_display_as_commands_and_round_trip() {
        let cases = [
            (
                Sequence::AddNode { node_id: "n4".into(), node_address: "h:1".into(), rebalance: true },
                "add-node --node-id n4 --node-address h:1 --rebalance",
            ),
            (
                Sequence::MoveShard { shard_id: "S".into(), from_node: "a".into(), to_node: "b".into() },
                "move-shard --shard-id S --from-node a --to-node b",
            ),
            (
                Sequence::SplitShard { shard_id: "S".into(), split_at: Some("08000000".into()), children: 2 },
                "split-shard --shard-id S --split-at 08000000",
            ),
            (Sequence::SplitShard { shard_id: "S".into(), split_at: None, children: 4 }, "split-shard --shard-id S --children 4"),
            (Sequence::Rebalance, "rebalance"),
        ];
        for (s, want) in cases {
            assert_eq!(s.to_string(), want);
            let json = serde_json::to_string(&s).unwrap();
            assert_eq!(serde_json::from_str::<Sequence>(&json).unwrap(), s);
        }
    }
}
