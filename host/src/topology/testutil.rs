//! Builders for the table tests.

use super::model::*;

pub(crate) fn node(id: &str) -> Node {
    Node { id: id.into(), grpc_address: format!("{id}.internal:7000"), metadata: vec![] }
}

pub(crate) fn shard(id: &str, lower: u32, upper: u32, state: ShardState, parent: Option<&str>, nodes: &[&str]) -> Shard {
    Shard {
        id: id.into(),
        lower,
        upper,
        state,
        parent_id: parent.map(Into::into),
        replicas: nodes.iter().map(|n| Replica { id: format!("{id}_{n}"), node_id: (*n).into(), metadata: vec![] }).collect(),
        metadata: vec![],
    }
}

/// Version 1, nodes n1..n4, application `A` (rf 3) with 4 active shards
/// `A_00_3f`, `A_40_7f`, `A_80_bf`, `A_c0_ff` on n1, n2, n3.
pub(crate) fn base() -> ClusterConfig {
    let q = 0x4000_0000u32;
    let shards = (0..4u32)
        .map(|i| {
            let (lo, hi) = (i * q, i * q + (q - 1));
            let id = format!("A_{:02x}_{:02x}", lo >> 24, hi >> 24);
            shard(&id, lo, hi, ShardState::Active, None, &["n1", "n2", "n3"])
        })
        .collect();
    ClusterConfig {
        applications: vec![Application {
            name: "A".into(),
            implementation: "A".into(),
            shards,
            replication_factor: 3,
            metadata: vec![],
        }],
        nodes: vec![node("n1"), node("n2"), node("n3"), node("n4")],
        version: 1,
        metadata: vec![],
    }
}

pub(crate) fn app<'a>(c: &'a mut ClusterConfig, name: &str) -> &'a mut Application {
    c.applications.iter_mut().find(|a| a.name == name).expect("application")
}

pub(crate) fn shard_mut<'a>(c: &'a mut ClusterConfig, id: &str) -> &'a mut Shard {
    c.applications.iter_mut().flat_map(|a| a.shards.iter_mut()).find(|s| s.id == id).expect("shard")
}

/// Marks `id` splitting and adds `n` equal activating children on its nodes,
/// ids `<id>_c<k>`.
pub(crate) fn start_split(c: &mut ClusterConfig, id: &str, n: u32) {
    let s = shard_mut(c, id);
    s.state = ShardState::Splitting;
    let (lo, hi) = (s.lower, s.upper);
    let nodes: Vec<String> = s.replicas.iter().map(|r| r.node_id.clone()).collect();
    let nodes: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let width = (u64::from(hi) - u64::from(lo) + 1) / u64::from(n);
    let kids: Vec<Shard> = (0..n)
        .map(|k| {
            let l = u64::from(lo) + width * u64::from(k);
            let h = if k + 1 == n { u64::from(hi) } else { l + width - 1 };
            shard(&format!("{id}_c{k}"), l as u32, h as u32, ShardState::Activating, Some(id), &nodes)
        })
        .collect();
    let a = c.applications.iter_mut().find(|a| a.shards.iter().any(|s| s.id == id)).unwrap();
    a.shards.extend(kids);
}

/// Completes a split started by [`start_split`]: parent inactive, children active.
pub(crate) fn finish_split(c: &mut ClusterConfig, id: &str) {
    for a in &mut c.applications {
        for s in &mut a.shards {
            if s.id == id {
                s.state = ShardState::Inactive;
            } else if s.parent_id.as_deref() == Some(id) {
                s.state = ShardState::Active;
            }
        }
    }
}
