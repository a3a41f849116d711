//! Transition rules: what may change between two consecutive versions.
//!
//! [`validate_transition`] checks both configs on their own (see
//! [`super::validate`]) and the change between them, and returns every
//! violation in a [`TransitionReport`]. Shards are matched by (application,
//! shard id) and replicas by (application, shard id, replica id); the work is
//! linear in the number of shards and replicas (hash maps, no nested scans
//! over the config).
//!
//! Each config is validated once. The transition rules look old shards up in
//! the shard id index the old config's validation built, and match shards
//! (and replicas) by position first: a new version mostly keeps the old
//! entries where they were, so a lookup is only needed past the first
//! difference.

use std::cell::OnceCell;
use std::collections::{HashMap, HashSet};

use super::fasthash::{self, FastMap, SortedIds, str_eq};

use serde::Serialize;

use super::model::{Application, ClusterConfig, Replica, Shard, ShardState};
use super::rules::{RuleCode, Violation};
use super::validate::{list, shard_index, validate, validate_indexed};

/// Which check found a violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// The old config on its own.
    Old,
    /// The new config on its own.
    New,
    /// The change from old to new.
    Transition,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Old => "old config",
            Scope::New => "new config",
            Scope::Transition => "transition",
        }
    }
}

/// Every violation of a transition, by where it was found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TransitionReport {
    pub old: Vec<Violation>,
    pub new: Vec<Violation>,
    pub transition: Vec<Violation>,
}

impl TransitionReport {
    pub fn is_valid(&self) -> bool {
        self.old.is_empty() && self.new.is_empty() && self.transition.is_empty()
    }

    pub fn len(&self) -> usize {
        self.old.len() + self.new.len() + self.transition.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every violation with its scope: old, new, then transition.
    pub fn all(&self) -> impl Iterator<Item = (Scope, &Violation)> {
        self.old
            .iter()
            .map(|v| (Scope::Old, v))
            .chain(self.new.iter().map(|v| (Scope::New, v)))
            .chain(self.transition.iter().map(|v| (Scope::Transition, v)))
    }
}

/// Checks `old` and `new` on their own and the change between them.
///
/// The transition rules run after the old config's check, reusing its shard
/// index. Large configs (more than 10,000 shards between them) are checked
/// on two threads: the new config on one, the old config and then the
/// transition on the other.
pub fn validate_transition(old: &ClusterConfig, new: &ClusterConfig) -> TransitionReport {
    let old_side = || {
        let (violations, indexed) = validate_indexed(old);
        let ids = OldIds { old, given: Some(&indexed.shard_ids), built: OnceCell::new() };
        (violations, rules(old, new, &ids, indexed.replica_ids_unique))
    };
    if old.shard_count() + new.shard_count() < 10_000 {
        let (old_check, transition) = old_side();
        return TransitionReport { old: old_check, new: validate(new), transition };
    }
    std::thread::scope(|scope| {
        let new_check = scope.spawn(|| validate(new));
        let (old_check, transition) = old_side();
        let new_check = new_check.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        TransitionReport { old: old_check, new: new_check, transition }
    })
}

/// Only the rules about the change (both configs assumed checked separately).
/// Robust against invalid configs: duplicates resolve to the first entry.
pub fn transition_rules(old: &ClusterConfig, new: &ClusterConfig) -> Vec<Violation> {
    // Nothing is known about the old config's replica ids here, so replicas
    // are always matched by lookup.
    rules(old, new, &OldIds { old, given: None, built: OnceCell::new() }, false)
}

/// `old_replicas_unique`: no replica id of `old` is empty or repeated.
fn rules(old: &ClusterConfig, new: &ClusterConfig, ids: &OldIds, old_replicas_unique: bool) -> Vec<Violation> {
    let mut t = Transition { old_replicas_unique, ..Default::default() };
    t.run(old, new, ids);
    t.finish()
}

/// The old config's shard id index ([`shard_index`]): handed over by its
/// validation, or built on first use (most transitions never need it).
struct OldIds<'a> {
    old: &'a ClusterConfig,
    given: Option<&'a SortedIds>,
    built: OnceCell<SortedIds>,
}

impl OldIds<'_> {
    fn get(&self) -> &SortedIds {
        self.given.unwrap_or_else(|| self.built.get_or_init(|| shard_index(self.old)))
    }
}

/// A replica seen as added or removed, for the message.
struct Seen<'a> {
    count: usize,
    example: Option<(&'a str, &'a str, &'a str)>, // shard, replica, node
}

impl<'a> Seen<'a> {
    fn note(&mut self, shard: &'a str, r: &'a Replica) {
        self.count += 1;
        if self.example.is_none() {
            self.example = Some((shard, &r.id, &r.node_id));
        }
    }
    fn note_all(&mut self, s: &'a Shard) {
        for r in &s.replicas {
            self.note(&s.id, r);
        }
    }
    fn describe(&self) -> String {
        match self.example {
            Some((s, r, n)) => format!("{} replica(s) (e.g. `{r}` of shard `{s}` on node `{n}`)", self.count),
            None => "no replicas".into(),
        }
    }
}

#[derive(Default)]
struct Transition<'a> {
    out: Vec<Violation>,
    added: Option<Seen<'a>>,
    removed: Option<Seen<'a>>,
    /// Replicas whose ids line up may be matched by position (see `replicas`).
    old_replicas_unique: bool,
}

fn allowed(from: ShardState, to: ShardState) -> bool {
    use ShardState::*;
    from == to || matches!((from, to), (Active, Splitting) | (Splitting, Inactive) | (Activating, Active))
}

impl<'a> Transition<'a> {
    fn push(&mut self, code: RuleCode, message: String) {
        self.out.push(Violation::new(code, message));
    }

    fn added(&mut self) -> &mut Seen<'a> {
        self.added.get_or_insert(Seen { count: 0, example: None })
    }

    fn removed(&mut self) -> &mut Seen<'a> {
        self.removed.get_or_insert(Seen { count: 0, example: None })
    }

    fn run(&mut self, old: &'a ClusterConfig, new: &'a ClusterConfig, ids: &OldIds) {
        use RuleCode::*;
        if new.version <= old.version {
            self.push(
                VersionNotIncreased,
                format!(
                    "the new version {} is not greater than the old version {}; set it to {}",
                    new.version,
                    old.version,
                    old.version.saturating_add(1)
                ),
            );
        }

        self.nodes(old, new);
        self.applications(old, new, ids);
    }

    /// A node leaves the config only once it hosts no replica.
    fn nodes(&mut self, old: &ClusterConfig, new: &ClusterConfig) {
        use RuleCode::*;
        let mut new_nodes = fasthash::set::<&str>(new.nodes.len());
        new_nodes.extend(new.nodes.iter().map(|n| n.id.as_str()));
        let gone: HashSet<&str> = old.nodes.iter().map(|n| n.id.as_str()).filter(|id| !new_nodes.contains(id)).collect();
        if !gone.is_empty() {
            let mut hosted: HashMap<&str, Vec<&str>> = HashMap::new();
            for (_, s) in old.shards() {
                for r in &s.replicas {
                    if gone.contains(r.node_id.as_str()) {
                        hosted.entry(r.node_id.as_str()).or_default().push(&r.id);
                    }
                }
            }
            let mut seen = HashSet::new();
            for n in &old.nodes {
                if !seen.insert(n.id.as_str()) {
                    continue;
                }
                if let Some(replicas) = hosted.get(n.id.as_str()) {
                    self.push(
                        NodeRemovedWithReplicas,
                        format!(
                            "node `{}` is removed but hosts {} replica(s) in the old config ({}); remove its replicas in one version and the node in a later one",
                            n.id,
                            replicas.len(),
                            list(replicas.iter().copied())
                        ),
                    );
                }
            }
        }
    }

    /// Applications are never removed; each one present in both versions
    /// is compared shard by shard.
    fn applications(&mut self, old: &'a ClusterConfig, new: &'a ClusterConfig, ids: &OldIds) {
        use RuleCode::*;
        let mut new_apps: HashMap<&str, &Application> = HashMap::with_capacity(new.applications.len());
        for a in &new.applications {
            new_apps.entry(a.name.as_str()).or_insert(a);
        }
        let mut old_names: HashSet<&str> = HashSet::with_capacity(old.applications.len());
        let mut start = 0u32; // the position of `a`'s first shard in the old config's index
        for a in &old.applications {
            let first = start;
            start += a.shards.len() as u32;
            if !old_names.insert(a.name.as_str()) {
                continue; // a duplicate name: the old config's own violation
            }
            match new_apps.get(a.name.as_str()) {
                None => {
                    self.push(
                        ApplicationRemoved,
                        format!(
                            "application `{}` ({} shard(s)) is removed; applications are never removed",
                            a.name,
                            a.shards.len()
                        ),
                    );
                    for s in &a.shards {
                        self.removed().note_all(s);
                    }
                }
                Some(b) => self.application(a, b, first, ids),
            }
        }
        for a in &new.applications {
            if !old_names.contains(a.name.as_str()) {
                for s in &a.shards {
                    self.added().note_all(s);
                }
            }
        }
    }

    /// `first`: the position of `a`'s first shard in the old config's index.
    fn application(&mut self, a: &'a Application, b: &'a Application, first: u32, ids: &OldIds) {
        use RuleCode::*;
        // The position in `a` of the first old shard with `id`, asked only if
        // the fast path (the same id at the same position, as when a version
        // only appends) does not match. The index holds non-empty ids only.
        let range = first..first + a.shards.len() as u32;
        let find_old = |id: &str| -> Option<usize> {
            if id.is_empty() {
                return a.shards.iter().position(|s| s.id.is_empty());
            }
            let id_of = |p: u32| a.shards[(p - first) as usize].id.as_str();
            ids.get().find_in(id, range.clone(), id_of).map(|p| (p - first) as usize)
        };
        // Which old shards are matched.
        let mut matched = vec![false; a.shards.len()];
        // Activating children naming each shard as parent, in the new config.
        let mut activating_kids: FastMap<&str, usize> = fasthash::map(0);
        for s in &b.shards {
            if let (Some(p), ShardState::Activating) = (s.parent_id.as_deref(), s.state) {
                *activating_kids.entry(p).or_default() += 1;
            }
        }
        for (j, n) in b.shards.iter().enumerate() {
            let at = if a.shards.get(j).is_some_and(|s| str_eq(&s.id, &n.id)) { Some(j) } else { find_old(&n.id) };
            let Some(i) = at else {
                if n.state == ShardState::Active {
                    self.push(
                        NewShardActive,
                        format!(
                            "shard `{}` is added to existing application `{}` as active; add it as activating (a child of a splitting shard) and activate it in a later version",
                            n.id, a.name
                        ),
                    );
                }
                self.added().note_all(n);
                continue;
            };
            if std::mem::replace(&mut matched[i], true) {
                continue; // a duplicate id in the new config: its own violation
            }
            self.shard(&a.shards[i], n, &activating_kids);
        }
        for (i, s) in a.shards.iter().enumerate() {
            if matched[i] || find_old(&s.id) != Some(i) {
                continue; // present in new, or a duplicate id in old
            }
            self.push(
                ShardRemoved,
                format!(
                    "shard `{}` of application `{}` is removed; shards are never removed (a split parent stays, inactive)",
                    s.id, a.name
                ),
            );
            self.removed().note_all(s);
        }
    }

    /// A shard present in both versions (`s` old, `n` new): bounds and
    /// parent fixed, only the allowed state changes, a split started with
    /// its children, and its replicas.
    fn shard(&mut self, s: &'a Shard, n: &'a Shard, activating_kids: &FastMap<&str, usize>) {
        use RuleCode::*;
        if (s.lower, s.upper) != (n.lower, n.upper) {
            self.push(
                ShardBoundsChanged,
                format!(
                    "shard `{}` changes its bounds from {} to {}; bounds are fixed — split the shard instead",
                    s.id,
                    s.range_string(),
                    n.range_string()
                ),
            );
        }
        if s.parent_id != n.parent_id {
            let show = |p: &Option<String>| p.as_deref().map_or("none".to_owned(), |p| format!("`{p}`"));
            self.push(
                ShardParentChanged,
                format!(
                    "shard `{}` changes its parent from {} to {}; a shard keeps its parent",
                    s.id,
                    show(&s.parent_id),
                    show(&n.parent_id)
                ),
            );
        }
        if !allowed(s.state, n.state) {
            self.push(
                ShardStateChangeForbidden,
                format!(
                    "shard `{}` goes from {} to {}; the only state changes are active→splitting, splitting→inactive and activating→active",
                    s.id, s.state, n.state
                ),
            );
        } else if s.state == ShardState::Active && n.state == ShardState::Splitting {
            let kids = activating_kids.get(s.id.as_str()).copied().unwrap_or(0);
            if kids < 2 {
                self.push(
                    SplitStartWithoutChildren,
                    format!(
                        "shard `{}` starts splitting with {kids} activating child(ren) in the new config; add at least 2 activating children (parent_id `{}`) in the same version",
                        s.id, s.id
                    ),
                );
            }
        }
        self.replicas(s, n);
    }

    /// Replicas of one shard present in both versions.
    fn replicas(&mut self, s: &'a Shard, n: &'a Shard) {
        // Ids that line up, when each old id names one replica, match by
        // position: the lookups below would pair the same replicas and
        // find none added or removed.
        if self.old_replicas_unique
            && s.replicas.len() == n.replicas.len()
            && s.replicas.iter().zip(&n.replicas).all(|(o, r)| str_eq(&o.id, &r.id))
        {
            for (o, r) in s.replicas.iter().zip(&n.replicas) {
                if !str_eq(&o.node_id, &r.node_id) {
                    self.moved(s, o, r);
                }
            }
            return;
        }
        let small = s.replicas.len() <= 16 && n.replicas.len() <= 16;
        let index: HashMap<&str, &Replica> = if small {
            HashMap::new()
        } else {
            let mut m = HashMap::with_capacity(s.replicas.len());
            for r in &s.replicas {
                m.entry(r.id.as_str()).or_insert(r);
            }
            m
        };
        let find_old = |id: &str| -> Option<&'a Replica> {
            if small { s.replicas.iter().find(|r| r.id == id) } else { index.get(id).copied() }
        };
        for r in &n.replicas {
            match find_old(&r.id) {
                Some(o) if o.node_id != r.node_id => self.moved(s, o, r),
                Some(_) => {}
                None => self.added().note(&n.id, r),
            }
        }
        let new_ids: HashSet<&str> = if small { HashSet::new() } else { n.replicas.iter().map(|r| r.id.as_str()).collect() };
        for r in &s.replicas {
            let present = if small { n.replicas.iter().any(|q| q.id == r.id) } else { new_ids.contains(r.id.as_str()) };
            if !present {
                self.removed().note(&s.id, r);
            }
        }
    }

    /// Replica `r` of shard `s` was `o` on another node in the old config.
    fn moved(&mut self, s: &Shard, o: &Replica, r: &Replica) {
        self.push(
            RuleCode::ReplicaNodeChanged,
            format!(
                "replica `{}` of shard `{}` moves from node `{}` to node `{}`; replicas never move — add a new replica on `{}`, then remove `{}` in a later version",
                r.id, s.id, o.node_id, r.node_id, r.node_id, r.id
            ),
        );
    }

    fn finish(mut self) -> Vec<Violation> {
        if let (Some(a), Some(r)) = (&self.added, &self.removed) {
            let message = format!(
                "this transition adds {} and removes {}; add replicas in one version and remove replicas in another",
                a.describe(),
                r.describe()
            );
            self.push(RuleCode::ReplicasAddedAndRemoved, message);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::model::*;
    use crate::topology::testutil::*;
    use RuleCode::*;
    use ShardState::*;

    fn add_replica(c: &mut ClusterConfig, shard: &str, node: &str) {
        let s = shard_mut(c, shard);
        s.replicas.push(Replica { id: format!("{shard}_{node}"), node_id: node.into(), metadata: vec![] });
    }

    fn second_app(c: &mut ClusterConfig) {
        let mut b = c.applications[0].clone();
        b.name = "B".into();
        for s in &mut b.shards {
            s.id = s.id.replacen('A', "B", 1);
            for r in &mut s.replicas {
                r.id = r.id.replacen('A', "B", 1);
            }
        }
        c.applications.push(b);
    }

    type Case = (&'static str, fn(&mut ClusterConfig, &mut ClusterConfig), &'static [RuleCode]);

    const CASES: &[Case] = &[
        // ---- valid ----
        ("version bump", |_, _| {}, &[]),
        ("version jump", |_, n| n.version = 10, &[]),
        ("add a node", |_, n| n.nodes.push(node("n5")), &[]),
        (
            "remove a node without replicas",
            |_, n| {
                n.nodes.pop();
            },
            &[],
        ),
        ("add an application with active shards", |_, n| second_app(n), &[]),
        ("start a split into 2", |_, n| start_split(n, "A_00_3f", 2), &[]),
        ("start a split into 4", |_, n| start_split(n, "A_c0_ff", 4), &[]),
        (
            "finish a split",
            |o, n| {
                start_split(o, "A_00_3f", 2);
                start_split(n, "A_00_3f", 2);
                finish_split(n, "A_00_3f");
            },
            &[],
        ),
        (
            "children active, parent still splitting is invalid alone but",
            |o, n| {
                // splitting → inactive and activating → active together
                start_split(o, "A_40_7f", 4);
                start_split(n, "A_40_7f", 4);
                finish_split(n, "A_40_7f");
            },
            &[],
        ),
        ("add a replica beyond the factor", |_, n| add_replica(n, "A_00_3f", "n4"), &[]),
        (
            "add replicas to every shard",
            |_, n| {
                for id in ["A_00_3f", "A_40_7f", "A_80_bf", "A_c0_ff"] {
                    add_replica(n, id, "n4")
                }
            },
            &[],
        ),
        ("remove a replica beyond the factor", |o, _| add_replica(o, "A_00_3f", "n4"), &[]),
        (
            "remove a node after its replicas left",
            |o, n| {
                // old: n4 hosts nothing (its replica was removed a version earlier)
                o.nodes.push(node("n5"));
                n.nodes.push(node("n5"));
                n.nodes.retain(|x| x.id != "n4");
            },
            &[],
        ),
        (
            "change metadata and addresses",
            |_, n| {
                n.nodes[0].metadata = vec![Metadata::new("zone", "b")];
                n.nodes[1].grpc_address = "moved:7000".into();
                n.applications[0].shards[0].metadata = vec![Metadata::new("hot", "1")];
            },
            &[],
        ),
        // ---- invalid ----
        ("same version", |_, n| n.version = 1, &[VersionNotIncreased]),
        (
            "older version",
            |o, n| {
                o.version = 5;
                n.version = 4
            },
            &[VersionNotIncreased],
        ),
        (
            "remove a node with replicas",
            |o, n| {
                add_replica(o, "A_00_3f", "n4");
                n.nodes.retain(|x| x.id != "n4");
            },
            &[NodeRemovedWithReplicas],
        ),
        ("remove an application", |o, _| second_app(o), &[ApplicationRemoved]),
        (
            "remove a retired shard",
            |o, n| {
                for c in [&mut *o, &mut *n] {
                    start_split(c, "A_00_3f", 2);
                    finish_split(c, "A_00_3f");
                }
                app(n, "A").shards.retain(|s| s.id != "A_00_3f");
            },
            &[ShardRemoved, ShardParentUnknown],
        ),
        (
            "merge two shards",
            |_, n| {
                let a = app(n, "A");
                a.shards.drain(0..2);
                a.shards.insert(0, shard("A_00_7f", 0, 0x7fff_ffff, Active, None, &["n1", "n2", "n3"]));
            },
            &[ShardRemoved, NewShardActive, ReplicasAddedAndRemoved],
        ),
        (
            "move a boundary",
            |_, n| {
                app(n, "A").shards[0].upper = 0x3eff_ffff;
                app(n, "A").shards[1].lower = 0x3f00_0000
            },
            &[ShardBoundsChanged],
        ),
        (
            "drop a parent",
            |o, n| {
                for c in [&mut *o, &mut *n] {
                    start_split(c, "A_00_3f", 2);
                    finish_split(c, "A_00_3f");
                }
                shard_mut(n, "A_00_3f_c0").parent_id = None;
            },
            &[ShardParentChanged],
        ),
        (
            "active to inactive",
            |_, n| shard_mut(n, "A_00_3f").state = Inactive,
            &[ShardStateChangeForbidden, InactiveShardNoChildren, KeyspaceGap],
        ),
        ("abort a split", |o, _| start_split(o, "A_00_3f", 2), &[ShardStateChangeForbidden, ShardRemoved]),
        (
            "inactive to splitting",
            |o, n| {
                for c in [&mut *o, &mut *n] {
                    start_split(c, "A_00_3f", 2);
                    finish_split(c, "A_00_3f");
                }
                shard_mut(n, "A_00_3f").state = Splitting;
                shard_mut(n, "A_00_3f_c0").state = Activating;
                shard_mut(n, "A_00_3f_c1").state = Activating;
            },
            &[ShardStateChangeForbidden],
        ),
        (
            "splitting to active",
            |o, n| {
                start_split(o, "A_00_3f", 2);
                start_split(n, "A_00_3f", 2);
                shard_mut(n, "A_00_3f").state = Active;
            },
            &[ShardStateChangeForbidden, ActiveShardHasChildren, ActivatingParentNotSplitting],
        ),
        (
            "split started without children",
            |_, n| shard_mut(n, "A_00_3f").state = Splitting,
            &[SplitStartWithoutChildren, SplittingTooFewChildren],
        ),
        (
            "split completed in one step",
            |_, n| {
                start_split(n, "A_00_3f", 2);
                finish_split(n, "A_00_3f")
            },
            &[ShardStateChangeForbidden, NewShardActive],
        ),
        (
            "new shard added active",
            |_, n| {
                let a = app(n, "A");
                a.shards[3].upper = 0xfeff_ffff;
                a.shards.push(shard("A_ff", 0xff00_0000, u32::MAX, Active, None, &["n1", "n2", "n3"]));
            },
            &[ShardBoundsChanged, NewShardActive],
        ),
        (
            "replace a replica",
            |_, n| {
                let r = &mut shard_mut(n, "A_00_3f").replicas[2];
                r.id = "A_00_3f_n4".into();
                r.node_id = "n4".into();
            },
            &[ReplicasAddedAndRemoved],
        ),
        (
            "add and remove replicas on different applications",
            |o, n| {
                second_app(o);
                second_app(n);
                add_replica(n, "A_00_3f", "n4");
                add_replica(o, "B_40_7f", "n4");
            },
            &[ReplicasAddedAndRemoved],
        ),
        ("move a replica", |_, n| shard_mut(n, "A_00_3f").replicas[2].node_id = "n4".into(), &[ReplicaNodeChanged]),
        ("old config invalid", |o, _| o.nodes[3].grpc_address.clear(), &[NodeAddressEmpty]),
        // ---- invalid configs: old entries found as the lookups always found them ----
        (
            "a repeated replica id pairs with its first replica",
            |o, n| {
                // Matched by position, the second `A_00_3f_n1` would stay on n2.
                for c in [&mut *o, &mut *n] {
                    shard_mut(c, "A_00_3f").replicas[1].id = "A_00_3f_n1".into()
                }
            },
            &[ReplicaIdDuplicate, ReplicaNodeChanged],
        ),
        (
            "a shard id repeated in another application, reordered",
            |o, n| {
                for c in [&mut *o, &mut *n] {
                    second_app(c);
                    c.applications[1].shards[1].id = "A_00_3f".into()
                }
                n.applications[1].shards.reverse();
            },
            &[ShardIdDuplicate],
        ),
        (
            "an empty shard id, reordered",
            |o, n| {
                for c in [&mut *o, &mut *n] {
                    app(c, "A").shards[0].id.clear()
                }
                app(n, "A").shards.reverse();
            },
            &[ShardIdEmpty],
        ),
    ];

    #[test]
    fn table() {
        let mut failures = Vec::new();
        for (name, mutate, want) in CASES {
            let mut old = base();
            let mut new = base();
            new.version = 2;
            mutate(&mut old, &mut new);
            let report = validate_transition(&old, &new);
            let mut got: Vec<RuleCode> = report.all().map(|(_, v)| v.code).collect();
            got.sort();
            got.dedup();
            let mut want = want.to_vec();
            want.sort();
            if got != want {
                failures.push(format!("{name}: want {want:?}, got {report:#?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// The rules given the old config's index and replica facts (and so
    /// matching by position) report exactly what they report on their own,
    /// looking every old entry up.
    #[test]
    fn reused_indexes_change_nothing() {
        for (name, mutate, _) in CASES {
            let mut old = base();
            let mut new = base();
            new.version = 2;
            mutate(&mut old, &mut new);
            assert_eq!(validate_transition(&old, &new).transition, transition_rules(&old, &new), "{name}");
            assert_eq!(validate_transition(&new, &old).transition, transition_rules(&new, &old), "{name}, reversed");
        }
    }

    #[test]
    fn every_transition_rule_has_a_valid_and_an_invalid_case() {
        let covered: HashSet<RuleCode> = CASES.iter().flat_map(|c| c.2.iter().copied()).collect();
        for code in RuleCode::ALL.iter().filter(|c| c.is_transition_rule()) {
            assert!(covered.contains(code), "no invalid case for {code}");
        }
    }

    #[test]
    fn scopes_and_examples() {
        let old = base();
        let mut new = base();
        new.version = 1;
        new.nodes[0].grpc_address.clear();
        let r = shard_mut(&mut new, "A_00_3f");
        r.replicas[0].node_id = "n4".into();
        let report = validate_transition(&old, &new);
        assert!(report.old.is_empty());
        assert_eq!(report.new.len(), 1);
        assert_eq!(report.transition.len(), 2);
        let moved = &report.transition[1];
        assert!(moved.message.contains("A_00_3f_n1") && moved.message.contains("`n1` to node `n4`"), "{moved}");
    }
}
