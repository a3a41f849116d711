//! The gRPC API of chitin nodes, package `chitin.v1`: the messages and the
//! clients generated from `chitin.proto` (shipped in this package, the one
//! source every client library generates from), and with the `server`
//! feature the servers a node implements.
//!
//! Applications use it through `chitin-client`, which adds failover with
//! the same request id, typed outcomes, the assignment map and the fences.

#![deny(missing_docs)]

#[allow(missing_docs)]
mod generated {
    tonic::include_proto!("chitin.v1");
}

pub use generated::*;

/// The protobuf file this crate was generated from, for tools that read
/// the API at run time (reflection, other languages' code generators).
pub const PROTO: &str = include_str!("../chitin.proto");

/// Metadata keys of the typed outcome of an append that failed (see
/// `service Journal` in the proto file). A client follows these keys, never
/// the wording of a message.
pub mod outcome {
    /// `not-applied` or `unknown`.
    pub const KEY: &str = "chitin-outcome";
    /// Certainly not applied: safe to send again anywhere.
    pub const NOT_APPLIED: &str = "not-applied";
    /// Maybe applied: send again only with the same request id.
    pub const UNKNOWN: &str = "unknown";
    /// The shard's holder by name, when the answering node knows it.
    pub const HOLDER: &str = "chitin-holder";
    /// The holder's gRPC address.
    pub const HOLDER_ADDRESS: &str = "chitin-holder-address";
}
