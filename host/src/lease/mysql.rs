//! MySQL (≥ 8.0) and MariaDB (≥ 10.6): SQL text, column decoding and session
//! bounds. "Now" is always `UTC_TIMESTAMP(6)` and times are `DATETIME(6)` in
//! UTC; UUIDs are `CHAR(36)`. Locks are taken with `FOR UPDATE` and
//! `LOCK IN SHARE MODE` (both servers accept it); reads that must see the
//! latest commit under repeatable read are locking reads.
//!
//! Every session bounds lock waits (`innodb_lock_wait_timeout`) and, on
//! MariaDB, idle transactions (`idle_transaction_timeout`,
//! `idle_write_transaction_timeout`) to half a lease TTL, in whole seconds
//! and at least one. MySQL has no idle-transaction timeout: there a holder
//! cut off mid-transaction keeps its row locks until the server notices the
//! dead connection (`wait_timeout`, or TCP keepalive), and takers of its
//! leases fail their lock waits after half a TTL and retry meanwhile.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPoolOptions, MySqlQueryResult, MySqlRow};
use sqlx::{MySql, MySqlConnection, Row};
use uuid::Uuid;

use super::engine::{AppendInOne, Backend, Contended, Engine, Sql};
use super::{LeaseError, StoreOptions, parse_uuid};
use crate::plant::{self, Plant};

/// The MySQL / MariaDB dialect.
#[derive(Clone, Copy, Debug)]
pub struct My;

/// When the lease of row `l` runs out: see the PostgreSQL dialect. InnoDB
/// does not lock the rows a subquery of a locking read reads (checked on
/// MariaDB 10.11 and documented for MySQL 8), so the fence never waits for
/// a heartbeat, nor a heartbeat for the fence.
macro_rules! lease_expiry {
    () => {
        "CASE WHEN l.liveness_epoch IS NULL THEN l.expires_at ELSE (SELECT n.lease_expires_at FROM chitin_nodes n \
         WHERE n.id = l.holder AND n.liveness_epoch = l.liveness_epoch AND n.state <> 'down') END"
    };
}

macro_rules! lease_cols {
    () => {
        concat!(
            "l.shard_id, l.holder, l.holder_name, l.epoch, l.liveness_epoch, ",
            lease_expiry!(),
            " AS expires_at, CAST(l.holder IS NOT NULL AND ",
            lease_expiry!(),
            " > UTC_TIMESTAMP(6) AS SIGNED) AS live FROM chitin_shard_leases l"
        )
    };
}

/// The application's fence: see [`super::Dialect::fence_sql`].
pub(super) const FENCE: &str = concat!(
    "SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = ? AND l.holder = ? AND l.epoch = ? AND ",
    lease_expiry!(),
    " > UTC_TIMESTAMP(6) LOCK IN SHARE MODE"
);

impl Backend for My {
    type Db = MySql;

    /// No data-modifying CTE here: the fence, the sequence bump and the
    /// insert are one call of the procedure of migration 0009.
    const APPEND_IN_ONE: Option<AppendInOne> = Some(AppendInOne {
        fenced: "CALL chitin_append_v1(?, ?, ?, ?, ?, ?)",
        unfenced: "CALL chitin_append_v1(?, NULL, ?, ?, ?, ?)",
        commits_itself: true,
    });

    const SQL: Sql = Sql {
        now: "SELECT UTC_TIMESTAMP(6) AS now",
        new_node_id: "SELECT UUID() AS id",
        mark_stale_down: "UPDATE chitin_nodes SET state = 'down' WHERE name = ? AND state <> 'down' \
             AND last_seen <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        insert_node: "INSERT INTO chitin_nodes (id, name, address, state, started_at, last_seen) \
             VALUES (?, ?, ?, 'joining', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
        name_holder: "SELECT id, address, last_seen FROM chitin_nodes WHERE name = ? AND state <> 'down'",
        heartbeat: "UPDATE chitin_nodes SET last_seen = UTC_TIMESTAMP(6), \
             lease_expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE id = ? AND state <> 'down' AND liveness_epoch = ?",
        liveness: "SELECT state, liveness_epoch FROM chitin_nodes WHERE id = ?",
        set_state: "UPDATE chitin_nodes SET state = ?, last_seen = UTC_TIMESTAMP(6) WHERE id = ? AND state <> 'down'",
        free_leases_of: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE holder = ?",
        mark_down: "UPDATE chitin_nodes SET state = 'down', last_seen = UTC_TIMESTAMP(6), \
             liveness_epoch = liveness_epoch + 1, lease_expires_at = NULL WHERE id = ? AND state <> 'down'",
        bump_liveness: "UPDATE chitin_nodes SET liveness_epoch = liveness_epoch + 1, lease_expires_at = NULL \
             WHERE id = ? AND liveness_epoch = ? AND (lease_expires_at IS NULL OR lease_expires_at <= UTC_TIMESTAMP(6))",
        nodes: "SELECT id, name, address, state, started_at, last_seen, \
             CAST(state <> 'down' AND last_seen > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS SIGNED) AS live \
             FROM chitin_nodes ORDER BY started_at DESC, id",
        node: "SELECT name, state, \
             CAST(state <> 'down' AND last_seen > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS SIGNED) AS live, \
             liveness_epoch, CAST(lease_expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS leased FROM chitin_nodes WHERE id = ?",
        insert_meta: "INSERT INTO chitin_cluster_meta (id, shard_count, lease_ttl_ms, renew_interval_ms, created_at) \
             VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE id = id",
        meta: "SELECT shard_count, lease_ttl_ms, renew_interval_ms FROM chitin_cluster_meta WHERE id = 1",
        lease: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = ?"),
        lease_for_update: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = ? FOR UPDATE"),
        lease_for_share: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = ? LOCK IN SHARE MODE"),
        ensure_lease: "INSERT INTO chitin_shard_leases (shard_id) VALUES (?) ON DUPLICATE KEY UPDATE shard_id = shard_id",
        grant: "UPDATE chitin_shard_leases SET holder = ?, holder_name = ?, epoch = epoch + 1, \
             expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, liveness_epoch = NULL WHERE shard_id = ?",
        grant_on_liveness: "UPDATE chitin_shard_leases SET holder = ?, holder_name = ?, epoch = epoch + 1, \
             expires_at = UTC_TIMESTAMP(6), liveness_epoch = ? WHERE shard_id = ?",
        convert: "UPDATE chitin_shard_leases SET expires_at = UTC_TIMESTAMP(6), liveness_epoch = ? \
             WHERE shard_id = ? AND holder = ? AND epoch = ? AND liveness_epoch IS NULL \
             AND expires_at > UTC_TIMESTAMP(6)",
        retire: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL, \
             epoch = epoch + 1 WHERE shard_id = ?",
        renew: "UPDATE chitin_shard_leases SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE shard_id = ? AND holder = ? AND epoch = ? AND liveness_epoch IS NULL \
             AND expires_at > UTC_TIMESTAMP(6)",
        release: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE shard_id = ? AND holder = ? AND epoch = ?",
        holders: concat!("SELECT ", lease_cols!(), " ORDER BY l.shard_id"),
        leases_of: concat!(
            "SELECT ",
            lease_cols!(),
            " WHERE l.holder = ? AND ",
            lease_expiry!(),
            " > UTC_TIMESTAMP(6) ORDER BY l.shard_id"
        ),
        leases_in: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id IN ("),
        insert_history: "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
        history: concat!("SELECT ", history_cols!(), " ORDER BY shard_id, epoch"),
        history_of: concat!("SELECT ", history_cols!(), " WHERE shard_id = ? ORDER BY epoch"),
        insert_retirement: "INSERT INTO chitin_shard_retirements \
             (shard_id, epoch, holder, holder_name, children, retired_at) VALUES (?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
        retirement_locked: concat!("SELECT ", retirement_cols!(), " WHERE shard_id = ? LOCK IN SHARE MODE"),
        retirement: concat!("SELECT ", retirement_cols!(), " WHERE shard_id = ?"),
        retirements: concat!("SELECT ", retirement_cols!(), " ORDER BY shard_id"),
        handoff_budget: "SELECT id FROM chitin_handoff_budget WHERE id = 1 FOR UPDATE",
        recent_handoffs: "SELECT count(*) AS n, min(acquired_at) AS oldest, UTC_TIMESTAMP(6) AS now \
             FROM chitin_lease_history WHERE via = 'handover' \
             AND acquired_at > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        insert_entry: "INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch, committed_at) \
             VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
        entry_of_request: "SELECT seq, epoch FROM chitin_journal WHERE stream = ? AND request_id = ?",
        read: "SELECT stream, seq, request_id, payload, shard_id, epoch, committed_at FROM chitin_journal \
             WHERE stream = ? AND seq >= ? ORDER BY seq LIMIT ?",
    };

    /// Deadlock (1213), lock wait timeout (1205).
    fn contention(e: &sqlx::Error) -> Option<Contended> {
        let sqlx::Error::Database(d) = e else { return None };
        match d.try_downcast_ref::<MySqlDatabaseError>()?.number() {
            1213 => Some(Contended::Conflict),
            1205 => Some(Contended::LockWait),
            _ => None,
        }
    }

    fn uuid(row: &MySqlRow, col: &str) -> Result<Option<Uuid>, LeaseError> {
        row.try_get::<Option<String>, _>(col)?.as_deref().map(parse_uuid).transpose()
    }

    fn time(row: &MySqlRow, col: &str) -> Result<Option<DateTime<Utc>>, LeaseError> {
        Ok(row.try_get(col)?)
    }

    fn flag(row: &MySqlRow, col: &str) -> Result<bool, LeaseError> {
        Ok(row.try_get::<Option<i64>, _>(col)?.unwrap_or(0) != 0)
    }

    fn affected(done: &MySqlQueryResult) -> u64 {
        done.rows_affected()
    }

    // The trait's signature promises a `Send` future, which `async fn` in an
    // impl cannot state.
    #[allow(clippy::manual_async_fn)]
    fn next_seq<'c>(
        conn: &'c mut MySqlConnection,
        stream: &'c str,
    ) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c {
        // No RETURNING: the new value travels back as LAST_INSERT_ID.
        async move {
            let bumped = sqlx::query(
                "INSERT INTO chitin_journal_streams (stream, last_seq) VALUES (?, LAST_INSERT_ID(1)) \
                 ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + 1)",
            )
            .bind(stream)
            .execute(conn)
            .await?;
            i64::try_from(bumped.last_insert_id()).map_err(|e| sqlx::Error::Decode(Box::new(e)))
        }
    }
}

/// The session variables that bound a stuck peer, as far as this server has them.
const BOUNDED: [&str; 3] = ["innodb_lock_wait_timeout", "idle_transaction_timeout", "idle_write_transaction_timeout"];

/// Sets every variable of [`BOUNDED`] the server knows to `secs` for this session.
async fn bound_session(conn: &mut MySqlConnection, secs: u64) -> Result<(), sqlx::Error> {
    if plant::active(Plant::IdleBound) {
        return Ok(());
    }
    let known = sqlx::raw_sql(
        "SHOW SESSION VARIABLES WHERE Variable_name IN \
         ('innodb_lock_wait_timeout', 'idle_transaction_timeout', 'idle_write_transaction_timeout')",
    )
    .fetch_all(&mut *conn)
    .await?;
    for row in &known {
        let name: String = row.try_get(0)?;
        // Only names of our own list reach the statement.
        if let Some(&name) = BOUNDED.iter().find(|b| b.eq_ignore_ascii_case(&name)) {
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!("SET SESSION {name} = {secs}"))).execute(&mut *conn).await?;
        }
    }
    Ok(())
}

/// Half a TTL in whole seconds, at least one (the servers count in seconds).
pub(crate) fn bound_secs(options: &StoreOptions) -> u64 {
    (options.lease_ttl / 2).as_secs().max(1)
}

pub(super) async fn connect(url: &str, options: StoreOptions) -> Result<Engine<My>, LeaseError> {
    // sqlx speaks `mysql://`; `mariadb://` is the same protocol.
    let url = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
        _ => url.to_owned(),
    };
    // The session time zone is UTC (sqlx's default, set explicitly here).
    let connect = MySqlConnectOptions::from_str(&url)?.timezone(Some("+00:00".to_owned()));
    let secs = bound_secs(&options);
    let (control, data) = super::engine::pool_sizes(options.max_connections);
    let pool_of = |size, wait| {
        super::engine::ping_when_idle(MySqlPoolOptions::new())
            .max_connections(size)
            .acquire_timeout(wait)
            .after_connect(move |conn, _| Box::pin(bound_session(conn, secs)))
    };
    let round_wait = super::engine::control_acquire_timeout(&options);
    let pool = pool_of(control, round_wait).connect_with(connect.clone()).await?;
    let data = pool_of(data, options.acquire_timeout).connect_lazy_with(connect.clone());
    let heartbeat = pool_of(1, round_wait).connect_lazy_with(connect);
    Ok(Engine::new(pool, options).with_own_pools(data, heartbeat))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bound_is_half_a_ttl_in_whole_seconds_at_least_one() {
        for (ttl_ms, secs) in [(500, 1), (2_000, 1), (3_000, 1), (4_000, 2), (15_000, 7), (60_000, 30)] {
            let options = StoreOptions { lease_ttl: Duration::from_millis(ttl_ms), ..StoreOptions::default() };
            assert_eq!(bound_secs(&options), secs, "ttl {ttl_ms} ms");
        }
    }
}
