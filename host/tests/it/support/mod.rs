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
