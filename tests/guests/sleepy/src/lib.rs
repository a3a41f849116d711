//! Sleeps for a minute with `std::thread::sleep`, which waits on a
//! `wasi:clocks/monotonic-clock` subscription: on every `place-replicas` and
//! `rebalance` call, and on every `preferred-holders` call once a node is
//! active. While every node is joining it ranks each shard's replica nodes
//! in request order, so a node running this plugin takes its leases; from
//! its first round as an active node on, every ranking sleeps (and, failing,
//! is asked for again each round). A host that really waited would hold the
//! slot (and the node's lease round) for the whole minute.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "placement-policy" });

use std::time::Duration;

use chitin::policy::types::NodeState;
use exports::chitin::policy::placement::*;

/// Far beyond any call deadline (at most 60 s) and any lease TTL of the tests.
const NAP: Duration = Duration::from_secs(120);

struct Sleepy;

impl Guest for Sleepy {
    fn place_replicas(_request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        std::thread::sleep(NAP);
        Err(PolicyError::Unsupported("slept through".into()))
    }
    fn rebalance(_request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        std::thread::sleep(NAP);
        Err(PolicyError::Unsupported("slept through".into()))
    }
    fn preferred_holders(request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        if request.nodes.iter().any(|n| matches!(n.state, NodeState::Active)) {
            std::thread::sleep(NAP);
        }
        let eligible = |id: &str| {
            request
                .nodes
                .iter()
                .any(|n| n.id == id && matches!(n.state, NodeState::Active | NodeState::Joining))
        };
        Ok(request
            .shards
            .iter()
            .map(|s| HolderRanking {
                shard: s.id.clone(),
                nodes: request
                    .replicas
                    .iter()
                    .filter(|r| r.shard == s.id && eligible(&r.node))
                    .map(|r| r.node.clone())
                    .collect(),
            })
            .collect())
    }
}

export!(Sleepy);
