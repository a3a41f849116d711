//! Generates the gRPC code (clients and servers) of the node API,
//! `host/proto/chitin.proto`, with a pure-Rust protobuf compiler, so no
//! system `protoc` is needed. The host re-exports this code: it is
//! generated once, here.

use std::path::PathBuf;

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let proto_dir = manifest_dir.join("../../host/proto");
    let fds = protox::compile([proto_dir.join("chitin.proto")], [&proto_dir]).expect("host/proto/chitin.proto compiles");
    tonic_prost_build::compile_fds(fds).expect("generate the gRPC code");
    println!("cargo:rerun-if-changed={}", proto_dir.display());
}
