//! A client of chitin nodes for applications (and the `chitin` CLI):
//!
//! - [`Nodes`]: several node addresses (`a:50051,b:50051`), tried in order;
//! - [`Client`]: appends routed by key to the shard's holder (asked through
//!   the node's `Ownership.Route`), failing over to another node with the
//!   **same request id**, answered as an [`AppendOutcome`]: applied, certainly
//!   not applied (and where to go), or unknown once the retries are spent;
//!   reads and lookups fail over the same way;
//! - [`AssignmentMap`]: the cluster's whole assignment map (every shard's
//!   range, state and holder), a snapshot then deltas from any node, so that
//!   keys are routed here ([`Client::assignment_map`] routes appends by it);
//! - [`OwnershipWatch`]: a node's ownership events that resubscribes after a
//!   gap (a restart, a slow watcher) and hands over a fresh `Held` snapshot;
//! - [`fence`]: a deposed owner's writes never land: an sqlx transaction
//!   whose first statement is the lease fence in chitin's database, a fence
//!   table in the application's own PostgreSQL or MySQL/MariaDB
//!   ([`fence::table`]: claimed by each new holder, checked by each write),
//!   and the same in the application's own Redis (`fence::redis`);
//! - with the `otel` feature, every call carries the caller's OpenTelemetry
//!   context (`traceparent`), so the nodes' spans join the caller's trace.
//!
//! The contract it follows is in `docs/clients.md`: outcomes are read from
//! the `chitin-outcome` trailers ([`proto::outcome`]), never from wording.

#![deny(missing_docs)]

pub mod assignments;
pub mod client;
#[cfg(feature = "fence")]
pub mod fence;
pub mod key;
pub mod nodes;
pub mod outcome;
pub mod proto;
#[cfg(feature = "otel")]
mod trace_context;
#[cfg(feature = "otel")]
pub use trace_context::Outgoing as MetadataInjector;
pub mod watch;

pub use assignments::{AssignmentMap, Assignments, MapError};
pub use client::{AppendOutcome, Applied, BoxChannel, Client, ClientBuilder, Dial, Error, Options, boxed};
pub use key::{fnv1a, stream_key};
pub use nodes::{Nodes, NodesError, Unreachable};
pub use outcome::{Attempt, Holder, classify, never_sent};
pub use watch::{OwnershipWatch, WatchEvent};
