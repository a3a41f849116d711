//! Interface version 0.1.0 (`wit/since_v0.1.0`): the generated bindings, the
//! exports of each slot, and calls in the SDK's plain types. A later
//! interface version gets a module of its own beside this one and an arm in
//! [`super`]; the rest of the host only sees the SDK types.

use chitin_policy_sdk as sdk;
use wasmtime::Store;
use wasmtime::component::{Instance, InstancePre};

use super::{Answer, wrong_slot};
use crate::policy::Slot;
use crate::policy::sandbox::State;

wasmtime::component::bindgen!({
    path: "../wit/since_v0.1.0",
    world: "all-policies",
});

/// The interface version these bindings speak.
pub(super) const VERSION: &str = "0.1.0";

use self::chitin::policy::types as wit;
use exports::chitin::policy::{drain, instance_id, placement, split};

chitin_policy_sdk::__policy_conversions!(
    types: wit,
    instance_id: instance_id,
    placement: placement,
    split: split,
    drain: drain,
);

/// Where one slot's exports are in a component, found once per component.
pub(crate) enum Indices {
    /// `instance-id`
    InstanceId(instance_id::GuestIndices),
    /// `placement`
    Placement(placement::GuestIndices),
    /// `split`
    Split(split::GuestIndices),
    /// `drain`
    Drain(drain::GuestIndices),
}

/// One slot's exports in one instance.
pub(crate) enum Exports {
    /// `instance-id`
    InstanceId(instance_id::Guest),
    /// `placement`
    Placement(placement::Guest),
    /// `split`
    Split(split::Guest),
    /// `drain`
    Drain(drain::Guest),
}

impl Indices {
    /// Finds the exports of `slot` in the component `pre` instantiates.
    pub(crate) fn new(slot: Slot, pre: &InstancePre<State>) -> wasmtime::Result<Self> {
        Ok(match slot {
            Slot::InstanceId => Indices::InstanceId(instance_id::GuestIndices::new(pre)?),
            Slot::Placement => Indices::Placement(placement::GuestIndices::new(pre)?),
            Slot::Split => Indices::Split(split::GuestIndices::new(pre)?),
            Slot::Drain => Indices::Drain(drain::GuestIndices::new(pre)?),
        })
    }

    /// The exports in `instance`.
    pub(crate) fn load(&self, store: &mut Store<State>, instance: &Instance) -> wasmtime::Result<Exports> {
        Ok(match self {
            Indices::InstanceId(i) => Exports::InstanceId(i.load(&mut *store, instance)?),
            Indices::Placement(i) => Exports::Placement(i.load(&mut *store, instance)?),
            Indices::Split(i) => Exports::Split(i.load(&mut *store, instance)?),
            Indices::Drain(i) => Exports::Drain(i.load(&mut *store, instance)?),
        })
    }
}

/// A guest's answer in SDK types.
fn answer<T: Conv<U>, U>(r: wasmtime::Result<Result<T, wit::PolicyError>>) -> Answer<U> {
    r.map(|r| r.map(Conv::conv).map_err(Conv::conv))
}

impl Exports {
    fn slot(&self) -> Slot {
        match self {
            Exports::InstanceId(_) => Slot::InstanceId,
            Exports::Placement(_) => Slot::Placement,
            Exports::Split(_) => Slot::Split,
            Exports::Drain(_) => Slot::Drain,
        }
    }

    /// `instance-id.resolve`.
    pub(crate) fn resolve(&self, store: &mut Store<State>, ctx: sdk::InstanceContext) -> Answer<String> {
        match self {
            Exports::InstanceId(g) => answer(g.call_resolve(store, &ctx.conv())),
            _ => wrong_slot(self.slot(), Slot::InstanceId),
        }
    }

    /// `placement.place-replicas`.
    pub(crate) fn place_replicas(
        &self,
        store: &mut Store<State>,
        req: sdk::PlacementRequest,
    ) -> Answer<Vec<sdk::ShardPlacement>> {
        match self {
            Exports::Placement(g) => answer(g.call_place_replicas(store, &req.conv())),
            _ => wrong_slot(self.slot(), Slot::Placement),
        }
    }

    /// `placement.rebalance`.
    pub(crate) fn rebalance(&self, store: &mut Store<State>, req: sdk::RebalanceRequest) -> Answer<Vec<sdk::ReplicaMove>> {
        match self {
            Exports::Placement(g) => answer(g.call_rebalance(store, &req.conv())),
            _ => wrong_slot(self.slot(), Slot::Placement),
        }
    }

    /// `placement.preferred-holders`.
    pub(crate) fn preferred_holders(
        &self,
        store: &mut Store<State>,
        req: sdk::RankingRequest,
    ) -> Answer<Vec<sdk::HolderRanking>> {
        match self {
            Exports::Placement(g) => answer(g.call_preferred_holders(store, &req.conv())),
            _ => wrong_slot(self.slot(), Slot::Placement),
        }
    }

    /// `split.split-points`.
    pub(crate) fn split_points(&self, store: &mut Store<State>, req: sdk::SplitRequest) -> Answer<Vec<u32>> {
        match self {
            Exports::Split(g) => answer(g.call_split_points(store, &req.conv())),
            _ => wrong_slot(self.slot(), Slot::Split),
        }
    }

    /// `drain.plan-drain`.
    pub(crate) fn plan_drain(&self, store: &mut Store<State>, req: sdk::DrainRequest) -> Answer<Vec<Vec<sdk::Handoff>>> {
        match self {
            Exports::Drain(g) => answer(g.call_plan_drain(store, &req.conv())),
            _ => wrong_slot(self.slot(), Slot::Drain),
        }
    }
}
