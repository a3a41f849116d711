//! Sleeps for a minute with `std::thread::sleep`, which waits on a
//! `wasi:clocks/monotonic-clock` subscription: on every `place-replicas` and
//! `rebalance` call, and on every second `preferred-holders` call of an
//! instance. The first `preferred-holders` call of an instance ranks each
//! shard's replica nodes in request order, so a node running this plugin
//! takes its leases; the next call sleeps. A host that really waited would
//! hold the slot (and the node's lease round) for the whole minute.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "placement-policy" });

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use chitin::policy::types::NodeState;
use exports::chitin::policy::placement::*;

/// Far beyond any call deadline (at most 60 s) and any lease TTL of the tests.
const NAP: Duration = Duration::from_secs(120);

static CALLS: AtomicU32 = AtomicU32::new(0);

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
        if CALLS.fetch_add(1, Ordering::Relaxed) % 2 == 1 {
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
