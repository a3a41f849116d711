//! Fencing in the application's own PostgreSQL or MySQL/MariaDB database,
//! one that is not chitin's: a fence table beside the application's data.
//!
//! The protocol, per shard:
//! 1. **Claim** on `ACQUIRED` (or a `Held` snapshot), before serving: the
//!    new holder writes its epoch into the shard's fence row. The stored
//!    epoch only ever rises, so an older holder's claim is refused. The
//!    claim takes the row exclusively, so it waits for every transaction
//!    that checked the older epoch and is still open, and every later check
//!    under the older epoch fails. Claiming a child of a split retires its
//!    parent's row in the same transaction: the parent's token cannot write
//!    once a child serves, so a key never has two writable tokens.
//! 2. **Check** as the first statement of each write transaction
//!    ([`begin_postgres`], [`begin_mysql`]): the row must hold this token's
//!    epoch and holder and not be retired; the row is taken **shared**, so
//!    writers of one shard do not queue behind each other, and a claim waits
//!    for them.
//!
//! The guarantee (storage-side fencing): a transaction under an older epoch
//! can commit only before the newer holder's claim commits, and the newer
//! holder serves only after its claim, so no write under an older token ever
//! lands after the newer holder wrote anything. It holds whatever the old
//! holder's process believes (a pause, a partition, a clock jump), because
//! the database decides. It needs the default isolation levels (READ
//! COMMITTED on PostgreSQL, REPEATABLE READ on InnoDB; a locking read sees
//! the newest committed row on both); at SERIALIZABLE on PostgreSQL a check
//! racing a claim fails with a serialization error instead, which is safe.
//!
//! The statements are public so that other languages can run them
//! (`docs/clients.md` lists them with the Python and TypeScript clients).

use sqlx::{MySql, MySqlConnection, MySqlPool, PgConnection, PgPool, Postgres, Row, Transaction};

use super::{FenceError, LeaseToken};

/// The fence table on PostgreSQL; idempotent (run it at start).
///
/// Instances that start together run it at once, and two `CREATE TABLE IF
/// NOT EXISTS` at once can fail on PostgreSQL's catalog (a unique violation
/// in `pg_type`), so it takes a transaction-scoped advisory lock first: they
/// take turns, and the later ones find the table.
pub const POSTGRES_MIGRATION: &str = "DO $$ BEGIN
  PERFORM pg_advisory_xact_lock(27980661893770854);
  CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder UUID,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now());
END $$";

/// The fence table on MySQL/MariaDB; idempotent. The shard id is binary, so
/// it compares byte for byte (no trailing-space padding).
pub const MYSQL_MIGRATION: &str = "CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id VARBINARY(255) NOT NULL PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder CHAR(36) NULL,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB";

/// PostgreSQL claim: `$1` shard, `$2` epoch, `$3` holder. Writes only a
/// higher epoch into a row that is not retired; read the row back after it.
pub const POSTGRES_CLAIM: &str = "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES ($1, $2, $3) \
     ON CONFLICT (shard_id) DO UPDATE SET epoch = EXCLUDED.epoch, holder = EXCLUDED.holder, claimed_at = now() \
     WHERE chitin_fence.epoch < EXCLUDED.epoch AND NOT chitin_fence.retired";

/// MySQL/MariaDB claim: shard, epoch, holder. `epoch` is assigned last, as
/// MySQL evaluates the assignments in order and the others test the old one.
pub const MYSQL_CLAIM: &str = "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES (?, ?, ?) \
     ON DUPLICATE KEY UPDATE \
     holder = IF(NOT retired AND epoch < VALUES(epoch), VALUES(holder), holder), \
     claimed_at = IF(NOT retired AND epoch < VALUES(epoch), CURRENT_TIMESTAMP(6), claimed_at), \
     epoch = IF(NOT retired AND epoch < VALUES(epoch), VALUES(epoch), epoch)";

/// PostgreSQL: retires the parent `$1` of a claimed child (in the claim's
/// transaction).
pub const POSTGRES_RETIRE: &str = "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES ($1, 0, TRUE) \
     ON CONFLICT (shard_id) DO UPDATE SET retired = TRUE";

/// MySQL/MariaDB: retires the parent of a claimed child.
pub const MYSQL_RETIRE: &str =
    "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES (?, 0, TRUE) ON DUPLICATE KEY UPDATE retired = TRUE";

/// PostgreSQL: the row after a claim, locked by it: `$1` shard.
pub const POSTGRES_READ: &str = "SELECT epoch, holder::text AS holder, retired FROM chitin_fence WHERE shard_id = $1";

/// MySQL/MariaDB: the row after a claim.
pub const MYSQL_READ: &str = "SELECT epoch, holder, retired FROM chitin_fence WHERE shard_id = ?";

/// PostgreSQL check, the first statement of a write transaction: `$1` shard,
/// `$2` epoch, `$3` holder; a row means the token may write.
pub const POSTGRES_CHECK: &str =
    "SELECT 1 FROM chitin_fence WHERE shard_id = $1 AND epoch = $2 AND holder = $3 AND NOT retired FOR SHARE";

/// MySQL/MariaDB check: shard, epoch, holder.
pub const MYSQL_CHECK: &str =
    "SELECT 1 FROM chitin_fence WHERE shard_id = ? AND epoch = ? AND holder = ? AND NOT retired LOCK IN SHARE MODE";

/// Creates the fence table if it is missing (PostgreSQL).
pub async fn migrate_postgres(pool: &PgPool) -> Result<(), FenceError> {
    sqlx::raw_sql(POSTGRES_MIGRATION).execute(pool).await?;
    Ok(())
}

/// Creates the fence table if it is missing (MySQL/MariaDB).
pub async fn migrate_mysql(pool: &MySqlPool) -> Result<(), FenceError> {
    sqlx::query(MYSQL_MIGRATION).execute(pool).await?;
    Ok(())
}

/// One claim transaction on either dialect (their pools and holder columns
/// differ in type, not in steps): claim, read back, judge, retire the parent.
macro_rules! claim_in {
    ($pool:expr, $token:expr, $parent:expr, $holder:expr, [$claim:expr, $read:expr, $retire:expr]) => {{
        let mut tx = $pool.begin().await?;
        sqlx::query($claim).bind(&$token.shard).bind($token.epoch()?).bind($holder).execute(&mut *tx).await?;
        let row = sqlx::query($read).bind(&$token.shard).fetch_one(&mut *tx).await?;
        let stored = Stored { epoch: row.try_get("epoch")?, holder: row.try_get("holder")?, retired: row.try_get("retired")? };
        stored.judge($token)?;
        if let Some(parent) = $parent.filter(|p| !p.is_empty()) {
            sqlx::query($retire).bind(parent).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }};
}

/// Claims `token`'s shard for its epoch, retiring `parent` (the shard it was
/// split from, [`crate::proto::ShardLease::parent`]) in the same
/// transaction. Claiming again with the same token is a no-op.
pub async fn claim_postgres(pool: &PgPool, token: &LeaseToken, parent: Option<&str>) -> Result<(), FenceError> {
    claim_in!(pool, token, parent, token.holder, [POSTGRES_CLAIM, POSTGRES_READ, POSTGRES_RETIRE])
}

/// Claims `token`'s shard for its epoch (MySQL/MariaDB); see
/// [`claim_postgres`].
pub async fn claim_mysql(pool: &MySqlPool, token: &LeaseToken, parent: Option<&str>) -> Result<(), FenceError> {
    claim_in!(pool, token, parent, token.holder.to_string(), [MYSQL_CLAIM, MYSQL_READ, MYSQL_RETIRE])
}

/// A shard's fence row as a claim left it.
struct Stored {
    epoch: i64,
    holder: Option<String>,
    retired: bool,
}

impl Stored {
    /// Whether the row now belongs to `token`: the claim's outcome.
    fn judge(&self, token: &LeaseToken) -> Result<(), FenceError> {
        if self.retired {
            return Err(FenceError::Retired { shard: token.shard.clone() });
        }
        let ours = self.holder.as_deref().is_some_and(|h| h.eq_ignore_ascii_case(&token.holder.to_string()));
        if self.epoch == token.epoch()? && ours {
            return Ok(());
        }
        Err(FenceError::Superseded { shard: token.shard.clone(), epoch: token.epoch, stored: self.epoch })
    }
}

/// Runs the check as the next statement of the open transaction `conn`.
pub async fn check_postgres(conn: &mut PgConnection, token: &LeaseToken) -> Result<(), FenceError> {
    let row = sqlx::query(POSTGRES_CHECK).bind(&token.shard).bind(token.epoch()?).bind(token.holder).fetch_optional(conn).await?;
    row.map(|_| ()).ok_or_else(|| token.lost())
}

/// Runs the check as the next statement of the open transaction `conn`.
pub async fn check_mysql(conn: &mut MySqlConnection, token: &LeaseToken) -> Result<(), FenceError> {
    let row = sqlx::query(MYSQL_CHECK)
        .bind(&token.shard)
        .bind(token.epoch()?)
        .bind(token.holder.to_string())
        .fetch_optional(conn)
        .await?;
    row.map(|_| ()).ok_or_else(|| token.lost())
}

/// Begins a transaction whose first statement is the check: write under it
/// and commit; on [`FenceError::Lost`] it has been rolled back.
pub async fn begin_postgres(pool: &PgPool, token: &LeaseToken) -> Result<Transaction<'static, Postgres>, FenceError> {
    let mut tx = pool.begin().await?;
    super::checked(check_postgres(&mut tx, token).await, tx).await
}

/// Begins a transaction whose first statement is the check (MySQL/MariaDB).
pub async fn begin_mysql(pool: &MySqlPool, token: &LeaseToken) -> Result<Transaction<'static, MySql>, FenceError> {
    let mut tx = pool.begin().await?;
    super::checked(check_mysql(&mut tx, token).await, tx).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(epoch: u64) -> LeaseToken {
        LeaseToken { shard: "s".into(), holder: uuid::Uuid::from_u128(7), epoch }
    }

    #[test]
    fn a_claim_is_ours_only_at_our_epoch_and_holder_and_never_on_a_retired_row() {
        let ours = uuid::Uuid::from_u128(7).to_string();
        let other = uuid::Uuid::from_u128(8).to_string();
        let cases: &[(i64, Option<&str>, bool, u64, &str)] = &[
            (5, Some(&ours), false, 5, "ok"),
            (5, Some(&ours.to_uppercase()), false, 5, "ok"),
            (6, Some(&other), false, 5, "superseded"),
            (5, Some(&other), false, 5, "superseded"),
            (5, None, false, 5, "superseded"),
            (5, Some(&ours), true, 5, "retired"),
            (9, Some(&ours), true, 5, "retired"),
        ];
        for &(epoch, holder, retired, claimed, want) in cases {
            let stored = Stored { epoch, holder: holder.map(str::to_owned), retired };
            let got = match stored.judge(&token(claimed)) {
                Ok(()) => "ok",
                Err(FenceError::Superseded { .. }) => "superseded",
                Err(FenceError::Retired { .. }) => "retired",
                Err(e) => panic!("{e}"),
            };
            assert_eq!(got, want, "stored {epoch}/{holder:?}/retired {retired}, claimed {claimed}");
        }
    }
}
