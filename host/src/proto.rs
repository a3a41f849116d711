//! The generated protobuf and gRPC code of the node API (`chitin-proto`,
//! `proto/chitin.proto`): the messages and clients every layer uses (node
//! forwarding, the rollout executor, the fault suite, the CLI) and the
//! servers `api` implements. One crate generates it, so the host and its
//! clients share one set of types.

pub use chitin_proto::*;
