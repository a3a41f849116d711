//! The interface versions this host speaks, in the manner of zed's
//! extension host: one `since_vX_Y_Z` module per version holds its bindings
//! and calls in the SDK's types, and the enums here have one arm per
//! version. Supporting interface 0.2.0 is one new module plus one arm in
//! each enum; [`super::slot`] only calls through these enums.

use chitin_policy_sdk as sdk;
use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::Slot;
use super::sandbox::State;

mod since_v0_1_0;

/// The newest supported interface version.
use since_v0_1_0 as latest;

/// Interface versions this host can call, newest first.
pub const SUPPORTED_VERSIONS: &[&str] = &[latest::VERSION];

/// A call's outcome: `Err` is a trap (or a host error), `Ok(Err)` the
/// policy's refusal.
pub(crate) type Answer<T> = wasmtime::Result<Result<T, sdk::PolicyError>>;

/// Where one slot's exports are in a component, at its interface version.
pub(crate) enum Indices {
    /// `chitin:policy@0.1.x`
    V0_1_0(since_v0_1_0::Indices),
}

/// One slot's exports in one instance, at its interface version.
pub(crate) enum Exports {
    /// `chitin:policy@0.1.x`
    V0_1_0(since_v0_1_0::Exports),
}

impl Indices {
    /// Finds the exports of `slot` at `version`, one of [`SUPPORTED_VERSIONS`]
    /// (as [`super::Plugin::slot_version`] returns it).
    pub(crate) fn new(version: &str, slot: Slot, pre: &InstancePre<State>) -> wasmtime::Result<Self> {
        match version {
            since_v0_1_0::VERSION => since_v0_1_0::Indices::new(slot, pre).map(Indices::V0_1_0),
            other => wasmtime::bail!("interface version {other} is not supported by this host"),
        }
    }

    /// The exports in `instance`.
    pub(crate) fn load(&self, store: &mut Store<State>, instance: &Instance) -> wasmtime::Result<Exports> {
        match self {
            Indices::V0_1_0(i) => i.load(store, instance).map(Exports::V0_1_0),
        }
    }
}

impl Exports {
    /// `instance-id.resolve`.
    pub(crate) fn resolve(&self, store: &mut Store<State>, ctx: sdk::InstanceContext) -> Answer<String> {
        match self {
            Exports::V0_1_0(e) => e.resolve(store, ctx),
        }
    }

    /// `placement.place-replicas`.
    pub(crate) fn place_replicas(
        &self,
        store: &mut Store<State>,
        req: sdk::PlacementRequest,
    ) -> Answer<Vec<sdk::ShardPlacement>> {
        match self {
            Exports::V0_1_0(e) => e.place_replicas(store, req),
        }
    }

    /// `placement.rebalance`.
    pub(crate) fn rebalance(&self, store: &mut Store<State>, req: sdk::RebalanceRequest) -> Answer<Vec<sdk::ReplicaMove>> {
        match self {
            Exports::V0_1_0(e) => e.rebalance(store, req),
        }
    }

    /// `placement.preferred-holders`.
    pub(crate) fn preferred_holders(
        &self,
        store: &mut Store<State>,
        req: sdk::RankingRequest,
    ) -> Answer<Vec<sdk::HolderRanking>> {
        match self {
            Exports::V0_1_0(e) => e.preferred_holders(store, req),
        }
    }

    /// `split.split-points`.
    pub(crate) fn split_points(&self, store: &mut Store<State>, req: sdk::SplitRequest) -> Answer<Vec<u32>> {
        match self {
            Exports::V0_1_0(e) => e.split_points(store, req),
        }
    }

    /// `drain.plan-drain`.
    pub(crate) fn plan_drain(&self, store: &mut Store<State>, req: sdk::DrainRequest) -> Answer<Vec<Vec<sdk::Handoff>>> {
        match self {
            Exports::V0_1_0(e) => e.plan_drain(store, req),
        }
    }
}

/// A runner called as another slot than its own: a bug in the host.
pub(super) fn wrong_slot(have: Slot, wanted: Slot) -> ! {
    panic!("the runner of slot `{have}` was called as `{wanted}`")
}
