//! Precompiled components on disk.
//!
//! Compiling a component takes tens of milliseconds; loading a precompiled
//! one takes well under one. An entry is named by the SHA-256 of the
//! component's bytes and a hash of the engine's compatibility settings, so a
//! different wasmtime or configuration never reads another's artifact.
//!
//! A precompiled entry is native code that runs outside the sandbox, so an
//! entry is loaded only when this node wrote it: each file starts with an
//! HMAC-SHA256 of its name and payload under a key that only the node reads
//! (`<data dir>/policy-cache.key`, mode 0600, made on first use). A planted,
//! torn or corrupt entry fails the check before wasmtime sees it; it is
//! removed, named in a warning, and the component is compiled afresh.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Bytes of the key and of the tag that starts each entry.
const KEY_LEN: usize = 32;

/// A directory of precompiled components.
#[derive(Clone, Debug)]
pub struct Cache {
    dir: PathBuf,
    key: Arc<KeySource>,
}

/// Where the authentication key comes from.
#[derive(Debug)]
enum KeySource {
    /// A key file, read (or made) on first use; `None` when it is unusable.
    File(PathBuf, OnceLock<Option<Key>>),
    /// A key of this process only.
    Ephemeral(OnceLock<Option<Key>>),
}

/// An HMAC key; never printed.
struct Key([u8; KEY_LEN]);

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(..)")
    }
}

impl Cache {
    /// A cache in `dir` whose key lives only in this process: entries written
    /// by another process are never trusted (they are recompiled).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Cache { dir: dir.into(), key: Arc::new(KeySource::Ephemeral(OnceLock::new())) }
    }

    /// A cache in `dir` authenticated with the key in `key_file` (kept
    /// outside `dir`, in the node's data dir; made with mode 0600 when missing).
    pub fn with_key_file(dir: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        Cache { dir: dir.into(), key: Arc::new(KeySource::File(key_file.into(), OnceLock::new())) }
    }

    /// The directory entries live in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key file, when the key is kept on disk.
    pub fn key_file(&self) -> Option<&Path> {
        match &*self.key {
            KeySource::File(path, _) => Some(path),
            KeySource::Ephemeral(_) => None,
        }
    }

    fn key(&self) -> Option<&Key> {
        match &*self.key {
            KeySource::File(path, key) => key.get_or_init(|| match load_or_make_key(path) {
                Ok(key) => Some(key),
                Err(reason) => {
                    tracing::warn!(key = %path.display(), %reason, "the policy cache is off: its key is unusable");
                    None
                }
            }),
            KeySource::Ephemeral(key) => key.get_or_init(|| random_key().ok().map(Key)),
        }
        .as_ref()
    }

    /// The entry file of `wasm` for `engine`.
    pub fn entry_path(&self, engine: &Engine, wasm: &[u8]) -> PathBuf {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        env!("CARGO_PKG_VERSION").hash(&mut h);
        self.dir.join(format!("{}-{:016x}.cwasm", hex(&Sha256::digest(wasm)), h.finish()))
    }

    /// The tag of an entry: binds the payload to the entry's name, so an
    /// entry of one component cannot stand in for another's.
    fn tag(key: &Key, path: &Path, payload: &[u8]) -> [u8; KEY_LEN] {
        let name = path.file_name().map(|n| n.as_encoded_bytes()).unwrap_or_default();
        hmac_sha256(&key.0, &[name, b"\0", payload])
    }

    /// The cached component of `wasm`, if this node wrote a sound entry for it.
    pub fn get(&self, engine: &Engine, wasm: &[u8]) -> Option<Component> {
        let key = self.key()?;
        let path = self.entry_path(engine, wasm);
        let bytes = std::fs::read(&path).ok()?;
        let authentic = (bytes.len() > KEY_LEN)
            .then(|| bytes.split_at(KEY_LEN))
            .filter(|(tag, payload)| constant_time_eq(tag, &Self::tag(key, &path, payload)));
        let Some((_, payload)) = authentic else {
            tracing::warn!(
                path = %path.display(),
                "ignoring a policy cache entry this node did not write (its authentication tag does not \
                 match: planted, torn or corrupt); removing it and recompiling"
            );
            let _ = std::fs::remove_file(&path);
            return None;
        };
        // SAFETY: the payload is exactly what `put` wrote from
        // `Component::serialize` with this engine configuration: the file
        // name pins the configuration, and the tag, which only a holder of
        // the key can make, proves this node wrote these bytes under this name.
        match unsafe { Component::deserialize(engine, payload) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot load a policy cache entry; recompiling");
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    /// Stores `component` (compiled from `wasm`). Failures only cost a recompilation later.
    pub fn put(&self, engine: &Engine, wasm: &[u8], component: &Component) {
        let Some(key) = self.key() else { return };
        let write = || -> std::io::Result<()> {
            let payload = component.serialize().map_err(std::io::Error::other)?;
            std::fs::create_dir_all(&self.dir)?;
            let path = self.entry_path(engine, wasm);
            let tmp = path.with_extension(format!("tmp{}", std::process::id()));
            let mut bytes = Self::tag(key, &path, &payload).to_vec();
            bytes.extend_from_slice(&payload);
            std::fs::write(&tmp, bytes)?;
            std::fs::rename(tmp, path)
        };
        if let Err(e) = write() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "cannot write the policy cache");
        }
    }
}

/// Reads the key at `path`, or makes one there (mode 0600) when there is none.
fn load_or_make_key(path: &Path) -> Result<Key, String> {
    match read_key(path) {
        Ok(Some(key)) => return Ok(key),
        Ok(None) => {}
        Err(e) => return Err(e),
    }
    let fresh = random_key().map_err(|e| format!("cannot draw a key: {e}"))?;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    // Written whole under a temporary name, then linked into place: a
    // concurrent start either links first or reads the winner's key.
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut file = private_file(&tmp)?;
        file.write_all(&fresh)?;
        file.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let linked = std::fs::hard_link(&tmp, path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(Key(fresh)),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read_key(path)?.ok_or_else(|| format!("{} vanished while it was made", path.display()))
        }
        Err(e) => Err(format!("cannot create {}: {e}", path.display())),
    }
}

/// The key at `path`; `None` when there is no file. A key that others may
/// read or write is refused: whoever can read it can forge entries.
fn read_key(path: &Path) -> Result<Option<Key>, String> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read it: {e}")),
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).map_err(|e| format!("cannot stat it: {e}"))?.permissions().mode();
        if mode & 0o077 != 0 {
            return Err(format!(
                "its mode is {:o}; it must be readable by the node's user only (chmod 600 {}, or delete it \
                 to have a new one made)",
                mode & 0o777,
                path.display()
            ));
        }
    }
    let key: [u8; KEY_LEN] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("it holds {} bytes, not {KEY_LEN}; delete it to have a new one made", b.len()))?;
    Ok(Some(Key(key)))
}

fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(path)
}

fn random_key() -> Result<[u8; KEY_LEN], getrandom::Error> {
    let mut key = [0u8; KEY_LEN];
    getrandom::getrandom(&mut key)?;
    Ok(key)
}

/// HMAC-SHA256 (RFC 2104) of the concatenated `parts` under `key` (at most
/// one SHA-256 block, 64 bytes, as every key here is).
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    assert!(key.len() <= 64, "HMAC keys here fit one block");
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for part in parts {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// Compares without an early exit, so the time taken tells nothing of where
/// a forged tag first differs.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231() {
        // Test case 2 of RFC 4231.
        let tag = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(hex(&tag), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        // Test case 1: a 20-byte key of 0x0b.
        let tag = hmac_sha256(&[0x0b; 20], &[b"Hi There"]);
        assert_eq!(hex(&tag), "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    }

    #[test]
    fn tags_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
