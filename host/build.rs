//! Generates and builds what the host embeds or tests with:
//! - the gRPC code of `proto/chitin.proto`;
//! - `policies/default` (the embedded default policies) for every build;
//! - the test guests of `tests/guests` (bad plugins, another WIT version),
//!   whose paths reach the tests through `CHITIN_TEST_GUESTS_DIR`.
//!
//! The guests build with a nested cargo in `target/guests`, a target
//! directory of their own so it never waits on the outer build's lock, and a scrubbed
//! environment so the outer build's flags do not leak into a wasm build.

use std::path::{Path, PathBuf};
use std::process::Command;

const GUEST_TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(env("CARGO_MANIFEST_DIR"));
    let root = manifest_dir.parent().expect("host/ has a parent").to_path_buf();
    let out_dir = PathBuf::from(env("OUT_DIR"));
    // Shared by every profile of the host so a test and a bench build reuse it.
    let guest_target_dir = root.join("target").join("guests");

    let defaults = build_guests(
        &root.join("policies/default/Cargo.toml"),
        &guest_target_dir,
        &["chitin_default_policies"],
    );
    std::fs::copy(&defaults[0], out_dir.join("chitin_default_policies.wasm"))
        .expect("copy the default policies component");

    let test_guests = [
        "bad_trap",
        "bad_loop",
        "bad_alloc",
        "bad_foreign",
        "future_version",
        "drain_one_round",
        "sleepy",
        "waits",
        "random_bytes",
        "env_leak",
    ];
    let built = build_guests(&root.join("tests/guests/Cargo.toml"), &guest_target_dir, &test_guests);
    let dir = built[0].parent().unwrap();
    println!("cargo:rustc-env=CHITIN_TEST_GUESTS_DIR={}", dir.display());

    compile_protos(&manifest_dir);

    for path in ["policies/default", "plugins/sdk/src", "wit", "tests/guests"] {
        println!("cargo:rerun-if-changed={}", root.join(path).display());
    }
}

/// Generates the gRPC code of `proto/chitin.proto` with a pure-Rust protobuf
/// compiler, so no system `protoc` is needed.
fn compile_protos(manifest_dir: &Path) {
    let proto_dir = manifest_dir.join("proto");
    let fds = protox::compile([proto_dir.join("chitin.proto")], [&proto_dir]).expect("proto/chitin.proto compiles");
    tonic_prost_build::compile_fds(fds).expect("generate the gRPC code");
    println!("cargo:rerun-if-changed={}", proto_dir.display());
}

/// Builds `manifest` for wasm32-wasip2 in release mode; returns the `.wasm`
/// file of each crate (library) name.
fn build_guests(manifest: &Path, target_dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["build", "--release", "--target", GUEST_TARGET, "--manifest-path"])
        .arg(manifest)
        .arg("--target-dir")
        .arg(target_dir);
    if manifest.ends_with("tests/guests/Cargo.toml") {
        cmd.arg("--workspace");
    }
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME" || key == "RUSTFLAGS" || key == "RUSTC_WRAPPER" {
            cmd.env_remove(&key);
        }
    }
    let status = cmd.status().expect("run cargo for the wasm guests");
    if !status.success() {
        panic!(
            "building {} for {GUEST_TARGET} failed; is the target installed? (rustup target add {GUEST_TARGET})",
            manifest.display()
        );
    }
    names
        .iter()
        .map(|name| target_dir.join(GUEST_TARGET).join("release").join(format!("{name}.wasm")))
        .inspect(|p| assert!(p.exists(), "guest build produced no {}", p.display()))
        .collect()
}

fn env(key: &str) -> String {
    std::env::var(key).unwrap_or_else(|_| panic!("{key} is set by cargo"))
}
