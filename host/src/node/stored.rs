//! The node's own copy of its cluster config and id, in its data dir, so a
//! restart or reboot finds them. Written atomically (temp file + rename).

use std::path::{Path, PathBuf};

use crate::topology::ClusterConfig;

const CONFIG_FILE: &str = "cluster_config.json";
const NODE_ID_FILE: &str = "node_id";

/// What the data dir holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Provisioned {
    pub config: ClusterConfig,
    /// Set by `bootstrap`; absent when the config was seeded from settings.
    pub node_id: Option<String>,
}

/// Why the stored config could not be read or written.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {reason}")]
pub struct StoredError {
    pub what: &'static str,
    pub path: PathBuf,
    pub reason: String,
}

pub fn config_path(data_dir: &Path) -> PathBuf {
    data_dir.join(CONFIG_FILE)
}

/// The stored config and id, if the node was provisioned.
pub fn load(data_dir: &Path) -> Result<Option<Provisioned>, StoredError> {
    let path = config_path(data_dir);
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(err("cannot read the stored cluster config", &path, e)),
    };
    let config = ClusterConfig::from_json(&text).map_err(|e| err("the stored cluster config is corrupt:", &path, e))?;
    let id_path = data_dir.join(NODE_ID_FILE);
    let node_id = match std::fs::read_to_string(&id_path) {
        Ok(id) => Some(id.trim().to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(err("cannot read", &id_path, e)),
    };
    Ok(Some(Provisioned { config, node_id }))
}

/// Stores `config` (and `node_id` when given).
pub fn save(data_dir: &Path, config: &ClusterConfig, node_id: Option<&str>) -> Result<(), StoredError> {
    std::fs::create_dir_all(data_dir).map_err(|e| err("cannot create the data dir", data_dir, e))?;
    if let Some(id) = node_id {
        write_atomically(&data_dir.join(NODE_ID_FILE), id.as_bytes())?;
    }
    write_atomically(&config_path(data_dir), config.to_json().as_bytes())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoredError> {
    crate::topology::file::write_atomically(path, bytes).map_err(|e| err("cannot write", path, e))
}

fn err(what: &'static str, path: &Path, reason: impl std::fmt::Display) -> StoredError {
    StoredError { what, path: path.to_path_buf(), reason: reason.to_string() }
}
