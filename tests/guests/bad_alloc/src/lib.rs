//! Allocates without bound on every call.
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
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut chunk = vec![0u8; 1 << 20];
        chunk[0] = hoard.len() as u8;
        hoard.push(std::hint::black_box(chunk));
    }
}

export!(Bad);
