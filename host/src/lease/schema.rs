//! Migrations, one directory per dialect under `host/migrations/`, embedded
//! at compile time and applied with sqlx's migrator (table
//! `_sqlx_migrations`, checksummed, locked on PostgreSQL and MySQL).
//!
//! Rolling upgrades: a migration only adds; anything removed goes a version
//! later, once no node of the previous version runs.

use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

use super::Dialect;

/// `(version, description, postgres, mysql, sqlite)`.
const MIGRATIONS: &[(i64, &str, &str, &str, &str)] = &[(
    1,
    "init",
    include_str!("../../migrations/postgres/0001_init.sql"),
    include_str!("../../migrations/mysql/0001_init.sql"),
    include_str!("../../migrations/sqlite/0001_init.sql"),
)];

pub(crate) fn migrator(dialect: Dialect) -> Migrator {
    let migrations = MIGRATIONS
        .iter()
        .map(|&(version, description, pg, my, lite)| {
            let sql = match dialect {
                Dialect::Postgres => pg,
                Dialect::MySql => my,
                Dialect::Sqlite => lite,
            };
            Migration::new(
                version,
                description.into(),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    Migrator::with_migrations(migrations)
}
