//! A placement plugin built against `chitin:policy@0.2.0`, a version this
//! chitin does not support: the host must refuse it by name and version.
wit_bindgen::generate!({ path: "wit", world: "placement-policy" });

use exports::chitin::policy::placement::*;

struct Future;

impl Guest for Future {
    fn place_replicas(_request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        Ok(Vec::new())
    }
    fn rebalance(_request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        Ok(Vec::new())
    }
    fn preferred_holders(_request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        Ok(Vec::new())
    }
}

export!(Future);
