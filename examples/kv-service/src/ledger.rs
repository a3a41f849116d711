//! The service's own table, `kv_writes`, and its one write path.
//!
//! Each write is a row with the token it was written under (`shard`,
//! `epoch`) and an increasing `seq`. The fence makes `seq` follow the
//! tokens: a write under an older epoch can commit only before the newer
//! holder's claim, and the newer holder writes only after its claim, so per
//! key, rows in `seq` order never go back to an older token. `chitin chaos
//! --service` checks exactly that, and that every acknowledged write is
//! stored once.

use std::time::{Duration, Instant};

use chitin_client::fence::{FenceError, LeaseToken, table};
use sqlx::{MySqlPool, PgPool};

/// A write that takes longer than this is logged with its steps, so that a
/// latency tail can be placed: in the database's steps, or outside them.
const SLOW_WRITE: Duration = Duration::from_millis(50);

/// PostgreSQL: the table (created at start; idempotent). Instances start
/// together, and two `CREATE TABLE IF NOT EXISTS` at once can fail on the
/// catalog, so they take turns on an advisory lock (as the fence table's
/// migration does).
const POSTGRES_TABLE: &str = "DO $$ BEGIN PERFORM pg_advisory_xact_lock(7030462301); \
     CREATE TABLE IF NOT EXISTS kv_writes (seq BIGSERIAL PRIMARY KEY, \
     request_id VARCHAR(128) NOT NULL UNIQUE, item_key VARCHAR(255) NOT NULL, value TEXT NOT NULL, \
     shard VARCHAR(255) NOT NULL, epoch BIGINT NOT NULL); END $$";
/// MySQL/MariaDB: the table.
const MYSQL_TABLE: &str = "CREATE TABLE IF NOT EXISTS kv_writes (seq BIGINT AUTO_INCREMENT PRIMARY KEY, \
     request_id VARCHAR(128) NOT NULL UNIQUE, item_key VARCHAR(255) NOT NULL, value TEXT NOT NULL, \
     shard VARCHAR(255) NOT NULL, epoch BIGINT NOT NULL)";
/// A request sent again (the client never heard the answer) finds its row
/// and stores nothing: a write is stored once, under the token of the
/// attempt that committed it.
const POSTGRES_WRITE: &str = "INSERT INTO kv_writes (request_id, item_key, value, shard, epoch) \
     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (request_id) DO NOTHING";
const MYSQL_WRITE: &str = "INSERT INTO kv_writes (request_id, item_key, value, shard, epoch) \
     VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE request_id = request_id";

/// The service's database.
#[derive(Clone)]
pub enum Db {
    /// A PostgreSQL database.
    Postgres(PgPool),
    /// A MySQL or MariaDB database.
    Mysql(MySqlPool),
}

/// One write, as the API received it.
pub struct Write<'a> {
    /// The caller's id for the write; the same id sent again is stored once.
    pub request_id: &'a str,
    /// The key.
    pub key: &'a str,
    /// The value.
    pub value: &'a str,
}

/// Why a write did not commit.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The fence refused the token: the shard moved on.
    #[error(transparent)]
    Fence(#[from] FenceError),
    /// The database failed; the write may be sent again with its id.
    #[error("the service's database: {0}")]
    Database(#[from] sqlx::Error),
}

impl Db {
    /// Connects to `url`, a `postgres://` or `mysql://` URL.
    pub async fn connect(url: &str) -> Result<Db, String> {
        let scheme = url.split("://").next().unwrap_or_default();
        let failed = |e: sqlx::Error| format!("--database: cannot connect: {e}");
        match scheme {
            "postgres" | "postgresql" => PgPool::connect(url).await.map(Db::Postgres).map_err(failed),
            "mysql" | "mariadb" => MySqlPool::connect(url).await.map(Db::Mysql).map_err(failed),
            _ => Err(format!(
                "--database must be a postgres:// or mysql:// URL of the service's own database (got scheme {scheme:?})"
            )),
        }
    }

    /// Creates the fence table (shipped with the client) and `kv_writes`.
    pub async fn migrate(&self) -> Result<(), String> {
        let done = match self {
            Db::Postgres(pool) => match table::migrate_postgres(pool).await {
                Ok(()) => sqlx::raw_sql(POSTGRES_TABLE).execute(pool).await.map(drop).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
            Db::Mysql(pool) => match table::migrate_mysql(pool).await {
                Ok(()) => sqlx::query(MYSQL_TABLE).execute(pool).await.map(drop).map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            },
        };
        done.map_err(|e| format!("creating the service's tables: {e}"))
    }

    /// Claims `token`'s shard in the fence table before serving it,
    /// retiring `parent` (a split's parent) in the same transaction.
    pub async fn claim(&self, token: &LeaseToken, parent: Option<&str>) -> Result<(), FenceError> {
        match self {
            Db::Postgres(pool) => table::claim_postgres(pool, token, parent).await,
            Db::Mysql(pool) => table::claim_mysql(pool, token, parent).await,
        }
    }

    /// Stores `w` under `token`: the fence's check is the transaction's
    /// first statement (skipped only by the planted bug, `check_fence`
    /// false).
    pub async fn write(&self, token: &LeaseToken, check_fence: bool, w: &Write<'_>) -> Result<(), WriteError> {
        let epoch =
            i64::try_from(token.epoch).map_err(|_| FenceError::Lost { shard: token.shard.clone(), epoch: token.epoch })?;
        let started = Instant::now();
        // When the transaction had begun (and checked the fence), and when
        // the row was inserted.
        let mut marks = [Duration::ZERO; 2];
        match self {
            Db::Postgres(pool) => {
                let mut tx = if check_fence { table::begin_postgres(pool, token).await? } else { pool.begin().await? };
                marks[0] = started.elapsed();
                let insert = sqlx::query(POSTGRES_WRITE).bind(w.request_id).bind(w.key).bind(w.value).bind(&token.shard);
                insert.bind(epoch).execute(&mut *tx).await?;
                marks[1] = started.elapsed();
                tx.commit().await?;
            }
            Db::Mysql(pool) => {
                let mut tx = if check_fence { table::begin_mysql(pool, token).await? } else { pool.begin().await? };
                marks[0] = started.elapsed();
                let insert = sqlx::query(MYSQL_WRITE).bind(w.request_id).bind(w.key).bind(w.value).bind(&token.shard);
                insert.bind(epoch).execute(&mut *tx).await?;
                marks[1] = started.elapsed();
                tx.commit().await?;
            }
        }
        log_if_slow(w, token, started.elapsed(), marks);
        Ok(())
    }
}

/// Logs a stored write that took [`SLOW_WRITE`] or longer, step by step.
fn log_if_slow(w: &Write<'_>, token: &LeaseToken, took: Duration, [begun, inserted]: [Duration; 2]) {
    if took < SLOW_WRITE {
        return;
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    eprintln!(
        "chitin-example-kv: slow write {} ({} at epoch {}): {:.1} ms: begin and fence check {:.1} ms, insert {:.1} ms, \
         commit {:.1} ms",
        w.request_id,
        token.shard,
        token.epoch,
        ms(took),
        ms(begun),
        ms(inserted - begun),
        ms(took - inserted)
    );
}
