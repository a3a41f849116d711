//! Single-config rules.
//!
//! [`validate`] checks every rule of a config and returns every violation it
//! finds, in config order (nodes, then applications and their shards, then
//! each application's keyspace). It runs in O(n log n) over shards and
//! replicas: ids are indexed in hash maps and ranges are sorted once, so a
//! config of 100,000 shards × 3 replicas validates in tens of milliseconds.

use std::collections::HashSet;

use super::fasthash::{self, FastMap, SortedIds};

use super::model::{Application, ClusterConfig, Metadata, Shard, ShardState};
use super::rules::{RuleCode, Violation, Violations};

/// The minimum number of nodes of a config.
pub const MIN_NODES: usize = 3;
/// The minimum replication factor of an application.
pub const MIN_REPLICATION_FACTOR: u32 = 3;

/// Every violation of the single-config rules; empty when the config is valid.
pub fn validate(config: &ClusterConfig) -> Vec<Violation> {
    validate_indexed(config).0
}

/// What checking a config learns that the transition rules reuse rather
/// than rebuild.
pub(crate) struct Indexed {
    /// Every non-empty shard id, by its position among all the config's
    /// shards (applications in order); see [`shard_index`].
    pub shard_ids: SortedIds,
    /// No replica id is empty or repeated, so within a shard an id names
    /// exactly one replica.
    pub replica_ids_unique: bool,
}

/// [`validate`], and the indexes it built.
pub(crate) fn validate_indexed(config: &ClusterConfig) -> (Vec<Violation>, Indexed) {
    let mut c = Checker::default();
    let indexed = c.run(config);
    (c.out, indexed)
}

/// The shard id index of [`Indexed::shard_ids`], built on its own.
pub(crate) fn shard_index(config: &ClusterConfig) -> SortedIds {
    let shards = config.applications.iter().flat_map(|a| &a.shards);
    SortedIds::new(shards.enumerate().filter(|(_, s)| !s.id.is_empty()).map(|(i, s)| (i as u32, s.id.as_str())))
}

/// [`validate`] as a `Result`.
pub fn check(config: &ClusterConfig) -> Result<(), Violations> {
    let v = validate(config);
    if v.is_empty() { Ok(()) } else { Err(Violations(v)) }
}

#[derive(Default)]
struct Checker {
    out: Vec<Violation>,
}

/// A shard with its application, by position in the config.
struct Entry<'a> {
    app: usize,
    shard: &'a Shard,
}

/// What the pass over shards and replicas collects for the rules across
/// shards.
struct Shards<'a> {
    /// Every shard in config order (the positions of [`shard_index`]).
    entries: Vec<Entry<'a>>,
    /// Every non-empty replica id with the position of its shard in `entries`.
    replicas: Vec<(&'a str, u32)>,
    /// Whether every replica id is `<its shard id>_<suffix without _>`.
    all_conform: bool,
    /// Some replica has an empty id.
    replica_id_empty: bool,
}

/// The split tree of the parents that resolve within their application.
struct Tree {
    /// `parent[i]`: the position of shard i's parent.
    parent: Vec<Option<usize>>,
    /// The positions of each parent's children.
    children: FastMap<usize, Vec<usize>>,
}

/// A number per distinct node id of the replicas: its position in the
/// config, or past the end for ids not in the config, whose replicas are
/// grouped for one violation per node.
struct NodeNumbers<'a, 'k> {
    known: &'k FastMap<&'a str, usize>,
    /// The config's node count: unknown ids are numbered after it.
    nodes: usize,
    /// Unknown node ids with their replicas' ids, in order of appearance.
    unknown: Vec<(&'a str, Vec<&'a str>)>,
    /// Each unknown node id's position in `unknown`.
    index: FastMap<&'a str, usize>,
}

impl<'a> NodeNumbers<'a, '_> {
    fn number(&mut self, node_id: &'a str, replica_id: &'a str) -> u32 {
        if let Some(&i) = self.known.get(node_id) {
            return i as u32;
        }
        let unknown = &mut self.unknown;
        let g = *self.index.entry(node_id).or_insert_with(|| {
            unknown.push((node_id, Vec::new()));
            unknown.len() - 1
        });
        unknown[g].1.push(replica_id);
        (self.nodes + g) as u32
    }
}

/// Gaps and overlaps of a set of ranges over `[lo, hi]`.
pub(crate) struct Coverage<'a> {
    pub gaps: Vec<(u32, u32)>,
    /// (shard reaching furthest so far, next shard, overlapping keys)
    pub overlaps: Vec<(&'a str, &'a str, u32, u32)>,
}

/// Sorts `ranges` (inclusive, `lower <= upper`) and finds what of `[lo, hi]`
/// they leave uncovered and where they overlap. Ranges are clipped to
/// `[lo, hi]`; arithmetic is done in u64 so `ffffffff` cannot overflow.
pub(crate) fn coverage<'a>(mut ranges: Vec<(u32, u32, &'a str)>, lo: u32, hi: u32) -> Coverage<'a> {
    ranges.sort_unstable();
    let mut gaps = Vec::new();
    let mut overlaps = Vec::new();
    let mut next = u64::from(lo); // first key not covered yet
    let mut reach: Option<&str> = None; // the shard covering up to `next - 1`
    for (l, u, id) in ranges {
        let (l, u) = (l.max(lo), u.min(hi));
        if l > u {
            continue;
        }
        let (l64, u64_) = (u64::from(l), u64::from(u));
        if l64 > next {
            gaps.push((next as u32, l - 1));
        } else if l64 < next {
            let end = u64_.min(next - 1) as u32;
            overlaps.push((reach.unwrap_or(""), id, l, end));
        }
        if u64_ + 1 > next {
            next = u64_ + 1;
            reach = Some(id);
        }
    }
    if next <= u64::from(hi) {
        gaps.push((next as u32, hi));
    }
    Coverage { gaps, overlaps }
}

fn keys(lo: u32, hi: u32) -> String {
    format!("[{lo:08x}, {hi:08x}]")
}

/// Keys that appear more than once in a metadata list, each once.
fn duplicate_keys(metadata: &[Metadata]) -> Vec<&str> {
    let mut dups: Vec<&str> = Vec::new();
    if metadata.len() < 2 {
        return dups;
    }
    let mut seen = HashSet::with_capacity(metadata.len());
    for m in metadata {
        if !seen.insert(m.key.as_str()) && !dups.contains(&m.key.as_str()) {
            dups.push(&m.key);
        }
    }
    dups
}

/// The distinct node ids of a shard's replicas, sorted.
pub(crate) fn node_set(shard: &Shard) -> Vec<&str> {
    let mut v: Vec<&str> = shard.replicas.iter().map(|r| r.node_id.as_str()).collect();
    v.sort_unstable();
    v.dedup();
    v
}

impl Checker {
    fn push(&mut self, code: RuleCode, message: String) {
        self.out.push(Violation::new(code, message));
    }

    fn metadata(&mut self, what: &str, metadata: &[Metadata]) {
        for key in duplicate_keys(metadata) {
            self.push(
                RuleCode::MetadataKeyDuplicate,
                format!("{what} has metadata key `{key}` more than once; keep one entry per key"),
            );
        }
    }

    /// Every rule, section by section, in the order the violations are
    /// reported.
    fn run(&mut self, cfg: &ClusterConfig) -> Indexed {
        if cfg.version == 0 {
            self.push(RuleCode::VersionNotPositive, "version is 0; versions start at 1".into());
        }
        self.metadata("the config", &cfg.metadata);
        let node_ids = self.nodes(cfg);
        self.applications(cfg);
        let shards = self.shards(cfg, &node_ids);
        let shard_ids = shard_index(cfg);
        let replica_ids_unique = self.unique_ids(&shards, &shard_ids);
        let tree = self.parents(cfg, &shards.entries, &shard_ids);
        self.cycles(&shards.entries, &tree.parent);
        self.states(&shards.entries, &tree);
        self.keyspaces(cfg, &shards.entries);
        Indexed { shard_ids, replica_ids_unique }
    }

    /// The node rules; returns each valid, first-seen node id's position.
    fn nodes<'a>(&mut self, cfg: &'a ClusterConfig) -> FastMap<&'a str, usize> {
        use RuleCode::*;
        if cfg.nodes.len() < MIN_NODES {
            self.push(
                TooFewNodes,
                format!("the config has {} node(s), at least {MIN_NODES} are required; add nodes", cfg.nodes.len()),
            );
        }
        let mut node_ids: FastMap<&str, usize> = fasthash::map(cfg.nodes.len());
        let mut addresses: FastMap<&str, &str> = fasthash::map(cfg.nodes.len());
        for (i, n) in cfg.nodes.iter().enumerate() {
            if n.id.is_empty() {
                self.push(NodeIdEmpty, format!("node #{} has an empty id; give it a unique id", i + 1));
            } else if let Some(why) = crate::names::problem(&n.id) {
                self.push(
                    NodeIdInvalid,
                    format!(
                        "node id {:?} {why}; a node id is the node's name: 1 to {} bytes without `:`, whitespace or \
                         control characters",
                        n.id,
                        crate::names::MAX_NODE_NAME
                    ),
                );
            } else if node_ids.insert(&n.id, i).is_some() {
                self.push(NodeIdDuplicate, format!("node id `{}` is used by more than one node; node ids must be unique", n.id));
            }
            if n.grpc_address.is_empty() {
                self.push(NodeAddressEmpty, format!("node `{}` has an empty grpc_address; set its host:port", n.id));
            } else if let Some(first) = addresses.insert(&n.grpc_address, &n.id) {
                self.push(
                    NodeAddressDuplicate,
                    format!(
                        "nodes `{first}` and `{}` share grpc_address `{}`; each node needs its own address",
                        n.id, n.grpc_address
                    ),
                );
            }
            self.metadata(&format!("node `{}`", n.id), &n.metadata);
        }
        node_ids
    }

    /// The rules of each application's own fields.
    fn applications(&mut self, cfg: &ClusterConfig) {
        use RuleCode::*;
        let mut app_names = fasthash::set::<&str>(cfg.applications.len());
        for a in &cfg.applications {
            if a.name.is_empty() {
                self.push(ApplicationNameEmpty, "an application has an empty name; name it".into());
            } else if !app_names.insert(&a.name) {
                self.push(
                    ApplicationNameDuplicate,
                    format!("application name `{}` is used more than once; names must be unique", a.name),
                );
            }
            if a.implementation.is_empty() {
                self.push(ImplementationEmpty, format!("application `{}` has an empty implementation; set it", a.name));
            }
            if a.replication_factor < MIN_REPLICATION_FACTOR {
                self.push(
                    ReplicationFactorTooLow,
                    format!(
                        "application `{}` has replication_factor {}, at least {MIN_REPLICATION_FACTOR} is required",
                        a.name, a.replication_factor
                    ),
                );
            }
            if a.shards.is_empty() {
                self.push(
                    ApplicationNoShards,
                    format!("application `{}` has no shards; give it shards covering the keyspace", a.name),
                );
            }
            self.metadata(&format!("application `{}`", a.name), &a.metadata);
        }
    }

    /// The rules of each shard and replica on its own, and what the rules
    /// across shards need of them.
    fn shards<'a>(&mut self, cfg: &'a ClusterConfig, node_ids: &FastMap<&'a str, usize>) -> Shards<'a> {
        let total: usize = cfg.applications.iter().map(|a| a.shards.len()).sum();
        let mut out = Shards {
            entries: Vec::with_capacity(total),
            replicas: Vec::with_capacity(total * 3),
            all_conform: true,
            replica_id_empty: false,
        };
        let mut numbers = NodeNumbers { known: node_ids, nodes: cfg.nodes.len(), unknown: Vec::new(), index: fasthash::map(0) };
        let mut shard_nodes: Vec<u32> = Vec::new();
        for (ai, a) in cfg.applications.iter().enumerate() {
            for s in &a.shards {
                let idx = out.entries.len() as u32;
                out.entries.push(Entry { app: ai, shard: s });
                self.shard(a, s);
                for r in &s.replicas {
                    if r.id.is_empty() {
                        out.replica_id_empty = true;
                        self.push(
                            RuleCode::ReplicaIdEmpty,
                            format!("a replica of shard `{}` has an empty id; give it a unique id", s.id),
                        );
                    } else {
                        out.all_conform &= conforms(&r.id, &s.id);
                        out.replicas.push((&r.id, idx));
                    }
                    shard_nodes.push(numbers.number(&r.node_id, &r.id));
                    if !r.metadata.is_empty() {
                        self.metadata(&format!("replica `{}`", r.id), &r.metadata);
                    }
                }
                self.distinct_nodes(s, &mut shard_nodes);
                if !s.metadata.is_empty() {
                    self.metadata(&format!("shard `{}`", s.id), &s.metadata);
                }
            }
        }
        for (node, ids) in &numbers.unknown {
            self.push(
                RuleCode::ReplicaNodeUnknown,
                format!(
                    "node `{node}` is not in the config but {} replica(s) are on it ({}); add the node or fix their node_id",
                    ids.len(),
                    list(ids.iter().copied())
                ),
            );
        }
        out
    }

    /// The rules of one shard's own fields.
    fn shard(&mut self, a: &Application, s: &Shard) {
        use RuleCode::*;
        if s.id.is_empty() {
            self.push(ShardIdEmpty, format!("a shard of application `{}` has an empty id; give it a unique id", a.name));
        } else if let Some(why) = crate::names::id_problem(&s.id) {
            self.push(
                ShardIdInvalid,
                format!(
                    "shard id {:?} of application `{}` {why}; a shard id is a key of the lease table: 1 to {} bytes \
                     without whitespace or control characters",
                    s.id,
                    a.name,
                    crate::names::MAX_NODE_NAME
                ),
            );
        }
        if s.lower >= s.upper {
            self.push(
                ShardBoundsOrder,
                format!(
                    "shard `{}` has lower bound {:08x} not below upper bound {:08x}; lower must be strictly less than upper",
                    s.id, s.lower, s.upper
                ),
            );
        }
        if (s.replicas.len() as u64) < u64::from(a.replication_factor) {
            self.push(
                ShardTooFewReplicas,
                format!(
                    "shard `{}` ({}) has {} replica(s), application `{}` requires {} (replication_factor); add replicas on other nodes",
                    s.id, s.state, s.replicas.len(), a.name, a.replication_factor
                ),
            );
        }
    }

    /// Shard ids and replica ids unique across the config; returns whether
    /// every replica id is there and unique.
    fn unique_ids(&mut self, shards: &Shards, shard_ids: &SortedIds) -> bool {
        // `entries` lists the shards in config order, so its positions are
        // those of `shard_index`.
        let shard_id = |p: u32| shards.entries[p as usize].shard.id.as_str();
        let shard_dups = shard_ids.duplicates(shard_id);
        let shard_ids_unique = shard_dups.is_empty();
        for (_, later) in shard_dups {
            self.push(
                RuleCode::ShardIdDuplicate,
                format!("shard id `{}` is used more than once; shard ids must be unique across the config", shard_id(later)),
            );
        }
        let replica_dups = duplicate_replica_ids(&shards.replicas, shards.all_conform && shard_ids_unique);
        let unique = !shards.replica_id_empty && replica_dups.is_empty();
        for (first, later) in replica_dups {
            let (id, shard) = shards.replicas[later as usize];
            let first_shard = shard_id(shards.replicas[first as usize].1);
            self.push(
                RuleCode::ReplicaIdDuplicate,
                format!(
                    "replica id `{id}` is used more than once (shards `{first_shard}` and `{}`); replica ids must be unique across the config",
                    shard_id(shard)
                ),
            );
        }
        unique
    }

    /// The parent rules; returns the split tree of the parents that resolve.
    fn parents(&mut self, cfg: &ClusterConfig, entries: &[Entry], shard_ids: &SortedIds) -> Tree {
        use RuleCode::*;
        let shard_id = |p: u32| entries[p as usize].shard.id.as_str();
        let mut tree = Tree { parent: vec![None; entries.len()], children: fasthash::map(0) };
        for (i, e) in entries.iter().enumerate() {
            let Some(pid) = e.shard.parent_id.as_deref() else { continue };
            if pid == e.shard.id {
                self.push(
                    ShardParentSelf,
                    format!("shard `{pid}` names itself as parent; remove parent_id or name the shard it was split from"),
                );
                continue;
            }
            match shard_ids.find(pid, shard_id).map(|p| p as usize) {
                None => self.push(
                    ShardParentUnknown,
                    format!("shard `{}` has parent `{pid}`, which is not in the config; keep the parent shard or fix parent_id", e.shard.id),
                ),
                Some(p) if entries[p].app != e.app => self.push(
                    ShardParentForeign,
                    format!(
                        "shard `{}` of application `{}` has parent `{pid}` of application `{}`; a parent must belong to the same application",
                        e.shard.id, cfg.applications[e.app].name, cfg.applications[entries[p].app].name
                    ),
                ),
                Some(p) => {
                    tree.parent[i] = Some(p);
                    tree.children.entry(p).or_default().push(i);
                }
            }
        }
        tree
    }

    /// The rules of each shard's state against its place in the split tree.
    fn states(&mut self, entries: &[Entry], tree: &Tree) {
        use RuleCode::*;
        for (i, e) in entries.iter().enumerate() {
            let s = e.shard;
            let kids = tree.children.get(&i).map(Vec::as_slice).unwrap_or(&[]);
            match s.state {
                ShardState::Active if !kids.is_empty() => self.push(
                    ActiveShardHasChildren,
                    format!(
                        "active shard `{}` has children ({}); an active shard has none — mark it splitting or fix the children's parent_id",
                        s.id, list(kids.iter().map(|&k| entries[k].shard.id.as_str()))
                    ),
                ),
                ShardState::Inactive if kids.is_empty() => self.push(
                    InactiveShardNoChildren,
                    format!("inactive shard `{}` has no children; an inactive shard's range is served by its children", s.id),
                ),
                ShardState::Splitting => self.splitting(entries, i, kids),
                ShardState::Activating => self.activating(entries, i, kids, tree.parent[i]),
                _ => {}
            }
        }
    }

    fn activating(&mut self, entries: &[Entry], i: usize, kids: &[usize], parent: Option<usize>) {
        use RuleCode::*;
        let s = entries[i].shard;
        if !kids.is_empty() {
            self.push(
                ActivatingShardHasChildren,
                format!(
                    "activating shard `{}` has children ({}); it cannot be split before it is active",
                    s.id,
                    list(kids.iter().map(|&k| entries[k].shard.id.as_str()))
                ),
            );
        }
        match (s.parent_id.as_deref(), parent) {
            (None, _) => self.push(
                ActivatingShardNoParent,
                format!("activating shard `{}` has no parent_id; an activating shard is the child of a splitting shard", s.id),
            ),
            (Some(_), Some(p)) if entries[p].shard.state != ShardState::Splitting => self.push(
                ActivatingParentNotSplitting,
                format!(
                    "activating shard `{}` has parent `{}`, which is {}, not splitting",
                    s.id, entries[p].shard.id, entries[p].shard.state
                ),
            ),
            _ => {}
        }
    }

    /// Each application's routable shards cover its keyspace once.
    fn keyspaces(&mut self, cfg: &ClusterConfig, entries: &[Entry]) {
        let mut start = 0;
        for a in &cfg.applications {
            let shards = &entries[start..start + a.shards.len()];
            start += a.shards.len();
            if shards.is_empty() {
                continue; // reported as application-no-shards
            }
            let ranges: Vec<(u32, u32, &str)> = shards
                .iter()
                .filter(|e| e.shard.state.is_routable() && e.shard.lower <= e.shard.upper)
                .map(|e| (e.shard.lower, e.shard.upper, e.shard.id.as_str()))
                .collect();
            let cov = coverage(ranges, 0, u32::MAX);
            for (lo, hi) in cov.gaps {
                self.push(
                    RuleCode::KeyspaceGap,
                    format!(
                        "application `{}`: keys {} are served by no active or splitting shard; add a shard for them or widen a neighbour",
                        a.name, keys(lo, hi)
                    ),
                );
            }
            for (x, y, lo, hi) in cov.overlaps {
                self.push(
                    RuleCode::KeyspaceOverlap,
                    format!(
                        "application `{}`: shards `{x}` and `{y}` both serve keys {}; active and splitting shards must not overlap",
                        a.name, keys(lo, hi)
                    ),
                );
            }
        }
    }

    /// `nodes`: the number of each replica's node (see `run`); cleared here.
    fn distinct_nodes(&mut self, s: &Shard, nodes: &mut Vec<u32>) {
        let n = nodes.len();
        let mut dups: Vec<u32> = Vec::new();
        if n <= 16 {
            for i in 1..n {
                if nodes[..i].contains(&nodes[i]) && !dups.contains(&nodes[i]) {
                    dups.push(nodes[i]);
                }
            }
        } else {
            let mut sorted = nodes.clone();
            sorted.sort_unstable();
            for w in sorted.windows(2) {
                if w[0] == w[1] && dups.last() != Some(&w[0]) {
                    dups.push(w[0]);
                }
            }
        }
        for d in dups {
            let pos = nodes.iter().position(|&x| x == d).expect("present");
            let node = s.replicas[pos].node_id.as_str();
            let ids = s.replicas.iter().filter(|r| r.node_id == node).map(|r| r.id.as_str());
            self.push(
                RuleCode::ReplicaNodeDuplicate,
                format!(
                    "shard `{}` has replicas {} on the same node `{node}`; a shard's replicas must sit on distinct nodes",
                    s.id,
                    list(ids)
                ),
            );
        }
        nodes.clear();
    }

    /// Reports every cycle of `parent` once. O(n): each shard is walked once.
    fn cycles(&mut self, entries: &[Entry], parent: &[Option<usize>]) {
        // 0 = unvisited, 1 = on the current walk, 2 = done
        let mut mark = vec![0u8; entries.len()];
        let mut path = Vec::new();
        for start in 0..entries.len() {
            let mut at = Some(start);
            while let Some(i) = at {
                match mark[i] {
                    0 => {
                        mark[i] = 1;
                        path.push(i);
                        at = parent[i];
                    }
                    1 => {
                        let from = path.iter().position(|&p| p == i).expect("on the path");
                        let ids: Vec<&str> = path[from..].iter().map(|&k| entries[k].shard.id.as_str()).collect();
                        self.push(
                            RuleCode::ShardParentCycle,
                            format!(
                                "shards {} are each other's ancestors (parent_id cycle); a split history has a root",
                                list(ids.into_iter())
                            ),
                        );
                        break;
                    }
                    _ => break,
                }
            }
            for &p in &path {
                mark[p] = 2;
            }
            path.clear();
        }
    }

    fn splitting(&mut self, entries: &[Entry], i: usize, kids: &[usize]) {
        use RuleCode::*;
        let s = entries[i].shard;
        if kids.len() < 2 {
            self.push(
                SplittingTooFewChildren,
                format!(
                    "splitting shard `{}` has {} child(ren), at least 2 activating children are required; add children or keep it active",
                    s.id, kids.len()
                ),
            );
        }
        let parent_nodes = node_set(s);
        let mut ranges = Vec::with_capacity(kids.len());
        for &k in kids {
            let c = entries[k].shard;
            if c.state != ShardState::Activating {
                self.push(
                    SplittingChildNotActivating,
                    format!(
                        "shard `{}` is {} but its parent `{}` is splitting; the children of a splitting shard are activating",
                        c.id, c.state, s.id
                    ),
                );
            }
            if c.lower < s.lower || c.upper > s.upper {
                self.push(
                    SplitChildOutOfRange,
                    format!(
                        "child `{}` {} reaches outside its splitting parent `{}` {}; children must lie within the parent's range",
                        c.id,
                        c.range_string(),
                        s.id,
                        s.range_string()
                    ),
                );
            }
            if c.lower <= c.upper {
                ranges.push((c.lower, c.upper, c.id.as_str()));
            }
            let nodes = node_set(c);
            if nodes != parent_nodes {
                self.push(
                    SplitChildNodesMismatch,
                    format!(
                        "child `{}` has replicas on nodes [{}] but its splitting parent `{}` on [{}]; split seeding is node-local, so a child's replicas sit on exactly its parent's nodes",
                        c.id, nodes.join(", "), s.id, parent_nodes.join(", ")
                    ),
                );
            }
        }
        if kids.is_empty() {
            return;
        }
        let cov = coverage(ranges, s.lower.min(s.upper), s.upper.max(s.lower));
        for (lo, hi) in cov.gaps {
            self.push(
                SplitChildrenGap,
                format!(
                    "no child of splitting shard `{}` covers keys {}; the children must exactly cover the parent's range",
                    s.id,
                    keys(lo, hi)
                ),
            );
        }
        for (x, y, lo, hi) in cov.overlaps {
            self.push(
                SplitChildrenOverlap,
                format!(
                    "children `{x}` and `{y}` of splitting shard `{}` both cover keys {}; the children must not overlap",
                    s.id,
                    keys(lo, hi)
                ),
            );
        }
    }
}

/// Whether `replica` is `<shard>_<suffix>` with no `_` in the suffix. Such an
/// id names its shard unambiguously (the part before the last `_`), so ids
/// of this form on different shards can never be equal.
fn conforms(replica: &str, shard: &str) -> bool {
    replica.len() > shard.len() + 1
        && fasthash::bytes_eq(&replica.as_bytes()[..shard.len()], shard.as_bytes())
        && replica.as_bytes()[shard.len()] == b'_'
        && !replica[shard.len() + 1..].contains('_')
}

/// (first, later) positions in `replicas` (id, shard position; grouped by
/// shard) of repeated ids, by later position. When every id conforms (see
/// [`conforms`]) and shard ids are unique, only ids within one shard can
/// repeat, so the check stays within each shard; otherwise all ids are
/// hashed and sorted.
fn duplicate_replica_ids(replicas: &[(&str, u32)], all_conform: bool) -> Vec<(u32, u32)> {
    if !all_conform {
        return SortedIds::new(replicas.iter().enumerate().map(|(i, r)| (i as u32, r.0))).duplicates(|p| replicas[p as usize].0);
    }
    let mut out = Vec::new();
    let mut start = 0usize;
    for run in replicas.chunk_by(|a, b| a.1 == b.1) {
        if run.len() <= 32 {
            for (j, r) in run.iter().enumerate().skip(1) {
                if let Some(k) = run[..j].iter().position(|q| fasthash::str_eq(q.0, r.0)) {
                    out.push(((start + k) as u32, (start + j) as u32));
                }
            }
        } else {
            let ids = SortedIds::new(run.iter().enumerate().map(|(i, r)| (i as u32, r.0)));
            out.extend(
                ids.duplicates(|p| run[p as usize].0)
                    .into_iter()
                    .map(|(a, b)| ((start + a as usize) as u32, (start + b as usize) as u32)),
            );
        }
        start += run.len();
    }
    out
}

/// `a`, `b`, `c` (the first 5, then a count).
pub(crate) fn list<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let all: Vec<&str> = ids.collect();
    let mut s = all.iter().take(5).map(|i| format!("`{i}`")).collect::<Vec<_>>().join(", ");
    if all.len() > 5 {
        s.push_str(&format!(" and {} more", all.len() - 5));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::model::*;
    use crate::topology::testutil::*;
    use RuleCode::*;
    use ShardState::*;

    fn codes(v: &[Violation]) -> Vec<RuleCode> {
        let mut c: Vec<RuleCode> = v.iter().map(|v| v.code).collect();
        c.sort();
        c.dedup();
        c
    }

    /// A second application `B` with the same layout as `A` and its own ids.
    fn add_b(c: &mut ClusterConfig) {
        let mut b = c.applications[0].clone();
        b.name = "B".into();
        b.implementation = "B".into();
        for s in &mut b.shards {
            s.id = s.id.replacen('A', "B", 1);
            for r in &mut s.replicas {
                r.id = r.id.replacen('A', "B", 1);
            }
        }
        c.applications.push(b);
    }

    type Case = (&'static str, fn(&mut ClusterConfig), &'static [RuleCode]);

    const CASES: &[Case] = &[
        // ---- valid ----
        ("base", |_| {}, &[]),
        ("no applications", |c| c.applications.clear(), &[]),
        ("two applications", add_b, &[]),
        (
            "one shard, whole keyspace",
            |c| {
                let a = app(c, "A");
                a.shards.truncate(1);
                a.shards[0].lower = 0;
                a.shards[0].upper = u32::MAX;
            },
            &[],
        ),
        ("mid-split into 2", |c| start_split(c, "A_00_3f", 2), &[]),
        ("mid-split into 4", |c| start_split(c, "A_c0_ff", 4), &[]),
        (
            "two splits at once",
            |c| {
                start_split(c, "A_00_3f", 2);
                start_split(c, "A_c0_ff", 4)
            },
            &[],
        ),
        (
            "split finished",
            |c| {
                start_split(c, "A_40_7f", 2);
                finish_split(c, "A_40_7f")
            },
            &[],
        ),
        (
            "child of a finished split splitting",
            |c| {
                start_split(c, "A_40_7f", 2);
                finish_split(c, "A_40_7f");
                start_split(c, "A_40_7f_c1", 2);
            },
            &[],
        ),
        (
            "replicas beyond the factor",
            |c| {
                let s = shard_mut(c, "A_00_3f");
                s.replicas.push(Replica { id: "A_00_3f_n4".into(), node_id: "n4".into(), metadata: vec![] });
            },
            &[],
        ),
        (
            "split of a shard with 4 replicas",
            |c| {
                let s = shard_mut(c, "A_00_3f");
                s.replicas.push(Replica { id: "A_00_3f_n4".into(), node_id: "n4".into(), metadata: vec![] });
                start_split(c, "A_00_3f", 2);
            },
            &[],
        ),
        (
            "metadata everywhere",
            |c| {
                c.metadata = vec![Metadata::new("owner", "ops")];
                c.nodes[0].metadata = vec![Metadata::new("zone", "a"), Metadata::new("rack", "1")];
                c.applications[0].metadata = vec![Metadata::new("tier", "gold")];
                c.applications[0].shards[0].metadata = vec![Metadata::new("hot", "yes")];
                c.applications[0].shards[0].replicas[0].metadata = vec![Metadata::new("disk", "ssd")];
            },
            &[],
        ),
        (
            "replication factor 4 on 4 nodes",
            |c| {
                app(c, "A").replication_factor = 4;
                for s in &mut app(c, "A").shards {
                    let id = s.id.clone();
                    s.replicas.push(Replica { id: format!("{id}_n4"), node_id: "n4".into(), metadata: vec![] });
                }
            },
            &[],
        ),
        ("node without replicas", |c| c.nodes.push(node("n5")), &[]),
        (
            "smallest shard of two keys",
            |c| {
                let a = app(c, "A");
                a.shards[0].upper = 1;
                a.shards.insert(1, shard("A_x", 2, 0x3fff_ffff, Active, None, &["n1", "n2", "n3"]));
            },
            &[],
        ),
        // ---- invalid ----
        ("version 0", |c| c.version = 0, &[VersionNotPositive]),
        (
            "2 nodes",
            |c| {
                c.applications.clear();
                c.nodes.truncate(2)
            },
            &[TooFewNodes],
        ),
        ("empty node id", |c| c.nodes[3].id.clear(), &[NodeIdEmpty]),
        ("node id with a space", |c| c.nodes[3].id.push(' '), &[NodeIdInvalid]),
        ("node id with a colon", |c| c.nodes[3].id.push(':'), &[NodeIdInvalid]),
        ("duplicate node id", |c| c.nodes[3].id = "n1".into(), &[NodeIdDuplicate]),
        ("empty node address", |c| c.nodes[3].grpc_address.clear(), &[NodeAddressEmpty]),
        ("duplicate node address", |c| c.nodes[3].grpc_address = c.nodes[0].grpc_address.clone(), &[NodeAddressDuplicate]),
        ("empty application name", |c| c.applications[0].name.clear(), &[ApplicationNameEmpty]),
        (
            "duplicate application name",
            |c| {
                add_b(c);
                c.applications[1].name = "A".into()
            },
            &[ApplicationNameDuplicate],
        ),
        ("empty implementation", |c| c.applications[0].implementation.clear(), &[ImplementationEmpty]),
        ("replication factor 2", |c| c.applications[0].replication_factor = 2, &[ReplicationFactorTooLow]),
        (
            "application without shards",
            |c| {
                add_b(c);
                c.applications[1].shards.clear()
            },
            &[ApplicationNoShards],
        ),
        ("empty shard id", |c| c.applications[0].shards[0].id.clear(), &[ShardIdEmpty]),
        ("shard id with a trailing space", |c| c.applications[0].shards[0].id.push(' '), &[ShardIdInvalid]),
        ("shard id with a NUL", |c| c.applications[0].shards[0].id.push('\0'), &[ShardIdInvalid]),
        ("duplicate shard id", |c| c.applications[0].shards[1].id = "A_00_3f".into(), &[ShardIdDuplicate]),
        (
            "duplicate shard id across applications",
            |c| {
                add_b(c);
                c.applications[1].shards[1].id = "A_00_3f".into()
            },
            &[ShardIdDuplicate],
        ),
        (
            "too few replicas",
            |c| {
                c.applications[0].shards[2].replicas.pop();
            },
            &[ShardTooFewReplicas],
        ),
        (
            "too few replicas on an activating child",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c1").replicas.pop();
            },
            &[ShardTooFewReplicas, SplitChildNodesMismatch],
        ),
        (
            "lower equals upper",
            |c| {
                let a = app(c, "A");
                a.shards[0].upper = 0;
                a.shards.insert(1, shard("A_x", 1, 0x3fff_ffff, Active, None, &["n1", "n2", "n3"]));
            },
            &[ShardBoundsOrder],
        ),
        (
            "lower above upper",
            |c| {
                let s = &mut app(c, "A").shards[0];
                s.lower = 5;
                s.upper = 2
            },
            &[ShardBoundsOrder, KeyspaceGap],
        ),
        ("empty replica id", |c| c.applications[0].shards[0].replicas[0].id.clear(), &[ReplicaIdEmpty]),
        ("duplicate replica id", |c| c.applications[0].shards[1].replicas[0].id = "A_00_3f_n1".into(), &[ReplicaIdDuplicate]),
        (
            "duplicate replica id within a shard",
            |c| c.applications[0].shards[1].replicas[1].id = "A_40_7f_n1".into(),
            &[ReplicaIdDuplicate],
        ),
        (
            "duplicate replica id, prefix-shaped ids",
            |c| {
                // `A_00_3f` + `_n1_x` and `A_00_3f_n1` + `_x` are the same string.
                let a = app(c, "A");
                a.shards[0].replicas[0].id = "A_00_3f_n1_x".into();
                a.shards.push(shard("A_00_3f_n1", 0, 5, Inactive, Some("A_00_3f_n1"), &["n1", "n2", "n3"]));
                a.shards.last_mut().unwrap().replicas[0].id = "A_00_3f_n1_x".into();
            },
            &[ReplicaIdDuplicate, ShardParentSelf, InactiveShardNoChildren],
        ),
        (
            "duplicate replica ids on shards sharing an id",
            |c| {
                let a = app(c, "A");
                a.shards.push(shard("A_00_3f", 0, 5, Inactive, None, &["n1", "n2", "n3"]));
            },
            &[ShardIdDuplicate, ReplicaIdDuplicate, InactiveShardNoChildren],
        ),
        ("replica on an unknown node", |c| c.applications[0].shards[0].replicas[0].node_id = "n9".into(), &[ReplicaNodeUnknown]),
        ("replicas on the same node", |c| c.applications[0].shards[0].replicas[1].node_id = "n1".into(), &[ReplicaNodeDuplicate]),
        ("gap at ffffffff", |c| app(c, "A").shards[3].upper = 0xffff_fffe, &[KeyspaceGap]),
        ("gap at 00000000", |c| app(c, "A").shards[0].lower = 1, &[KeyspaceGap]),
        ("gap in the middle", |c| app(c, "A").shards[1].upper = 0x7fff_0000, &[KeyspaceGap]),
        (
            "no routable shard",
            |c| {
                let a = app(c, "A");
                a.shards.truncate(1);
                a.shards[0].state = Activating;
                a.shards[0].parent_id = None;
            },
            &[ActivatingShardNoParent, KeyspaceGap],
        ),
        ("overlap", |c| app(c, "A").shards[1].lower = 0x3f00_0000, &[KeyspaceOverlap]),
        (
            "overlap at ffffffff",
            |c| {
                app(c, "A").shards.push(shard("A_x", 0xffff_ff00, u32::MAX, Active, None, &["n1", "n2", "n3"]));
            },
            &[KeyspaceOverlap],
        ),
        (
            "splitting shard overlapping an active one",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f").upper = 0x4000_00ff;
            },
            &[KeyspaceOverlap, SplitChildrenGap],
        ),
        ("own parent", |c| c.applications[0].shards[0].parent_id = Some("A_00_3f".into()), &[ShardParentSelf]),
        ("unknown parent", |c| c.applications[0].shards[0].parent_id = Some("ghost".into()), &[ShardParentUnknown]),
        (
            "parent in another application",
            |c| {
                add_b(c);
                c.applications[1].shards[0].parent_id = Some("A_00_3f".into())
            },
            &[ShardParentForeign],
        ),
        (
            "parent cycle",
            |c| {
                let a = app(c, "A");
                a.shards.push(shard("X", 0, 5, Inactive, Some("Y"), &["n1", "n2", "n3"]));
                a.shards.push(shard("Y", 0, 5, Inactive, Some("X"), &["n1", "n2", "n3"]));
            },
            &[ShardParentCycle],
        ),
        (
            "active shard with a child",
            |c| {
                app(c, "A").shards.push(shard("K", 0, 0xff, Activating, Some("A_00_3f"), &["n1", "n2", "n3"]));
            },
            &[ActiveShardHasChildren, ActivatingParentNotSplitting],
        ),
        (
            "inactive shard without children",
            |c| {
                app(c, "A").shards.push(shard("Z", 0, 0xff, Inactive, None, &["n1", "n2", "n3"]));
            },
            &[InactiveShardNoChildren],
        ),
        (
            "splitting with one child",
            |c| {
                start_split(c, "A_00_3f", 2);
                app(c, "A").shards.retain(|s| s.id != "A_00_3f_c1");
            },
            &[SplittingTooFewChildren, SplitChildrenGap],
        ),
        ("splitting without children", |c| shard_mut(c, "A_00_3f").state = Splitting, &[SplittingTooFewChildren]),
        (
            "splitting with an active child",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c0").state = Active;
            },
            &[SplittingChildNotActivating, KeyspaceOverlap],
        ),
        (
            "split children with a gap",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c1").lower += 0x100
            },
            &[SplitChildrenGap],
        ),
        (
            "split children with a gap at the parent's end",
            |c| {
                start_split(c, "A_c0_ff", 4);
                shard_mut(c, "A_c0_ff_c3").upper = 0xffff_fff0
            },
            &[SplitChildrenGap],
        ),
        (
            "split children overlapping",
            |c| {
                start_split(c, "A_00_3f", 4);
                shard_mut(c, "A_00_3f_c2").lower -= 0x100
            },
            &[SplitChildrenOverlap],
        ),
        (
            "split child out of range",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c1").upper = 0x4000_0fff
            },
            &[SplitChildOutOfRange],
        ),
        (
            "split child on other nodes",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c0").replicas[2].node_id = "n4".into();
            },
            &[SplitChildNodesMismatch],
        ),
        (
            "split child with an extra node",
            |c| {
                start_split(c, "A_00_3f", 2);
                shard_mut(c, "A_00_3f_c0").replicas.push(Replica { id: "extra".into(), node_id: "n4".into(), metadata: vec![] });
            },
            &[SplitChildNodesMismatch],
        ),
        (
            "activating shard with a child",
            |c| {
                start_split(c, "A_00_3f", 2);
                app(c, "A").shards.push(shard("G", 0, 0xff, Activating, Some("A_00_3f_c0"), &["n1", "n2", "n3"]));
            },
            &[ActivatingShardHasChildren, ActivatingParentNotSplitting],
        ),
        (
            "activating shard without parent",
            |c| {
                app(c, "A").shards.push(shard("K", 0, 0xff, Activating, None, &["n1", "n2", "n3"]));
            },
            &[ActivatingShardNoParent],
        ),
        (
            "activating child of an inactive shard",
            |c| {
                start_split(c, "A_00_3f", 2);
                finish_split(c, "A_00_3f");
                shard_mut(c, "A_00_3f_c0").state = Activating;
            },
            &[ActivatingParentNotSplitting, KeyspaceGap],
        ),
        (
            "duplicate node metadata key",
            |c| c.nodes[0].metadata = vec![Metadata::new("zone", "a"), Metadata::new("zone", "b")],
            &[MetadataKeyDuplicate],
        ),
        (
            "duplicate shard metadata key",
            |c| c.applications[0].shards[0].metadata = vec![Metadata::new("k", "a"), Metadata::new("k", "a")],
            &[MetadataKeyDuplicate],
        ),
        (
            "duplicate replica metadata key",
            |c| c.applications[0].shards[0].replicas[0].metadata = vec![Metadata::new("k", "a"), Metadata::new("k", "b")],
            &[MetadataKeyDuplicate],
        ),
        (
            "duplicate application metadata key",
            |c| c.applications[0].metadata = vec![Metadata::new("k", "a"), Metadata::new("k", "b")],
            &[MetadataKeyDuplicate],
        ),
        (
            "duplicate config metadata key",
            |c| c.metadata = vec![Metadata::new("k", "a"), Metadata::new("k", "b")],
            &[MetadataKeyDuplicate],
        ),
    ];

    #[test]
    fn table() {
        let mut failures = Vec::new();
        for (name, mutate, want) in CASES {
            let mut c = base();
            mutate(&mut c);
            let got = validate(&c);
            let mut want = want.to_vec();
            want.sort();
            if codes(&got) != want {
                failures.push(format!("{name}: want {want:?}, got {got:#?}"));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn every_single_config_rule_has_a_valid_and_an_invalid_case() {
        let covered: HashSet<RuleCode> = CASES.iter().flat_map(|c| c.2.iter().copied()).collect();
        for code in RuleCode::ALL.iter().filter(|c| !c.is_transition_rule()) {
            assert!(covered.contains(code), "no invalid case for {code}");
        }
        assert!(CASES.iter().filter(|c| c.2.is_empty()).count() >= 10);
    }

    #[test]
    fn every_violation_is_reported_not_just_the_first() {
        let mut c = base();
        c.version = 0;
        c.nodes[3].id = "n1".into();
        c.applications[0].shards[0].replicas[0].node_id = "n9".into();
        c.applications[0].shards[1].replicas[0].node_id = "n8".into();
        app(&mut c, "A").shards[3].upper = 0xffff_fffe;
        let v = validate(&c);
        assert_eq!(v.len(), 5, "{v:#?}");
        assert!(v.iter().any(|v| v.message.contains("`n8`") && v.message.contains("A_40_7f_n1")));
    }

    #[test]
    fn replica_ids_unique_only_without_empty_or_repeated_ids() {
        type Mutate = fn(&mut ClusterConfig);
        let cases: &[(&str, Mutate, bool)] = &[
            ("base", |_| {}, true),
            ("mid-split", |c| start_split(c, "A_00_3f", 2), true),
            ("an empty replica id", |c| c.applications[0].shards[0].replicas[0].id.clear(), false),
            (
                "two empty replica ids",
                |c| {
                    for r in &mut c.applications[0].shards[0].replicas[..2] {
                        r.id.clear()
                    }
                },
                false,
            ),
            ("a repeated id within a shard", |c| c.applications[0].shards[1].replicas[1].id = "A_40_7f_n1".into(), false),
            ("a repeated id across shards", |c| c.applications[0].shards[1].replicas[0].id = "A_00_3f_n1".into(), false),
        ];
        for (name, mutate, want) in cases {
            let mut c = base();
            mutate(&mut c);
            let (violations, indexed) = validate_indexed(&c);
            assert_eq!(indexed.replica_ids_unique, *want, "{name}: {violations:?}");
            assert_eq!(violations, validate(&c), "{name}");
        }
    }

    #[test]
    fn coverage_edges() {
        let c = coverage(vec![(0, u32::MAX, "a")], 0, u32::MAX);
        assert!(c.gaps.is_empty() && c.overlaps.is_empty());
        let c = coverage(vec![], 0, u32::MAX);
        assert_eq!(c.gaps, vec![(0, u32::MAX)]);
        let c = coverage(vec![(0, 9, "a"), (5, u32::MAX, "b"), (20, 30, "c")], 0, u32::MAX);
        assert_eq!(c.overlaps, vec![("a", "b", 5, 9), ("b", "c", 20, 30)]);
        let c = coverage(vec![(0, 9, "a"), (u32::MAX, u32::MAX, "z")], 0, u32::MAX);
        assert_eq!(c.gaps, vec![(10, u32::MAX - 1)]);
    }
}
