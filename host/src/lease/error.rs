use std::fmt;

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// Why a lease is no longer held at the epoch a writer believed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LostReason {
    /// The shard has no lease row at all.
    NoLease,
    /// The lease is free (released, or its holder deregistered).
    Released,
    /// Another holder or a later epoch holds it now.
    Superseded { holder: Option<Uuid>, epoch: i64 },
    /// Same holder and epoch, but past its expiry by the database clock.
    Expired { expired_at: DateTime<Utc> },
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::NoLease => f.write_str("the shard has no lease"),
            LostReason::Released => f.write_str("the lease was released"),
            LostReason::Superseded { holder: Some(h), epoch } => {
                write!(f, "now held by {h} at epoch {epoch}")
            }
            LostReason::Superseded { holder: None, epoch } => {
                write!(f, "now free at epoch {epoch}")
            }
            LostReason::Expired { expired_at } => {
                write!(f, "it expired at {expired_at} (database clock)")
            }
        }
    }
}

/// One value that differs from what the cluster recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaMismatch {
    pub field: &'static str,
    pub cluster: String,
    pub ours: String,
}

impl fmt::Display for MetaMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: the cluster has {}, this node has {}", self.field, self.cluster, self.ours)
    }
}

/// Errors of the durable store.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("unsupported database URL scheme `{scheme}`: expected postgres://, mysql://, mariadb:// or sqlite:")]
    UnsupportedUrl { scheme: String },

    #[error("database error: {0}")]
    Db(#[from] sqlx::Error),

    /// A batch of appends failed in a way that may or may not have
    /// committed (the batch's own error, as each of its appends sees it).
    #[error("the group commit of this append failed and may have committed: {0}; retry with the same request id")]
    BatchOutcomeUnknown(String),

    #[error(
        "schema migration failed: {0}; if the database refused for lack of rights, give this user the right to \
         create and alter tables and indexes and, on MySQL/MariaDB, CREATE ROUTINE and EXECUTE (README, `database.url`), \
         or run one node once with a user that has them"
    )]
    Migrate(#[from] sqlx::migrate::MigrateError),

    #[error(
        "node name `{name}` is in use by a live process: registration {holder} at {address}, last seen {last_seen} \
         (database clock). Stop that process, or choose another name; a crashed process's name is free again \
         once it has not been seen for the liveness timeout"
    )]
    NameInUse { name: String, holder: Uuid, address: String, last_seen: DateTime<Utc> },

    #[error("node registration {0} is unknown or down; register again")]
    NodeNotRegistered(Uuid),

    #[error(
        "the liveness lock of registration {node} stayed taken for {waited:?}: another session holds it (a peer \
         judging this node, or a pooler in transaction mode sharing one server session between clients). The node \
         retries; if this repeats, point database.url at the database itself or a session-mode pool, or set \
         cluster.session_liveness = false"
    )]
    SessionLockHeld { node: Uuid, waited: std::time::Duration },

    #[error(
        "the liveness watch's database session gave no answer within {waited:?}: the server ended it while this \
         node was cut off from it, or the server is gone; a new watch replaces it"
    )]
    WatchSilent { waited: std::time::Duration },

    #[error("node registration {0} is not live (down, or not seen within the liveness timeout)")]
    NodeNotLive(Uuid),

    #[error(
        "node registration {0} has no unexpired liveness: its heartbeat (one per lease round) did not renew it \
         within the lease TTL, so it takes no leases until its next heartbeat gets through; if this repeats, \
         look for a slow or unreachable database"
    )]
    LivenessLapsed(Uuid),

    #[error("node registration {0} is leaving the cluster: it takes no leases")]
    NodeLeaving(Uuid),

    #[error(
        "the database's handoff budget is spent: {cap} handovers per round of {window:?} across every node \
         (`leases.max_handoffs_per_round`); the next fits in {retry_after:?}"
    )]
    HandoffBudget { cap: u32, window: std::time::Duration, retry_after: std::time::Duration },

    #[error(
        "{op} waited out the lock-wait bound (half a lease TTL) behind another session holding the row, and stops \
         there so that a round cannot outlast the node's own leases; the next round tries again (a session that \
         holds rows this long is stuck, and its own idle bound ends it): {source}"
    )]
    LockWait {
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },

    #[error("{op} gave up after {attempts} attempts on contention (deadlocks, serialization failures): {source}")]
    Contention {
        op: &'static str,
        attempts: usize,
        #[source]
        source: sqlx::Error,
    },

    #[error("lease of shard `{shard}` lost by {holder} at epoch {epoch}: {reason}")]
    LeaseLost { shard: String, holder: Uuid, epoch: i64, reason: LostReason },

    #[error(
        "this node's settings differ from the cluster's: {}. Use the cluster's values (every node must agree; \
         leave leases.ttl_secs and leases.renew_interval_secs both unset to take the cluster's timing), or \
         recreate the cluster's database",
        .mismatches.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    ClusterMetaMismatch { mismatches: Vec<MetaMismatch> },

    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    #[error("unexpected database content: {0}")]
    Corrupt(String),
}

impl LeaseError {
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, LeaseError::LeaseLost { .. })
    }

    /// A statement waited out its bound: a row's lock (a session holding
    /// it is stuck), or a connection from the pool (every one busy). A
    /// lease round ends at such a wait.
    pub fn waited_out(&self) -> bool {
        matches!(self, LeaseError::LockWait { .. } | LeaseError::Db(sqlx::Error::PoolTimedOut))
    }
}
