//! PostgreSQL (≥ 14). "Now" is always `clock_timestamp()`.

use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use uuid::Uuid;

use super::{
    Appended, CurrentLease, HistoryEntry, JournalEntry, Lease, LeaseError, LeaseRow, LeaseToken,
    NodeRecord, NodeState, RETRIES, StoreOptions, lost, lost_reason, unique_violation,
};

#[derive(Clone, Debug)]
pub struct PgStore {
    pub(super) pool: PgPool,
    pub(super) options: StoreOptions,
}

/// Deadlock or serialization failure: the transaction may simply be retried.
fn retryable(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if matches!(d.code().as_deref(), Some("40P01" | "40001")))
}

fn current(row: &PgRow) -> Result<CurrentLease, sqlx::Error> {
    Ok(CurrentLease {
        holder: row.try_get("holder")?,
        epoch: row.try_get("epoch")?,
        expires_at: row.try_get("expires_at")?,
        live: row.try_get::<Option<bool>, _>("live")?.unwrap_or(false),
    })
}

const CURRENT: &str = "SELECT holder, epoch, expires_at, \
     (holder IS NOT NULL AND expires_at > clock_timestamp()) AS live \
     FROM chitin_shard_leases WHERE shard_id = $1";

const CURRENT_FOR_SHARE: &str = "SELECT holder, epoch, expires_at, \
     (holder IS NOT NULL AND expires_at > clock_timestamp()) AS live \
     FROM chitin_shard_leases WHERE shard_id = $1 FOR SHARE";

impl PgStore {
    pub(super) async fn connect(url: &str, options: StoreOptions) -> Result<Self, LeaseError> {
        // A peer cut off mid-transaction keeps its row locks until the
        // server gives up on it; without a bound, the lease it held cannot be
        // taken over when it expires, and the taker's round (its renewals
        // too) waits behind the lock. Half a TTL bounds both: the stuck
        // transaction is ended, a blocked statement fails and is retried.
        let bound = format!("{}ms", (options.lease_ttl / 2).max(Duration::from_millis(500)).as_millis());
        let connect = PgConnectOptions::from_str(url)?
            .options([("idle_in_transaction_session_timeout", bound.as_str()), ("lock_timeout", bound.as_str())]);
        let pool = PgPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(PgStore { pool, options })
    }

    fn ttl(&self) -> f64 {
        self.options.lease_ttl.as_secs_f64()
    }

    fn liveness(&self) -> f64 {
        self.options.liveness_timeout.as_secs_f64()
    }

    pub(super) async fn now(&self) -> Result<DateTime<Utc>, LeaseError> {
        Ok(sqlx::query_scalar("SELECT clock_timestamp()")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn lost_error(&self, token: &LeaseToken) -> LeaseError {
        match sqlx::query(CURRENT)
            .bind(&token.shard)
            .fetch_optional(&self.pool)
            .await
        {
            Ok(row) => {
                let cur = match row.as_ref().map(current).transpose() {
                    Ok(c) => c,
                    Err(e) => return e.into(),
                };
                let reason =
                    lost_reason(cur.as_ref(), token).unwrap_or(super::LostReason::Superseded {
                        holder: cur.as_ref().and_then(|c| c.holder),
                        epoch: cur.as_ref().map_or(0, |c| c.epoch),
                    });
                lost(token, reason)
            }
            Err(e) => e.into(),
        }
    }

    // ---- nodes ------------------------------------------------------------

    pub(super) async fn register_node(
        &self,
        name: &str,
        address: &str,
    ) -> Result<Uuid, LeaseError> {
        for _ in 0..RETRIES {
            let mut tx = self.pool.begin().await?;
            sqlx::query(
                "UPDATE chitin_nodes SET state = 'down' \
                 WHERE name = $1 AND state <> 'down' \
                   AND last_seen <= clock_timestamp() - make_interval(secs => $2)",
            )
            .bind(name)
            .bind(self.liveness())
            .execute(&mut *tx)
            .await?;
            let inserted = sqlx::query_scalar::<_, Uuid>(
                "INSERT INTO chitin_nodes (name, address, state) VALUES ($1, $2, 'joining') RETURNING id",
            )
            .bind(name)
            .bind(address)
            .fetch_one(&mut *tx)
            .await;
            match inserted {
                Ok(id) => {
                    tx.commit().await?;
                    return Ok(id);
                }
                Err(e) if unique_violation(&e).is_some() => {
                    tx.rollback().await?;
                    let row = sqlx::query(
                        "SELECT id, address, last_seen FROM chitin_nodes WHERE name = $1 AND state <> 'down'",
                    )
                    .bind(name)
                    .fetch_optional(&self.pool)
                    .await?;
                    if let Some(row) = row {
                        return Err(LeaseError::NameInUse {
                            name: name.to_owned(),
                            holder: row.try_get("id")?,
                            address: row.try_get("address")?,
                            last_seen: row.try_get("last_seen")?,
                        });
                    }
                    // The holder went down meanwhile: try again.
                }
                Err(e) if retryable(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not register `{name}`: too many conflicts"
        )))
    }

    pub(super) async fn heartbeat(&self, node: Uuid) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "UPDATE chitin_nodes SET last_seen = clock_timestamp() WHERE id = $1 AND state <> 'down'",
        )
        .bind(node)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(LeaseError::NodeNotRegistered(node));
        }
        Ok(())
    }

    pub(super) async fn set_node_state(
        &self,
        node: Uuid,
        state: NodeState,
    ) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "UPDATE chitin_nodes SET state = $2, last_seen = clock_timestamp() WHERE id = $1 AND state <> 'down'",
        )
        .bind(node)
        .bind(state.as_str())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(LeaseError::NodeNotRegistered(node));
        }
        Ok(())
    }

    pub(super) async fn deregister(&self, node: Uuid) -> Result<(), LeaseError> {
        for _ in 0..RETRIES {
            match self.deregister_once(node).await {
                Err(LeaseError::Db(e)) if retryable(&e) => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not deregister {node}: too many conflicts"
        )))
    }

    async fn deregister_once(&self, node: Uuid) -> Result<(), LeaseError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL WHERE holder = $1",
        )
        .bind(node)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE chitin_nodes SET state = 'down', last_seen = clock_timestamp() WHERE id = $1 AND state <> 'down'",
        )
        .bind(node)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn nodes(&self) -> Result<Vec<NodeRecord>, LeaseError> {
        let rows = sqlx::query(
            "SELECT id, name, address, state, started_at, last_seen, \
               (state <> 'down' AND last_seen > clock_timestamp() - make_interval(secs => $1)) AS live \
             FROM chitin_nodes ORDER BY started_at DESC, id",
        )
        .bind(self.liveness())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(NodeRecord {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    address: r.try_get("address")?,
                    state: r.try_get::<String, _>("state")?.parse()?,
                    started_at: r.try_get("started_at")?,
                    last_seen: r.try_get("last_seen")?,
                    live: r.try_get("live")?,
                })
            })
            .collect()
    }

    // ---- cluster meta -----------------------------------------------------

    pub(super) async fn check_cluster_meta(
        &self,
        shard_count: i64,
        ttl_ms: i64,
        renew_ms: i64,
    ) -> Result<(i64, i64, i64), LeaseError> {
        sqlx::query(
            "INSERT INTO chitin_cluster_meta (id, shard_count, lease_ttl_ms, renew_interval_ms) \
             VALUES (1, $1, $2, $3) ON CONFLICT (id) DO NOTHING",
        )
        .bind(shard_count)
        .bind(ttl_ms)
        .bind(renew_ms)
        .execute(&self.pool)
        .await?;
        Ok(sqlx::query_as(
            "SELECT shard_count, lease_ttl_ms, renew_interval_ms FROM chitin_cluster_meta WHERE id = 1",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    // ---- leases -----------------------------------------------------------

    pub(super) async fn try_acquire(
        &self,
        shard: &str,
        node: Uuid,
    ) -> Result<Option<Lease>, LeaseError> {
        for _ in 0..RETRIES {
            match self.try_acquire_once(shard, node).await {
                Err(LeaseError::Db(e)) if retryable(&e) => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not acquire `{shard}`: too many conflicts"
        )))
    }

    async fn try_acquire_once(&self, shard: &str, node: Uuid) -> Result<Option<Lease>, LeaseError> {
        let mut tx = self.pool.begin().await?;
        let name: Option<String> =
            sqlx::query_scalar("SELECT name FROM chitin_nodes WHERE id = $1 AND state <> 'down'")
                .bind(node)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(name) = name else {
            return Err(LeaseError::NodeNotRegistered(node));
        };
        // Free or expired only; every grant increments the epoch. The WHERE
        // is re-checked on the newest row version after any lock wait.
        let granted: Option<(i64, DateTime<Utc>)> = sqlx::query_as(
            "INSERT INTO chitin_shard_leases AS l (shard_id, holder, holder_name, epoch, expires_at) \
             VALUES ($1, $2, $3, 1, clock_timestamp() + make_interval(secs => $4)) \
             ON CONFLICT (shard_id) DO UPDATE \
               SET holder = EXCLUDED.holder, holder_name = EXCLUDED.holder_name, epoch = l.epoch + 1, \
                   expires_at = clock_timestamp() + make_interval(secs => $4) \
               WHERE l.holder IS NULL OR l.expires_at <= clock_timestamp() \
             RETURNING epoch, expires_at",
        )
        .bind(shard)
        .bind(node)
        .bind(&name)
        .bind(self.ttl())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((epoch, expires_at)) = granted else {
            tx.rollback().await?;
            return Ok(None);
        };
        sqlx::query(
            "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES ($1, $2, $3, $4, 'acquire', clock_timestamp())",
        )
        .bind(shard)
        .bind(epoch)
        .bind(node)
        .bind(&name)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Some(Lease {
            shard: shard.to_owned(),
            holder: node,
            holder_name: name,
            epoch,
            expires_at,
        }))
    }

    pub(super) async fn renew(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let expires_at: Option<DateTime<Utc>> = sqlx::query_scalar(
            "UPDATE chitin_shard_leases SET expires_at = clock_timestamp() + make_interval(secs => $4) \
             WHERE shard_id = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp() \
             RETURNING expires_at",
        )
        .bind(&lease.shard)
        .bind(lease.holder)
        .bind(lease.epoch)
        .bind(self.ttl())
        .fetch_optional(&self.pool)
        .await?;
        match expires_at {
            Some(expires_at) => Ok(Lease {
                expires_at,
                ..lease.clone()
            }),
            None => Err(self.lost_error(&lease.token()).await),
        }
    }

    pub(super) async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE shard_id = $1 AND holder = $2 AND epoch = $3",
        )
        .bind(&lease.shard)
        .bind(lease.holder)
        .bind(lease.epoch)
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(self.lost_error(&lease.token()).await);
        }
        Ok(())
    }

    pub(super) async fn handover(&self, lease: &Lease, to: Uuid) -> Result<Lease, LeaseError> {
        if to == lease.holder {
            return Err(LeaseError::InvalidArgument(format!(
                "handover of `{}` to its own holder {to}",
                lease.shard
            )));
        }
        for _ in 0..RETRIES {
            match self.handover_once(lease, to).await {
                Err(LeaseError::Db(e)) if retryable(&e) => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not hand over `{}`: too many conflicts",
            lease.shard
        )))
    }

    async fn handover_once(&self, lease: &Lease, to: Uuid) -> Result<Lease, LeaseError> {
        let mut tx = self.pool.begin().await?;
        let name: Option<String> = sqlx::query_scalar(
            "SELECT name FROM chitin_nodes WHERE id = $1 AND state <> 'down' \
               AND last_seen > clock_timestamp() - make_interval(secs => $2)",
        )
        .bind(to)
        .bind(self.liveness())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(name) = name else {
            return Err(LeaseError::NodeNotLive(to));
        };
        let granted: Option<(i64, DateTime<Utc>)> = sqlx::query_as(
            "UPDATE chitin_shard_leases \
               SET holder = $4, holder_name = $5, epoch = epoch + 1, \
                   expires_at = clock_timestamp() + make_interval(secs => $6) \
             WHERE shard_id = $1 AND holder = $2 AND epoch = $3 AND expires_at > clock_timestamp() \
             RETURNING epoch, expires_at",
        )
        .bind(&lease.shard)
        .bind(lease.holder)
        .bind(lease.epoch)
        .bind(to)
        .bind(&name)
        .bind(self.ttl())
        .fetch_optional(&mut *tx)
        .await?;
        let Some((epoch, expires_at)) = granted else {
            tx.rollback().await?;
            return Err(self.lost_error(&lease.token()).await);
        };
        sqlx::query(
            "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES ($1, $2, $3, $4, 'handover', clock_timestamp())",
        )
        .bind(&lease.shard)
        .bind(epoch)
        .bind(to)
        .bind(&name)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(Lease {
            shard: lease.shard.clone(),
            holder: to,
            holder_name: name,
            epoch,
            expires_at,
        })
    }

    pub(super) async fn holders(&self) -> Result<Vec<LeaseRow>, LeaseError> {
        let rows = sqlx::query(
            "SELECT shard_id, holder, holder_name, epoch, expires_at, \
               (holder IS NOT NULL AND expires_at > clock_timestamp()) AS live \
             FROM chitin_shard_leases ORDER BY shard_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LeaseRow {
                    shard: r.try_get("shard_id")?,
                    holder: r.try_get("holder")?,
                    holder_name: r.try_get("holder_name")?,
                    epoch: r.try_get("epoch")?,
                    expires_at: r.try_get("expires_at")?,
                    live: r.try_get::<Option<bool>, _>("live")?.unwrap_or(false),
                })
            })
            .collect()
    }

    pub(super) async fn history(
        &self,
        shard: Option<&str>,
    ) -> Result<Vec<HistoryEntry>, LeaseError> {
        let rows = sqlx::query(
            "SELECT shard_id, epoch, holder, holder_name, via, acquired_at FROM chitin_lease_history \
             WHERE $1::text IS NULL OR shard_id = $1 ORDER BY shard_id, epoch",
        )
        .bind(shard)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HistoryEntry {
                    shard: r.try_get("shard_id")?,
                    epoch: r.try_get("epoch")?,
                    holder: r.try_get("holder")?,
                    holder_name: r.try_get("holder_name")?,
                    via: r.try_get("via")?,
                    acquired_at: r.try_get("acquired_at")?,
                })
            })
            .collect()
    }

    // ---- journal ----------------------------------------------------------

    pub(super) async fn append(
        &self,
        fence: Option<&LeaseToken>,
        shard: &str,
        epoch: i64,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Appended, LeaseError> {
        for _ in 0..RETRIES {
            match self
                .append_once(fence, shard, epoch, stream, request_id, payload)
                .await
            {
                Err(LeaseError::Db(e)) if retryable(&e) => continue,
                Ok(None) => continue,
                Ok(Some(done)) => return Ok(done),
                Err(e) => return Err(e),
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not append to `{stream}`: too many conflicts"
        )))
    }

    /// `Ok(None)`: lost a race on the request id to a transaction that has
    /// since rolled back; try again.
    async fn append_once(
        &self,
        fence: Option<&LeaseToken>,
        shard: &str,
        epoch: i64,
        stream: &str,
        request_id: &str,
        payload: &[u8],
    ) -> Result<Option<Appended>, LeaseError> {
        let mut tx = self.pool.begin().await?;
        if let Some(token) = fence {
            // First statement: shared row lock on the lease, then the check.
            let row = sqlx::query(CURRENT_FOR_SHARE)
                .bind(&token.shard)
                .fetch_optional(&mut *tx)
                .await?;
            let cur = row.as_ref().map(current).transpose()?;
            if let Some(reason) = lost_reason(cur.as_ref(), token) {
                tx.rollback().await?;
                return Err(lost(token, reason));
            }
        }
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO chitin_journal_streams AS s (stream, last_seq) VALUES ($1, 1) \
             ON CONFLICT (stream) DO UPDATE SET last_seq = s.last_seq + 1 RETURNING last_seq",
        )
        .bind(stream)
        .fetch_one(&mut *tx)
        .await?;
        let inserted = sqlx::query(
            "INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
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
                tx.commit().await?;
                Ok(Some(Appended {
                    seq,
                    epoch,
                    fresh: true,
                }))
            }
            Err(e) if unique_violation(&e).is_some() => {
                tx.rollback().await?;
                let original: Option<(i64, i64)> = sqlx::query_as(
                    "SELECT seq, epoch FROM chitin_journal WHERE stream = $1 AND request_id = $2",
                )
                .bind(stream)
                .bind(request_id)
                .fetch_optional(&self.pool)
                .await?;
                Ok(original.map(|(seq, epoch)| Appended {
                    seq,
                    epoch,
                    fresh: false,
                }))
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn read(
        &self,
        stream: &str,
        from: i64,
        limit: i64,
    ) -> Result<Vec<JournalEntry>, LeaseError> {
        let rows = sqlx::query(
            "SELECT stream, seq, request_id, payload, shard_id, epoch, committed_at FROM chitin_journal \
             WHERE stream = $1 AND seq >= $2 ORDER BY seq LIMIT $3",
        )
        .bind(stream)
        .bind(from)
        .bind(limit)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(JournalEntry {
                    stream: r.try_get("stream")?,
                    seq: r.try_get("seq")?,
                    request_id: r.try_get("request_id")?,
                    payload: r.try_get("payload")?,
                    shard: r.try_get("shard_id")?,
                    epoch: r.try_get("epoch")?,
                    committed_at: r.try_get("committed_at")?,
                })
            })
            .collect()
    }
}
