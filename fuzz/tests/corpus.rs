//! Every committed input of every fuzz target, run through the target's
//! body on the stable toolchain: the corpus `scripts/fuzz` grew and
//! minimized (`corpus/<target>/`) and the inputs that once failed
//! (`regressions/<target>/`, kept after their fix), so that a change that
//! breaks a parser on any of them fails the suite without a fuzzing run.

use std::path::{Path, PathBuf};

fn inputs(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut files: Vec<PathBuf> = entries.map(|e| e.unwrap().path()).filter(|p| p.is_file()).collect();
    files.sort();
    files
}

#[test]
fn every_committed_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut failures = Vec::new();
    for (name, target) in chitin_fuzz::TARGETS {
        let corpus = inputs(&root.join("corpus").join(name));
        // An empty corpus would pass without running the target once.
        assert!(corpus.len() >= 5, "fuzz/corpus/{name} holds {} inputs; run scripts/fuzz {name}", corpus.len());
        for file in corpus.iter().chain(&inputs(&root.join("regressions").join(name))) {
            let data = std::fs::read(file).unwrap();
            if let Err(panic) = std::panic::catch_unwind(|| target(&data)) {
                let why = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
                failures.push(format!("{name}: {}: {}", file.display(), why.unwrap_or_default()));
            }
        }
    }
    assert!(failures.is_empty(), "{} inputs fail their fuzz target:\n{}", failures.len(), failures.join("\n"));
}
