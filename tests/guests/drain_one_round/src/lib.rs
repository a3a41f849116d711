//! A drain policy that ignores `max-per-round`: every handoff in one round,
//! each shard to its first other active replica node. The host must still
//! hand over no more than its own cap per round across the database.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "drain-policy" });

use chitin::policy::types::NodeState;
use exports::chitin::policy::drain::*;

struct OneRound;

impl Guest for OneRound {
    fn plan_drain(request: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
        let active = |id: &str| request.nodes.iter().any(|n| n.id == id && n.state == NodeState::Active);
        let round = request
            .holders
            .iter()
            .filter(|h| h.node == request.leaving)
            .filter_map(|h| {
                let target = request
                    .replicas
                    .iter()
                    .find(|r| r.shard == h.shard && r.node != request.leaving && active(&r.node))?;
                Some(Handoff { shard: h.shard.clone(), source: request.leaving.clone(), target: target.node.clone() })
            })
            .collect();
        Ok(vec![round])
    }
}

export!(OneRound);
