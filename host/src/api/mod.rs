//! The node's network surface.
//!
//! - [`grpc`]: the gRPC services of `proto/chitin.proto` on `[api] listen`:
//!   `Journal` (client API, also used node-to-node for forwarding),
//!   `Ownership` (for the application beside the node), `Admin`;
//! - [`coordination`]: the `Coordination` gRPC service (Redis affinity,
//!   registry, deployments);
//! - [`health`]: the standard `grpc.health.v1.Health` service, following the
//!   node's readiness;
//! - [`http`]: `/health`, `/readyz`, `/metrics` and the status page on
//!   `[metrics] listen`;
//! - [`deadline`]: `[limits] request_timeout_secs` on both listeners;
//! - [`outcome`]: an append's answer as a gRPC status and its trailers;
//! - [`status_page`]: the HTML of the status page at `/`;
//! - [`versions`]: the protocol check every gRPC call passes first, and the
//!   Admin calls of upgrades (status, finalize).

pub mod coordination;
mod deadline;
pub mod grpc;
pub(crate) mod health;
pub(crate) mod http;
mod outcome;
pub mod status_page;
pub(crate) mod versions;

pub use crate::proto;
