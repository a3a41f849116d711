//! The generated protobuf and gRPC code of `host/proto/chitin.proto`: the
//! messages and clients every layer uses (node forwarding, the rollout
//! executor, the fault suite, the CLI) and the servers `api` implements.
//! Generated once, by the chitin-client crate (`clients/rust/build.rs`),
//! so the host and its clients share one set of types.

pub use chitin_client::proto::*;
