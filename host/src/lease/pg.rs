//! PostgreSQL (≥ 14): SQL text and column decoding. "Now" is always
//! `clock_timestamp()`; UUIDs are bound as text and cast (`$n::uuid`).

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgQueryResult, PgRow};
use sqlx::{PgConnection, Postgres, Row};
use uuid::Uuid;

use super::engine::{AppendInOne, Attempt, Backend, Contended, Engine, Sql};
use super::{Appended, LeaseError, LeaseToken, NewEntry, StoreOptions};
use crate::plant::{self, Plant};

/// The PostgreSQL dialect.
#[derive(Clone, Copy, Debug)]
pub struct Pg;

/// When the lease of row `l` runs out: its own expiry, or for a lease on
/// its holder's liveness (migration 0007) the holder's, while the holder is
/// not down and still at the lease's liveness epoch. The node row is read in
/// a subquery, which a locking read of `l` does not lock.
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
            " AS expires_at, (l.holder IS NOT NULL AND ",
            lease_expiry!(),
            " > clock_timestamp()) AS live FROM chitin_shard_leases l"
        )
    };
}

/// The application's fence: see [`super::Dialect::fence_sql`].
pub(super) const FENCE: &str = concat!(
    "SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = $1 AND l.holder = $2 AND l.epoch = $3 AND ",
    lease_expiry!(),
    " > clock_timestamp() FOR SHARE"
);

impl Backend for Pg {
    type Db = Postgres;

    // The fence's locking read, the stream's sequence bump and the insert as
    // one statement: one round trip, its own transaction. The bump reads
    // from the fence and the insert from the bump, so a failed fence writes
    // nothing and returns no row; a repeated request id fails the insert,
    // which undoes the bump with it.
    const APPEND_IN_ONE: Option<AppendInOne> = Some(AppendInOne {
        fenced: concat!(
            "WITH fence AS (SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = $1 AND l.holder = $2::uuid \
             AND l.epoch = $3 AND ",
            lease_expiry!(),
            " > clock_timestamp() FOR SHARE), \
             bumped AS (INSERT INTO chitin_journal_streams AS s (stream, last_seq) SELECT $4, 1 FROM fence \
             ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + 1 RETURNING last_seq) \
             INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch) \
             SELECT $4, last_seq, $5, $6, $1, $3 FROM bumped RETURNING seq"
        ),
        unfenced: "WITH bumped AS (INSERT INTO chitin_journal_streams AS s (stream, last_seq) VALUES ($3, 1) \
             ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + 1 RETURNING last_seq) \
             INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch) \
             SELECT $3, last_seq, $4, $5, $1, $2 FROM bumped RETURNING seq",
        commits_itself: false,
    });

    const SQL: Sql = Sql {
        now: "SELECT clock_timestamp() AS now",
        new_node_id: "SELECT gen_random_uuid()::text AS id",
        mark_stale_down: "UPDATE chitin_nodes SET state = 'down' WHERE name = $1 AND state <> 'down' \
             AND last_seen <= clock_timestamp() - $2 * interval '1 microsecond'",
        insert_node: "INSERT INTO chitin_nodes (id, name, address, state) VALUES ($1::uuid, $2, $3, 'joining')",
        name_holder: "SELECT id, address, last_seen FROM chitin_nodes WHERE name = $1 AND state <> 'down'",
        heartbeat: "UPDATE chitin_nodes SET last_seen = clock_timestamp(), \
             lease_expires_at = clock_timestamp() + $1 * interval '1 microsecond' \
             WHERE id = $2::uuid AND state <> 'down' AND liveness_epoch = $3",
        liveness: "SELECT state, liveness_epoch FROM chitin_nodes WHERE id = $1::uuid",
        set_state: "UPDATE chitin_nodes SET state = $1, last_seen = clock_timestamp() \
             WHERE id = $2::uuid AND state <> 'down'",
        free_leases_of: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE holder = $1::uuid",
        mark_down: "UPDATE chitin_nodes SET state = 'down', last_seen = clock_timestamp(), \
             liveness_epoch = liveness_epoch + 1, lease_expires_at = NULL WHERE id = $1::uuid AND state <> 'down'",
        bump_liveness: "UPDATE chitin_nodes SET liveness_epoch = liveness_epoch + 1, lease_expires_at = NULL \
             WHERE id = $1::uuid AND liveness_epoch = $2 \
             AND (lease_expires_at IS NULL OR lease_expires_at <= clock_timestamp())",
        nodes: "SELECT id, name, address, state, started_at, last_seen, \
             (state <> 'down' AND last_seen > clock_timestamp() - $1 * interval '1 microsecond') AS live \
             FROM chitin_nodes ORDER BY started_at DESC, id",
        node: "SELECT name, state, \
             (state <> 'down' AND last_seen > clock_timestamp() - $1 * interval '1 microsecond') AS live, \
             liveness_epoch, (lease_expires_at > clock_timestamp()) AS leased FROM chitin_nodes WHERE id = $2::uuid",
        insert_meta: "INSERT INTO chitin_cluster_meta (id, shard_count, lease_ttl_ms, renew_interval_ms) \
             VALUES (1, $1, $2, $3) ON CONFLICT (id) DO NOTHING",
        meta: "SELECT shard_count, lease_ttl_ms, renew_interval_ms FROM chitin_cluster_meta WHERE id = 1",
        lease: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = $1"),
        lease_for_update: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = $1 FOR UPDATE"),
        lease_for_share: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id = $1 FOR SHARE"),
        ensure_lease: "INSERT INTO chitin_shard_leases (shard_id) VALUES ($1) ON CONFLICT (shard_id) DO NOTHING",
        grant: "UPDATE chitin_shard_leases SET holder = $1::uuid, holder_name = $2, epoch = epoch + 1, \
             expires_at = clock_timestamp() + $3 * interval '1 microsecond', liveness_epoch = NULL WHERE shard_id = $4",
        grant_on_liveness: "UPDATE chitin_shard_leases SET holder = $1::uuid, holder_name = $2, epoch = epoch + 1, \
             expires_at = clock_timestamp(), liveness_epoch = $3 WHERE shard_id = $4",
        convert: "UPDATE chitin_shard_leases SET expires_at = clock_timestamp(), liveness_epoch = $1 \
             WHERE shard_id = $2 AND holder = $3::uuid AND epoch = $4 AND liveness_epoch IS NULL \
             AND expires_at > clock_timestamp()",
        retire: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL, \
             epoch = epoch + 1 WHERE shard_id = $1",
        renew: "UPDATE chitin_shard_leases SET expires_at = clock_timestamp() + $1 * interval '1 microsecond' \
             WHERE shard_id = $2 AND holder = $3::uuid AND epoch = $4 AND liveness_epoch IS NULL \
             AND expires_at > clock_timestamp()",
        release: "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE shard_id = $1 AND holder = $2::uuid AND epoch = $3",
        holders: concat!("SELECT ", lease_cols!(), " ORDER BY l.shard_id"),
        leases_of: concat!(
            "SELECT ",
            lease_cols!(),
            " WHERE l.holder = $1::uuid AND ",
            lease_expiry!(),
            " > clock_timestamp() ORDER BY l.shard_id"
        ),
        leases_in: concat!("SELECT ", lease_cols!(), " WHERE l.shard_id IN ("),
        insert_history: "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES ($1, $2, $3::uuid, $4, $5, clock_timestamp())",
        history: concat!("SELECT ", history_cols!(), " ORDER BY shard_id, epoch"),
        history_of: concat!("SELECT ", history_cols!(), " WHERE shard_id = $1 ORDER BY epoch"),
        insert_retirement: "INSERT INTO chitin_shard_retirements \
             (shard_id, epoch, holder, holder_name, children, retired_at) \
             VALUES ($1, $2, $3::uuid, $4, $5, clock_timestamp())",
        retirement_locked: concat!("SELECT ", retirement_cols!(), " WHERE shard_id = $1 FOR SHARE"),
        retirement: concat!("SELECT ", retirement_cols!(), " WHERE shard_id = $1"),
        retirements: concat!("SELECT ", retirement_cols!(), " ORDER BY shard_id"),
        handoff_budget: "SELECT id FROM chitin_handoff_budget WHERE id = 1 FOR UPDATE",
        recent_handoffs: "SELECT count(*) AS n, min(acquired_at) AS oldest, clock_timestamp() AS now \
             FROM chitin_lease_history WHERE via = 'handover' \
             AND acquired_at > clock_timestamp() - $1 * interval '1 microsecond'",
        insert_entry: "INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        entry_of_request: "SELECT seq, epoch FROM chitin_journal WHERE stream = $1 AND request_id = $2",
        read: "SELECT stream, seq, request_id, payload, shard_id, epoch, committed_at FROM chitin_journal \
             WHERE stream = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
    };

    /// Serialization failure, deadlock; lock timeout (`lock_timeout`).
    fn contention(e: &sqlx::Error) -> Option<Contended> {
        let sqlx::Error::Database(d) = e else { return None };
        match d.code().as_deref()? {
            "40001" | "40P01" => Some(Contended::Conflict),
            "55P03" => Some(Contended::LockWait),
            _ => None,
        }
    }

    fn uuid(row: &PgRow, col: &str) -> Result<Option<Uuid>, LeaseError> {
        Ok(row.try_get(col)?)
    }

    fn time(row: &PgRow, col: &str) -> Result<Option<DateTime<Utc>>, LeaseError> {
        Ok(row.try_get(col)?)
    }

    fn flag(row: &PgRow, col: &str) -> Result<bool, LeaseError> {
        Ok(row.try_get::<Option<bool>, _>(col)?.unwrap_or(false))
    }

    fn affected(done: &PgQueryResult) -> u64 {
        done.rows_affected()
    }

    fn next_seq<'c>(conn: &'c mut PgConnection, stream: &'c str) -> impl Future<Output = Result<i64, sqlx::Error>> + Send + 'c {
        sqlx::query_scalar(
            "INSERT INTO chitin_journal_streams AS s (stream, last_seq) VALUES ($1, 1) \
             ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + 1 RETURNING last_seq",
        )
        .bind(stream)
        .fetch_one(conn)
    }
}

/// A batch of appends as one statement: the fence gates the input; entries
/// whose request id is stored (or repeated earlier in the batch) are left
/// out; each stream's sequence is bumped once by its count, and the fresh
/// entries are numbered from it in batch order. Returns the inserted rows.
const APPEND_BATCH: &str = concat!(
    "WITH fence AS (SELECT 1 FROM chitin_shard_leases l WHERE l.shard_id = $1 AND l.holder = $2::uuid \
     AND l.epoch = $3 AND ",
    lease_expiry!(),
    " > clock_timestamp() FOR SHARE), \
     input AS (SELECT t.stream, t.request_id, t.payload, t.ord \
       FROM unnest($4::text[], $5::text[], $6::bytea[]) WITH ORDINALITY AS t(stream, request_id, payload, ord) \
       WHERE EXISTS (SELECT 1 FROM fence)), \
     fresh AS (SELECT DISTINCT ON (i.stream, i.request_id) i.stream, i.request_id, i.payload, i.ord FROM input i \
       WHERE NOT EXISTS (SELECT 1 FROM chitin_journal j WHERE j.stream = i.stream AND j.request_id = i.request_id) \
       ORDER BY i.stream, i.request_id, i.ord), \
     counts AS (SELECT stream, count(*) AS k FROM fresh GROUP BY stream), \
     bumped AS (INSERT INTO chitin_journal_streams AS s (stream, last_seq) SELECT stream, k FROM counts \
       ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + EXCLUDED.last_seq RETURNING s.stream, s.last_seq), \
     numbered AS (SELECT f.stream, f.request_id, f.payload, \
       b.last_seq - c.k + row_number() OVER (PARTITION BY f.stream ORDER BY f.ord) AS seq \
       FROM fresh f JOIN counts c ON c.stream = f.stream JOIN bumped b ON b.stream = f.stream) \
     INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch) \
     SELECT stream, seq, request_id, payload, $1, $3 FROM numbered RETURNING stream, request_id, seq"
);

/// [`super::Store::append_batch`] on PostgreSQL: one round trip for the
/// batch, one more only when some entries were not fresh (to answer them
/// with their original outcome).
pub(super) async fn append_batch(e: &Engine<Pg>, token: &LeaseToken, entries: &[NewEntry]) -> Result<Vec<Appended>, LeaseError> {
    use std::collections::HashMap;
    crate::failpoint::hit("append.before_fence").await;
    if plant::active(Plant::Fence) || plant::active(Plant::Dedup) || crate::failpoint::is_armed("append.before_commit") {
        // The planted bugs and the pause before COMMIT live in the transactional batch.
        return e.append_batch(token, entries).await;
    }
    let (streams, ids, payloads): (Vec<&str>, Vec<&str>, Vec<&[u8]>) =
        entries.iter().map(|x| (x.stream.as_str(), x.request_id.as_str(), x.payload.as_slice())).collect();
    let mut stored: HashMap<(String, String), (i64, i64, bool)> = e
        .with_retry("append batch", || async {
            let rows = sqlx::query(APPEND_BATCH)
                .bind(token.shard.as_str())
                .bind(token.holder.to_string())
                .bind(token.epoch)
                .bind(&streams)
                .bind(&ids)
                .bind(&payloads)
                .fetch_all(&e.pool)
                .await;
            match rows {
                Ok(rows) => rows
                    .iter()
                    .map(|r| Ok(((r.try_get("stream")?, r.try_get("request_id")?), (r.try_get("seq")?, token.epoch, true))))
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(Attempt::from),
                // A racing writer of the same id committed meanwhile: run again, and find it.
                Err(err) if super::unique_violation(&err).is_some() => Err(Attempt::Again(err)),
                Err(err) => Err(err.into()),
            }
        })
        .await?;
    // The entries not written now were stored before (or the fence refused
    // the batch): one lookup finds them all, to answer with their outcome.
    let (old_streams, old_ids): (Vec<&str>, Vec<&str>) = entries
        .iter()
        .filter(|x| !stored.contains_key(&(x.stream.clone(), x.request_id.clone())))
        .map(|x| (x.stream.as_str(), x.request_id.as_str()))
        .unzip();
    if !old_streams.is_empty() {
        let rows = sqlx::query(
            "SELECT j.stream, j.request_id, j.seq, j.epoch FROM chitin_journal j \
             JOIN unnest($1::text[], $2::text[]) AS t(stream, request_id) ON j.stream = t.stream AND j.request_id = t.request_id",
        )
        .bind(&old_streams)
        .bind(&old_ids)
        .fetch_all(&e.pool)
        .await?;
        for r in rows {
            stored.insert((r.try_get("stream")?, r.try_get("request_id")?), (r.try_get("seq")?, r.try_get("epoch")?, false));
        }
    }
    let mut answers = Vec::with_capacity(entries.len());
    let mut first = std::collections::HashSet::new();
    for x in entries {
        let key = (x.stream.clone(), x.request_id.clone());
        // Neither written nor stored before: the fence refused the batch.
        let Some(&(seq, epoch, fresh)) = stored.get(&key) else { return Err(e.lost_error(token).await) };
        // A repeat within the batch is answered as applied before.
        answers.push(Appended { seq, epoch, fresh: fresh && first.insert(key) });
    }
    Ok(answers)
}

/// The lock and idle-transaction bound of every session: half a TTL, at
/// least 500 ms, as PostgreSQL reads it (`1000ms`).
pub(super) fn session_bound(options: &StoreOptions) -> String {
    format!("{}ms", (options.lease_ttl / 2).max(Duration::from_millis(500)).as_millis())
}

pub(super) async fn connect(url: &str, options: StoreOptions) -> Result<Engine<Pg>, LeaseError> {
    // A peer cut off mid-transaction keeps its row locks until the server
    // gives up on it; without a bound, the lease it held cannot be taken over
    // when it expires, and the taker's round (its renewals too) waits behind
    // the lock. Half a TTL bounds both: the stuck transaction is ended, a
    // blocked statement fails and is retried.
    let bound = session_bound(&options);
    let mut connect = PgConnectOptions::from_str(url)?;
    if !plant::active(Plant::IdleBound) {
        connect = connect.options([("idle_in_transaction_session_timeout", bound.as_str()), ("lock_timeout", bound.as_str())]);
    }
    let (control, data) = super::engine::pool_sizes(options.max_connections);
    let pool_of = |size, wait| super::engine::ping_when_idle(PgPoolOptions::new()).max_connections(size).acquire_timeout(wait);
    let round_wait = super::engine::control_acquire_timeout(&options);
    let pool = pool_of(control, round_wait).connect_with(connect.clone()).await?;
    let data = pool_of(data, options.acquire_timeout).connect_lazy_with(connect.clone());
    let heartbeat = pool_of(1, round_wait).connect_lazy_with(connect);
    Ok(Engine::new(pool, options).with_own_pools(data, heartbeat))
}
