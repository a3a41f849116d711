//! The config as the records the policies receive (`chitin_policy_sdk`).
//!
//! Every node is `active` (the config does not know about liveness; the
//! caller overrides states it knows better). A node's metadata becomes its
//! labels, and its `zone` entry also fills `Node::zone`.

use chitin_policy_sdk as sdk;

use super::model::{ClusterConfig, Node, Shard, ShardState, metadata_value};

/// The metadata key copied into `Node::zone`.
pub(crate) const ZONE_KEY: &str = "zone";

pub(crate) fn node(n: &Node) -> sdk::Node {
    node_in_state(n, sdk::NodeState::Active)
}

/// `n` in the state its caller knows it to be in.
pub(crate) fn node_in_state(n: &Node, state: sdk::NodeState) -> sdk::Node {
    sdk::Node {
        id: n.id.clone(),
        address: n.grpc_address.clone(),
        zone: metadata_value(&n.metadata, ZONE_KEY).map(str::to_owned),
        labels: n.metadata.iter().map(|m| sdk::Label { key: m.key.clone(), value: m.value.clone() }).collect(),
        state,
    }
}

pub(crate) fn shard_state(s: ShardState) -> sdk::ShardState {
    match s {
        ShardState::Active => sdk::ShardState::Active,
        ShardState::Splitting => sdk::ShardState::Splitting,
        ShardState::Activating => sdk::ShardState::Activating,
        ShardState::Inactive => sdk::ShardState::Inactive,
    }
}

pub(crate) fn shard(application: &str, s: &Shard) -> sdk::Shard {
    sdk::Shard {
        id: s.id.clone(),
        application: application.to_owned(),
        lower: s.lower,
        upper: s.upper,
        state: shard_state(s.state),
        parent: s.parent_id.clone(),
    }
}

pub(crate) fn nodes(c: &ClusterConfig) -> Vec<sdk::Node> {
    c.nodes.iter().map(node).collect()
}

/// The config's nodes, each in the state `state_of(id)` says.
pub(crate) fn nodes_with_states(c: &ClusterConfig, state_of: impl Fn(&str) -> sdk::NodeState) -> Vec<sdk::Node> {
    c.nodes.iter().map(|n| node_in_state(n, state_of(&n.id))).collect()
}

pub(crate) fn shards(c: &ClusterConfig) -> Vec<sdk::Shard> {
    c.shards().map(|(a, s)| shard(&a.name, s)).collect()
}

pub(crate) fn replicas(c: &ClusterConfig) -> Vec<sdk::Replica> {
    c.shards()
        .flat_map(|(_, s)| {
            s.replicas.iter().map(move |r| sdk::Replica { id: r.id.clone(), shard: s.id.clone(), node: r.node_id.clone() })
        })
        .collect()
}

/// A `place-replicas` request for `new_shards`, which must already be in `c`
/// (with no replicas).
pub(crate) fn placement_request(c: &ClusterConfig, new_shards: Vec<String>, replication_factor: u32) -> sdk::PlacementRequest {
    sdk::PlacementRequest { nodes: nodes(c), shards: shards(c), replicas: replicas(c), new_shards, replication_factor }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::model::Metadata;
    use crate::topology::testutil::*;

    #[test]
    fn converts() {
        let mut c = base();
        c.nodes[0].metadata = vec![Metadata::new("zone", "us-a"), Metadata::new("rack", "7")];
        start_split(&mut c, "A_00_3f", 2);
        let n = nodes(&c);
        assert_eq!(n[0].zone.as_deref(), Some("us-a"));
        assert_eq!(n[0].label("rack"), Some("7"));
        assert_eq!(n[0].address, "n1.internal:7000");
        assert_eq!(n[1].zone, None);
        assert!(n.iter().all(|n| n.state == sdk::NodeState::Active));
        let s = shards(&c);
        assert_eq!(s.len(), 6);
        let kid = s.iter().find(|s| s.id == "A_00_3f_c1").unwrap();
        assert_eq!(
            (kid.application.as_str(), kid.state, kid.parent.as_deref()),
            ("A", sdk::ShardState::Activating, Some("A_00_3f"))
        );
        assert_eq!((kid.lower, kid.upper), (0x2000_0000, 0x3fff_ffff));
        let r = replicas(&c);
        assert_eq!(r.len(), 18);
        assert_eq!(r[0], sdk::Replica { id: "A_00_3f_n1".into(), shard: "A_00_3f".into(), node: "n1".into() });
    }
}
