//! Building new versions of a config: `init`, `add-node`, `add-application`.
//!
//! Each operation is pure: it takes the current config (and, for
//! `add_application`, the placement policy as a function) and returns the
//! next version, or refuses. A result is returned only if it is valid and,
//! for operations on an existing config, the transition to it is valid too.
//!
//! Replica ids are `<shard id>_<8 hex digits>`. The digits are the 32-bit
//! FNV-1a hash of `"<shard id>/<node id>"`, so the same command on the same
//! config always writes the same ids; if the id is taken, the hash of
//! `"<shard id>/<node id>/<n>"` for n = 1, 2, … is used instead.

use std::collections::HashSet;

use chitin_policy_sdk::{PlacementRequest, ShardPlacement};

use super::bounds::format_bounds;
use super::model::{Application, ClusterConfig, Metadata, Node, Replica, Shard, ShardState};
use super::policy_view::placement_request;
use super::transition::{TransitionReport, validate_transition};
use super::validate::{MIN_REPLICATION_FACTOR, validate};

/// The default number of shards of a new application.
pub const DEFAULT_SHARDS: u32 = 16;
/// The largest power of two an application can be divided into (a shard
/// needs at least two keys, since `lower < upper`).
pub const MAX_SHARDS: u32 = 1 << 31;

/// Why an operation refused.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The request itself is wrong (before any config is built).
    #[error("{0}")]
    Request(String),
    /// The resulting config, or the transition to it, breaks rules.
    #[error("the result would be invalid ({} violation(s)); nothing written", .0.len())]
    Invalid(TransitionReport),
    /// The placement policy failed.
    #[error("the placement policy failed: {0}")]
    Placement(String),
    /// The placement policy answered something that does not fit the request.
    #[error("the placement policy gave an unusable answer: {0}")]
    BadPlacement(String),
}

fn check_result(old: Option<&ClusterConfig>, new: ClusterConfig) -> Result<ClusterConfig, OpsError> {
    let report = match old {
        Some(old) => validate_transition(old, &new),
        None => TransitionReport { new: validate(&new), ..Default::default() },
    };
    if report.is_valid() { Ok(new) } else { Err(OpsError::Invalid(report)) }
}

/// Version 1 with these `(id, grpc_address)` nodes and no applications.
pub fn init(nodes: &[(String, String)]) -> Result<ClusterConfig, OpsError> {
    let config = ClusterConfig {
        applications: vec![],
        nodes: nodes
            .iter()
            .map(|(id, address)| Node { id: id.clone(), grpc_address: address.clone(), metadata: vec![] })
            .collect(),
        version: 1,
        metadata: vec![],
    };
    check_result(None, config)
}

/// The next version with one more node.
pub fn add_node(config: &ClusterConfig, id: &str, address: &str, metadata: Vec<Metadata>) -> Result<ClusterConfig, OpsError> {
    if config.node(id).is_some() {
        return Err(OpsError::Request(format!("node `{id}` is already in the config (version {})", config.version)));
    }
    let mut next = config.clone();
    next.version = config.version + 1;
    next.nodes.push(Node { id: id.to_owned(), grpc_address: address.to_owned(), metadata });
    check_result(Some(config), next)
}

/// What `add-application` creates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewApplication {
    pub name: String,
    pub implementation: String,
    /// A power of two, 1 ..= 2^31.
    pub shards_count: u32,
    pub replication_factor: u32,
    pub metadata: Vec<Metadata>,
}

/// The ranges of `count` equal shards: shard i covers
/// `[i·2³²/count, (i+1)·2³²/count − 1]`.
pub fn equal_ranges(count: u32) -> Vec<(u32, u32)> {
    (0..count).map(|i| shard_range(i, count)).collect()
}

/// The range of shard `i` of `count` equal shards (`count` a power of two).
pub fn shard_range(i: u32, count: u32) -> (u32, u32) {
    let width = (1u64 << 32) / u64::from(count);
    let i = u64::from(i);
    ((i * width) as u32, ((i + 1) * width - 1) as u32)
}

/// `<name>_<lower>_<upper>` with the shortened bounds (`App_00_0f`); a
/// single shard over the whole keyspace is `<name>_00_ff`.
pub fn shard_id(application: &str, lower: u32, upper: u32) -> String {
    let (lo, hi) = format_bounds(lower, upper);
    if lo.is_empty() { format!("{application}_00_ff") } else { format!("{application}_{lo}_{hi}") }
}

/// A replica id for `shard` on `node` that is not in `taken` (see the module docs).
pub fn replica_id(shard: &str, node: &str, taken: &HashSet<String>) -> String {
    let mut salt = 0u32;
    loop {
        let key = if salt == 0 { format!("{shard}/{node}") } else { format!("{shard}/{node}/{salt}") };
        let id = format!("{shard}_{:08x}", super::route::fnv1a(key.as_bytes()));
        if !taken.contains(&id) {
            return id;
        }
        salt += 1;
    }
}

/// The next version with a new application whose shards are placed by `place`
/// (the `placement` policy's `place-replicas`).
pub fn add_application<E: std::error::Error>(
    config: &ClusterConfig,
    app: NewApplication,
    place: impl FnOnce(PlacementRequest) -> Result<Vec<ShardPlacement>, E>,
) -> Result<ClusterConfig, OpsError> {
    if app.name.is_empty() {
        return Err(OpsError::Request("the application name is empty".into()));
    }
    if config.application(&app.name).is_some() {
        return Err(OpsError::Request(format!("application `{}` is already in the config", app.name)));
    }
    if !app.shards_count.is_power_of_two() || app.shards_count > MAX_SHARDS {
        return Err(OpsError::Request(format!("--shards-count {} is not a power of two between 1 and 2^31", app.shards_count)));
    }
    if app.replication_factor < MIN_REPLICATION_FACTOR {
        return Err(OpsError::Request(format!(
            "--replication-factor {} is below the minimum of {MIN_REPLICATION_FACTOR}",
            app.replication_factor
        )));
    }
    let mut next = config.clone();
    next.version = config.version + 1;
    let shards: Vec<Shard> = equal_ranges(app.shards_count)
        .into_iter()
        .map(|(lower, upper)| Shard {
            id: shard_id(&app.name, lower, upper),
            lower,
            upper,
            state: ShardState::Active,
            parent_id: None,
            replicas: vec![],
            metadata: vec![],
        })
        .collect();
    let new_ids: Vec<String> = shards.iter().map(|s| s.id.clone()).collect();
    next.applications.push(Application {
        name: app.name.clone(),
        implementation: app.implementation,
        shards,
        replication_factor: app.replication_factor,
        metadata: app.metadata,
    });

    let request = placement_request(&next, new_ids, app.replication_factor);
    let placements = place(request).map_err(|e| OpsError::Placement(error_chain(&e)))?;

    let mut taken: HashSet<String> = config.shards().flat_map(|(_, s)| s.replicas.iter().map(|r| r.id.clone())).collect();
    let new_app = next.applications.last_mut().expect("just pushed");
    let mut placed = vec![false; new_app.shards.len()];
    let index: std::collections::HashMap<&str, usize> =
        new_app.shards.iter().enumerate().map(|(i, s)| (s.id.as_str(), i)).collect();
    let mut assignments: Vec<(usize, Vec<String>)> = Vec::with_capacity(placements.len());
    for p in placements {
        let Some(&i) = index.get(p.shard.as_str()) else {
            return Err(OpsError::BadPlacement(format!("it placed shard `{}`, which was not asked for", p.shard)));
        };
        if std::mem::replace(&mut placed[i], true) {
            return Err(OpsError::BadPlacement(format!("it placed shard `{}` twice", p.shard)));
        }
        assignments.push((i, p.nodes));
    }
    if let Some(i) = placed.iter().position(|p| !p) {
        return Err(OpsError::BadPlacement(format!("it did not place shard `{}`", new_app.shards[i].id)));
    }
    for (i, nodes) in assignments {
        let shard = &mut new_app.shards[i];
        for node in nodes {
            let id = replica_id(&shard.id, &node, &taken);
            taken.insert(id.clone());
            shard.replicas.push(Replica { id, node_id: node, metadata: vec![] });
        }
    }
    check_result(Some(config), next)
}

/// An error and its sources, `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::rules::RuleCode;
    use chitin_policy_sdk::PolicyError;

    fn three() -> Vec<(String, String)> {
        (1..=3).map(|i| (format!("node-0{i}"), format!("10.0.0.{i}:7000"))).collect()
    }

    /// Round-robin placement, like a trivial policy.
    fn round_robin(req: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        let n = req.nodes.len();
        Ok(req
            .new_shards
            .iter()
            .enumerate()
            .map(|(i, s)| ShardPlacement {
                shard: s.clone(),
                nodes: (0..req.replication_factor as usize).map(|k| req.nodes[(i + k) % n].id.clone()).collect(),
            })
            .collect())
    }

    fn app(name: &str, count: u32) -> NewApplication {
        NewApplication {
            name: name.into(),
            implementation: name.into(),
            shards_count: count,
            replication_factor: 3,
            metadata: vec![],
        }
    }

    #[test]
    fn init_and_grow() {
        let c = init(&three()).unwrap();
        assert_eq!((c.version, c.nodes.len(), c.applications.len()), (1, 3, 0));
        let c2 = add_application(&c, app("App", 16), round_robin).unwrap();
        assert_eq!(c2.version, 2);
        let ids: Vec<&str> = c2.applications[0].shards.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids.first(), Some(&"App_00_0f"));
        assert_eq!(ids.last(), Some(&"App_f0_ff"));
        assert_eq!(ids.len(), 16);
        let r = &c2.applications[0].shards[0].replicas[0];
        assert_eq!(r.id.len(), "App_00_0f_".len() + 8);
        assert!(r.id.starts_with("App_00_0f_"));
        // Reproducible.
        assert_eq!(add_application(&c, app("App", 16), round_robin).unwrap(), c2);
        let c3 = add_node(&c2, "node-04", "10.0.0.4:7000", vec![Metadata::new("zone", "b")]).unwrap();
        assert_eq!((c3.version, c3.nodes.len()), (3, 4));
        let c4 = add_application(&c3, app("Two", 1), round_robin).unwrap();
        assert_eq!(c4.applications[1].shards[0].id, "Two_00_ff");
        assert_eq!((c4.applications[1].shards[0].lower, c4.applications[1].shards[0].upper), (0, u32::MAX));
    }

    #[test]
    fn ranges() {
        assert_eq!(equal_ranges(1), vec![(0, u32::MAX)]);
        assert_eq!(equal_ranges(2), vec![(0, 0x7fff_ffff), (0x8000_0000, u32::MAX)]);
        assert_eq!(shard_range(0, MAX_SHARDS), (0, 1));
        assert_eq!(shard_range(MAX_SHARDS - 1, MAX_SHARDS), (u32::MAX - 1, u32::MAX));
        assert_eq!(equal_ranges(16)[15], (0xf000_0000, u32::MAX));
        assert_eq!(shard_id("A", 0x0800_0000, 0x0800_ffff), "A_0800_0800");
    }

    #[test]
    fn refusals() {
        let c = init(&three()).unwrap();
        let two: Vec<_> = three().into_iter().take(2).collect();
        match init(&two) {
            Err(OpsError::Invalid(r)) => assert_eq!(r.new[0].code, RuleCode::TooFewNodes),
            other => panic!("{other:?}"),
        }
        let dup = vec![three()[0].clone(), three()[0].clone(), three()[1].clone()];
        assert!(matches!(init(&dup), Err(OpsError::Invalid(_))));
        assert!(matches!(add_node(&c, "node-01", "x:1", vec![]), Err(OpsError::Request(_))));
        match add_node(&c, "node-09", "10.0.0.1:7000", vec![]) {
            Err(OpsError::Invalid(r)) => assert_eq!(r.new[0].code, RuleCode::NodeAddressDuplicate),
            other => panic!("{other:?}"),
        }
        assert!(matches!(add_application(&c, app("A", 12), round_robin), Err(OpsError::Request(_))));
        assert!(matches!(add_application(&c, app("A", 0), round_robin), Err(OpsError::Request(_))));
        let c2 = add_application(&c, app("A", 4), round_robin).unwrap();
        assert!(matches!(add_application(&c2, app("A", 4), round_robin), Err(OpsError::Request(_))));
        let failing = |_| Err::<Vec<ShardPlacement>, _>(PolicyError::Unsupported("no".into()));
        assert!(matches!(add_application(&c, app("B", 4), failing), Err(OpsError::Placement(m)) if m.contains("no")));
        let short = |req: PlacementRequest| {
            Ok::<_, PolicyError>(vec![ShardPlacement { shard: req.new_shards[0].clone(), nodes: vec!["node-01".into()] }])
        };
        assert!(matches!(add_application(&c, app("B", 4), short), Err(OpsError::BadPlacement(_))));
        // Placement on too few nodes: the result is invalid and refused.
        let thin = |req: PlacementRequest| {
            Ok::<_, PolicyError>(
                req.new_shards
                    .iter()
                    .map(|s| ShardPlacement { shard: s.clone(), nodes: vec!["node-01".into(), "node-01".into(), "ghost".into()] })
                    .collect(),
            )
        };
        match add_application(&c, app("B", 2), thin) {
            Err(OpsError::Invalid(r)) => {
                let codes: HashSet<_> = r.new.iter().map(|v| v.code).collect();
                assert!(codes.contains(&RuleCode::ReplicaNodeDuplicate) && codes.contains(&RuleCode::ReplicaNodeUnknown));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replica_ids_avoid_collisions() {
        let mut taken = HashSet::new();
        let a = replica_id("S", "n1", &taken);
        taken.insert(a.clone());
        let b = replica_id("S", "n1", &taken);
        assert_ne!(a, b);
        assert!(b.starts_with("S_") && b.len() == 10);
    }
}
