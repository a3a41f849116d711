//! Fenced writes for an application's own data.
//!
//! Holding a lease token is not enough: a paused process may wake up after
//! its lease moved. Three places to fence, one token ([`LeaseToken`]):
//! - data in **the database chitin uses**: this module's statements check
//!   the token against chitin's own lease row (below);
//! - data in **the application's own PostgreSQL or MySQL/MariaDB**:
//!   [`table`], a fence table the new holder claims before it serves;
//! - data in **the application's own Redis**: [`redis`] (feature
//!   `fence-redis`), the same claim and check inside scripts.
//!
//! In chitin's database, the first statement of every transaction that
//! writes a shard's data checks the token `(shard, holder, epoch)` against
//! the lease row and takes the row's lock **shared**: a
//! change of holder (which takes it exclusively) waits for the transaction,
//! and once the holder changed no transaction finds the row. A deposed owner
//! can never commit; writers of one shard do not queue behind each other.
//!
//! ```no_run
//! # async fn f(pool: sqlx::PgPool, lease: chitin_client::proto::ShardLease) -> Result<(), Box<dyn std::error::Error>> {
//! use chitin_client::fence::{LeaseToken, begin_postgres};
//! let token = LeaseToken::from_lease(&lease)?; // from Held, Route or an ACQUIRED event
//! let mut tx = begin_postgres(&pool, &token).await?; // Err(FenceError::Lost) → the lease moved
//! sqlx::query("INSERT INTO orders (id) VALUES ($1)").bind(7i64).execute(&mut *tx).await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
//!
//! These statements are the fence's one definition for applications (the
//! node's own journal runs the same check, `host/src/lease`).

#[cfg(feature = "fence-redis")]
pub mod redis;
pub mod table;

use sqlx::{MySql, MySqlConnection, MySqlPool, PgConnection, PgPool, Postgres, Transaction};

use crate::proto::ShardLease;

/// PostgreSQL: `$1` shard id, `$2` holder UUID (as `uuid`), `$3` epoch.
///
/// A lease either carries its own expiry or rides on its holder's liveness
/// record (`liveness_epoch` set: renewed by the holder's heartbeat, ended
/// when a peer takes the holder over); the `CASE` judges both. The holder's
/// row is read in a subquery, which the shared lock does not cover, so
/// writers never queue behind the holder's heartbeat.
pub const POSTGRES: &str = "SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = $1 AND l.holder = $2 AND l.epoch = $3 \
     AND CASE WHEN l.liveness_epoch IS NULL THEN l.expires_at ELSE (SELECT n.lease_expires_at FROM chitin_nodes n \
     WHERE n.id = l.holder AND n.liveness_epoch = l.liveness_epoch AND n.state <> 'down') END > clock_timestamp() FOR SHARE";

/// MySQL / MariaDB: shard id, holder UUID (as text), epoch. See [`POSTGRES`].
pub const MYSQL: &str = "SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = ? AND l.holder = ? AND l.epoch = ? \
     AND CASE WHEN l.liveness_epoch IS NULL THEN l.expires_at ELSE (SELECT n.lease_expires_at FROM chitin_nodes n \
     WHERE n.id = l.holder AND n.liveness_epoch = l.liveness_epoch AND n.state <> 'down') END > UTC_TIMESTAMP(6) \
     LOCK IN SHARE MODE";

/// A lease as a fencing token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseToken {
    /// The shard the lease is of.
    pub shard: String,
    /// The holder's registration UUID (`holder_uuid` of a lease).
    pub holder: uuid::Uuid,
    /// The lease's epoch: the token's order among the shard's holders.
    pub epoch: u64,
}

/// Why a fenced transaction could not start.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// The token no longer holds the shard (moved, expired, retired by a
    /// split): the transaction was rolled back; route the key again.
    #[error("the lease of shard {shard} at epoch {epoch} is lost: no write under it can commit; route the key again")]
    Lost {
        /// The shard.
        shard: String,
        /// The token's epoch.
        epoch: u64,
    },
    /// A claim found a newer epoch (or another holder at this one) in the
    /// shard's fence row: a newer holder claimed it; this token never writes
    /// again.
    #[error(
        "the fence of shard {shard} holds epoch {stored}, newer than this claim's {epoch}: a newer holder claimed it; \
         stop serving the shard and route its keys again"
    )]
    Superseded {
        /// The shard.
        shard: String,
        /// The claim's epoch.
        epoch: u64,
        /// The epoch the fence row holds.
        stored: i64,
    },
    /// A claim found the shard's fence row retired: the shard was split and
    /// a child claimed; its keys belong to the children now.
    #[error("the fence of shard {shard} is retired (the shard was split and a child claimed); route its keys again")]
    Retired {
        /// The split parent.
        shard: String,
    },
    /// The lease had no holder (the shard is between holders).
    #[error("a lease without a holder cannot fence (shard {shard}): wait for the shard's holder and ask again")]
    NoHolder {
        /// The shard.
        shard: String,
    },
    /// The lease's `holder_uuid` is not a UUID (a node of another version?).
    #[error("holder_uuid `{value}` of shard {shard} is not a UUID")]
    BadHolder {
        /// The shard.
        shard: String,
        /// What the lease held.
        value: String,
    },
    /// An epoch the database's integer cannot hold.
    #[error("epoch {0} is over the database's range (i64)")]
    BadEpoch(u64),
    /// The database failed the statement (the transaction is rolled back).
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// Redis failed the script (nothing was written).
    #[cfg(feature = "fence-redis")]
    #[error("redis: {0}")]
    Redis(#[from] ::redis::RedisError),
}

impl LeaseToken {
    /// The token of a lease as `Held`, `Route` or the status report it.
    pub fn from_lease(lease: &ShardLease) -> Result<LeaseToken, FenceError> {
        if lease.holder_uuid.is_empty() {
            return Err(FenceError::NoHolder { shard: lease.shard.clone() });
        }
        let holder = uuid::Uuid::parse_str(&lease.holder_uuid)
            .map_err(|_| FenceError::BadHolder { shard: lease.shard.clone(), value: lease.holder_uuid.clone() })?;
        Ok(LeaseToken { shard: lease.shard.clone(), holder, epoch: lease.epoch })
    }

    pub(crate) fn epoch(&self) -> Result<i64, FenceError> {
        i64::try_from(self.epoch).map_err(|_| FenceError::BadEpoch(self.epoch))
    }

    pub(crate) fn lost(&self) -> FenceError {
        FenceError::Lost { shard: self.shard.clone(), epoch: self.epoch }
    }
}

/// Runs the fence as the next statement of the open transaction `conn`.
pub async fn check_postgres(conn: &mut PgConnection, token: &LeaseToken) -> Result<(), FenceError> {
    let row = sqlx::query(POSTGRES).bind(&token.shard).bind(token.holder).bind(token.epoch()?).fetch_optional(conn).await?;
    row.map(|_| ()).ok_or_else(|| token.lost())
}

/// Runs the fence as the next statement of the open transaction `conn`.
pub async fn check_mysql(conn: &mut MySqlConnection, token: &LeaseToken) -> Result<(), FenceError> {
    let row =
        sqlx::query(MYSQL).bind(&token.shard).bind(token.holder.to_string()).bind(token.epoch()?).fetch_optional(conn).await?;
    row.map(|_| ()).ok_or_else(|| token.lost())
}

/// Begins a transaction whose first statement is the fence: write under it
/// and commit; on [`FenceError::Lost`] it has been rolled back.
pub async fn begin_postgres(pool: &PgPool, token: &LeaseToken) -> Result<Transaction<'static, Postgres>, FenceError> {
    let mut tx = pool.begin().await?;
    checked(check_postgres(&mut tx, token).await, tx).await
}

/// Begins a transaction whose first statement is the fence (MySQL/MariaDB).
pub async fn begin_mysql(pool: &MySqlPool, token: &LeaseToken) -> Result<Transaction<'static, MySql>, FenceError> {
    let mut tx = pool.begin().await?;
    checked(check_mysql(&mut tx, token).await, tx).await
}

/// `tx` when its fence `check` passed; rolled back and the refusal when not.
async fn checked<DB: sqlx::Database>(
    check: Result<(), FenceError>,
    tx: Transaction<'static, DB>,
) -> Result<Transaction<'static, DB>, FenceError> {
    match check {
        Ok(()) => Ok(tx),
        Err(e) => {
            tx.rollback().await?;
            Err(e)
        }
    }
}
