//! chitin: a cluster control plane for sharded services, extended with
//! WebAssembly policy plugins. The design of record is `docs/design.md`.
//!
//! # Layout
//!
//! Imports run one way, each module reaching only those below it: `chaos`
//! → `testkit` → `server` → `api` → `rollout` → `node` → `upgrade` →
//! `lease` / `coord` / `policy` / `topology` → `telemetry` → `security` → `settings` →
//! `proto` / `failpoint` / `plant` / `names` / `redact`.
//! `host/tests/it/module_graph.rs` fails on an import against it, and on a
//! circle between the modules one level down inside any of them.
//!
//! - [`policy`]: the wasmtime host that loads and calls policy components;
//! - [`topology`]: the cluster config, its invariants and transition rules;
//! - [`settings`]: a node's settings (`chitin.toml` + `CHITIN__…` overrides);
//! - [`coord`]: Redis coordination: registry, monitor, affinity, deployments;
//! - [`lease`]: the durable store: identity, leases, fencing, the journal;
//! - [`rollout`]: control sequences: planner, executor, checkpoints;
//! - [`upgrade`]: versions on the wire, node and cluster versions, version
//!   gates, the expand/contract rule of migrations;
//! - [`node`]: a node's lifecycle, lease rounds, drain and journal;
//! - [`proto`]: the generated gRPC messages, clients and servers;
//! - [`api`]: gRPC and HTTP;
//! - [`security`]: listener exposure, the planes' tokens, redaction;
//! - [`telemetry`]: logs, and OpenTelemetry spans sent to a collector;
//! - [`server`]: running a node until it is told to stop;
//! - [`chaos`]: the fault-injection run and its checker;
//! - [`names`]: the one rule for a node's name;
//! - [`redact`]: the one redaction of passwords, tokens and secrets;
//! - [`failpoint`], [`plant`]: pauses at risky moments and planted bugs for
//!   the fault suite, compiled in only with their cargo features;
//! - [`testkit`]: node processes, private servers and fresh databases for
//!   `chitin chaos` and the test suite.

// An item in a `pub(crate)` module is `pub(crate)` unless it is re-exported
// (CI turns the warning into an error).
#![warn(unreachable_pub)]

pub mod api;
pub mod chaos;
pub mod coord;
pub mod failpoint;
pub mod lease;
pub mod names;
pub mod node;
pub mod plant;
pub mod policy;
pub mod proto;
pub mod redact;
pub mod rollout;
pub mod security;
pub mod server;
pub mod settings;
pub mod telemetry;
pub mod testkit;
pub mod topology;
pub mod upgrade;
