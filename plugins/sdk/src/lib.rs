//! The chitin policy SDK.
//!
//! A chitin policy is a WebAssembly component that exports one or more of the
//! interfaces of the `chitin:policy` WIT package (`wit/since_v0.1.0/policy.wit`).
//! This crate holds the records of that package as ordinary Rust types
//! ([`types`]), one plain trait per policy slot ([`InstanceIdPolicy`],
//! [`PlacementPolicy`], [`SplitPolicy`], [`DrainPolicy`]) and helpers for the
//! common work ([`rank`], [`range`]).
//!
//! The host uses the same types, so a policy's logic can be tested natively
//! and benchmarked against its WebAssembly build without conversion code of
//! its own.

pub mod range;
pub mod rank;
pub mod types;

#[cfg(feature = "testing")]
pub mod testing;

#[cfg(target_arch = "wasm32")]
mod export;

// Lets the generated bindings name this crate by path from any crate.
extern crate self as chitin_policy_sdk;

/// Not public API: what [`export_policies!`] expands to refers to these.
#[doc(hidden)]
pub mod __private {
    #[cfg(target_arch = "wasm32")]
    pub use crate::export::{drain, instance_id, placement, split};
    #[cfg(target_arch = "wasm32")]
    pub use wit_bindgen;
}

/// Exports `$ty` as a component serving the named slots (`instance_id`,
/// `placement`, `split`, `drain`; any non-empty subset, in any order).
///
/// `$ty` must implement the trait of each named slot. The component exports
/// exactly the interfaces of those slots at `chitin:policy@0.1.0`. Outside
/// `wasm32` the macro expands to nothing, so the same crate builds and tests
/// natively.
///
/// ```ignore
/// chitin_policy_sdk::export_policies!(MyPolicy: placement, drain);
/// ```
#[macro_export]
macro_rules! export_policies {
    ($ty:ty : $($slot:ident),+ $(,)?) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            type __ChitinPolicy = $ty;
            $( $crate::__export_slot!($slot __ChitinPolicy); )+
        };
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __export_slot {
    (instance_id $ty:ident) => {
        $crate::__private::instance_id::export!($ty with_types_in $crate::__private::instance_id);
    };
    (placement $ty:ident) => {
        $crate::__private::placement::export!($ty with_types_in $crate::__private::placement);
    };
    (split $ty:ident) => {
        $crate::__private::split::export!($ty with_types_in $crate::__private::split);
    };
    (drain $ty:ident) => {
        $crate::__private::drain::export!($ty with_types_in $crate::__private::drain);
    };
    ($other:ident $ty:ident) => {
        compile_error!(concat!(
            "unknown policy slot `", stringify!($other),
            "`; the slots are instance_id, placement, split and drain"
        ));
    };
}

pub use types::*;

/// Names the node (slot `instance-id`).
pub trait InstanceIdPolicy {
    /// The node's name; the host refuses an empty name or one containing `:`.
    fn resolve(ctx: InstanceContext) -> Result<String, PolicyError>;
}

/// Places replicas, plans rebalancing and ranks lease holders (slot `placement`).
pub trait PlacementPolicy {
    /// Nodes for the replicas of each new shard.
    fn place_replicas(request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError>;
    /// Replica moves that even out replicas across nodes.
    fn rebalance(request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError>;
    /// Each shard's eligible replica nodes, best first.
    fn preferred_holders(request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError>;
}

/// Chooses split points (slot `split`).
pub trait SplitPolicy {
    /// The first key of every child but the first.
    fn split_points(request: SplitRequest) -> Result<Vec<u32>, PolicyError>;
}

/// Orders a draining node's handoffs (slot `drain`).
pub trait DrainPolicy {
    /// Handoffs in rounds of at most `max_per_round`.
    fn plan_drain(request: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError>;
}
