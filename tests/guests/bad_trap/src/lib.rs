//! Panics (a trap) on every call, after writing to stderr.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "placement-policy" });

use exports::chitin::policy::placement::*;

struct Bad;

impl Guest for Bad {
    fn place_replicas(_request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        misbehave()
    }
    fn rebalance(_request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        misbehave()
    }
    fn preferred_holders(_request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        misbehave()
    }
}

fn misbehave<T>() -> T {
    panic!("bad_trap always panics")
}

export!(Bad);
