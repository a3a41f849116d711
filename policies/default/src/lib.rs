//! chitin's default policies.
//!
//! The same logic serves two builds:
//!
//! * natively, as [`Defaults`], a plain type implementing the four SDK traits
//!   ([`InstanceIdPolicy`], [`PlacementPolicy`], [`SplitPolicy`],
//!   [`DrainPolicy`]); the host benchmarks it against the WebAssembly build and
//!   the fixture tests run against it;
//! * for `wasm32`, as the component that exports the `all-policies` world of
//!   `chitin:policy@0.1.0` (module `component`, compiled only there).
//!
//! Each slot's logic is a pure function over SDK types in its own module:
//! [`instance_id`], [`placement`], [`split`], [`drain`].

use chitin_policy_sdk::{
    DrainPolicy, DrainRequest, Handoff, HolderRanking, InstanceContext, InstanceIdPolicy, PlacementPolicy, PlacementRequest,
    PolicyError, RankingRequest, RebalanceRequest, ReplicaMove, ShardPlacement, SplitPolicy, SplitRequest,
};

pub mod drain;
pub mod instance_id;
pub mod placement;
pub mod split;

#[cfg(all(target_arch = "wasm32", feature = "component"))]
mod component;

/// The default policies of every slot.
#[derive(Clone, Copy, Debug, Default)]
pub struct Defaults;

impl InstanceIdPolicy for Defaults {
    fn resolve(ctx: InstanceContext) -> Result<String, PolicyError> {
        Ok(instance_id::resolve(&ctx))
    }
}

impl PlacementPolicy for Defaults {
    fn place_replicas(request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        placement::place_replicas(&request)
    }

    fn rebalance(request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        placement::rebalance(&request)
    }

    fn preferred_holders(request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        Ok(placement::preferred_holders(&request))
    }
}

impl SplitPolicy for Defaults {
    fn split_points(request: SplitRequest) -> Result<Vec<u32>, PolicyError> {
        split::split_points(&request)
    }
}

impl DrainPolicy for Defaults {
    fn plan_drain(request: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
        drain::plan_drain(&request)
    }
}
