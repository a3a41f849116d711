//! What the integration tests share: real clusters of `chitin node`
//! processes (`cluster`), the durable store's scenarios run on every dialect
//! (`lease`), Redis namespaces for the coordination tests (`coord`), and the
//! Prometheus exposition parser of the operator tests (`ops`).

pub mod cluster;
pub mod coord;
pub mod lease;
pub mod ops;

use std::path::{Path, PathBuf};

/// The repository's root (the workspace's), for the tests that read its
/// files or build its other packages.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

/// The workspace's build directory, from where cargo put the `chitin`
/// under test (`<target>/<profile>/chitin`): outside a fresh clone when CI
/// keeps it, so nested builds placed under it stay warm between runs.
pub fn build_dir() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_chitin")).parent().and_then(Path::parent).expect("<target>/<profile>/chitin").to_path_buf()
}

/// Whether the outside tool `name` runs here, installed by
/// `scripts/ops-tools` when missing; when it cannot be had, prints SKIPPED
/// with the reason, and the caller skips its check.
pub fn tool(name: &str) -> bool {
    let out =
        std::process::Command::new(repo_root().join("scripts/ops-tools")).arg(name).output().expect("run scripts/ops-tools");
    if !out.status.success() {
        eprintln!("SKIPPED: {name} is not available: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    out.status.success()
}

/// The example service's binary (`examples/kv-service`), built beside
/// `chitin` by the workspace's build (its own package's test makes cargo
/// build it for the suite).
pub fn example_service() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_chitin")).with_file_name("chitin-example-kv");
    assert!(path.exists(), "{} is missing: build it with `cargo build -p chitin-example-kv`", path.display());
    path
}
