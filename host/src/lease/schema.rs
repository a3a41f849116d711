//! Migrations, one directory per dialect under `host/migrations/`, embedded
//! at compile time and applied with sqlx's migrator (table
//! `_sqlx_migrations`, checksummed, locked on PostgreSQL and MySQL).
//!
//! Rolling upgrades: a migration only adds; anything removed goes a version
//! later, once no node of the previous version runs. For the same reason the
//! migrator ignores applied migrations it does not know (a newer binary
//! applied them): an older binary starts on a newer schema.

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use super::Dialect;

/// `(version, description, postgres, mysql, sqlite)`.
const MIGRATIONS: &[(i64, &str, &str, &str, &str)] = &[
    (
        1,
        "init",
        include_str!("../../migrations/postgres/0001_init.sql"),
        include_str!("../../migrations/mysql/0001_init.sql"),
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ),
    (
        2,
        "shard retirements",
        include_str!("../../migrations/postgres/0002_shard_retirements.sql"),
        include_str!("../../migrations/mysql/0002_shard_retirements.sql"),
        include_str!("../../migrations/sqlite/0002_shard_retirements.sql"),
    ),
    (
        3,
        "handoff budget",
        include_str!("../../migrations/postgres/0003_handoff_budget.sql"),
        include_str!("../../migrations/mysql/0003_handoff_budget.sql"),
        include_str!("../../migrations/sqlite/0003_handoff_budget.sql"),
    ),
    (
        4,
        "versions",
        include_str!("../../migrations/postgres/0004_versions.sql"),
        include_str!("../../migrations/mysql/0004_versions.sql"),
        include_str!("../../migrations/sqlite/0004_versions.sql"),
    ),
    (
        5,
        "node sessions",
        include_str!("../../migrations/postgres/0005_node_sessions.sql"),
        include_str!("../../migrations/mysql/0005_node_sessions.sql"),
        include_str!("../../migrations/sqlite/0005_node_sessions.sql"),
    ),
    (
        6,
        "policy hashes",
        include_str!("../../migrations/postgres/0006_policy_hashes.sql"),
        include_str!("../../migrations/mysql/0006_policy_hashes.sql"),
        include_str!("../../migrations/sqlite/0006_policy_hashes.sql"),
    ),
    (
        7,
        "node leases",
        include_str!("../../migrations/postgres/0007_node_leases.sql"),
        include_str!("../../migrations/mysql/0007_node_leases.sql"),
        include_str!("../../migrations/sqlite/0007_node_leases.sql"),
    ),
    (
        8,
        "lease holder index",
        include_str!("../../migrations/postgres/0008_lease_holder_index.sql"),
        include_str!("../../migrations/mysql/0008_lease_holder_index.sql"),
        include_str!("../../migrations/sqlite/0008_lease_holder_index.sql"),
    ),
    (
        9,
        "append procedure",
        include_str!("../../migrations/postgres/0009_append_procedure.sql"),
        include_str!("../../migrations/mysql/0009_append_procedure.sql"),
        include_str!("../../migrations/sqlite/0009_append_procedure.sql"),
    ),
];

/// The versions of `applied` this binary has no migration for.
pub(crate) fn unknown_versions(applied: &[i64]) -> Vec<i64> {
    applied.iter().copied().filter(|v| !MIGRATIONS.iter().any(|m| m.0 == *v)).collect()
}

pub(crate) fn migrator(dialect: Dialect) -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|&(version, description, pg, my, lite)| {
            let sql = match dialect {
                Dialect::Postgres => pg,
                Dialect::MySql => my,
                Dialect::Sqlite => lite,
            };
            Migration::new(version, description.into(), MigrationType::Simple, sql.into_sql_str(), false)
        })
        .collect();
    let mut migrator = Migrator::with_migrations(migrations);
    migrator.set_ignore_missing(true);
    migrator
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_versions_are_those_without_a_migration() {
        let cases: &[(&[i64], &[i64])] = &[
            (&[], &[]),
            (&[1, 2, 3, 4, 5, 6, 7, 8, 9], &[]),
            (&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], &[10]),
            (&[1, 10, 11], &[10, 11]),
        ];
        for (applied, unknown) in cases {
            assert_eq!(unknown_versions(applied), *unknown, "{applied:?}");
        }
    }
}
