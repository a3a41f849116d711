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
