//! Reading and writing `cluster_config.json` — the only I/O of the module.

use std::io::Write;
use std::path::Path;

use super::model::{ClusterConfig, LoadError};

/// Why a config could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot write `{path}`: {source}")]
pub struct SaveError {
    pub path: String,
    #[source]
    pub source: std::io::Error,
}

/// Reads and parses a config file.
pub fn load(path: &Path) -> Result<ClusterConfig, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io { path: path.display().to_string(), source })?;
    ClusterConfig::from_json(&text)
}

/// Writes a config atomically ([`write_atomically`]), so a reader never sees
/// half a config.
pub fn save(path: &Path, config: &ClusterConfig) -> Result<(), SaveError> {
    write_atomically(path, config.to_json().as_bytes()).map_err(|source| SaveError { path: path.display().to_string(), source })
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the new
/// one, whole: a temporary file beside it, synced, renamed over it, and the
/// directory synced so that the rename itself survives a power loss.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "file".into());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::base;

    #[test]
    fn round_trip_through_a_file() {
        let dir = std::env::temp_dir().join(format!("chitin-topology-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cluster_config.json");
        let c = base();
        save(&path, &c).unwrap();
        assert_eq!(load(&path).unwrap(), c);
        assert!(matches!(load(&dir.join("missing.json")), Err(LoadError::Io { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
