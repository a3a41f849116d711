//! The two version tables of migration 0004: `chitin_node_versions` (what
//! each registration runs) and `chitin_cluster_version` (the finalized
//! release line). Kept apart from the lease engine: nothing on a lease or
//! journal path reads them.

use std::collections::HashMap;

use sqlx::Row;
use uuid::Uuid;

use super::version::Release;
use crate::lease::{LeaseError, Store};

/// One dialect's statements.
struct Sql {
    /// (node, version, protocol)
    record_node: &'static str,
    /// () → node_id (text), version, protocol
    node_versions: &'static str,
    /// () → version
    cluster_version: &'static str,
    /// (version): only when every registration ever made recorded a
    /// version (no 0.1.0 node ever ran) and no version is set yet.
    init_cluster_version: &'static str,
    /// (version)
    set_cluster_version: &'static str,
}

/// Every registration without a version row: a 0.1.0 node once ran here.
macro_rules! unversioned_registration {
    () => {
        "SELECT 1 FROM chitin_nodes n WHERE NOT EXISTS (SELECT 1 FROM chitin_node_versions v WHERE v.node_id = n.id)"
    };
}

const PG: Sql = Sql {
    record_node: "INSERT INTO chitin_node_versions (node_id, version, protocol) VALUES ($1::uuid, $2, $3) \
                  ON CONFLICT (node_id) DO UPDATE SET version = EXCLUDED.version, protocol = EXCLUDED.protocol",
    node_versions: "SELECT node_id::text AS node_id, version, protocol FROM chitin_node_versions",
    cluster_version: "SELECT version FROM chitin_cluster_version WHERE id = 1",
    init_cluster_version: concat!(
        "INSERT INTO chitin_cluster_version (id, version) SELECT 1, $1 WHERE NOT EXISTS (",
        unversioned_registration!(),
        ") ON CONFLICT (id) DO NOTHING"
    ),
    set_cluster_version: "INSERT INTO chitin_cluster_version (id, version) VALUES (1, $1) \
                          ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, finalized_at = clock_timestamp()",
};

const MY: Sql = Sql {
    record_node: "INSERT INTO chitin_node_versions (node_id, version, protocol, recorded_at) \
                  VALUES (?, ?, ?, UTC_TIMESTAMP(6)) \
                  ON DUPLICATE KEY UPDATE version = VALUES(version), protocol = VALUES(protocol)",
    node_versions: "SELECT node_id, version, protocol FROM chitin_node_versions",
    cluster_version: "SELECT version FROM chitin_cluster_version WHERE id = 1",
    init_cluster_version: concat!(
        "INSERT IGNORE INTO chitin_cluster_version (id, version, finalized_at) SELECT 1, ?, UTC_TIMESTAMP(6) ",
        "FROM DUAL WHERE NOT EXISTS (",
        unversioned_registration!(),
        ")"
    ),
    set_cluster_version: "INSERT INTO chitin_cluster_version (id, version, finalized_at) VALUES (1, ?, UTC_TIMESTAMP(6)) \
                          ON DUPLICATE KEY UPDATE version = VALUES(version), finalized_at = VALUES(finalized_at)",
};

/// SQLite's clock in milliseconds, as the lease tables keep it.
macro_rules! lite_now_ms {
    () => {
        "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
    };
}

const LITE: Sql = Sql {
    record_node: concat!(
        "INSERT INTO chitin_node_versions (node_id, version, protocol, recorded_at) VALUES (?1, ?2, ?3, ",
        lite_now_ms!(),
        ") ON CONFLICT (node_id) DO UPDATE SET version = excluded.version, protocol = excluded.protocol"
    ),
    node_versions: "SELECT node_id, version, protocol FROM chitin_node_versions",
    cluster_version: "SELECT version FROM chitin_cluster_version WHERE id = 1",
    init_cluster_version: concat!(
        "INSERT INTO chitin_cluster_version (id, version, finalized_at) SELECT 1, ?1, ",
        lite_now_ms!(),
        " WHERE NOT EXISTS (",
        unversioned_registration!(),
        ") ON CONFLICT (id) DO NOTHING"
    ),
    set_cluster_version: concat!(
        "INSERT INTO chitin_cluster_version (id, version, finalized_at) VALUES (1, ?1, ",
        lite_now_ms!(),
        ") ON CONFLICT (id) DO UPDATE SET version = excluded.version, finalized_at = excluded.finalized_at"
    ),
};

/// Runs one statement with text/integer parameters on whichever pool
/// `store` holds; evaluates to the number of rows it changed.
macro_rules! execute {
    ($store:expr, $field:ident $(, $arg:expr)*) => {
        match $store {
            Store::Postgres(s) => sqlx::query(PG.$field)$(.bind($arg))*.execute(&s.pool).await?.rows_affected(),
            Store::MySql(s) => sqlx::query(MY.$field)$(.bind($arg))*.execute(&s.pool).await?.rows_affected(),
            Store::Sqlite(s) => sqlx::query(LITE.$field)$(.bind($arg))*.execute(&s.pool).await?.rows_affected(),
        }
    };
}

/// Records the version and protocol registration `node` runs.
pub async fn record_node(store: &Store, node: Uuid, version: &str, protocol: u32) -> Result<(), LeaseError> {
    execute!(store, record_node, node.to_string(), version.to_string(), i64::from(protocol));
    Ok(())
}

/// What a registration recorded about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVersion {
    pub version: String,
    pub protocol: u32,
}

/// Every recorded registration's version, by registration id.
pub async fn node_versions(store: &Store) -> Result<HashMap<Uuid, NodeVersion>, LeaseError> {
    let mut out = HashMap::new();
    macro_rules! collect {
        ($pool:expr, $sql:expr) => {
            for row in sqlx::query($sql.node_versions).fetch_all($pool).await? {
                let id: String = row.try_get("node_id")?;
                let protocol: i64 = row.try_get("protocol")?;
                let id = Uuid::parse_str(&id)
                    .map_err(|e| LeaseError::Corrupt(format!("bad node id `{id}` in chitin_node_versions: {e}")))?;
                let version = NodeVersion { version: row.try_get("version")?, protocol: u32::try_from(protocol).unwrap_or(0) };
                out.insert(id, version);
            }
        };
    }
    match store {
        Store::Postgres(s) => collect!(&s.pool, PG),
        Store::MySql(s) => collect!(&s.pool, MY),
        Store::Sqlite(s) => collect!(&s.pool, LITE),
    }
    Ok(out)
}

/// The finalized cluster version; [`Release::first`] when none was set.
pub async fn cluster_version(store: &Store) -> Result<Release, LeaseError> {
    let text: Option<String> = match store {
        Store::Postgres(s) => sqlx::query_scalar(PG.cluster_version).fetch_optional(&s.pool).await?,
        Store::MySql(s) => sqlx::query_scalar(MY.cluster_version).fetch_optional(&s.pool).await?,
        Store::Sqlite(s) => sqlx::query_scalar(LITE.cluster_version).fetch_optional(&s.pool).await?,
    };
    match text {
        None => Ok(Release::first()),
        Some(t) => t.parse().map_err(|e| LeaseError::Corrupt(format!("chitin_cluster_version: {e}"))),
    }
}

/// Sets the cluster version of a cluster no 0.1.0 node ever joined (a new
/// cluster starts finalized at the release of its first node); true when
/// it did.
pub async fn init_cluster_version(store: &Store, release: Release) -> Result<bool, LeaseError> {
    Ok(execute!(store, init_cluster_version, release.to_string()) > 0)
}

/// Finalizes the cluster at `release`.
pub async fn set_cluster_version(store: &Store, release: Release) -> Result<(), LeaseError> {
    execute!(store, set_cluster_version, release.to_string());
    Ok(())
}
