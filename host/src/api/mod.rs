//! The node's network surface.
//!
//! - [`grpc`]: the gRPC services of `proto/chitin.proto` on `[api] listen`:
//!   `Journal` (client API, also used node-to-node for forwarding),
//!   `Ownership` (for the application beside the node), `Admin`;
//! - [`coordination`]: the `Coordination` gRPC service (Redis affinity,
//!   registry, deployments);
//! - [`http`]: `/health`, `/readyz` and `/metrics` on `[metrics] listen`.

pub mod coordination;
pub mod grpc;
pub mod http;

/// The generated protobuf and gRPC code.
pub mod proto {
    tonic::include_proto!("chitin.v1");
}
