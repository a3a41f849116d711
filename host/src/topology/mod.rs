//! The cluster config: model, invariants and transition rules (pure).
//!
//! `cluster_config.json` follows the reference layout (see `docs/design.md`, "Cluster
//! config and rollout"). This module parses and writes it ([`model`],
//! [`bounds`], [`file`]), routes a 32-bit key to its shard ([`route`]),
//! checks one config ([`validate`]) and a change between two versions
//! ([`transition`]), describes a change ([`diff`]) and a config
//! ([`summary`]), builds new versions ([`ops`]) and hands the config to the
//! policies as SDK records ([`policy_view`]) and records a running cluster
//! for a shadow comparison of policies ([`snapshot`]).
//!
//! Nothing here does I/O except [`file`], which reads and writes one file.
//! Every check returns *every* violation it finds, each with a stable
//! [`RuleCode`].

pub mod bounds;
pub mod diff;
mod fasthash;
pub mod file;
pub mod model;
pub mod ops;
pub(crate) mod policy_view;
pub(crate) mod route;
pub(crate) mod rules;
pub mod snapshot;
pub mod summary;
pub mod transition;
pub mod validate;

#[cfg(test)]
pub(crate) mod testutil;

pub use bounds::{BoundError, BoundField};
pub use model::{Application, ClusterConfig, LoadError, Metadata, Node, Replica, Shard, ShardState};
pub use route::Router;
pub use rules::{RuleCode, Violation};
pub use transition::{TransitionReport, validate_transition};
pub use validate::validate;
