//! The store's choreography, written once over a [`Backend`] that holds only
//! a dialect's SQL text and how it spells three column types (UUIDs, times,
//! truth values). Every statement takes its parameters in the order listed
//! beside its [`Sql`] field, each once, so that MySQL's positional `?` and
//! PostgreSQL's `$n` bind the same way.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, Utc};
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Pool, Row, Transaction, Type};
use uuid::Uuid;

use crate::plant::{self, Plant};

use super::{
    Appended, HistoryEntry, JournalEntry, Lease, LeaseError, LeaseRow, LeaseToken, LostReason, NewEntry, NodeRecord, NodeState,
    Retirement, SplitSeed, StoreOptions, Via, lost, lost_reason, micros, parse_uuid, unique_violation,
};

/// What kind of contention ended a transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contended {
    /// A serialization failure, a deadlock, a busy database: it lost a race
    /// and may simply run again.
    Conflict,
    /// A statement waited for a row lock until the session's bound (half a
    /// TTL) ended it: the holder of the lock is stuck, not racing.
    LockWait,
}

/// How often a transaction that hit contention is run before giving up.
pub(crate) const ATTEMPTS: usize = 8;

/// A pooled connection idle at least this long is pinged before it is
/// used; see [`ping_when_idle`].
pub(super) const PING_WHEN_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// `options` with the check before use kept for connections that sat idle
/// ([`PING_WHEN_IDLE`]) and dropped for those in steady use. The driver's
/// default pings every connection before every use: a round trip of its own
/// in front of each append's single statement. A connection in steady use
/// is also pinged when it goes back to the pool (the driver does that after
/// every use), so the check before use adds nothing for it; an idle one may
/// have been cut meanwhile (a database restart) and is still checked.
pub(super) fn ping_when_idle<DB: Database>(options: sqlx::pool::PoolOptions<DB>) -> sqlx::pool::PoolOptions<DB> {
    options.test_before_acquire(false).before_acquire(|conn, meta| {
        Box::pin(async move {
            if meta.idle_for >= PING_WHEN_IDLE {
                sqlx::Connection::ping(conn).await?;
            }
            Ok(true)
        })
    })
}

/// The most values one `IN (…)` list binds: far under every dialect's limit
/// on parameters per statement (SQLite's is the lowest).
const IN_LIST_MAX: usize = 500;

/// One dialect's statements; the comment of each names its parameters in
/// binding order and, for queries, the columns read.
pub struct Sql {
    /// () → now
    pub now: &'static str,
    /// () → id (text): a UUID made by the database.
    pub new_node_id: &'static str,
    /// (name, liveness µs): earlier registrations of the name not seen within the timeout go `down`.
    pub mark_stale_down: &'static str,
    /// (id, name, address)
    pub insert_node: &'static str,
    /// (name) → id, address, last_seen of the registration that is not down.
    pub name_holder: &'static str,
    /// (ttl µs, node, liveness epoch): last seen now, the node's leases extended by the TTL; nothing
    /// updated when the node is down or its liveness epoch moved on.
    pub heartbeat: &'static str,
    /// (node) → state, liveness_epoch
    pub liveness: &'static str,
    /// (state, node)
    pub set_state: &'static str,
    /// (node): frees every lease the node holds.
    pub free_leases_of: &'static str,
    /// (node): down, and its liveness epoch bumped (every lease on it ends).
    pub mark_down: &'static str,
    /// (node, liveness epoch): the epoch bumped if it is still this one and the node's leases
    /// ran out, so that a node coming back cannot revive what a peer is taking over.
    pub bump_liveness: &'static str,
    /// (liveness µs) → id, name, address, state, started_at, last_seen, live; newest first.
    pub nodes: &'static str,
    /// (liveness µs, node) → name, state, live, liveness_epoch, leased (its leases unexpired).
    pub node: &'static str,
    /// (shard count, ttl ms, renew ms): first writer wins.
    pub insert_meta: &'static str,
    /// () → shard_count, lease_ttl_ms, renew_interval_ms
    pub meta: &'static str,
    /// (shard) → the lease columns (shard_id, holder, holder_name, epoch, liveness_epoch,
    /// expires_at, live); `expires_at` and `live` judge a lease on liveness by its holder's row.
    pub lease: &'static str,
    /// (shard) → the lease columns, row locked exclusively.
    pub lease_for_update: &'static str,
    /// (shard) → the lease columns, row locked shared: the fence.
    pub lease_for_share: &'static str,
    /// (shard): a free row at epoch 0 unless one exists.
    pub ensure_lease: &'static str,
    /// (holder, holder_name, ttl µs, shard): a grant with its own expiry, epoch + 1.
    pub grant: &'static str,
    /// (holder, holder_name, liveness epoch, shard): a grant on the holder's liveness, epoch + 1.
    pub grant_on_liveness: &'static str,
    /// (liveness epoch, shard, holder, epoch): an unexpired lease with its own expiry moved onto
    /// its holder's liveness, same epoch.
    pub convert: &'static str,
    /// (shard): holder and expiry cleared, epoch + 1.
    pub retire: &'static str,
    /// (ttl µs, shard, holder, epoch): extends an unexpired lease with its own expiry.
    pub renew: &'static str,
    /// (shard, holder, epoch)
    pub release: &'static str,
    /// () → the lease columns of every row, by shard.
    pub holders: &'static str,
    /// (node) → the lease columns of the node's live leases, by shard.
    pub leases_of: &'static str,
    /// (shard, …) → the lease columns of the named shards. Ends in `IN (`: the engine adds a
    /// placeholder per shard and the closing parenthesis.
    pub leases_in: &'static str,
    /// (shard, epoch, holder, holder_name, via)
    pub insert_history: &'static str,
    /// () → shard_id, epoch, holder, holder_name, via, acquired_at; by shard and epoch.
    pub history: &'static str,
    /// (shard) → as `history`.
    pub history_of: &'static str,
    /// (shard, epoch, holder, holder_name, children)
    pub insert_retirement: &'static str,
    /// (shard) → shard_id, epoch, holder, holder_name, children, retired_at; a locking read, so
    /// that MySQL's repeatable read sees the latest commit.
    pub retirement_locked: &'static str,
    /// (shard) → as `retirement_locked`, without a lock.
    pub retirement: &'static str,
    /// () → as `retirement_locked`, every row by shard.
    pub retirements: &'static str,
    /// () → id: the handoff budget's row, locked exclusively (every
    /// handover takes it first, so budget checks run one at a time).
    pub handoff_budget: &'static str,
    /// (window µs) → n, oldest, now: handovers in the history within the
    /// last window, the oldest of them, and the database clock.
    pub recent_handoffs: &'static str,
    /// (stream, seq, request_id, payload, shard, epoch)
    pub insert_entry: &'static str,
    /// (stream, request_id) → seq, epoch
    pub entry_of_request: &'static str,
    /// (stream, from, limit) → stream, seq, request_id, payload, shard_id, epoch, committed_at
    pub read: &'static str,
}

/// An append as one statement (a dialect with data-modifying CTEs): both
/// return the new entry's `seq`, nothing when the fence fails.
pub struct AppendInOne {
    /// (shard, holder, epoch, stream, request_id, payload)
    pub fenced: &'static str,
    /// (shard, epoch, stream, request_id, payload)
    pub unfenced: &'static str,
    /// The statement commits its own transaction (a procedure call), so it
    /// cannot run inside one held open by a failpoint: a paused commit goes
    /// the transactional way instead, which takes the same locks.
    pub commits_itself: bool,
}

/// What differs between dialects: SQL text, column decoding, which errors
/// mean contention, and the one statement whose result each reads its own way.
pub trait Backend: Clone + std::fmt::Debug + Send + Sync + 'static {
    type Db: Database;
    const SQL: Sql;
    /// The statement that opens a write transaction (`None`: the driver's `BEGIN`).
    const BEGIN_WRITE: Option<&'static str> = None;
    /// The append in one statement, where the dialect can say it.
    const APPEND_IN_ONE: Option<AppendInOne> = None;
    /// Whether `e` is contention, and which kind: the transaction was rolled
    /// back either way.
    fn contention(e: &sqlx::Error) -> Option<Contended>;
    fn uuid(row: &<Self::Db as Database>::Row, col: &str) -> Result<Option<Uuid>, LeaseError>;
    fn time(row: &<Self::Db as Database>::Row, col: &str) -> Result<Option<DateTime<Utc>>, LeaseError>;
    fn flag(row: &<Self::Db as Database>::Row, col: &str) -> Result<bool, LeaseError>;
    fn affected(done: &<Self::Db as Database>::QueryResult) -> u64;
    /// The stream's next sequence number, its row locked until the transaction ends.
    fn next_seq<'c>(
        conn: &'c mut <Self::Db as Database>::Connection,
        stream: &'c str,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c;
}

/// A try of a retried transaction that did not finish.
pub(crate) enum Attempt {
    /// Lost a race (contention, or a duplicate key whose winner then rolled back): run again.
    Again(sqlx::Error),
    Fail(LeaseError),
}

impl From<sqlx::Error> for Attempt {
    fn from(e: sqlx::Error) -> Self {
        Attempt::Fail(LeaseError::Db(e))
    }
}

impl From<LeaseError> for Attempt {
    fn from(e: LeaseError) -> Self {
        Attempt::Fail(e)
    }
}

/// `[database] max_connections` split between the control plane's pool and
/// the journal's data pool: a quarter (one to four) for leases and
/// registrations, the rest (at least one) for appends and reads. The lease
/// round needs one connection at a time; the rest serve the status page,
/// metrics and `Route` lookups.
pub(super) fn pool_sizes(max_connections: u32) -> (u32, u32) {
    let control = (max_connections / 4).clamp(1, 4);
    (control, max_connections.saturating_sub(control).max(1))
}

/// How long a statement of the control pool (the lease round's,
/// registrations', the lease table's readers') or of the heartbeat waits for
/// a connection: `database.acquire_timeout_secs`, but no longer than the
/// lock bound (half a TTL, at least 500 ms), so that a round statement
/// waits out one bound at most, for a row or for a connection, and then
/// ends the round ([`LeaseError::Db`] of `PoolTimedOut`). The journal's
/// pool keeps the setting.
pub(super) fn control_acquire_timeout(options: &StoreOptions) -> std::time::Duration {
    options.acquire_timeout.min((options.lease_ttl / 2).max(std::time::Duration::from_millis(500)))
}

/// The store over one dialect.
#[derive(Debug)]
pub struct Engine<B: Backend> {
    /// Leases, registrations and the rest of the control plane's rows.
    pub(crate) pool: Pool<B::Db>,
    /// The journal's appends and reads, apart from `pool`: appends that
    /// stall (a slow disk, a lock, a failpoint's park) hold their
    /// connections, and must not starve the lease round of the connection
    /// it grants a dead node's shards with (`None`: SQLite, one writer,
    /// whose data shares the pool).
    data_pool: Option<Pool<B::Db>>,
    /// The heartbeat's own connection, so that it never queues behind
    /// acquisitions, appends or client reads (`None`: SQLite, as above).
    heartbeat_pool: Option<Pool<B::Db>>,
    pub(crate) options: StoreOptions,
    /// Grants name the holder's liveness epoch (gate `node-leases` on),
    /// shared by every clone.
    on_liveness: Arc<AtomicBool>,
    backend: PhantomData<B>,
}

/// A registration as a grant needs it.
struct Taker {
    name: String,
    state: NodeState,
    /// Seen within the liveness timeout.
    live: bool,
    liveness_epoch: i64,
    /// Its leases on liveness are unexpired.
    leased: bool,
}

// Not derived: the derive would ask the driver type to be `Clone`.
impl<B: Backend> Clone for Engine<B> {
    fn clone(&self) -> Self {
        Engine {
            pool: self.pool.clone(),
            data_pool: self.data_pool.clone(),
            heartbeat_pool: self.heartbeat_pool.clone(),
            options: self.options.clone(),
            on_liveness: self.on_liveness.clone(),
            backend: PhantomData,
        }
    }
}

type DbRow<B> = <<B as Backend>::Db as Database>::Row;

fn not_found(shard: &str) -> LeaseError {
    LeaseError::Corrupt(format!("the lease row of `{shard}` vanished inside its transaction"))
}

impl<B: Backend> Engine<B>
where
    for<'c> &'c mut <B::Db as Database>::Connection: Executor<'c, Database = B::Db>,
    <B::Db as Database>::Arguments: IntoArguments<B::Db>,
    for<'a> &'a str: Encode<'a, B::Db> + Type<B::Db> + ColumnIndex<DbRow<B>>,
    for<'a> &'a [u8]: Encode<'a, B::Db> + Type<B::Db>,
    for<'a> i64: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'a> String: Encode<'a, B::Db> + Decode<'a, B::Db> + Type<B::Db>,
    for<'a> Vec<u8>: Decode<'a, B::Db> + Type<B::Db>,
{
    pub(crate) fn new(pool: Pool<B::Db>, options: StoreOptions) -> Self {
        Engine { pool, data_pool: None, heartbeat_pool: None, options, on_liveness: Arc::default(), backend: PhantomData }
    }

    /// The same engine with pools of their own for the journal's data and
    /// for the heartbeat.
    pub(crate) fn with_own_pools(self, data_pool: Pool<B::Db>, heartbeat_pool: Pool<B::Db>) -> Self {
        Engine { data_pool: Some(data_pool), heartbeat_pool: Some(heartbeat_pool), ..self }
    }

    /// The pool of the journal's appends and reads.
    pub(crate) fn data(&self) -> &Pool<B::Db> {
        self.data_pool.as_ref().unwrap_or(&self.pool)
    }

    /// Closes every pool.
    pub(crate) async fn close(&self) {
        for p in [&self.heartbeat_pool, &self.data_pool].into_iter().flatten() {
            p.close().await;
        }
        self.pool.close().await;
    }

    pub(crate) fn set_on_liveness(&self, on: bool) {
        self.on_liveness.store(on, Ordering::SeqCst);
    }

    pub(crate) fn on_liveness(&self) -> bool {
        self.on_liveness.load(Ordering::SeqCst)
    }

    fn ttl(&self) -> i64 {
        micros(self.options.lease_ttl)
    }

    fn liveness(&self) -> i64 {
        micros(self.options.liveness_timeout)
    }

    async fn begin(&self) -> Result<Transaction<'static, B::Db>, sqlx::Error> {
        Self::begin_in(&self.pool).await
    }

    /// A write transaction of the journal's data ([`Engine::data`]).
    async fn begin_data(&self) -> Result<Transaction<'static, B::Db>, sqlx::Error> {
        Self::begin_in(self.data()).await
    }

    async fn begin_in(pool: &Pool<B::Db>) -> Result<Transaction<'static, B::Db>, sqlx::Error> {
        match B::BEGIN_WRITE {
            Some(begin) => pool.begin_with(begin).await,
            None => pool.begin().await,
        }
    }

    /// Runs `attempt` until it finishes, again after a conflict (at most
    /// [`ATTEMPTS`] times; then [`LeaseError::Contention`] with the last
    /// driver error); a lock-wait timeout ends it ([`LeaseError::LockWait`]).
    pub(crate) async fn with_retry<T, F, Fut>(&self, op: &'static str, mut attempt: F) -> Result<T, LeaseError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Attempt>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let contended = match attempt().await {
                Ok(v) => return Ok(v),
                Err(Attempt::Again(e)) => e,
                Err(Attempt::Fail(LeaseError::Db(e))) => match B::contention(&e) {
                    Some(Contended::Conflict) => e,
                    // It already waited its bound: another wait, and another,
                    // would take a lease round past its own leases' expiry.
                    // The lock's holder is ended by its own idle bound; the
                    // next round tries again.
                    Some(Contended::LockWait) => return Err(LeaseError::LockWait { op, source: e }),
                    None => return Err(LeaseError::Db(e)),
                },
                Err(Attempt::Fail(e)) => return Err(e),
            };
            if attempts == ATTEMPTS {
                return Err(LeaseError::Contention { op, attempts, source: contended });
            }
            // Two transactions that deadlocked and retry at once meet again in
            // the same order; a random pause, longer each time, parts them.
            super::metrics::count_retry(op);
            tokio::time::sleep(retry_pause(attempts)).await;
        }
    }

    // ---- row mapping --------------------------------------------------------

    fn lease_row(row: &DbRow<B>) -> Result<LeaseRow, LeaseError> {
        let mut lease = LeaseRow {
            shard: row.try_get("shard_id")?,
            holder: B::uuid(row, "holder")?,
            holder_name: row.try_get("holder_name")?,
            epoch: row.try_get("epoch")?,
            liveness_epoch: row.try_get("liveness_epoch")?,
            expires_at: B::time(row, "expires_at")?,
            live: B::flag(row, "live")?,
        };
        if plant::active(Plant::Liveness) && lease.liveness_epoch.is_some() {
            // Planted: "has an expiry" taken for "unexpired". The expiry of a
            // lease on liveness is there while its holder's row is at its
            // epoch and not down; only the comparison with now says it ran out.
            lease.live = lease.holder.is_some() && lease.expires_at.is_some();
        }
        Ok(lease)
    }

    fn retirement_row(row: &DbRow<B>) -> Result<Retirement, LeaseError> {
        let children: String = row.try_get("children")?;
        Ok(Retirement {
            shard: row.try_get("shard_id")?,
            epoch: row.try_get("epoch")?,
            holder: B::uuid(row, "holder")?.ok_or_else(|| LeaseError::Corrupt("retirement without holder".into()))?,
            holder_name: row.try_get("holder_name")?,
            children: children.split(',').filter(|c| !c.is_empty()).map(str::to_owned).collect(),
            retired_at: required_time::<B>(row, "retired_at")?,
        })
    }

    async fn lease_in(
        conn: &mut <B::Db as Database>::Connection,
        sql: &'static str,
        shard: &str,
    ) -> Result<Option<LeaseRow>, LeaseError> {
        let row = sqlx::query(sql).bind(shard).fetch_optional(conn).await?;
        row.as_ref().map(Self::lease_row).transpose()
    }

    /// A registration as grants and handovers judge it.
    async fn node_in(&self, conn: &mut <B::Db as Database>::Connection, node: Uuid) -> Result<Option<Taker>, LeaseError> {
        let row = sqlx::query(B::SQL.node).bind(self.liveness()).bind(node.to_string().as_str()).fetch_optional(conn).await?;
        row.map(|r| {
            Ok(Taker {
                name: r.try_get("name")?,
                state: r.try_get::<String, _>("state")?.parse()?,
                live: B::flag(&r, "live")?,
                liveness_epoch: r.try_get("liveness_epoch")?,
                leased: B::flag(&r, "leased")?,
            })
        })
        .transpose()
    }

    /// A registration that may take leases: not down, and when grants ride
    /// on liveness, with its own liveness unexpired (a grant it could not
    /// use would only hide the shard from the others).
    async fn taker(&self, conn: &mut <B::Db as Database>::Connection, node: Uuid) -> Result<Taker, LeaseError> {
        match self.node_in(conn, node).await? {
            Some(t) if t.state == NodeState::Down => Err(LeaseError::NodeNotRegistered(node)),
            Some(t) if self.on_liveness() && !t.leased => Err(LeaseError::LivenessLapsed(node)),
            Some(t) => Ok(t),
            None => Err(LeaseError::NodeNotRegistered(node)),
        }
    }

    /// Grants the locked row `shard` to `node` (epoch + 1) and records it:
    /// on `taker`'s liveness epoch when the gate is on, else with a full TTL
    /// of its own.
    async fn grant_in(
        &self,
        conn: &mut <B::Db as Database>::Connection,
        shard: &str,
        node: Uuid,
        taker: &Taker,
        via: Via,
    ) -> Result<Lease, LeaseError> {
        let holder = node.to_string();
        let grant = sqlx::query(if self.on_liveness() { B::SQL.grant_on_liveness } else { B::SQL.grant })
            .bind(holder.as_str())
            .bind(taker.name.as_str());
        let grant = if self.on_liveness() { grant.bind(taker.liveness_epoch) } else { grant.bind(self.ttl()) };
        grant.bind(shard).execute(&mut *conn).await?;
        // Planted: the grant keeps the epoch it replaced, which the history already records.
        let recorded = plant::active(Plant::EpochBump) && Self::plant_keep_epoch(&mut *conn, shard).await?;
        let row = Self::lease_in(&mut *conn, B::SQL.lease, shard).await?.ok_or_else(|| not_found(shard))?;
        if !recorded {
            sqlx::query(B::SQL.insert_history)
                .bind(shard)
                .bind(row.epoch)
                .bind(holder.as_str())
                .bind(taker.name.as_str())
                .bind(via.as_str())
                .execute(&mut *conn)
                .await?;
        }
        Ok(Lease {
            shard: shard.to_owned(),
            holder: node,
            holder_name: taker.name.clone(),
            epoch: row.epoch,
            liveness_epoch: row.liveness_epoch,
            // A recipient that has not heartbeated yet: expired until it does.
            expires_at: row.expires_at.unwrap_or_default(),
        })
    }

    /// Ends the liveness epoch of a lease's holder whose leases ran out, so
    /// that it cannot revive them: the first step of taking over a dead node.
    async fn end_lapsed_liveness(&self, conn: &mut <B::Db as Database>::Connection, cur: &LeaseRow) -> Result<(), LeaseError> {
        if let Some((holder, epoch)) = cur.lapsed_liveness() {
            sqlx::query(B::SQL.bump_liveness).bind(holder.to_string().as_str()).bind(epoch).execute(conn).await?;
        }
        Ok(())
    }

    /// Planted [`Plant::EpochBump`]: undoes the epoch bump of the grant
    /// just made (a shard's first grant still gets epoch 1); says whether
    /// the history already records the epoch kept (it is keyed by epoch, so
    /// it keeps that epoch's first holder).
    async fn plant_keep_epoch(conn: &mut <B::Db as Database>::Connection, shard: &str) -> Result<bool, LeaseError> {
        // The dialect's placeholder, as its own statements spell it.
        let p = if B::SQL.lease.ends_with("$1") { "$1" } else { "?" };
        let unbump = format!("UPDATE chitin_shard_leases SET epoch = epoch - 1 WHERE shard_id = {p} AND epoch > 1");
        sqlx::query(sqlx::AssertSqlSafe(unbump)).bind(shard).execute(&mut *conn).await?;
        let epoch = Self::lease_in(&mut *conn, B::SQL.lease, shard).await?.ok_or_else(|| not_found(shard))?.epoch;
        let history = sqlx::query(B::SQL.history_of).bind(shard).fetch_all(&mut *conn).await?;
        Ok(history.iter().any(|r| r.try_get::<i64, _>("epoch").is_ok_and(|e| e == epoch)))
    }

    /// Takes one handover from the database-wide budget (see the
    /// `0003_handoff_budget` migration), or says when the next one fits.
    async fn spend_handoff(&self, conn: &mut <B::Db as Database>::Connection) -> Result<(), LeaseError> {
        if sqlx::query(B::SQL.handoff_budget).fetch_optional(&mut *conn).await?.is_none() {
            return Err(LeaseError::Corrupt("the handoff budget row (chitin_handoff_budget id 1) is missing".into()));
        }
        let row = sqlx::query(B::SQL.recent_handoffs).bind(micros(self.options.handoff_window)).fetch_one(conn).await?;
        self.budget_left(&row)
    }

    /// Whether the budget has room now, without taking it: a giver asks
    /// before it stops writes to the shard, so that a refusal costs no stall.
    pub(crate) async fn handoff_budget(&self) -> Result<(), LeaseError> {
        let row = sqlx::query(B::SQL.recent_handoffs).bind(micros(self.options.handoff_window)).fetch_one(&self.pool).await?;
        self.budget_left(&row)
    }

    /// Reads a `recent_handoffs` row against the cap.
    fn budget_left(&self, row: &DbRow<B>) -> Result<(), LeaseError> {
        let recent: i64 = row.try_get("n")?;
        let (oldest, now) = (B::time(row, "oldest")?, required_time::<B>(row, "now")?);
        budget_verdict(recent, oldest, now, self.options.max_handoffs_per_round, self.options.handoff_window)
    }

    async fn retired_in(conn: &mut <B::Db as Database>::Connection, shard: &str) -> Result<bool, LeaseError> {
        Ok(sqlx::query(B::SQL.retirement_locked).bind(shard).fetch_optional(conn).await?.is_some())
    }

    /// Why `token` no longer holds its lease, read after the statement that needed it failed.
    pub(crate) async fn lost_error(&self, token: &LeaseToken) -> LeaseError {
        let row = match sqlx::query(B::SQL.lease).bind(token.shard.as_str()).fetch_optional(&self.pool).await {
            Ok(row) => row,
            Err(e) => return e.into(),
        };
        let cur = match row.as_ref().map(Self::lease_row).transpose() {
            Ok(c) => c,
            Err(e) => return e,
        };
        // Held again by the time we looked (a racing renewal cannot make it so; say what we saw).
        let reason = lost_reason(cur.as_ref(), token).unwrap_or(LostReason::Superseded {
            holder: cur.as_ref().and_then(|c| c.holder),
            epoch: cur.as_ref().map_or(0, |c| c.epoch),
        });
        lost(token, reason)
    }

    /// The versions in sqlx's migration table (the same SQL in every dialect).
    pub(crate) async fn migration_versions(&self) -> Result<Vec<i64>, LeaseError> {
        let rows = sqlx::query("SELECT version FROM _sqlx_migrations ORDER BY version").fetch_all(&self.pool).await?;
        rows.iter().map(|r| Ok(r.try_get("version")?)).collect()
    }

    // ---- clock and nodes ----------------------------------------------------

    pub(crate) async fn now(&self) -> Result<DateTime<Utc>, LeaseError> {
        let row = sqlx::query(B::SQL.now).fetch_one(&self.pool).await?;
        required_time::<B>(&row, "now")
    }

    pub(crate) async fn register_node(&self, name: &str, address: &str) -> Result<Uuid, LeaseError> {
        self.with_retry("register", || async {
            // Each statement is its own transaction. In one transaction, the
            // stale-down UPDATE holds a gap lock on the name index (InnoDB,
            // repeatable read) until commit, and a node registering another
            // name at the same time inserts into that gap while holding its
            // own: a deadlock on every concurrent start. Marking a stale
            // registration down is right on its own, and the unique index on
            // live names decides the race for one name either way.
            sqlx::query(B::SQL.mark_stale_down).bind(name).bind(self.liveness()).execute(&self.pool).await?;
            let id: String = sqlx::query(B::SQL.new_node_id).fetch_one(&self.pool).await?.try_get("id")?;
            let inserted = sqlx::query(B::SQL.insert_node).bind(id.as_str()).bind(name).bind(address).execute(&self.pool).await;
            match inserted {
                Ok(_) => Ok(parse_uuid(&id)?),
                Err(e) if unique_violation(&e).is_some() => {
                    let Some(row) = sqlx::query(B::SQL.name_holder).bind(name).fetch_optional(&self.pool).await? else {
                        // The holder went down meanwhile.
                        return Err(Attempt::Again(e));
                    };
                    Err(Attempt::Fail(LeaseError::NameInUse {
                        name: name.to_owned(),
                        holder: B::uuid(&row, "id")?.ok_or_else(|| LeaseError::Corrupt("node without id".into()))?,
                        address: row.try_get("address")?,
                        last_seen: required_time::<B>(&row, "last_seen")?,
                    }))
                }
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// Records that `node` is alive and extends every lease on its liveness
    /// by the TTL, in one statement. `epoch` is the liveness epoch the node
    /// knows; when a peer ended it, the node's leases on it are gone and it
    /// heartbeats under the current one, which is returned.
    pub(crate) async fn heartbeat(&self, node: Uuid, mut epoch: i64) -> Result<i64, LeaseError> {
        let id = node.to_string();
        let pool = self.heartbeat_pool.as_ref().unwrap_or(&self.pool);
        for _ in 0..ATTEMPTS {
            let done = self
                .with_retry("heartbeat", || async {
                    Ok(sqlx::query(B::SQL.heartbeat).bind(self.ttl()).bind(id.as_str()).bind(epoch).execute(pool).await?)
                })
                .await?;
            if B::affected(&done) > 0 {
                return Ok(epoch);
            }
            let row = sqlx::query(B::SQL.liveness).bind(id.as_str()).fetch_optional(pool).await?;
            match row {
                Some(r) if r.try_get::<String, _>("state")?.parse::<NodeState>()? != NodeState::Down => {
                    epoch = r.try_get("liveness_epoch")?;
                }
                _ => break,
            }
        }
        Err(LeaseError::NodeNotRegistered(node))
    }

    /// Nothing updated means the registration is down or unknown.
    pub(crate) async fn set_node_state(&self, node: Uuid, state: NodeState) -> Result<(), LeaseError> {
        let id = node.to_string();
        let done = self
            .with_retry("set node state", || async {
                Ok(sqlx::query(B::SQL.set_state).bind(state.as_str()).bind(id.as_str()).execute(&self.pool).await?)
            })
            .await?;
        if B::affected(&done) == 0 {
            return Err(LeaseError::NodeNotRegistered(node));
        }
        Ok(())
    }

    pub(crate) async fn deregister(&self, node: Uuid) -> Result<(), LeaseError> {
        let id = node.to_string();
        self.with_retry("deregister", || async {
            let mut tx = self.begin().await?;
            sqlx::query(B::SQL.free_leases_of).bind(id.as_str()).execute(&mut *tx).await?;
            sqlx::query(B::SQL.mark_down).bind(id.as_str()).execute(&mut *tx).await?;
            tx.commit().await?;
            Ok(())
        })
        .await
    }

    pub(crate) async fn nodes(&self) -> Result<Vec<NodeRecord>, LeaseError> {
        let rows = sqlx::query(B::SQL.nodes).bind(self.liveness()).fetch_all(&self.pool).await?;
        rows.iter()
            .map(|r| {
                Ok(NodeRecord {
                    id: B::uuid(r, "id")?.ok_or_else(|| LeaseError::Corrupt("node without id".into()))?,
                    name: r.try_get("name")?,
                    address: r.try_get("address")?,
                    state: r.try_get::<String, _>("state")?.parse()?,
                    started_at: required_time::<B>(r, "started_at")?,
                    last_seen: required_time::<B>(r, "last_seen")?,
                    live: B::flag(r, "live")?,
                })
            })
            .collect()
    }

    pub(crate) async fn recorded_meta(&self) -> Result<Option<(i64, i64, i64)>, LeaseError> {
        let row = sqlx::query(B::SQL.meta).fetch_optional(&self.pool).await?;
        let Some(r) = row else { return Ok(None) };
        Ok(Some((r.try_get("shard_count")?, r.try_get("lease_ttl_ms")?, r.try_get("renew_interval_ms")?)))
    }

    pub(crate) async fn check_cluster_meta(
        &self,
        shard_count: i64,
        ttl_ms: i64,
        renew_ms: i64,
    ) -> Result<(i64, i64, i64), LeaseError> {
        sqlx::query(B::SQL.insert_meta).bind(shard_count).bind(ttl_ms).bind(renew_ms).execute(&self.pool).await?;
        let r = sqlx::query(B::SQL.meta).fetch_one(&self.pool).await?;
        Ok((r.try_get("shard_count")?, r.try_get("lease_ttl_ms")?, r.try_get("renew_interval_ms")?))
    }

    // ---- leases -------------------------------------------------------------

    pub(crate) async fn try_acquire(&self, shard: &str, node: Uuid, parent: Option<&str>) -> Result<Option<Lease>, LeaseError> {
        self.with_retry("acquire", || async {
            let mut tx = self.begin().await?;
            let taker = self.taker(&mut tx, node).await?;
            // The parent's row first (split_seed locks parent, then children):
            // its shared lock waits for a split in progress, after which the
            // retirement it wrote is visible.
            if let Some(parent) = parent {
                Self::lease_in(&mut tx, B::SQL.lease_for_share, parent).await?;
                if !Self::retired_in(&mut tx, parent).await? {
                    tx.rollback().await?;
                    return Ok(None);
                }
            }
            sqlx::query(B::SQL.ensure_lease).bind(shard).execute(&mut *tx).await?;
            let cur = Self::lease_in(&mut tx, B::SQL.lease_for_update, shard).await?.ok_or_else(|| not_found(shard))?;
            if cur.live || Self::retired_in(&mut tx, shard).await? {
                tx.rollback().await?;
                return Ok(None);
            }
            self.end_lapsed_liveness(&mut tx, &cur).await?;
            let lease = self.grant_in(&mut tx, shard, node, &taker, Via::Acquire).await?;
            tx.commit().await?;
            Ok(Some(lease))
        })
        .await
    }

    /// A lease with its own expiry is extended by the TTL, or, once grants
    /// ride on liveness, moved onto its holder's liveness (same epoch). A
    /// lease on liveness is renewed by its holder's heartbeat: here it is
    /// only checked. Either way the row as it stands after the statement
    /// says whether the token still holds.
    pub(crate) async fn renew(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let holder = lease.holder.to_string();
        let row = self
            .with_retry("renew", || async {
                let mut tx = self.begin().await?;
                let extend = if self.on_liveness() {
                    let epoch = match self.node_in(&mut tx, lease.holder).await? {
                        Some(t) if t.state != NodeState::Down => t.liveness_epoch,
                        _ => return Err(LeaseError::NodeNotRegistered(lease.holder).into()),
                    };
                    sqlx::query(B::SQL.convert).bind(epoch)
                } else {
                    sqlx::query(B::SQL.renew).bind(self.ttl())
                };
                extend.bind(lease.shard.as_str()).bind(holder.as_str()).bind(lease.epoch).execute(&mut *tx).await?;
                let row = Self::lease_in(&mut tx, B::SQL.lease, &lease.shard).await?;
                tx.commit().await?;
                Ok(row)
            })
            .await?;
        match (lost_reason(row.as_ref(), &lease.token()), row) {
            (None, Some(row)) => {
                Ok(Lease { expires_at: row.expires_at.unwrap_or_default(), liveness_epoch: row.liveness_epoch, ..lease.clone() })
            }
            (reason, _) => Err(lost(&lease.token(), reason.unwrap_or(LostReason::NoLease))),
        }
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        let holder = lease.holder.to_string();
        let done = self
            .with_retry("release", || async {
                Ok(sqlx::query(B::SQL.release)
                    .bind(lease.shard.as_str())
                    .bind(holder.as_str())
                    .bind(lease.epoch)
                    .execute(&self.pool)
                    .await?)
            })
            .await?;
        if B::affected(&done) == 0 {
            return Err(self.lost_error(&lease.token()).await);
        }
        Ok(())
    }

    pub(crate) async fn handover(&self, lease: &Lease, to: Uuid) -> Result<Lease, LeaseError> {
        if to == lease.holder {
            return Err(LeaseError::InvalidArgument(format!("handover of `{}` to its own holder {to}", lease.shard)));
        }
        let token = lease.token();
        self.with_retry("handover", || async {
            let mut tx = self.begin().await?;
            // First, so that MySQL's snapshot is taken after the budget lock.
            self.spend_handoff(&mut tx).await?;
            let recipient = match self.node_in(&mut tx, to).await? {
                Some(t) if t.live && matches!(t.state, NodeState::Joining | NodeState::Active) => t,
                Some(t) if t.live && t.state == NodeState::Leaving => return Err(LeaseError::NodeLeaving(to).into()),
                _ => return Err(LeaseError::NodeNotLive(to).into()),
            };
            let cur = Self::lease_in(&mut tx, B::SQL.lease_for_update, &lease.shard).await?;
            if let Some(reason) = lost_reason(cur.as_ref(), &token) {
                tx.rollback().await?;
                return Err(lost(&token, reason).into());
            }
            let theirs = self.grant_in(&mut tx, &lease.shard, to, &recipient, Via::Handover).await?;
            crate::failpoint::hit("handover.before_commit").await;
            tx.commit().await?;
            Ok(theirs)
        })
        .await
    }

    /// See [`super::Store::split_seed`].
    pub(crate) async fn split_seed(
        &self,
        parent: &str,
        children: &[String],
        node: Uuid,
        held: Option<&LeaseToken>,
    ) -> Result<SplitSeed, LeaseError> {
        let id = node.to_string();
        let joined = children.join(",");
        self.with_retry("split seed", || async {
            let mut tx = self.begin().await?;
            let taker = self.taker(&mut tx, node).await?;
            sqlx::query(B::SQL.ensure_lease).bind(parent).execute(&mut *tx).await?;
            // Waits for every fenced writer that holds the parent's row shared.
            let cur = Self::lease_in(&mut tx, B::SQL.lease_for_update, parent).await?.ok_or_else(|| not_found(parent))?;
            let retired = Self::retired_in(&mut tx, parent).await?;
            let via = match seed_step(&cur, retired, node, held) {
                SeedStep::Retire { via } => via,
                SeedStep::Refuse(outcome) => {
                    tx.rollback().await?;
                    return Ok(outcome);
                }
            };
            if !plant::active(Plant::SplitRetirement) {
                sqlx::query(B::SQL.retire).bind(parent).execute(&mut *tx).await?;
            }
            let retired = Self::lease_in(&mut tx, B::SQL.lease, parent).await?.ok_or_else(|| not_found(parent))?;
            sqlx::query(B::SQL.insert_retirement)
                .bind(parent)
                .bind(retired.epoch)
                .bind(id.as_str())
                .bind(taker.name.as_str())
                .bind(joined.as_str())
                .execute(&mut *tx)
                .await?;
            let mut seeded = Vec::with_capacity(children.len());
            for child in children {
                sqlx::query(B::SQL.ensure_lease).bind(child.as_str()).execute(&mut *tx).await?;
                let row = Self::lease_in(&mut tx, B::SQL.lease_for_update, child).await?.ok_or_else(|| not_found(child))?;
                if row.live || Self::retired_in(&mut tx, child).await? {
                    return Err(LeaseError::Corrupt(format!(
                        "child `{child}` of `{parent}` is live or retired before its parent is split: {row:?}"
                    ))
                    .into());
                }
                seeded.push(self.grant_in(&mut tx, child, node, &taker, via).await?);
            }
            crate::failpoint::hit("split.before_commit").await;
            tx.commit().await?;
            Ok(SplitSeed::Seeded(seeded))
        })
        .await
    }

    async fn lease_rows(&self, sql: &'static str, node: Option<Uuid>) -> Result<Vec<LeaseRow>, LeaseError> {
        let id = node.map(|n| n.to_string());
        let mut q = sqlx::query(sql);
        if let Some(id) = &id {
            q = q.bind(id.as_str());
        }
        q.fetch_all(&self.pool).await?.iter().map(Self::lease_row).collect()
    }

    pub(crate) async fn holders(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        self.lease_rows(B::SQL.holders, None).await
    }

    pub(crate) async fn leases_of(&self, node: Uuid) -> Result<Vec<LeaseRow>, LeaseError> {
        self.lease_rows(B::SQL.leases_of, Some(node)).await
    }

    /// The live leases of `node` and the rows of `shards`, by shard: what
    /// one lease round reads, two index lookups in a steady cluster.
    pub(crate) async fn round_leases(&self, node: Uuid, shards: &[String]) -> Result<Vec<LeaseRow>, LeaseError> {
        let mut rows: std::collections::BTreeMap<String, LeaseRow> =
            self.leases_of(node).await?.into_iter().map(|r| (r.shard.clone(), r)).collect();
        for chunk in shards.chunks(IN_LIST_MAX) {
            let mut query = sqlx::QueryBuilder::<B::Db>::new(B::SQL.leases_in);
            let mut list = query.separated(", ");
            for shard in chunk {
                list.push_bind(shard.as_str());
            }
            query.push(")");
            for row in query.build().fetch_all(&self.pool).await? {
                let row = Self::lease_row(&row)?;
                rows.insert(row.shard.clone(), row);
            }
        }
        Ok(rows.into_values().collect())
    }

    pub(crate) async fn lease(&self, shard: &str) -> Result<Option<LeaseRow>, LeaseError> {
        let mut conn = self.pool.acquire().await?;
        Self::lease_in(&mut conn, B::SQL.lease, shard).await
    }

    pub(crate) async fn history(&self, shard: Option<&str>) -> Result<Vec<HistoryEntry>, LeaseError> {
        let rows = match shard {
            Some(shard) => sqlx::query(B::SQL.history_of).bind(shard).fetch_all(&self.pool).await?,
            None => sqlx::query(B::SQL.history).fetch_all(&self.pool).await?,
        };
        rows.iter()
            .map(|r| {
                Ok(HistoryEntry {
                    shard: r.try_get("shard_id")?,
                    epoch: r.try_get("epoch")?,
                    holder: B::uuid(r, "holder")?.ok_or_else(|| LeaseError::Corrupt("history without holder".into()))?,
                    holder_name: r.try_get("holder_name")?,
                    via: Via::from_column(&r.try_get::<String, _>("via")?)?,
                    acquired_at: required_time::<B>(r, "acquired_at")?,
                })
            })
            .collect()
    }

    pub(crate) async fn retirements(&self) -> Result<Vec<Retirement>, LeaseError> {
        sqlx::query(B::SQL.retirements).fetch_all(&self.pool).await?.iter().map(Self::retirement_row).collect()
    }

    pub(crate) async fn retirement(&self, shard: &str) -> Result<Option<Retirement>, LeaseError> {
        let row = sqlx::query(B::SQL.retirement).bind(shard).fetch_optional(&self.pool).await?;
        row.as_ref().map(Self::retirement_row).transpose()
    }

    // ---- journal ------------------------------------------------------------

    pub(crate) async fn append(
        &self,
        fence: Option<&LeaseToken>,
        shard: &str,
        epoch: i64,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Appended, LeaseError> {
        crate::failpoint::hit("append.before_fence").await;
        let fence = fence.filter(|_| !plant::active(Plant::Fence));
        if let Some(one) =
            B::APPEND_IN_ONE.as_ref().filter(|one| !(one.commits_itself && crate::failpoint::is_armed("append.before_commit")))
        {
            return self.append_in_one(one, fence, shard, epoch, stream, request_id, payload).await;
        }
        self.with_retry("append", || async {
            let mut tx = self.begin_data().await?;
            if let Some(token) = fence {
                // First statement: shared row lock on the lease, then the check.
                let cur = Self::lease_in(&mut tx, B::SQL.lease_for_share, &token.shard).await?;
                if let Some(reason) = lost_reason(cur.as_ref(), token) {
                    tx.rollback().await?;
                    return Err(lost(token, reason).into());
                }
            }
            let seq = B::next_seq(&mut tx, stream).await?;
            let inserted = sqlx::query(B::SQL.insert_entry)
                .bind(stream)
                .bind(seq)
                .bind(request_id)
                .bind(payload)
                .bind(shard)
                .bind(epoch)
                .execute(&mut *tx)
                .await;
            match inserted {
                Ok(_) => {
                    crate::failpoint::hit("append.before_commit").await;
                    tx.commit().await?;
                    Ok(Appended { seq, epoch, fresh: true })
                }
                Err(e) if unique_violation(&e).is_some() && plant::active(Plant::Dedup) => {
                    tx.rollback().await?;
                    Ok(Appended { seq, epoch, fresh: true })
                }
                Err(e) if unique_violation(&e).is_some() => {
                    // Applied before: answer with the original outcome.
                    tx.rollback().await?;
                    let row =
                        sqlx::query(B::SQL.entry_of_request).bind(stream).bind(request_id).fetch_optional(self.data()).await?;
                    match row {
                        Some(r) => Ok(Appended { seq: r.try_get("seq")?, epoch: r.try_get("epoch")?, fresh: false }),
                        // The racing insert rolled back after all.
                        None => Err(Attempt::Again(e)),
                    }
                }
                Err(e) => Err(e.into()),
            }
        })
        .await
    }

    /// Appends `entries` under one fence in one transaction (group commit):
    /// one lock of the lease row and one COMMIT for all of them, each entry
    /// still answered with its own sequence, or the original outcome of a
    /// request id applied before (also earlier in the same batch).
    pub(crate) async fn append_batch(&self, token: &LeaseToken, entries: &[NewEntry]) -> Result<Vec<Appended>, LeaseError> {
        crate::failpoint::hit("append.before_fence").await;
        let fence = !plant::active(Plant::Fence);
        self.with_retry("append batch", || async {
            let mut tx = self.begin_data().await?;
            if fence {
                let cur = Self::lease_in(&mut tx, B::SQL.lease_for_share, &token.shard).await?;
                if let Some(reason) = lost_reason(cur.as_ref(), token) {
                    tx.rollback().await?;
                    return Err(lost(token, reason).into());
                }
            }
            let mut done = Vec::with_capacity(entries.len());
            for e in entries {
                let before = sqlx::query(B::SQL.entry_of_request)
                    .bind(e.stream.as_str())
                    .bind(e.request_id.as_str())
                    .fetch_optional(&mut *tx)
                    .await?;
                if let Some(r) = before {
                    let (seq, epoch) = (r.try_get("seq")?, r.try_get("epoch")?);
                    done.push(if plant::active(Plant::Dedup) {
                        Appended { seq: seq + 1, epoch, fresh: true }
                    } else {
                        Appended { seq, epoch, fresh: false }
                    });
                    continue;
                }
                let seq = B::next_seq(&mut tx, &e.stream).await?;
                let inserted = sqlx::query(B::SQL.insert_entry)
                    .bind(e.stream.as_str())
                    .bind(seq)
                    .bind(e.request_id.as_str())
                    .bind(e.payload.as_slice())
                    .bind(token.shard.as_str())
                    .bind(token.epoch)
                    .execute(&mut *tx)
                    .await;
                match inserted {
                    Ok(_) => done.push(Appended { seq, epoch: token.epoch, fresh: true }),
                    // A racing writer of the same id committed meanwhile: run again, and find it.
                    Err(err) if unique_violation(&err).is_some() => return Err(Attempt::Again(err)),
                    Err(err) => return Err(err.into()),
                }
            }
            crate::failpoint::hit("append.before_commit").await;
            tx.commit().await?;
            Ok(done)
        })
        .await
    }

    /// The append as one statement: one round trip. With a pause armed
    /// before COMMIT (fault tests), the same statement runs inside BEGIN …
    /// COMMIT, so that the pause holds its locks as a slow commit would.
    #[allow(clippy::too_many_arguments)]
    async fn append_in_one(
        &self,
        one: &AppendInOne,
        fence: Option<&LeaseToken>,
        shard: &str,
        epoch: i64,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Appended, LeaseError> {
        /// What one try found.
        enum Found {
            Inserted(i64),
            /// The fence did not pass: nothing written.
            Fenced,
            /// The request id was applied before, as (seq, epoch).
            Before(i64, i64),
        }
        let holder = fence.map(|t| t.holder.to_string());
        let held = crate::failpoint::is_armed("append.before_commit");
        let found = self
            .with_retry("append", || async {
                let q = match &holder {
                    Some(holder) => sqlx::query(one.fenced).bind(shard).bind(holder.as_str()),
                    None => sqlx::query(one.unfenced).bind(shard),
                };
                let q = q.bind(epoch).bind(stream).bind(request_id).bind(payload);
                let result = if held {
                    let mut tx = self.begin_data().await?;
                    let row = q.fetch_optional(&mut *tx).await;
                    if row.is_ok() {
                        crate::failpoint::hit("append.before_commit").await;
                        tx.commit().await?;
                    }
                    row
                } else {
                    q.fetch_optional(self.data()).await
                };
                match result {
                    Ok(Some(row)) => Ok(Found::Inserted(row.try_get("seq")?)),
                    Ok(None) => Ok(Found::Fenced),
                    Err(e) if unique_violation(&e).is_some() => {
                        let row = sqlx::query(B::SQL.entry_of_request)
                            .bind(stream)
                            .bind(request_id)
                            .fetch_optional(self.data())
                            .await?;
                        match row {
                            Some(r) => Ok(Found::Before(r.try_get("seq")?, r.try_get("epoch")?)),
                            // The racing insert rolled back after all.
                            None => Err(Attempt::Again(e)),
                        }
                    }
                    Err(e) => Err(e.into()),
                }
            })
            .await?;
        match (found, fence) {
            (Found::Inserted(seq), _) => Ok(Appended { seq, epoch, fresh: true }),
            (Found::Fenced, Some(token)) => Err(self.lost_error(token).await),
            (Found::Fenced, None) => Err(LeaseError::Corrupt("an unfenced append inserted nothing".into())),
            // The planted bug answers a repeat as new, with a sequence never stored for it.
            (Found::Before(seq, epoch), _) if plant::active(Plant::Dedup) => Ok(Appended { seq: seq + 1, epoch, fresh: true }),
            (Found::Before(seq, epoch), _) => Ok(Appended { seq, epoch, fresh: false }),
        }
    }

    /// Up to `limit` entries from `from`, stopping once their payloads pass
    /// `max_bytes` (the first entry always comes): rows are decoded as they
    /// stream in, so a read never holds more than its budget and one row.
    /// The flag says the budget cut the answer short.
    pub(crate) async fn read(
        &self,
        stream: &str,
        from: i64,
        limit: i64,
        max_bytes: usize,
    ) -> Result<(Vec<JournalEntry>, bool), LeaseError> {
        use tokio_stream::StreamExt;
        let mut rows = sqlx::query(B::SQL.read).bind(stream).bind(from).bind(limit).fetch(self.data());
        let (mut entries, mut bytes) = (Vec::new(), 0usize);
        while let Some(r) = rows.try_next().await? {
            let payload: Vec<u8> = r.try_get("payload")?;
            bytes = bytes.saturating_add(payload.len());
            if bytes > max_bytes && !entries.is_empty() {
                return Ok((entries, true));
            }
            entries.push(JournalEntry {
                stream: r.try_get("stream")?,
                seq: r.try_get("seq")?,
                request_id: r.try_get("request_id")?,
                payload,
                shard: r.try_get("shard_id")?,
                epoch: r.try_get("epoch")?,
                committed_at: required_time::<B>(&r, "committed_at")?,
            });
        }
        Ok((entries, false))
    }
}

/// What a split does with its parent, decided from the parent's locked row.
#[derive(Debug, PartialEq)]
enum SeedStep {
    /// Retire it and grant the children, recorded in the history as `via`.
    Retire { via: Via },
    /// Leave everything as it is and answer this.
    Refuse(SplitSeed),
}

/// A retired parent stays retired; a live parent is split only by the token
/// that holds it; a free or expired one by anyone. The children's grants
/// are a handover when the seeding node held the parent live.
fn seed_step(parent: &LeaseRow, retired: bool, node: Uuid, held: Option<&LeaseToken>) -> SeedStep {
    if retired {
        return SeedStep::Refuse(SplitSeed::AlreadyRetired);
    }
    let ours = held.is_some_and(|t| parent.holder == Some(t.holder) && parent.epoch == t.epoch);
    match parent.holder {
        Some(holder) if parent.live && !ours => SeedStep::Refuse(SplitSeed::HeldElsewhere { holder, epoch: parent.epoch }),
        Some(holder) if parent.live && holder == node => SeedStep::Retire { via: Via::Handover },
        _ => SeedStep::Retire { via: Via::Acquire },
    }
}

/// The budget's rule: with `recent` handovers in the last `window`, the
/// oldest at `oldest`, one more fits under `cap` now, or once the oldest
/// leaves the window.
fn budget_verdict(
    recent: i64,
    oldest: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    cap: u32,
    window: std::time::Duration,
) -> Result<(), LeaseError> {
    if recent < i64::from(cap) {
        return Ok(());
    }
    let frees_at = oldest.map_or(now, |o| o + window);
    let retry_after = (frees_at - now).to_std().unwrap_or_default();
    Err(LeaseError::HandoffBudget { cap, window, retry_after })
}

/// The pause before contention retry number `attempts + 1`: random, up to a
/// bound that doubles from 2 ms and stops at 32 ms, so eight attempts wait
/// at most 126 ms in all, far inside a lease round.
fn retry_pause(attempts: usize) -> std::time::Duration {
    let mut random = [0u8; 2];
    // Without randomness the longest pause is still a pause.
    let random = getrandom::getrandom(&mut random).map_or(u16::MAX, |()| u16::from_le_bytes(random));
    pause_within(attempts, random)
}

fn pause_within(attempts: usize, random: u16) -> std::time::Duration {
    let bound_us = 1_000u64 << attempts.clamp(1, 5);
    std::time::Duration::from_micros(u64::from(random) * bound_us / u64::from(u16::MAX))
}

fn required_time<B: Backend>(row: &DbRow<B>, col: &str) -> Result<DateTime<Utc>, LeaseError> {
    B::time(row, col)?.ok_or_else(|| LeaseError::Corrupt(format!("`{col}` is NULL")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_statement_waits_for_a_connection_one_lock_bound_at_most() {
        // (acquire timeout ms, TTL ms) → the control pool's wait in ms
        for (acquire_ms, ttl_ms, want) in
            [(10_000, 2_000, 1_000), (10_000, 30_000, 10_000), (300, 2_000, 300), (10_000, 600, 500)]
        {
            let options = StoreOptions {
                acquire_timeout: std::time::Duration::from_millis(acquire_ms),
                lease_ttl: std::time::Duration::from_millis(ttl_ms),
                ..StoreOptions::default()
            };
            assert_eq!(
                control_acquire_timeout(&options),
                std::time::Duration::from_millis(want),
                "{acquire_ms} ms, TTL {ttl_ms} ms"
            );
        }
    }

    /// (max_connections, control, data): the control plane always has a
    /// connection of its own, the data the rest, neither ever none.
    #[test]
    fn connections_are_split_between_control_and_data() {
        for (max, control, data) in [(1, 1, 1), (2, 1, 1), (4, 1, 3), (10, 2, 8), (16, 4, 12), (100, 4, 96)] {
            assert_eq!(pool_sizes(max), (control, data), "max_connections {max}");
        }
    }

    /// (attempts so far, random draw, pause in µs): up to 2 ms after the
    /// first, doubling, never above 32 ms.
    #[test]
    fn retry_pause_table() {
        let max = u16::MAX;
        for (attempts, random, us) in [
            (1, 0, 0),
            (1, max, 2_000),
            (1, max / 2, 999),
            (2, max, 4_000),
            (4, max, 16_000),
            (5, max, 32_000),
            (7, max, 32_000),
            (50, max, 32_000),
        ] {
            assert_eq!(pause_within(attempts, random).as_micros(), us, "attempts {attempts}, random {random}");
        }
    }

    #[test]
    fn budget_verdict_table() {
        let now = DateTime::<Utc>::from_timestamp(1_000, 0).unwrap();
        let window = std::time::Duration::from_millis(500);
        let ms = |m: i64| now - chrono::Duration::milliseconds(m);
        // (recent, oldest, cap, the wait when refused)
        let cases = [
            (0, None, 4, None),
            (3, Some(ms(100)), 4, None),
            (4, Some(ms(100)), 4, Some(400)),
            (9, Some(ms(499)), 4, Some(1)),
            // The oldest just left the window (clocks read apart): no wait.
            (4, Some(ms(700)), 4, Some(0)),
        ];
        for (recent, oldest, cap, wait) in cases {
            let got = match budget_verdict(recent, oldest, now, cap, window) {
                Ok(()) => None,
                Err(LeaseError::HandoffBudget { retry_after, cap: c, .. }) => {
                    assert_eq!(c, cap);
                    Some(retry_after.as_millis() as i64)
                }
                Err(e) => panic!("{e}"),
            };
            assert_eq!(got, wait, "recent {recent}, oldest {oldest:?}, cap {cap}");
        }
    }

    #[test]
    fn seed_step_table() {
        let (me, other) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let row = |holder: Option<Uuid>, epoch, live| LeaseRow {
            shard: "p".into(),
            holder,
            holder_name: holder.map(|h| h.to_string()),
            epoch,
            liveness_epoch: None,
            expires_at: holder.map(|_| DateTime::<Utc>::default()),
            live,
        };
        let token = |holder, epoch| LeaseToken { shard: "p".into(), holder, epoch };
        let retire = |via| SeedStep::Retire { via };
        let elsewhere = |holder, epoch| SeedStep::Refuse(SplitSeed::HeldElsewhere { holder, epoch });
        // (parent row, retired, held token, expected)
        let cases = [
            (row(None, 0, false), false, None, retire(Via::Acquire)),
            (row(None, 3, false), true, None, SeedStep::Refuse(SplitSeed::AlreadyRetired)),
            (row(Some(me), 3, true), true, Some(token(me, 3)), SeedStep::Refuse(SplitSeed::AlreadyRetired)),
            (row(Some(me), 3, true), false, Some(token(me, 3)), retire(Via::Handover)),
            (row(Some(me), 3, true), false, None, elsewhere(me, 3)),
            (row(Some(me), 3, true), false, Some(token(me, 2)), elsewhere(me, 3)),
            (row(Some(other), 3, true), false, Some(token(me, 3)), elsewhere(other, 3)),
            (row(Some(other), 3, true), false, Some(token(other, 3)), retire(Via::Acquire)),
            (row(Some(other), 3, false), false, None, retire(Via::Acquire)),
            (row(Some(me), 3, false), false, Some(token(me, 3)), retire(Via::Acquire)),
        ];
        for (parent, retired, held, want) in cases {
            assert_eq!(seed_step(&parent, retired, me, held.as_ref()), want, "{parent:?} retired {retired} held {held:?}");
        }
    }
}
