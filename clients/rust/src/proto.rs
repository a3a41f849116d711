//! The generated protobuf and gRPC code of `host/proto/chitin.proto`
//! (clients and servers; the host serves with this same code).

tonic::include_proto!("chitin.v1");

/// Metadata keys of the typed outcome of an append that failed (see
/// `service Journal` in the proto file). A client follows these keys, never
/// the wording of a message.
pub mod outcome {
    /// `not-applied` or `unknown`.
    pub const KEY: &str = "chitin-outcome";
    pub const NOT_APPLIED: &str = "not-applied";
    pub const UNKNOWN: &str = "unknown";
    /// The shard's holder by name, when the answering node knows it.
    pub const HOLDER: &str = "chitin-holder";
    /// The holder's gRPC address.
    pub const HOLDER_ADDRESS: &str = "chitin-holder-address";
}
