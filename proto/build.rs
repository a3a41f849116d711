//! Generates the node API's code from `chitin.proto` (beside this file) with
//! a pure-Rust protobuf compiler, so no system `protoc` is needed. Servers
//! only with the `server` feature.

use std::path::PathBuf;

fn main() {
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let fds = protox::compile([dir.join("chitin.proto")], [&dir]).expect("chitin.proto compiles");
    tonic_prost_build::configure()
        .build_server(std::env::var_os("CARGO_FEATURE_SERVER").is_some())
        .compile_fds(fds)
        .expect("generate the gRPC code");
    println!("cargo:rerun-if-changed=chitin.proto");
}
