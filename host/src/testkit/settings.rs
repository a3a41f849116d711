//! Node settings as the suite and the chaos lab write them: built as a
//! [`Settings`] value and serialized with `toml`, so that a renamed or
//! retyped key breaks the build here instead of a node's start-up there.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::settings::Settings;

use super::KitError;

/// What differs between the cluster nodes of one run or test.
#[derive(Clone, Debug)]
pub struct ClusterNode<'a> {
    pub name: &'a str,
    pub api: &'a str,
    pub metrics: &'a str,
    pub data_dir: PathBuf,
    /// The seed `cluster_config.json`; `None` starts the node unprovisioned.
    pub config_file: Option<&'a Path>,
}

/// What the cluster nodes of one run or test share.
#[derive(Clone, Debug)]
pub struct ClusterShared<'a> {
    pub redis_url: &'a str,
    pub namespace: &'a str,
    pub database_url: &'a str,
    pub ttl: Duration,
    pub renew: Duration,
}

/// The heartbeat interval of [`cluster_node`]s.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_secs(1);

/// The liveness timeout of [`cluster_node`]s: also the TTL of their
/// affinity claims.
pub const LIVENESS_TIMEOUT: Duration = Duration::from_secs(3);

/// A cluster node's settings: a 1 s heartbeat and a 3 s liveness timeout
/// (a dead node leaves the registry within a few seconds), the shared
/// servers and lease timing.
pub fn cluster_node(node: &ClusterNode<'_>, shared: &ClusterShared<'_>) -> Settings {
    let mut s = standalone(node.data_dir.clone(), node.api, node.metrics);
    s.cluster.enabled = true;
    s.cluster.instance_id = Some(node.name.to_string());
    s.cluster.config_file = node.config_file.map(Path::to_path_buf);
    s.cluster.redis_url = Some(shared.redis_url.to_string());
    s.cluster.namespace = shared.namespace.to_string();
    s.cluster.heartbeat_interval_secs = HEARTBEAT_INTERVAL.as_secs_f64();
    s.cluster.liveness_timeout_secs = LIVENESS_TIMEOUT.as_secs_f64();
    s.database.url = Some(shared.database_url.to_string());
    s.leases.ttl_secs = Some(shared.ttl.as_secs_f64());
    s.leases.renew_interval_secs = Some(shared.renew.as_secs_f64());
    s
}

/// A standalone node's settings: its data dir and listen addresses.
pub fn standalone(data_dir: PathBuf, api: &str, metrics: &str) -> Settings {
    let mut s = Settings::default();
    s.node.data_dir = data_dir;
    s.api.listen = api.to_string();
    s.metrics.listen = metrics.to_string();
    s
}

/// `settings` as TOML.
pub fn to_toml(settings: &Settings, path: &Path) -> Result<String, KitError> {
    toml::to_string(settings).map_err(|source| KitError::SettingsWrite { path: path.to_path_buf(), source })
}

/// Writes `settings` to `path`.
pub fn write(path: &Path, settings: &Settings) -> Result<(), KitError> {
    let text = to_toml(settings, path)?;
    std::fs::write(path, text).map_err(KitError::io(format!("write {}", path.display())))
}

/// Reads a settings file as written (no environment overlay, no rules:
/// what [`edit`] changes is the file, not what a node would load).
pub fn read(path: &Path) -> Result<Settings, KitError> {
    let text = std::fs::read_to_string(path).map_err(KitError::io(format!("read {}", path.display())))?;
    toml::from_str(&text).map_err(|source| KitError::SettingsRead { path: path.to_path_buf(), source })
}

/// Reads, changes and writes back a settings file.
pub fn edit(path: &Path, change: impl FnOnce(&mut Settings)) -> Result<(), KitError> {
    let mut s = read(path)?;
    change(&mut s);
    write(path, &s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> ClusterShared<'static> {
        ClusterShared {
            redis_url: "redis://127.0.0.1:6379",
            namespace: "chitin-test-x",
            database_url: "postgres://postgres@127.0.0.1:5432/chitin_t_x",
            ttl: Duration::from_secs(2),
            renew: Duration::from_millis(500),
        }
    }

    /// What a node would load from the written file is what was built,
    /// and it passes the node's own rules.
    #[test]
    fn written_settings_load_back_unchanged_and_valid() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cluster_config.json");
        let cases = [
            cluster_node(
                &ClusterNode {
                    name: "node-01",
                    api: "127.0.0.1:1",
                    metrics: "127.0.0.1:2",
                    data_dir: dir.path().join("d"),
                    config_file: Some(&config),
                },
                &shared(),
            ),
            cluster_node(
                &ClusterNode {
                    name: "node-02",
                    api: "127.0.0.1:3",
                    metrics: "127.0.0.1:4",
                    data_dir: dir.path().join("e"),
                    config_file: None,
                },
                &shared(),
            ),
            standalone(dir.path().join("s"), "127.0.0.1:5", "127.0.0.1:6"),
        ];
        for (k, s) in cases.iter().enumerate() {
            let path = dir.path().join(format!("{k}.toml"));
            write(&path, s).unwrap();
            let text = std::fs::read_to_string(&path).unwrap();
            let loaded = Settings::from_toml(&text, "test", std::iter::empty::<(String, String)>()).unwrap();
            assert_eq!(&loaded, s, "{text}");
        }
        assert_eq!(cases[0].leases.renew_interval_secs, Some(0.5));
        assert_eq!(cases[1].cluster.config_file, None);
    }

    #[test]
    fn an_edit_changes_only_what_it_touches() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.toml");
        let s = standalone(dir.path().join("s"), "127.0.0.1:5", "127.0.0.1:6");
        write(&path, &s).unwrap();
        edit(&path, |s| s.api.admin_token = Some("tok1".into())).unwrap();
        let mut want = s;
        want.api.admin_token = Some("tok1".into());
        assert_eq!(read(&path).unwrap(), want);
    }
}
