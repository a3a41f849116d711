//! The node API's messages and gRPC clients (`chitin-proto`, generated
//! from its `chitin.proto`), re-exported so that an application needs one
//! dependency.

pub use chitin_proto::*;
