//! Shadow comparison: two components decide over one recorded cluster
//! ([`Snapshot`]), and the decisions are compared (`chitin policy diff`); the
//! same calls become fixture files (`chitin policy fixture`).
//!
//! The calls a snapshot asks for ([`cases`]), each built as the node or the
//! CLI builds it, with the nodes in their recorded states:
//!
//! - `placement.place-replicas`: each application's routable shards placed
//!   anew (as `chitin config add-application` places them) beside the other
//!   applications' replicas;
//! - `placement.rebalance`: the config's replicas, the live leases and the
//!   recorded load;
//! - `placement.preferred-holders`: every shard's ranking over the config's
//!   replicas (what each node's lease round asks);
//! - `split.split-points`: every active shard in two, with its recorded
//!   load as the samples (as `chitin cluster split-shard` without
//!   `--split-at`);
//! - `drain.plan-drain`: each live node holding leases drained (as the node
//!   drains: only shards with a live replica node elsewhere, with the load
//!   recorded for them, then the host's check of the answer and its cap on handoffs per round).
//!
//! `instance-id` is not compared: a snapshot records no node's environment.
//!
//! [`compare`] is pure: it takes both answers of every case and builds the
//! [`Report`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::node::plan::{self, DrainInput, LiveNode};
use crate::policy::fixture::{Expect, Fixture};
use crate::policy::{Limits, Plugin, PolicyCallError, PolicyLoadError, Slot, SlotRunner, sdk};
use crate::topology::ShardState;
use crate::topology::snapshot::Snapshot;

/// What the snapshot does not record, given on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The nodes' `[leases] max_handoffs_per_round` (the drain's round cap).
    pub max_handoffs_per_round: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options { max_handoffs_per_round: crate::settings::LeaseSettings::default().max_handoffs_per_round }
    }
}

/// One policy call a snapshot asks for.
#[derive(Clone, Debug)]
pub struct Case {
    /// What the call is about: an application, a shard, a node, or `cluster`.
    pub subject: String,
    pub request: Request,
}

/// The request of a [`Case`].
#[derive(Clone, Debug)]
pub enum Request {
    PlaceReplicas(sdk::PlacementRequest),
    Rebalance(sdk::RebalanceRequest),
    PreferredHolders(sdk::RankingRequest),
    SplitPoints(sdk::SplitRequest),
    PlanDrain(Box<DrainCase>),
}

/// A drain as the node plans it: the policy's request and what the host
/// checks the answer against.
#[derive(Clone, Debug)]
pub struct DrainCase {
    pub request: sdk::DrainRequest,
    held: HashSet<String>,
    replicas: HashMap<String, Vec<String>>,
    live: HashMap<String, LiveNode>,
    placeable: Vec<String>,
    kept: Vec<plan::Kept>,
}

impl Request {
    pub fn slot(&self) -> Slot {
        match self {
            Request::PlaceReplicas(_) | Request::Rebalance(_) | Request::PreferredHolders(_) => Slot::Placement,
            Request::SplitPoints(_) => Slot::Split,
            Request::PlanDrain(_) => Slot::Drain,
        }
    }

    /// The call's name, as fixtures write it.
    pub fn call(&self) -> &'static str {
        match self {
            Request::PlaceReplicas(_) => "place-replicas",
            Request::Rebalance(_) => "rebalance",
            Request::PreferredHolders(_) => "preferred-holders",
            Request::SplitPoints(_) => "split-points",
            Request::PlanDrain(_) => "plan-drain",
        }
    }

    /// The request in its fixture (serde) form.
    pub fn input(&self) -> Value {
        let value = match self {
            Request::PlaceReplicas(r) => serde_json::to_value(r),
            Request::Rebalance(r) => serde_json::to_value(r),
            Request::PreferredHolders(r) => serde_json::to_value(r),
            Request::SplitPoints(r) => serde_json::to_value(r),
            Request::PlanDrain(d) => serde_json::to_value(&d.request),
        };
        value.expect("policy requests serialize")
    }
}

/// A policy's answer to a [`Case`].
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    Placements(Vec<sdk::ShardPlacement>),
    Moves(Vec<sdk::ReplicaMove>),
    Rankings(Vec<sdk::HolderRanking>),
    Points(Vec<u32>),
    Rounds(Vec<Vec<sdk::Handoff>>),
}

impl Output {
    /// The answer in its fixture (serde) form.
    pub fn to_value(&self) -> Value {
        let value = match self {
            Output::Placements(v) => serde_json::to_value(v),
            Output::Moves(v) => serde_json::to_value(v),
            Output::Rankings(v) => serde_json::to_value(v),
            Output::Points(v) => serde_json::to_value(v),
            Output::Rounds(v) => serde_json::to_value(v),
        };
        value.expect("policy outputs serialize")
    }
}

/// Every call the snapshot asks for (see the module documentation), in a
/// fixed order: placement, rebalance and rankings, split, drain.
pub fn cases(snap: &Snapshot, opts: &Options) -> Vec<Case> {
    let config = &snap.config;
    let v = Views {
        nodes: snap.policy_nodes(),
        shards: crate::topology::policy_view::shards(config),
        replicas: crate::topology::policy_view::replicas(config),
    };
    let mut out = Vec::new();
    placement_cases(snap, &v, &mut out);
    cluster_cases(snap, &v, &mut out);
    split_cases(snap, &mut out);
    drain_cases(snap, opts, &v, &mut out);
    out
}

/// The snapshot's cluster as every policy request shows it.
struct Views {
    nodes: Vec<sdk::Node>,
    shards: Vec<sdk::Shard>,
    replicas: Vec<sdk::Replica>,
}

/// Each application's routable shards placed afresh.
fn placement_cases(snap: &Snapshot, v: &Views, out: &mut Vec<Case>) {
    let config = &snap.config;
    for app in &config.applications {
        let mut fresh = config.clone();
        let placed: Vec<String> = app.shards.iter().filter(|s| s.state.is_routable()).map(|s| s.id.clone()).collect();
        if placed.is_empty() {
            continue;
        }
        for s in fresh.applications.iter_mut().filter(|a| a.name == app.name).flat_map(|a| a.shards.iter_mut()) {
            if placed.contains(&s.id) {
                s.replicas.clear();
            }
        }
        let mut request = crate::topology::policy_view::placement_request(&fresh, placed, app.replication_factor);
        request.nodes = v.nodes.clone();
        out.push(Case { subject: app.name.clone(), request: Request::PlaceReplicas(request) });
    }
}

/// The whole cluster's rebalance and preferred holders.
fn cluster_cases(snap: &Snapshot, v: &Views, out: &mut Vec<Case>) {
    let load: Vec<sdk::ShardLoad> = snap.load.iter().map(|l| l.split_input().0).collect();
    out.push(Case {
        subject: "cluster".into(),
        request: Request::Rebalance(sdk::RebalanceRequest {
            nodes: v.nodes.clone(),
            shards: v.shards.clone(),
            replicas: v.replicas.clone(),
            holders: snap.holders(),
            load,
        }),
    });
    out.push(Case {
        subject: "cluster".into(),
        request: Request::PreferredHolders(sdk::RankingRequest {
            nodes: v.nodes.clone(),
            shards: v.shards.clone(),
            replicas: v.replicas.clone(),
        }),
    });
}

/// Every active shard split in two, with its load.
fn split_cases(snap: &Snapshot, out: &mut Vec<Case>) {
    let config = &snap.config;
    for (_, s) in config.shards().filter(|(_, s)| s.state == ShardState::Active) {
        // The same request `split-shard` builds; only an active shard splits.
        let Ok(mut request) = super::plan::split_request(config, &s.id, None, 2) else { continue };
        if let Some(l) = snap.load_of(&s.id) {
            let (load, samples) = l.split_input();
            request.load = Some(load);
            request.samples = samples;
        }
        out.push(Case { subject: s.id.clone(), request: Request::SplitPoints(request) });
    }
}

/// Each live node of the config drained, when anything of it can go.
fn drain_cases(snap: &Snapshot, opts: &Options, v: &Views, out: &mut Vec<Case>) {
    let config = &snap.config;
    let replica_nodes: HashMap<String, Vec<String>> =
        config.shards().map(|(_, s)| (s.id.clone(), s.replicas.iter().map(|r| r.node_id.clone()).collect())).collect();
    for leaving in snap.nodes.iter().filter(|n| n.live && config.node(&n.name).is_some()) {
        let held: HashSet<String> =
            snap.leases.iter().filter(|l| l.live && l.holder == leaving.name).map(|l| l.shard.clone()).collect();
        let live: HashMap<String, LiveNode> = snap
            .nodes
            .iter()
            .filter(|n| n.live && n.name != leaving.name)
            .map(|n| {
                let uuid = uuid::Uuid::parse_str(&n.id).unwrap_or_default();
                (n.name.clone(), LiveNode { uuid, leaving: n.state == sdk::NodeState::Leaving })
            })
            .collect();
        let cap = opts.max_handoffs_per_round;
        let input = DrainInput { held: &held, replicas: &replica_nodes, live: &live, cap: cap as usize };
        let (placeable, kept) = plan::drain_candidates(&input);
        // The node asks the policy nothing when nothing can go.
        if placeable.is_empty() {
            continue;
        }
        let mut nodes = v.nodes.clone();
        for n in nodes.iter_mut().filter(|n| n.id == leaving.name) {
            n.state = sdk::NodeState::Leaving;
        }
        let request = sdk::DrainRequest {
            leaving: leaving.name.clone(),
            nodes,
            shards: v.shards.clone(),
            replicas: v.replicas.clone(),
            holders: placeable.iter().map(|s| sdk::Holder { shard: s.clone(), node: leaving.name.clone() }).collect(),
            load: snap.load.iter().filter(|l| placeable.contains(&l.shard)).map(|l| l.split_input().0).collect(),
            max_per_round: cap,
        };
        let case = DrainCase { request, held, replicas: replica_nodes.clone(), live, placeable, kept };
        out.push(Case { subject: leaving.name.clone(), request: Request::PlanDrain(Box::new(case)) });
    }
}

/// Runs `case` on `runner` (which must serve the case's slot).
pub fn run(runner: &SlotRunner, case: &Case) -> Result<Output, PolicyCallError> {
    Ok(match &case.request {
        Request::PlaceReplicas(r) => Output::Placements(runner.place_replicas(r.clone())?),
        Request::Rebalance(r) => Output::Moves(runner.rebalance(r.clone())?),
        Request::PreferredHolders(r) => Output::Rankings(runner.preferred_holders(r.clone())?),
        Request::SplitPoints(r) => Output::Points(runner.split_points(r.clone())?),
        Request::PlanDrain(d) => Output::Rounds(runner.plan_drain(d.request.clone())?),
    })
}

/// A failed call, as the report shows it: a policy's refusal by its error
/// alone (two components refusing alike are alike), anything else in full.
pub fn failure_text(e: &PolicyCallError) -> String {
    match e {
        PolicyCallError::Refused { error, .. } => format!("refused: {error}"),
        other => other.to_string(),
    }
}

/// The fixture of `case` expecting `answer` (a host-side failure, such as
/// a timeout, makes no fixture).
pub fn fixture(case: &Case, answer: &Result<Output, PolicyCallError>, snapshot: &Snapshot) -> Result<Fixture, String> {
    let expect = match answer {
        Ok(out) => Expect::Ok(out.to_value()),
        Err(PolicyCallError::Refused { error, .. }) => Expect::Error(error.clone()),
        Err(e) => return Err(format!("{} {} of {}: {e}", case.request.slot(), case.request.call(), case.subject)),
    };
    Ok(Fixture {
        description: format!(
            "{} of {} from a snapshot of config version {}{}",
            case.request.call(),
            case.subject,
            snapshot.config.version,
            if snapshot.taken_at.is_empty() { String::new() } else { format!(" taken {}", snapshot.taken_at) },
        ),
        slot: case.request.slot(),
        call: case.request.call().to_string(),
        input: case.request.input(),
        expect,
    })
}

/// A fixture in TOML (which has no null: absent optional fields stay out).
pub fn fixture_toml(f: &Fixture) -> Result<String, String> {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                m.retain(|_, v| !v.is_null());
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut value = serde_json::to_value(f).map_err(|e| e.to_string())?;
    strip(&mut value);
    toml::to_string(&value).map_err(|e| format!("cannot write the fixture as TOML: {e}"))
}

// ------------------------------------------------------------------ running

/// A component loaded for every slot it exports.
pub struct Side {
    pub plugin: Arc<Plugin>,
    runners: BTreeMap<Slot, SlotRunner>,
}

impl Side {
    /// Prepares every slot of `plugin` it exports at a supported version.
    pub fn new(plugin: Arc<Plugin>, limits: Limits) -> Result<Side, PolicyLoadError> {
        let mut runners = BTreeMap::new();
        for slot in Slot::ALL {
            if plugin.slot_version(slot).is_ok() {
                runners.insert(slot, SlotRunner::new(plugin.clone(), slot, limits)?);
            }
        }
        Ok(Side { plugin, runners })
    }

    /// The runner of `slot`, when exported.
    pub fn runner(&self, slot: Slot) -> Option<&SlotRunner> {
        self.runners.get(&slot)
    }
}

/// Runs every case of `snapshot` on both sides (the slots both export) and
/// compares: `new` is the candidate, `old` what it is compared against.
pub fn diff(snapshot: &Snapshot, new: &Side, old: &Side, opts: &Options) -> Report {
    let mut answers = Vec::new();
    let mut skipped = Vec::new();
    for slot in Slot::ALL {
        let why = match (new.runner(slot), old.runner(slot)) {
            _ if slot == Slot::InstanceId => Some("a snapshot records no node's environment".to_string()),
            (Some(_), Some(_)) => None,
            (None, _) => Some(format!("{} does not export it", new.plugin.name())),
            (_, None) => Some(format!("{} does not export it", old.plugin.name())),
        };
        if let Some(why) = why {
            skipped.push(Skipped { slot, why });
        }
    }
    for case in cases(snapshot, opts) {
        let slot = case.request.slot();
        let (Some(n), Some(o)) = (new.runner(slot), old.runner(slot)) else { continue };
        let answer = |r: &SlotRunner| run(r, &case).map_err(|e| failure_text(&e));
        let (old_answer, new_answer) = (answer(o), answer(n));
        answers.push((case, old_answer, new_answer));
    }
    let mut report = compare(&answers);
    report.plugin = new.plugin.name().to_string();
    report.against = old.plugin.name().to_string();
    report.config_version = snapshot.config.version;
    report.skipped = skipped;
    report
}

// ------------------------------------------------------------------ report

/// How two components' decisions over one snapshot differ.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// The candidate component.
    pub plugin: String,
    /// The component it is compared against.
    pub against: String,
    /// The snapshot's config version.
    pub config_version: u64,
    /// No call answered differently.
    pub identical: bool,
    /// Each call compared: how often, how many answers differed.
    pub calls: Vec<CallSummary>,
    /// Slots not compared, and why.
    pub skipped: Vec<Skipped>,
    /// `place-replicas`: shards whose replica nodes differ.
    pub placement: Vec<PlacementChange>,
    /// `rebalance`: the moves, when they differ.
    pub rebalance: Option<RebalanceChange>,
    /// `preferred-holders`: shards whose ranking differs.
    pub holders: Vec<HolderChange>,
    /// `split-points`: shards whose split points differ.
    pub splits: Vec<SplitChange>,
    /// `plan-drain`: nodes whose drain (order, rounds or kept shards) differs.
    pub drains: Vec<DrainChange>,
    /// Calls that one side or both refused, with differing answers.
    pub failures: Vec<FailureChange>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CallSummary {
    pub slot: Slot,
    pub call: String,
    pub cases: usize,
    pub differing: usize,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Skipped {
    pub slot: Slot,
    pub why: String,
}

/// A shard placed on other nodes: `old` → `new` (each sorted).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlacementChange {
    pub application: String,
    pub shard: String,
    pub old: Vec<String>,
    pub new: Vec<String>,
}

/// One replica move, `shard: source → target`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveView {
    pub shard: String,
    pub replica: String,
    pub source: String,
    pub target: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RebalanceChange {
    pub old: Vec<MoveView>,
    pub new: Vec<MoveView>,
}

/// A shard ranked differently; the first node is the preferred holder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HolderChange {
    pub shard: String,
    pub old: Vec<String>,
    pub new: Vec<String>,
    /// The first (preferred) node differs.
    pub preferred_changed: bool,
}

/// Split points (8 hex digits each).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitChange {
    pub shard: String,
    pub old: Vec<String>,
    pub new: Vec<String>,
}

/// One node's drain under each component.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainChange {
    pub node: String,
    pub old: DrainView,
    pub new: DrainView,
}

/// A drain as the node carries it out: rounds of handoffs in order, and
/// the shards it keeps with the reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainView {
    pub rounds: Vec<Vec<HandoffView>>,
    pub kept: Vec<KeptView>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandoffView {
    pub shard: String,
    pub to: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeptView {
    pub shard: String,
    pub why: String,
}

/// A call at least one side failed, answered differently.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailureChange {
    pub slot: Slot,
    pub call: String,
    pub subject: String,
    /// `ok`, or the failure.
    pub old: String,
    pub new: String,
}

/// One case with its answer from each side (`old`, `new`); a failure as
/// [`failure_text`] writes it.
pub type Answered = (Case, Result<Output, String>, Result<Output, String>);

/// Compares both answers of every case.
pub fn compare(answers: &[Answered]) -> Report {
    let mut report = Report::default();
    let mut calls: Vec<CallSummary> = Vec::new();
    for (case, old, new) in answers {
        let before = differences(&report);
        match (old, new) {
            (Ok(o), Ok(n)) => compare_outputs(case, o, n, &mut report),
            (o, n) if o == n => {}
            (o, n) => {
                let text = |r: &Result<Output, String>| match r {
                    Ok(_) => "ok".to_string(),
                    Err(e) => e.clone(),
                };
                report.failures.push(FailureChange {
                    slot: case.request.slot(),
                    call: case.request.call().into(),
                    subject: case.subject.clone(),
                    old: text(o),
                    new: text(n),
                });
            }
        }
        let (slot, call) = (case.request.slot(), case.request.call());
        let differs = usize::from(differences(&report) != before);
        match calls.iter_mut().find(|c| c.slot == slot && c.call == call) {
            Some(c) => {
                c.cases += 1;
                c.differing += differs;
            }
            None => calls.push(CallSummary { slot, call: call.into(), cases: 1, differing: differs }),
        }
    }
    report.identical = differences(&report) == 0;
    report.calls = calls;
    report
}

fn differences(r: &Report) -> usize {
    r.placement.len() + usize::from(r.rebalance.is_some()) + r.holders.len() + r.splits.len() + r.drains.len() + r.failures.len()
}

fn compare_outputs(case: &Case, old: &Output, new: &Output, report: &mut Report) {
    match (&case.request, old, new) {
        (Request::PlaceReplicas(_), Output::Placements(o), Output::Placements(n)) => {
            report.placement.extend(placement_changes(&case.subject, o, n));
        }
        (Request::Rebalance(_), Output::Moves(o), Output::Moves(n)) => {
            report.rebalance = rebalance_change(o, n);
        }
        (Request::PreferredHolders(_), Output::Rankings(o), Output::Rankings(n)) => {
            report.holders.extend(holder_changes(o, n));
        }
        (Request::SplitPoints(_), Output::Points(o), Output::Points(n)) => {
            report.splits.extend(split_change(&case.subject, o, n));
        }
        (Request::PlanDrain(d), Output::Rounds(o), Output::Rounds(n)) => {
            let (o, n) = (drain_view(d, o), drain_view(d, n));
            if o != n {
                report.drains.push(DrainChange { node: case.subject.clone(), old: o, new: n });
            }
        }
        _ => unreachable!("a case's answers have its call's type"),
    }
}

/// Shards whose replica node sets differ (a shard one side did not place
/// has no nodes there), in shard order.
pub fn placement_changes(application: &str, old: &[sdk::ShardPlacement], new: &[sdk::ShardPlacement]) -> Vec<PlacementChange> {
    let sets = |p: &[sdk::ShardPlacement]| -> BTreeMap<String, BTreeSet<String>> {
        p.iter().map(|p| (p.shard.clone(), p.nodes.iter().cloned().collect())).collect()
    };
    let (old, new) = (sets(old), sets(new));
    let shards: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    shards
        .into_iter()
        .filter_map(|shard| {
            let (o, n) = (old.get(shard).cloned().unwrap_or_default(), new.get(shard).cloned().unwrap_or_default());
            (o != n).then(|| PlacementChange {
                application: application.to_string(),
                shard: shard.clone(),
                old: o.into_iter().collect(),
                new: n.into_iter().collect(),
            })
        })
        .collect()
}

/// The moves of both sides, when they differ.
pub fn rebalance_change(old: &[sdk::ReplicaMove], new: &[sdk::ReplicaMove]) -> Option<RebalanceChange> {
    let view = |m: &[sdk::ReplicaMove]| -> Vec<MoveView> {
        m.iter()
            .map(|m| MoveView {
                shard: m.shard.clone(),
                replica: m.replica.clone(),
                source: m.source.clone(),
                target: m.target.clone(),
            })
            .collect()
    };
    (old != new).then(|| RebalanceChange { old: view(old), new: view(new) })
}

/// Shards ranked differently (order matters: the first is the preferred
/// holder, the next ones take over when it goes), in shard order.
pub fn holder_changes(old: &[sdk::HolderRanking], new: &[sdk::HolderRanking]) -> Vec<HolderChange> {
    let by_shard = |r: &[sdk::HolderRanking]| -> BTreeMap<String, Vec<String>> {
        r.iter().map(|r| (r.shard.clone(), r.nodes.clone())).collect()
    };
    let (old, new) = (by_shard(old), by_shard(new));
    let shards: BTreeSet<&String> = old.keys().chain(new.keys()).collect();
    shards
        .into_iter()
        .filter_map(|shard| {
            let (o, n) = (old.get(shard).cloned().unwrap_or_default(), new.get(shard).cloned().unwrap_or_default());
            (o != n).then(|| HolderChange { shard: shard.clone(), preferred_changed: o.first() != n.first(), old: o, new: n })
        })
        .collect()
}

/// The split points of one shard, when they differ.
pub fn split_change(shard: &str, old: &[u32], new: &[u32]) -> Option<SplitChange> {
    let hex = |p: &[u32]| p.iter().map(|p| format!("{p:08x}")).collect();
    (old != new).then(|| SplitChange { shard: shard.to_string(), old: hex(old), new: hex(new) })
}

/// What the node makes of a drain policy's `rounds` ([`plan::drain_plan`]).
fn drain_view(case: &DrainCase, rounds: &[Vec<sdk::Handoff>]) -> DrainView {
    let input =
        DrainInput { held: &case.held, replicas: &case.replicas, live: &case.live, cap: case.request.max_per_round as usize };
    let plan = plan::drain_plan(&input, &case.placeable, rounds);
    let mut kept: Vec<KeptView> =
        case.kept.iter().chain(&plan.kept).map(|k| KeptView { shard: k.shard.clone(), why: k.why.clone() }).collect();
    kept.sort_by(|a, b| a.shard.cmp(&b.shard));
    DrainView {
        rounds: plan
            .rounds
            .into_iter()
            .map(|r| r.into_iter().map(|h| HandoffView { shard: h.shard, to: h.to }).collect())
            .collect(),
        kept,
    }
}

impl Report {
    /// The human form of `chitin policy diff`.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "{} against {} over config version {}", self.plugin, self.against, self.config_version);
        for c in &self.calls {
            let calls = if c.cases == 1 { "call " } else { "calls" };
            let _ = writeln!(s, "  {:<30} {:>6} {calls} {:>6} differ", format!("{}.{}", c.slot, c.call), c.cases, c.differing);
        }
        for k in &self.skipped {
            let _ = writeln!(s, "  {:<30} not compared: {}", k.slot.to_string(), k.why);
        }
        if self.identical {
            let _ = writeln!(s, "\nno differences");
            return s;
        }
        if !self.placement.is_empty() {
            let _ = writeln!(s, "\nreplicas moved ({} shards; place-replicas, old -> new):", self.placement.len());
            for p in &self.placement {
                let _ = writeln!(s, "  {}: {} -> {}", p.shard, p.old.join(", "), p.new.join(", "));
            }
        }
        if let Some(r) = &self.rebalance {
            let _ = writeln!(s, "\nrebalance moves differ ({} old, {} new):", r.old.len(), r.new.len());
            let line = |m: &MoveView| format!("{} ({}): {} -> {}", m.shard, m.replica, m.source, m.target);
            for m in r.old.iter().filter(|m| !r.new.contains(m)) {
                let _ = writeln!(s, "  - {}", line(m));
            }
            for m in r.new.iter().filter(|m| !r.old.contains(m)) {
                let _ = writeln!(s, "  + {}", line(m));
            }
        }
        if !self.holders.is_empty() {
            let preferred = self.holders.iter().filter(|h| h.preferred_changed).count();
            let _ = writeln!(
                s,
                "\nholder rankings changed ({} shards, {preferred} with another preferred holder; old -> new):",
                self.holders.len()
            );
            for h in &self.holders {
                let mark = if h.preferred_changed { "*" } else { " " };
                let _ = writeln!(s, " {mark}{}: {} -> {}", h.shard, h.old.join(" > "), h.new.join(" > "));
            }
        }
        if !self.splits.is_empty() {
            let _ = writeln!(s, "\nsplit points changed ({} shards; old -> new):", self.splits.len());
            for p in &self.splits {
                let _ = writeln!(s, "  {}: {} -> {}", p.shard, p.old.join(", "), p.new.join(", "));
            }
        }
        if !self.drains.is_empty() {
            let _ = writeln!(s, "\ndrains changed ({} nodes):", self.drains.len());
            for d in &self.drains {
                let _ = writeln!(s, "  {}:", d.node);
                for (label, view) in [("old", &d.old), ("new", &d.new)] {
                    let n = view.rounds.len();
                    let _ = writeln!(s, "    {label}: {n} {}", if n == 1 { "round" } else { "rounds" });
                    for (i, round) in view.rounds.iter().enumerate() {
                        let hs: Vec<String> = round.iter().map(|h| format!("{} -> {}", h.shard, h.to)).collect();
                        let _ = writeln!(s, "      round {}: {}", i + 1, hs.join(", "));
                    }
                    for k in &view.kept {
                        let _ = writeln!(s, "      kept {}: {}", k.shard, k.why);
                    }
                }
            }
        }
        if !self.failures.is_empty() {
            let _ = writeln!(s, "\nfailures differ:");
            for f in &self.failures {
                let _ = writeln!(s, "  {}.{} {}:\n    old: {}\n    new: {}", f.slot, f.call, f.subject, f.old, f.new);
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(shard: &str, nodes: &[&str]) -> sdk::ShardPlacement {
        sdk::ShardPlacement { shard: shard.into(), nodes: nodes.iter().map(|n| n.to_string()).collect() }
    }

    fn ranking(shard: &str, nodes: &[&str]) -> sdk::HolderRanking {
        sdk::HolderRanking { shard: shard.into(), nodes: nodes.iter().map(|n| n.to_string()).collect() }
    }

    fn case(request: Request, subject: &str) -> Case {
        Case { subject: subject.into(), request }
    }

    #[test]
    fn placements_compare_as_sets_per_shard() {
        let old = [placement("a", &["n1", "n2"]), placement("b", &["n1", "n2"]), placement("c", &["n3"])];
        let new = [placement("a", &["n2", "n1"]), placement("b", &["n1", "n3"]), placement("d", &["n3"])];
        let changes = placement_changes("A", &old, &new);
        let got: Vec<(&str, Vec<String>, Vec<String>)> =
            changes.iter().map(|c| (c.shard.as_str(), c.old.clone(), c.new.clone())).collect();
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(got, vec![("b", v(&["n1", "n2"]), v(&["n1", "n3"])), ("c", v(&["n3"]), v(&[])), ("d", v(&[]), v(&["n3"])),]);
    }

    #[test]
    fn rankings_compare_in_order_and_flag_the_preferred_holder() {
        let old = [ranking("a", &["n1", "n2"]), ranking("b", &["n1", "n2", "n3"]), ranking("c", &["n1"])];
        let new = [ranking("a", &["n2", "n1"]), ranking("b", &["n1", "n3", "n2"]), ranking("c", &["n1"])];
        let changes = holder_changes(&old, &new);
        assert_eq!(changes.len(), 2);
        assert_eq!((changes[0].shard.as_str(), changes[0].preferred_changed), ("a", true));
        assert_eq!((changes[1].shard.as_str(), changes[1].preferred_changed), ("b", false));
    }

    #[test]
    fn split_points_are_hex_and_only_differences_count() {
        assert_eq!(split_change("s", &[0x8000_0000], &[0x8000_0000]), None);
        let c = split_change("s", &[0x8000_0000], &[0x4000_0000]).unwrap();
        assert_eq!((c.old, c.new), (vec!["80000000".to_string()], vec!["40000000".to_string()]));
    }

    #[test]
    fn the_report_counts_differing_calls_and_failures() {
        let place = |s: &str| case(Request::PlaceReplicas(Default::default()), s);
        let split = |s: &str| case(Request::SplitPoints(Default::default()), s);
        let answers = vec![
            (
                place("A"),
                Ok(Output::Placements(vec![placement("a", &["n1"])])),
                Ok(Output::Placements(vec![placement("a", &["n1"])])),
            ),
            (
                place("B"),
                Ok(Output::Placements(vec![placement("b", &["n1"])])),
                Ok(Output::Placements(vec![placement("b", &["n2"])])),
            ),
            (split("s1"), Ok(Output::Points(vec![5])), Ok(Output::Points(vec![5]))),
            (split("s2"), Err("refused: unsupported: x".to_string()), Err("refused: unsupported: x".to_string())),
            (split("s3"), Ok(Output::Points(vec![5])), Err("refused: invalid split: y".to_string())),
        ];
        let r = compare(&answers);
        assert!(!r.identical);
        assert_eq!(r.placement.len(), 1);
        assert_eq!(r.placement[0].application, "B");
        assert!(r.splits.is_empty());
        assert_eq!(r.failures.len(), 1);
        assert_eq!((r.failures[0].old.as_str(), r.failures[0].new.as_str()), ("ok", "refused: invalid split: y"));
        let summary: Vec<(&str, usize, usize)> = r.calls.iter().map(|c| (c.call.as_str(), c.cases, c.differing)).collect();
        assert_eq!(summary, vec![("place-replicas", 2, 1), ("split-points", 3, 1)]);
        let text = r.render();
        assert!(text.contains("b: n1 -> n2"), "{text}");
        assert!(text.contains("new: refused: invalid split: y"), "{text}");

        let same: Vec<_> = answers.into_iter().map(|(c, o, _)| (c, o.clone(), o)).collect();
        let r = compare(&same);
        assert!(r.identical && r.render().contains("no differences"), "{r:?}");
    }
}
