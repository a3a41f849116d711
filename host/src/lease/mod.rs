//! The durable store: node identity, cluster meta, shard leases with epochs,
//! fenced commits, and the reference journal, over PostgreSQL ≥ 14,
//! MySQL ≥ 8.0 / MariaDB ≥ 10.6, or SQLite (standalone mode only).
//!
//! [`Store`] is an enum over the three dialects. What the store does (every
//! transaction, its retries, the fence, the lost-lease error) is written once
//! in `engine`, generic over a backend; each dialect's submodule (`pg`,
//! `mysql`, `sqlite`) holds only its SQL text, how it decodes UUIDs, times and
//! truth values, and its connection settings; its migrations live under
//! `host/migrations/<dialect>/`. Conflicts (deadlocks, serialization
//! failures, a busy SQLite) are retried by one wrapper; running out of
//! attempts is [`LeaseError::Contention`], with the driver's error. A
//! lock-wait timeout is not retried ([`LeaseError::LockWait`]): it already
//! waited half a TTL. Every judgement of time — is a lease expired,
//! is a node live — is made by the database's clock inside the statement that
//! acts on it (`clock_timestamp()`, `UTC_TIMESTAMP(6)`, SQLite's `'now'`),
//! never by comparing with the node's clock.
//!
//! # Leases and epochs
//!
//! Each shard has one row in `chitin_shard_leases` (never deleted). Every grant
//! of a lease — [`Store::try_acquire`] of a free or expired lease, or a
//! [`Store::handover`] — increments the row's epoch and records
//! `(shard, epoch, holder)` in `chitin_lease_history`, so epochs strictly
//! increase with each change of holder. [`Store::release`] frees the row
//! (the epoch stays, the next grant goes one higher).
//!
//! # Leases on liveness
//!
//! A lease lasts in one of two ways. Granted with its own expiry (0.1, and
//! 0.2 until the cluster is finalized), it is extended by
//! [`Store::renew`], one row per lease per round. Granted on its holder's
//! liveness (gate `node-leases`, [`Store::set_leases_on_liveness`]), the row
//! names the holder's *liveness epoch* and the lease lasts while the
//! holder's registration is not down, still has that epoch, and its
//! `lease_expires_at` is in the future: [`Store::heartbeat`] renews every
//! such lease of a node in one statement, and a lease row changes only
//! when its holder does (CockroachDB's epoch-based leases, in SQL).
//! Taking over a dead node is one bump of its liveness epoch (made by the
//! first grant of one of its expired leases, or by marking it down) plus
//! the grants: a node that comes back after that finds its epoch moved and
//! revives none of its old leases. A renewal of a lease with its own expiry
//! once the gate is on moves it onto liveness, same epoch.
//!
//! # Fencing
//!
//! A write for a shard carries a [`LeaseToken`] `(shard, holder, epoch)` and
//! runs in one transaction that *first* takes a shared row lock on the lease
//! row and checks the token; a change of holder needs an exclusive lock on the
//! same row, so it waits for in-flight fenced transactions and they cannot
//! commit after it. The holder's liveness row is read in a subquery of that
//! locking read, which neither PostgreSQL nor InnoDB locks: writers of
//! different shards never queue behind one node row or behind the
//! heartbeat, and the heartbeat never waits for a writer. Applications fence
//! their own transactions with the same statement, as the first statement
//! of the transaction: [`Dialect::fence_sql`] (on PostgreSQL, with `$1`
//! shard, `$2` holder uuid, `$3` epoch):
//!
//! ```sql
//! SELECT 1 FROM chitin_shard_leases l
//!  WHERE l.shard_id = $1 AND l.holder = $2 AND l.epoch = $3
//!    AND CASE WHEN l.liveness_epoch IS NULL THEN l.expires_at
//!        ELSE (SELECT n.lease_expires_at FROM chitin_nodes n
//!               WHERE n.id = l.holder AND n.liveness_epoch = l.liveness_epoch
//!                 AND n.state <> 'down') END > clock_timestamp()
//!    FOR SHARE;
//! ```
//!
//! No row means the lease is lost: roll back. [`Store::append_fenced`] does
//! the same check before it writes to the journal.
//!
//! # Splits: one owner per key
//!
//! The invariant: at any instant, for any key, at most one (shard, holder,
//! epoch) passes the fence. A split hands a parent's range to its children
//! in one transaction, [`Store::split_seed`]: it locks the parent's lease row
//! exclusively (so it waits for every fenced writer holding it shared),
//! clears its holder and bumps its epoch, records the parent in
//! `chitin_shard_retirements`, and grants every child to the seeding node.
//! Why no interleaving yields two owners of a key:
//! - Parent before the split: a fenced write on the parent commits before
//!   the seed takes the row lock, or starts after the seed committed and
//!   finds the holder cleared (lost). Its token never passes again: no grant
//!   of a retired shard is ever made ([`Store::try_acquire`] refuses it under
//!   the parent's row lock), so the row stays without holder.
//! - Child before the split: [`Store::try_acquire`] with the child's parent
//!   grants only once the parent's retirement row exists, read under a shared
//!   lock on the parent's lease row, which the seed holds exclusively until
//!   it commits; so no child is held while the parent may still be. Locks are
//!   taken parent first, then child, in both, so they queue rather than
//!   deadlock.
//! - Nodes on different config versions or restarting: whatever a node
//!   believes, it acts only through these transactions, and they decide by
//!   the rows, not by the node's view. An old node that still routes to the
//!   parent fails the fence; a new node that tries a child before the seed
//!   is refused, and a second seeder finds the retirement
//!   ([`SplitSeed::AlreadyRetired`]).
// The column lists PostgreSQL and MySQL share (SQLite reads times as
// integers and writes its own); defined before the dialect modules, which
// splice them into their statements with `concat!`.
macro_rules! retirement_cols {
    () => {
        "shard_id, epoch, holder, holder_name, children, retired_at FROM chitin_shard_retirements"
    };
}

macro_rules! history_cols {
    () => {
        "shard_id, epoch, holder, holder_name, via, acquired_at FROM chitin_lease_history"
    };
}

#[cfg(test)]
mod bounds_tests;
mod engine;
mod error;
pub(crate) mod metrics;
mod mysql;
mod pg;
#[cfg(test)]
mod row_tests;
mod schema;
mod sqlite;

pub mod checks;
pub mod session;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

pub use error::{LeaseError, LostReason, MetaMismatch};
pub use metrics::contention_retries;

/// The SQL dialect of a database URL.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    Postgres,
    /// MySQL ≥ 8.0 or MariaDB ≥ 10.6 (`mysql://` or `mariadb://`).
    MySql,
    Sqlite,
}

impl Dialect {
    /// The dialect of a database URL, by its scheme.
    pub fn from_url(url: &str) -> Result<Dialect, LeaseError> {
        let scheme = url.split(':').next().unwrap_or("").to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::MySql),
            "sqlite" => Ok(Dialect::Sqlite),
            _ => Err(LeaseError::UnsupportedUrl { scheme }),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::MySql => "mysql",
            Dialect::Sqlite => "sqlite",
        }
    }
}

impl Dialect {
    /// The fence an application runs as the first statement of its own
    /// write transaction, with parameters (shard id, holder UUID as text or
    /// uuid, epoch): one row means the token is current, and the shared row
    /// lock keeps it current until the transaction ends; no row means the
    /// lease is lost, so roll back. On SQLite, run it inside `BEGIN IMMEDIATE`.
    pub fn fence_sql(self) -> &'static str {
        match self {
            Dialect::Postgres => pg::FENCE,
            Dialect::MySql => mysql::FENCE,
            Dialect::Sqlite => sqlite::FENCE,
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Timing and pool options of a [`Store`].
#[derive(Clone, Debug, PartialEq)]
pub struct StoreOptions {
    /// How long a granted or renewed lease lasts (`leases.ttl_secs`).
    pub lease_ttl: Duration,
    /// A node whose last heartbeat is older than this is not live
    /// (`cluster.liveness_timeout_secs`).
    pub liveness_timeout: Duration,
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long to wait for a connection.
    pub acquire_timeout: Duration,
    /// Handovers the whole database lets through in any window of
    /// [`handoff_window`](Self::handoff_window), whichever nodes plan them
    /// (`leases.max_handoffs_per_round`).
    pub max_handoffs_per_round: u32,
    /// One round (`leases.renew_interval_secs`).
    pub handoff_window: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            lease_ttl: Duration::from_secs(15),
            liveness_timeout: Duration::from_secs(30),
            max_connections: 10,
            acquire_timeout: Duration::from_secs(10),
            max_handoffs_per_round: 4,
            handoff_window: Duration::from_secs(5),
        }
    }
}

/// The lifecycle state of a node registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Joining,
    Active,
    Leaving,
    /// Deregistered, or superseded by a later registration of the same name.
    Down,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Joining => "joining",
            NodeState::Active => "active",
            NodeState::Leaving => "leaving",
            NodeState::Down => "down",
        }
    }
}

/// A registration's state as the policies see it.
impl From<NodeState> for chitin_policy_sdk::NodeState {
    fn from(state: NodeState) -> Self {
        match state {
            NodeState::Joining => chitin_policy_sdk::NodeState::Joining,
            NodeState::Active => chitin_policy_sdk::NodeState::Active,
            NodeState::Leaving => chitin_policy_sdk::NodeState::Leaving,
            NodeState::Down => chitin_policy_sdk::NodeState::Down,
        }
    }
}

impl FromStr for NodeState {
    type Err = LeaseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "joining" => Ok(NodeState::Joining),
            "active" => Ok(NodeState::Active),
            "leaving" => Ok(NodeState::Leaving),
            "down" => Ok(NodeState::Down),
            other => Err(LeaseError::Corrupt(format!("unknown node state `{other}`"))),
        }
    }
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One registration (incarnation) of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeRecord {
    pub id: Uuid,
    pub name: String,
    pub address: String,
    pub state: NodeState,
    pub started_at: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
    /// Not `down` and seen within the liveness timeout, by the database clock.
    pub live: bool,
}

/// The fencing token of a lease: what a writer must still hold to commit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseToken {
    pub shard: String,
    pub holder: Uuid,
    pub epoch: i64,
}

/// A lease held by a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Lease {
    pub shard: String,
    pub holder: Uuid,
    pub holder_name: String,
    pub epoch: i64,
    /// The holder's liveness epoch the lease rides on (renewed by the
    /// holder's heartbeat); `None` for a lease with its own expiry.
    pub liveness_epoch: Option<i64>,
    /// By the database clock (for a lease on liveness, the holder's as last
    /// read).
    pub expires_at: DateTime<Utc>,
}

impl Lease {
    pub fn token(&self) -> LeaseToken {
        LeaseToken { shard: self.shard.clone(), holder: self.holder, epoch: self.epoch }
    }
}

/// A shard that was split, from `chitin_shard_retirements`.
#[derive(Clone, Debug, PartialEq)]
pub struct Retirement {
    pub shard: String,
    /// The parent's epoch after retirement; no token passes the fence for it.
    pub epoch: i64,
    /// The node that retired it and was granted the children's first leases.
    pub holder: Uuid,
    pub holder_name: String,
    pub children: Vec<String>,
    /// By the database clock.
    pub retired_at: DateTime<Utc>,
}

/// The outcome of [`Store::split_seed`].
#[derive(Clone, Debug, PartialEq)]
pub enum SplitSeed {
    /// The parent is retired; the children's leases, held by the seeding node.
    Seeded(Vec<Lease>),
    /// The parent was retired before (by this call's twin, or earlier).
    AlreadyRetired,
    /// Another token holds the parent's lease live: nothing changed.
    HeldElsewhere { holder: Uuid, epoch: i64 },
}

/// A lease row as [`Store::holders`] reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseRow {
    pub shard: String,
    pub holder: Option<Uuid>,
    pub holder_name: Option<String>,
    pub epoch: i64,
    /// See [`Lease::liveness_epoch`].
    pub liveness_epoch: Option<i64>,
    /// The lease's own expiry, or its holder's for a lease on liveness.
    pub expires_at: Option<DateTime<Utc>>,
    /// Held and unexpired, by the database clock.
    pub live: bool,
}

impl LeaseRow {
    /// The holder and liveness epoch a takeover of this row ends first: a
    /// lease on liveness that is held but not live. Ending the epoch (only
    /// if the holder's leases did run out) keeps the holder from reviving
    /// this or any other lease on it; a lease with its own expiry needs no
    /// such step.
    pub fn lapsed_liveness(&self) -> Option<(Uuid, i64)> {
        match (self.holder, self.liveness_epoch, self.live) {
            (Some(holder), Some(epoch), false) => Some((holder, epoch)),
            _ => None,
        }
    }
}

/// One grant of a lease, from `chitin_lease_history`.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryEntry {
    pub shard: String,
    pub epoch: i64,
    pub holder: Uuid,
    pub holder_name: String,
    /// Taken or given.
    pub via: Via,
    pub acquired_at: DateTime<Utc>,
}

/// How a lease was granted, as `chitin_lease_history.via` records it (the
/// migrations' CHECK holds the same words; a test compares them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// Taken: a free or expired lease, or a split's children seeded by a
    /// node that did not hold their parent live.
    Acquire,
    /// Given by its live holder: a handover, or a split's children seeded by
    /// the parent's holder. Only the holder writes one.
    Handover,
}

impl Via {
    /// The word in the history's `via` column.
    pub const fn as_str(self) -> &'static str {
        match self {
            Via::Acquire => "acquire",
            Via::Handover => "handover",
        }
    }

    /// The grant a `via` column names; a word no migration allows is an
    /// error that says where it came from.
    pub fn from_column(word: &str) -> Result<Via, LeaseError> {
        [Via::Acquire, Via::Handover].into_iter().find(|v| v.as_str() == word).ok_or_else(|| {
            LeaseError::Corrupt(format!(
                "chitin_lease_history.via holds `{word}`, which this release never writes (it writes `acquire` or \
                 `handover`): the table was changed by hand, or a newer chitin wrote it (upgrade this node)"
            ))
        })
    }
}

/// What the cluster recorded at its first start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterMeta {
    pub shard_count: u64,
    pub lease_ttl: Duration,
    pub renew_interval: Duration,
}

impl ClusterMeta {
    /// From the row's shard count and milliseconds.
    fn from_row((count, ttl_ms, renew_ms): (i64, i64, i64)) -> ClusterMeta {
        let ms = |v: i64| Duration::from_millis(u64::try_from(v).unwrap_or(0));
        ClusterMeta { shard_count: u64::try_from(count).unwrap_or(0), lease_ttl: ms(ttl_ms), renew_interval: ms(renew_ms) }
    }
}

/// The outcome of an append: the entry's sequence number in its stream and
/// the epoch it was committed under (the original ones for a repeated
/// request id).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Appended {
    pub seq: i64,
    pub epoch: i64,
    /// False when the request id had already been applied and nothing new was written.
    pub fresh: bool,
}

/// An entry to append.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewEntry {
    pub stream: String,
    pub request_id: String,
    pub payload: Vec<u8>,
}

/// One journal entry.
#[derive(Clone, Debug, PartialEq)]
pub struct JournalEntry {
    pub stream: String,
    pub seq: i64,
    pub request_id: String,
    pub payload: Vec<u8>,
    pub shard: String,
    pub epoch: i64,
    pub committed_at: DateTime<Utc>,
}

/// The durable store, one variant per dialect.
#[derive(Clone, Debug)]
pub enum Store {
    Postgres(engine::Engine<pg::Pg>),
    MySql(engine::Engine<mysql::My>),
    Sqlite(engine::Engine<sqlite::Lite>),
}

macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match $self {
            Store::Postgres($s) => $e,
            Store::MySql($s) => $e,
            Store::Sqlite($s) => $e,
        }
    };
}

impl Store {
    /// Connects with default timing (15 s lease TTL, 30 s liveness).
    pub async fn connect(url: &str) -> Result<Store, LeaseError> {
        Store::connect_with(url, StoreOptions::default()).await
    }

    /// Connects with the given timing and pool options.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store, LeaseError> {
        if options.lease_ttl.is_zero() || options.liveness_timeout.is_zero() {
            return Err(LeaseError::InvalidArgument("lease_ttl and liveness_timeout must be positive".into()));
        }
        Ok(match Dialect::from_url(url)? {
            Dialect::Postgres => Store::Postgres(pg::connect(url, options).await?),
            Dialect::MySql => Store::MySql(mysql::connect(url, options).await?),
            Dialect::Sqlite => Store::Sqlite(sqlite::connect(url, options).await?),
        })
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            Store::Postgres(_) => Dialect::Postgres,
            Store::MySql(_) => Dialect::MySql,
            Store::Sqlite(_) => Dialect::Sqlite,
        }
    }

    pub fn options(&self) -> &StoreOptions {
        dispatch!(self, s => &s.options)
    }

    /// Sets the lease timing before the store is shared (a node that takes
    /// its cluster's recorded timing): the TTL, which is also how long a
    /// node's heartbeat keeps it live, and one round.
    pub fn set_lease_timing(&mut self, lease_ttl: Duration, round: Duration) {
        dispatch!(self, s => {
            s.options.lease_ttl = lease_ttl;
            s.options.liveness_timeout = lease_ttl;
            s.options.handoff_window = round;
        })
    }

    /// Closes the pool, waiting for connections to be returned.
    pub async fn close(&self) {
        dispatch!(self, s => s.close().await)
    }

    /// Creates or upgrades the schema (idempotent; concurrent callers are
    /// serialised by the migrator's lock on PostgreSQL and MySQL). Applied
    /// migrations this binary does not know are left alone and logged.
    pub async fn migrate(&self) -> Result<(), LeaseError> {
        self.run_migrations().await?;
        let applied = dispatch!(self, s => s.migration_versions().await?);
        for version in schema::unknown_versions(&applied) {
            tracing::info!(version, "the schema has a migration this binary does not know (a newer version applied it)");
        }
        Ok(())
    }

    async fn run_migrations(&self) -> Result<(), LeaseError> {
        let migrator = schema::migrator(self.dialect());
        match self {
            Store::Postgres(s) => migrator.run(&s.pool).await?,
            // sqlx's MySQL lock is `GET_LOCK(…, -1)`, which MariaDB answers
            // with NULL (no lock): take our own named lock on one connection.
            Store::MySql(s) => {
                let mut migrator = migrator;
                migrator.set_locking(false);
                let mut conn = s.pool.acquire().await?;
                let got: Option<i64> =
                    sqlx::query_scalar("SELECT GET_LOCK(CONCAT('chitin_migrate.', COALESCE(DATABASE(), '')), 600)")
                        .fetch_one(&mut *conn)
                        .await?;
                if got != Some(1) {
                    return Err(LeaseError::Corrupt("could not take the migration lock (GET_LOCK) within 600 s".into()));
                }
                let ran = migrator.run_direct(None, &mut *conn, false).await;
                sqlx::query("SELECT RELEASE_LOCK(CONCAT('chitin_migrate.', COALESCE(DATABASE(), '')))")
                    .execute(&mut *conn)
                    .await?;
                ran?;
            }
            // sqlx takes no lock on SQLite: hold the write lock for the whole
            // run so that concurrent starts apply each migration once.
            // (`run_direct` is what `run` calls; it takes the connection of
            // our transaction, which `run`'s `Acquire` bound cannot.)
            Store::Sqlite(s) => {
                let mut tx = s.pool.begin_with("BEGIN IMMEDIATE").await?;
                migrator.run_direct(None, &mut *tx, false).await?;
                tx.commit().await?;
            }
        }
        Ok(())
    }

    /// The database clock.
    pub async fn now(&self) -> Result<DateTime<Utc>, LeaseError> {
        dispatch!(self, s => s.now().await)
    }

    // ---- node identity ----------------------------------------------------

    /// Registers a new incarnation of node `name` in state `joining`; the
    /// database assigns its UUID. Earlier registrations of the name that are
    /// no longer live are marked `down`; a live one refuses with
    /// [`LeaseError::NameInUse`].
    pub async fn register_node(&self, name: &str, address: &str) -> Result<Uuid, LeaseError> {
        if name.is_empty() || name.contains(':') {
            return Err(LeaseError::InvalidArgument(format!("node name `{name}` must be non-empty and must not contain `:`")));
        }
        dispatch!(self, s => s.register_node(name, address).await)
    }

    /// Records that the node is alive (`last_seen` = database now) and
    /// extends every lease it holds on its liveness by the TTL: one
    /// statement, whatever the number of shards. `liveness_epoch` is the one
    /// the node knows (1 for a new registration); the current one is
    /// returned, and a different one means a peer ended the old one and
    /// every lease on it is gone. Fails with
    /// [`LeaseError::NodeNotRegistered`] once the registration is `down`.
    pub async fn heartbeat(&self, node: Uuid, liveness_epoch: i64) -> Result<i64, LeaseError> {
        dispatch!(self, s => s.heartbeat(node, liveness_epoch).await)
    }

    /// Whether grants from this store ride on the holder's liveness (gate
    /// `node-leases`, on once the cluster is finalized at 0.2): set by the
    /// node from the cluster version, shared by every clone of the store.
    pub fn set_leases_on_liveness(&self, on: bool) {
        dispatch!(self, s => s.set_on_liveness(on))
    }

    pub fn leases_on_liveness(&self) -> bool {
        dispatch!(self, s => s.on_liveness())
    }

    /// Moves a live registration to `state` (joining → active → leaving).
    /// Use [`Store::deregister`] for `down`.
    pub async fn set_node_state(&self, node: Uuid, state: NodeState) -> Result<(), LeaseError> {
        if state == NodeState::Down {
            return self.deregister(node).await;
        }
        dispatch!(self, s => s.set_node_state(node, state).await)
    }

    /// Marks the registration `down` and frees every lease it still holds
    /// (their epochs stay; the next grant goes one higher). Idempotent.
    pub async fn deregister(&self, node: Uuid) -> Result<(), LeaseError> {
        dispatch!(self, s => s.deregister(node).await)
    }

    /// Every registration, newest first.
    pub async fn nodes(&self) -> Result<Vec<NodeRecord>, LeaseError> {
        dispatch!(self, s => s.nodes().await)
    }

    // ---- cluster meta ------------------------------------------------------

    /// What the cluster recorded at its first start; `None` before any node
    /// started (needs the schema: after [`Store::migrate`]).
    pub async fn recorded_meta(&self) -> Result<Option<ClusterMeta>, LeaseError> {
        let recorded = dispatch!(self, s => s.recorded_meta().await?);
        Ok(recorded.map(ClusterMeta::from_row))
    }

    /// Records the cluster's shard count and lease timing on first start;
    /// later starts must match, else [`LeaseError::ClusterMetaMismatch`]
    /// names each differing value. Durations are compared in milliseconds.
    pub async fn check_cluster_meta(
        &self,
        shard_count: u64,
        lease_ttl: Duration,
        renew_interval: Duration,
    ) -> Result<ClusterMeta, LeaseError> {
        let ms = |d: Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let count = i64::try_from(shard_count).map_err(|_| LeaseError::InvalidArgument("shard count too large".into()))?;
        let (c, t, r) = dispatch!(self, s =>
            s.check_cluster_meta(count, ms(lease_ttl), ms(renew_interval)).await?);
        let recorded = ClusterMeta::from_row((c, t, r));
        let mut mismatches = Vec::new();
        if c != count {
            mismatches.push(MetaMismatch { field: "shard count", cluster: c.to_string(), ours: count.to_string() });
        }
        if t != ms(lease_ttl) {
            mismatches.push(MetaMismatch { field: "leases.ttl_secs", cluster: secs(t), ours: secs(ms(lease_ttl)) });
        }
        if r != ms(renew_interval) {
            mismatches.push(MetaMismatch {
                field: "leases.renew_interval_secs",
                cluster: secs(r),
                ours: secs(ms(renew_interval)),
            });
        }
        if mismatches.is_empty() { Ok(recorded) } else { Err(LeaseError::ClusterMetaMismatch { mismatches }) }
    }

    // ---- leases -----------------------------------------------------------

    /// Takes the lease of `shard` for `node` if it is free or expired (by the
    /// database clock); `None` if another holder's lease is still live, if
    /// `shard` is retired (split), or if `parent` is given and not yet
    /// retired (a child is granted only after its parent's split). A grant
    /// increments the epoch and is recorded in the lease history. The node
    /// must be registered and not `down`.
    pub async fn try_acquire(&self, shard: &str, node: Uuid, parent: Option<&str>) -> Result<Option<Lease>, LeaseError> {
        dispatch!(self, s => s.try_acquire(shard, node, parent).await)
    }

    /// Retires `parent` and grants its `children` to `node`, in one
    /// transaction (see the module docs, "Splits"). `held` is the parent's
    /// token if `node` holds it: a live parent lease held by any other token
    /// is [`SplitSeed::HeldElsewhere`]. The children must be new or free;
    /// `node` must be registered and not `down`.
    pub async fn split_seed(
        &self,
        parent: &str,
        children: &[String],
        node: Uuid,
        held: Option<&LeaseToken>,
    ) -> Result<SplitSeed, LeaseError> {
        let mut seen = std::collections::BTreeSet::new();
        if children.is_empty() || children.iter().any(|c| c == parent || c.is_empty() || c.contains(',') || !seen.insert(c)) {
            return Err(LeaseError::InvalidArgument(format!(
                "split of `{parent}` into {children:?}: children must be distinct, non-empty, without `,`, \
                 and not the parent"
            )));
        }
        dispatch!(self, s => s.split_seed(parent, children, node, held).await)
    }

    /// Every retired (split) shard, by shard id.
    pub async fn retirements(&self) -> Result<Vec<Retirement>, LeaseError> {
        dispatch!(self, s => s.retirements().await)
    }

    /// Whether `shard` was split (its lease is never granted again).
    pub async fn is_retired(&self, shard: &str) -> Result<bool, LeaseError> {
        Ok(dispatch!(self, s => s.retirement(shard).await?).is_some())
    }

    /// Extends an unexpired lease by the TTL from the database's now; same
    /// epoch. [`LeaseError::LeaseLost`] if the lease expired or changed.
    pub async fn renew(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        dispatch!(self, s => s.renew(lease).await)
    }

    /// Frees a lease that this holder still has at this epoch (expired or
    /// not, as long as nobody took it); [`LeaseError::LeaseLost`] otherwise.
    pub async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        dispatch!(self, s => s.release(lease).await)
    }

    /// Hands an unexpired lease to node `to` (registered, live, not leaving:
    /// else [`LeaseError::NodeNotLive`] or [`LeaseError::NodeLeaving`]) with
    /// a new epoch and a full TTL; returns the recipient's lease. Spends one
    /// handover of the database-wide budget
    /// ([`StoreOptions::max_handoffs_per_round`]), or refuses with
    /// [`LeaseError::HandoffBudget`].
    pub async fn handover(&self, lease: &Lease, to: Uuid) -> Result<Lease, LeaseError> {
        dispatch!(self, s => s.handover(lease, to).await)
    }

    /// `Ok` when the database-wide handoff budget has room now, else
    /// [`LeaseError::HandoffBudget`] saying when it will; [`Store::handover`]
    /// checks again, under the budget's lock.
    pub async fn handoff_budget(&self) -> Result<(), LeaseError> {
        dispatch!(self, s => s.handoff_budget().await)
    }

    /// Every lease row, by shard id.
    pub async fn holders(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        dispatch!(self, s => s.holders().await)
    }

    /// The lease row of one shard (`None`: never acquired).
    pub async fn lease(&self, shard: &str) -> Result<Option<LeaseRow>, LeaseError> {
        dispatch!(self, s => s.lease(shard).await)
    }

    /// The live leases `node` holds, by shard id.
    pub async fn leases_of(&self, node: Uuid) -> Result<Vec<LeaseRow>, LeaseError> {
        dispatch!(self, s => s.leases_of(node).await)
    }

    /// The live leases `node` holds and the rows of `shards` (those never
    /// leased have none), by shard id: a lease round's read, by index.
    pub async fn round_leases(&self, node: Uuid, shards: &[String]) -> Result<Vec<LeaseRow>, LeaseError> {
        dispatch!(self, s => s.round_leases(node, shards).await)
    }

    /// The lease history (of one shard, or all), by shard and epoch.
    pub async fn history(&self, shard: Option<&str>) -> Result<Vec<HistoryEntry>, LeaseError> {
        dispatch!(self, s => s.history(shard).await)
    }

    // ---- journal ----------------------------------------------------------

    /// Appends to `stream` under the fence: one transaction that first locks
    /// the lease row (shared) and checks holder, epoch and expiry, else
    /// aborts with [`LeaseError::LeaseLost`] and writes nothing. A
    /// `request_id` already applied to the stream returns the original
    /// `(seq, epoch)` with `fresh = false` and writes nothing.
    pub async fn append_fenced(
        &self,
        token: &LeaseToken,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Appended, LeaseError> {
        dispatch!(self, s => s.append(Some(token), &token.shard, token.epoch, stream, request_id, payload).await)
    }

    /// Appends every entry under one fence in one transaction (group
    /// commit): the fence as for [`Store::append_fenced`], then each entry
    /// in order, answered with its own sequence, or with the original
    /// outcome (`fresh = false`) of a request id applied before, earlier in
    /// the batch included. All or nothing: a lost lease writes none of them.
    pub async fn append_batch(&self, token: &LeaseToken, entries: &[NewEntry]) -> Result<Vec<Appended>, LeaseError> {
        match self {
            Store::Postgres(s) => pg::append_batch(s, token, entries).await,
            Store::MySql(s) => s.append_batch(token, entries).await,
            Store::Sqlite(s) => s.append_batch(token, entries).await,
        }
    }

    /// Whether [`Store::append_batch`] beats the same appends sent side by
    /// side: on PostgreSQL a batch is one statement, on SQLite one local
    /// transaction (one sync); on MySQL/MariaDB it is a round trip per
    /// statement, several per append, where a single append is one call.
    pub fn batches_appends(&self) -> bool {
        !matches!(self, Store::MySql(_))
    }

    /// The same insert without the lease check (the benchmark's baseline).
    pub async fn append_unfenced(
        &self,
        token: &LeaseToken,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Appended, LeaseError> {
        dispatch!(self, s => s.append(None, &token.shard, token.epoch, stream, request_id, payload).await)
    }

    /// Up to `limit` entries of `stream` with `seq >= from`, in order.
    pub async fn read(&self, stream: &str, from: i64, limit: u32) -> Result<Vec<JournalEntry>, LeaseError> {
        Ok(self.read_capped(stream, from, limit, usize::MAX).await?.0)
    }

    /// [`Store::read`] stopping once the payloads pass `max_bytes` (at least
    /// one entry comes); `true` when that cut the answer short.
    pub async fn read_capped(
        &self,
        stream: &str,
        from: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<JournalEntry>, bool), LeaseError> {
        dispatch!(self, s => s.read(stream, from, i64::from(limit), max_bytes).await)
    }
}

fn secs(ms: i64) -> String {
    format!("{}", ms as f64 / 1000.0)
}

/// Microseconds of a duration, saturating.
pub(crate) fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

pub(crate) fn parse_uuid(s: &str) -> Result<Uuid, LeaseError> {
    Uuid::parse_str(s).map_err(|e| LeaseError::Corrupt(format!("bad uuid `{s}` in database: {e}")))
}

/// Why `token` does not hold `current` (None: it does).
pub(crate) fn lost_reason(current: Option<&LeaseRow>, token: &LeaseToken) -> Option<LostReason> {
    let c = match current {
        None => return Some(LostReason::NoLease),
        Some(c) => c,
    };
    if c.holder == Some(token.holder) && c.epoch == token.epoch {
        if c.live { None } else { Some(LostReason::Expired { expired_at: c.expires_at.unwrap_or_default() }) }
    } else if c.holder.is_none() && c.epoch == token.epoch {
        Some(LostReason::Released)
    } else {
        Some(LostReason::Superseded { holder: c.holder, epoch: c.epoch })
    }
}

pub(crate) fn lost(token: &LeaseToken, reason: LostReason) -> LeaseError {
    LeaseError::LeaseLost { shard: token.shard.clone(), holder: token.holder, epoch: token.epoch, reason }
}

/// The constraint name of a unique violation, if `e` is one.
pub(crate) fn unique_violation(e: &sqlx::Error) -> Option<String> {
    match e {
        sqlx::Error::Database(d) if d.is_unique_violation() => {
            Some(d.constraint().map(str::to_owned).unwrap_or_else(|| d.message().to_owned()))
        }
        _ => None,
    }
}
