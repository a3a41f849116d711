//! Control sequences: topology changes rolled out as small, validated,
//! resumable steps (`docs/design.md`, "Cluster config and rollout").
//!
//! - [`plan`] (pure): a request (`add-node`, `move-shard`, `split-shard`,
//!   `rebalance`) becomes a list of configs, each the next version of the one
//!   before and a valid transition from it;
//! - [`checkpoint`]: the sequence, every planned config and the steps done,
//!   in `<config>.rollout.json` next to the config file; whether a request
//!   starts, resumes or is refused;
//! - [`exec`] (I/O): pushes each planned version to every node over the
//!   admin plane, waits until every node reports it, checkpoints, bakes;
//! - [`shadow`]: two policy components over one recorded cluster, their
//!   decisions compared (`chitin policy diff`) or recorded as fixtures
//!   (`chitin policy fixture`), each call built as the node and [`plan`]
//!   build it.

pub(crate) mod checkpoint;
pub mod exec;
pub mod plan;
pub mod shadow;

pub use checkpoint::{Checkpoint, Decision};
pub use plan::{Plan, PlanError, Sequence, Step};
