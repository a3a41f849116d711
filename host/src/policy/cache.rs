//! Precompiled components on disk.
//!
//! Compiling a component takes tens of milliseconds; loading a precompiled
//! one takes well under one. An entry is named by the SHA-256 of the
//! component's bytes and a hash of the engine's compatibility settings, so a
//! different wasmtime or configuration never reads another's artifact. Each
//! file starts with the SHA-256 of its payload: a torn or corrupt entry is
//! detected before wasmtime sees it, then ignored and rebuilt.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// A directory of precompiled components.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Cache { dir: dir.into() }
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The entry file of `wasm` for `engine`.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        self.dir.join(format!("{}-{:016x}.cwasm", hex(&Sha256::digest(wasm)), h.finish()))
    }

    /// The cached component of `wasm`, if a sound entry exists.
    pub fn get(&self, engine: &Engine, wasm: &[u8]) -> Option<Component> {
        let path = self.entry_path(engine, wasm);
        let bytes = std::fs::read(&path).ok()?;
        let loaded = (bytes.len() > 32)
            .then(|| bytes.split_at(32))
            .filter(|(sum, payload)| Sha256::digest(payload).as_slice() == *sum)
            // SAFETY: the payload is exactly what `put` wrote from
            // `Component::serialize` with this engine configuration (the file
            // name pins it, the checksum proves the bytes intact).
            .and_then(|(_, payload)| unsafe { Component::deserialize(engine, payload) }.ok());
        if loaded.is_none() {
            tracing::warn!(path = %path.display(), "ignoring a corrupt or foreign policy cache entry; recompiling");
            let _ = std::fs::remove_file(&path);
        }
        loaded
    }

    /// Stores `component` (compiled from `wasm`). Failures only cost a recompilation later.
    pub fn put(&self, engine: &Engine, wasm: &[u8], component: &Component) {
        let write = || -> std::io::Result<()> {
            let payload = component.serialize().map_err(std::io::Error::other)?;
            std::fs::create_dir_all(&self.dir)?;
            let path = self.entry_path(engine, wasm);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let mut bytes = Sha256::digest(&payload).to_vec();
            bytes.extend_from_slice(&payload);
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the policy cache");
        }
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
