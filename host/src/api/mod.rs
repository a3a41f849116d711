//! The node's network surface.
//!
//! - [`grpc`]: the gRPC services of `proto/chitin.proto` on `[api] listen`:
//!   `Journal` (client API, also used node-to-node for forwarding),
//!   `Ownership` (for the application beside the node), `Admin`;
//! - [`coordination`]: the `Coordination` gRPC service (Redis affinity,
//!   registry, deployments);
//! - [`http`]: `/health`, `/readyz`, `/metrics` and the status page on
//!   `[metrics] listen`;
//! - [`status_page`]: the HTML of the status page at `/`.

pub mod coordination;
pub mod grpc;
pub mod http;
pub mod status_page;

pub use crate::proto;
