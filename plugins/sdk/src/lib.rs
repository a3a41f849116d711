//! The chitin policy SDK: write chitin policy plugins as plain Rust.
//!
//! A chitin policy is a WebAssembly component that exports one or more of the
//! interfaces of the `chitin:policy` WIT package (`wit/since_v0.1.0/policy.wit`).
//! This crate holds the records of that package as ordinary Rust types
//! ([`types`]), one plain trait per policy slot ([`InstanceIdPolicy`],
//! [`PlacementPolicy`], [`SplitPolicy`], [`DrainPolicy`]), the
//! [`export_policies!`] macro that turns a type implementing some of them into
//! a component, helpers for the common work ([`rank`]: stable rendezvous
//! ranking; [`range`]: inclusive key ranges), and, with the `testing` feature,
//! [`testing::Fixtures`] to check fixture files against the native logic.
//!
//! The bindings (wit-bindgen) are private to this crate: a plugin depends on
//! `chitin-policy-sdk` only.
//!
//! # A complete plugin
//!
//! `Cargo.toml`:
//!
//! ```toml
//! [package]
//! name = "halves"
//! version = "0.1.0"
//! edition = "2024"
//!
//! [lib]
//! crate-type = ["cdylib", "rlib"]
//!
//! [dependencies]
//! chitin-policy-sdk = { path = "../chitin/plugins/sdk" }
//! ```
//!
//! `src/lib.rs`:
//!
//! ```
//! use chitin_policy_sdk::range::even_split_points;
//! use chitin_policy_sdk::{PolicyError, ShardState, SplitPolicy, SplitRequest};
//!
//! pub struct Halves;
//!
//! // Exports the `split` slot (and only it) when built for wasm32.
//! chitin_policy_sdk::export_policies!(Halves: split);
//!
//! impl SplitPolicy for Halves {
//!     fn split_points(req: SplitRequest) -> Result<Vec<u32>, PolicyError> {
//!         let s = &req.shard;
//!         if s.state != ShardState::Active {
//!             return Err(PolicyError::InvalidSplit(format!("shard {} is not active", s.id)));
//!         }
//!         even_split_points(s.lower, s.upper, req.children)
//!             .ok_or_else(|| PolicyError::InvalidSplit(format!("shard {} is too small", s.id)))
//!     }
//! }
//! # let req = SplitRequest {
//! #     shard: chitin_policy_sdk::Shard { id: "s".into(), upper: u32::MAX, ..Default::default() },
//! #     children: 2,
//! #     ..Default::default()
//! # };
//! # assert_eq!(Halves::split_points(req), Ok(vec![0x8000_0000]));
//! ```
//!
//! Build and test:
//!
//! ```sh
//! cargo build --release --target wasm32-wasip2      # target/wasm32-wasip2/release/halves.wasm
//! chitin policy inspect target/wasm32-wasip2/release/halves.wasm
//! chitin policy test --plugin target/wasm32-wasip2/release/halves.wasm fixtures/
//! ```
//!
//! Built examples live beside this crate in the chitin repository:
//! `plugins/zone-placement`, `plugins/load-split`, `plugins/priority-drain`
//! and `plugins/pod-instance-id`; `chitin policy new --slot SLOT NAME`
//! scaffolds a new one. The guide is `docs/plugins.md`.
//!
//! # Interface version
//!
//! This SDK builds components against `chitin:policy@0.1.0`. A chitin binary
//! loads a component whose interfaces have a version it supports (for 0.x,
//! the same minor version) and refuses any other, naming both versions.
//!
//! # Determinism
//!
//! The host may call a policy on any node, any number of times: give the
//! same answer to the same request. Break ties by id or by [`rank`], never by
//! the iteration order of a `std::collections::HashMap` (its seed is random
//! per instance; `BTreeMap` or sorting is safe). Components see frozen clocks
//! (always zero) and no files, network or environment beyond the request, and
//! a warm instance serves many calls, so keep no state between calls.

#![deny(missing_docs)]

mod conv;
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
/// ```
/// use chitin_policy_sdk::*;
///
/// pub struct MyPolicy;
///
/// impl SplitPolicy for MyPolicy {
///     fn split_points(req: SplitRequest) -> Result<Vec<u32>, PolicyError> {
///         Ok(vec![req.shard.lower + 1])
///     }
/// }
///
/// impl DrainPolicy for MyPolicy {
///     fn plan_drain(_req: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
///         Err(PolicyError::Unsupported("this cluster never drains".into()))
///     }
/// }
///
/// // One component serving two slots.
/// chitin_policy_sdk::export_policies!(MyPolicy: split, drain);
/// ```
///
/// Naming a slot whose trait `$ty` does not implement fails to compile on
/// wasm32 (the generated export needs the trait). Invoke the macro once per
/// crate: each slot's exports may exist only once in a component.
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
