//! The component glue: exports the `all-policies` world of
//! `chitin:policy@0.1.0` by converting the generated bindings to and from the
//! SDK types and calling [`Defaults`]. Compiled only for `wasm32`.

use chitin_policy_sdk as sdk;
use chitin_policy_sdk::{DrainPolicy, InstanceIdPolicy, PlacementPolicy, SplitPolicy};

use crate::Defaults;

wit_bindgen::generate!({
    path: "../../wit/since_v0.1.0",
    world: "all-policies",
});

use chitin::policy::types as wit;
use exports::chitin::policy::{drain, instance_id, placement, split};

export!(Defaults);

fn conv<A: Into<B>, B>(items: Vec<A>) -> Vec<B> {
    items.into_iter().map(Into::into).collect()
}

// ---- WIT -> SDK -------------------------------------------------------------

impl From<wit::NodeState> for sdk::NodeState {
    fn from(s: wit::NodeState) -> Self {
        match s {
            wit::NodeState::Joining => Self::Joining,
            wit::NodeState::Active => Self::Active,
            wit::NodeState::Leaving => Self::Leaving,
            wit::NodeState::Down => Self::Down,
        }
    }
}

impl From<wit::ShardState> for sdk::ShardState {
    fn from(s: wit::ShardState) -> Self {
        match s {
            wit::ShardState::Active => Self::Active,
            wit::ShardState::Splitting => Self::Splitting,
            wit::ShardState::Activating => Self::Activating,
            wit::ShardState::Inactive => Self::Inactive,
        }
    }
}

impl From<wit::Label> for sdk::Label {
    fn from(l: wit::Label) -> Self {
        Self {
            key: l.key,
            value: l.value,
        }
    }
}

impl From<wit::Node> for sdk::Node {
    fn from(n: wit::Node) -> Self {
        Self {
            id: n.id,
            address: n.address,
            zone: n.zone,
            labels: conv(n.labels),
            state: n.state.into(),
        }
    }
}

impl From<wit::Shard> for sdk::Shard {
    fn from(s: wit::Shard) -> Self {
        Self {
            id: s.id,
            application: s.application,
            lower: s.lower,
            upper: s.upper,
            state: s.state.into(),
            parent: s.parent,
        }
    }
}

impl From<wit::Replica> for sdk::Replica {
    fn from(r: wit::Replica) -> Self {
        Self {
            id: r.id,
            shard: r.shard,
            node: r.node,
        }
    }
}

impl From<wit::Holder> for sdk::Holder {
    fn from(h: wit::Holder) -> Self {
        Self {
            shard: h.shard,
            node: h.node,
        }
    }
}

impl From<wit::ShardLoad> for sdk::ShardLoad {
    fn from(l: wit::ShardLoad) -> Self {
        Self {
            shard: l.shard,
            keys: l.keys,
            bytes: l.bytes,
            ops_per_sec: l.ops_per_sec,
        }
    }
}

impl From<wit::RangeLoad> for sdk::RangeLoad {
    fn from(l: wit::RangeLoad) -> Self {
        Self {
            lower: l.lower,
            upper: l.upper,
            keys: l.keys,
            bytes: l.bytes,
            ops_per_sec: l.ops_per_sec,
        }
    }
}

impl From<instance_id::InstanceContext> for sdk::InstanceContext {
    fn from(c: instance_id::InstanceContext) -> Self {
        Self {
            env: c.env,
            hostname: c.hostname,
        }
    }
}

impl From<placement::PlacementRequest> for sdk::PlacementRequest {
    fn from(r: placement::PlacementRequest) -> Self {
        Self {
            nodes: conv(r.nodes),
            shards: conv(r.shards),
            replicas: conv(r.replicas),
            new_shards: r.new_shards,
            replication_factor: r.replication_factor,
        }
    }
}

impl From<placement::RebalanceRequest> for sdk::RebalanceRequest {
    fn from(r: placement::RebalanceRequest) -> Self {
        Self {
            nodes: conv(r.nodes),
            shards: conv(r.shards),
            replicas: conv(r.replicas),
            holders: conv(r.holders),
            load: conv(r.load),
        }
    }
}

impl From<placement::RankingRequest> for sdk::RankingRequest {
    fn from(r: placement::RankingRequest) -> Self {
        Self {
            nodes: conv(r.nodes),
            shards: conv(r.shards),
            replicas: conv(r.replicas),
        }
    }
}

impl From<split::SplitRequest> for sdk::SplitRequest {
    fn from(r: split::SplitRequest) -> Self {
        Self {
            shard: r.shard.into(),
            children: r.children,
            at: r.at,
            load: r.load.map(Into::into),
            samples: conv(r.samples),
        }
    }
}

impl From<drain::DrainRequest> for sdk::DrainRequest {
    fn from(r: drain::DrainRequest) -> Self {
        Self {
            leaving: r.leaving,
            nodes: conv(r.nodes),
            shards: conv(r.shards),
            replicas: conv(r.replicas),
            holders: conv(r.holders),
            load: conv(r.load),
            max_per_round: r.max_per_round,
        }
    }
}

// ---- SDK -> WIT -------------------------------------------------------------

impl From<sdk::PolicyError> for wit::PolicyError {
    fn from(e: sdk::PolicyError) -> Self {
        match e {
            sdk::PolicyError::InsufficientNodes(s) => Self::InsufficientNodes(wit::NodeShortage {
                needed: s.needed,
                eligible: s.eligible,
            }),
            sdk::PolicyError::UnknownShard(id) => Self::UnknownShard(id),
            sdk::PolicyError::UnknownNode(id) => Self::UnknownNode(id),
            sdk::PolicyError::InvalidSplit(why) => Self::InvalidSplit(why),
            sdk::PolicyError::InvalidInput(why) => Self::InvalidInput(why),
            sdk::PolicyError::Unsupported(why) => Self::Unsupported(why),
        }
    }
}

impl From<sdk::ShardPlacement> for wit::ShardPlacement {
    fn from(p: sdk::ShardPlacement) -> Self {
        Self {
            shard: p.shard,
            nodes: p.nodes,
        }
    }
}

impl From<sdk::ReplicaMove> for wit::ReplicaMove {
    fn from(m: sdk::ReplicaMove) -> Self {
        Self {
            shard: m.shard,
            replica: m.replica,
            source: m.source,
            target: m.target,
        }
    }
}

impl From<sdk::HolderRanking> for wit::HolderRanking {
    fn from(h: sdk::HolderRanking) -> Self {
        Self {
            shard: h.shard,
            nodes: h.nodes,
        }
    }
}

impl From<sdk::Handoff> for wit::Handoff {
    fn from(h: sdk::Handoff) -> Self {
        Self {
            shard: h.shard,
            source: h.source,
            target: h.target,
        }
    }
}

// ---- exports ----------------------------------------------------------------

impl instance_id::Guest for Defaults {
    fn resolve(ctx: instance_id::InstanceContext) -> Result<String, wit::PolicyError> {
        <Defaults as InstanceIdPolicy>::resolve(ctx.into()).map_err(Into::into)
    }
}

impl placement::Guest for Defaults {
    fn place_replicas(
        request: placement::PlacementRequest,
    ) -> Result<Vec<wit::ShardPlacement>, wit::PolicyError> {
        <Defaults as PlacementPolicy>::place_replicas(request.into())
            .map(conv)
            .map_err(Into::into)
    }

    fn rebalance(
        request: placement::RebalanceRequest,
    ) -> Result<Vec<wit::ReplicaMove>, wit::PolicyError> {
        <Defaults as PlacementPolicy>::rebalance(request.into())
            .map(conv)
            .map_err(Into::into)
    }

    fn preferred_holders(
        request: placement::RankingRequest,
    ) -> Result<Vec<wit::HolderRanking>, wit::PolicyError> {
        <Defaults as PlacementPolicy>::preferred_holders(request.into())
            .map(conv)
            .map_err(Into::into)
    }
}

impl split::Guest for Defaults {
    fn split_points(request: split::SplitRequest) -> Result<Vec<u32>, wit::PolicyError> {
        <Defaults as SplitPolicy>::split_points(request.into()).map_err(Into::into)
    }
}

impl drain::Guest for Defaults {
    fn plan_drain(
        request: drain::DrainRequest,
    ) -> Result<Vec<Vec<wit::Handoff>>, wit::PolicyError> {
        <Defaults as DrainPolicy>::plan_drain(request.into())
            .map(|rounds| rounds.into_iter().map(conv).collect())
            .map_err(Into::into)
    }
}
