//! MySQL (≥ 8.0) and MariaDB (≥ 10.6). "Now" is always `UTC_TIMESTAMP(6)`
//! and times are `DATETIME(6)` in UTC. MySQL has no `UPDATE … RETURNING`, so
//! grants lock the lease row with `SELECT … FOR UPDATE` and update it in the
//! same transaction; fences take `LOCK IN SHARE MODE` (both servers accept it).

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::mysql::{MySqlConnectOptions, MySqlDatabaseError, MySqlPool, MySqlPoolOptions, MySqlRow};
use uuid::Uuid;

use super::{
    Appended, CurrentLease, HistoryEntry, JournalEntry, Lease, LeaseError, LeaseRow, LeaseToken,
    NodeRecord, NodeState, RETRIES, StoreOptions, lost, lost_reason, micros, parse_uuid,
    unique_violation,
};

#[derive(Clone, Debug)]
pub struct MySqlStore {
    pub(super) pool: MySqlPool,
    pub(super) options: StoreOptions,
}

/// Deadlock (1213) or lock wait timeout (1205): retry the transaction.
fn retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => d
            .try_downcast_ref::<MySqlDatabaseError>()
            .is_some_and(|m| matches!(m.number(), 1213 | 1205)),
        _ => false,
    }
}

fn retryable_lease(e: &LeaseError) -> bool {
    matches!(e, LeaseError::Db(e) if retryable(e))
}

fn opt_uuid(s: Option<String>) -> Result<Option<Uuid>, LeaseError> {
    s.as_deref().map(parse_uuid).transpose()
}

fn current(row: &MySqlRow) -> Result<CurrentLease, LeaseError> {
    Ok(CurrentLease {
        holder: opt_uuid(row.try_get("holder")?)?,
        epoch: row.try_get("epoch")?,
        expires_at: row.try_get("expires_at")?,
        live: row.try_get::<Option<i64>, _>("live")?.unwrap_or(0) != 0,
    })
}

const CURRENT: &str = "SELECT holder, epoch, expires_at, \
     CAST(holder IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS live \
     FROM chitin_shard_leases WHERE shard_id = ?";

const CURRENT_FOR_UPDATE: &str = "SELECT holder, epoch, expires_at, \
     CAST(holder IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS live \
     FROM chitin_shard_leases WHERE shard_id = ? FOR UPDATE";

const CURRENT_FOR_SHARE: &str = "SELECT holder, epoch, expires_at, \
     CAST(holder IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS live \
     FROM chitin_shard_leases WHERE shard_id = ? LOCK IN SHARE MODE";

impl MySqlStore {
    pub(super) async fn connect(url: &str, options: StoreOptions) -> Result<Self, LeaseError> {
        // sqlx speaks `mysql://`; `mariadb://` is the same protocol.
        let url = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => {
                format!("mysql://{rest}")
            }
            _ => url.to_owned(),
        };
        // The session time zone is UTC (sqlx's default, set explicitly here).
        let connect = MySqlConnectOptions::from_str(&url)?.timezone(Some("+00:00".to_owned()));
        let pool = MySqlPoolOptions::new()
            .max_connections(options.max_connections)
            .acquire_timeout(options.acquire_timeout)
            .connect_with(connect)
            .await?;
        Ok(MySqlStore { pool, options })
    }

    fn ttl(&self) -> i64 {
        micros(self.options.lease_ttl)
    }

    fn liveness(&self) -> i64 {
        micros(self.options.liveness_timeout)
    }

    pub(super) async fn now(&self) -> Result<DateTime<Utc>, LeaseError> {
        Ok(sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
            .fetch_one(&self.pool)
            .await?)
    }

    async fn lost_error(&self, token: &LeaseToken) -> LeaseError {
        let row = match sqlx::query(CURRENT)
            .bind(&token.shard)
            .fetch_optional(&self.pool)
            .await
        {
            Ok(row) => row,
            Err(e) => return e.into(),
        };
        let cur = match row.as_ref().map(current).transpose() {
            Ok(c) => c,
            Err(e) => return e,
        };
        let reason = lost_reason(cur.as_ref(), token).unwrap_or(super::LostReason::Superseded {
            holder: cur.as_ref().and_then(|c| c.holder),
            epoch: cur.as_ref().map_or(0, |c| c.epoch),
        });
        lost(token, reason)
    }

    // ---- nodes ------------------------------------------------------------

    pub(super) async fn register_node(
        &self,
        name: &str,
        address: &str,
    ) -> Result<Uuid, LeaseError> {
        for _ in 0..RETRIES {
            match self.register_once(name, address).await {
                Ok(Some(id)) => return Ok(id),
                Ok(None) => continue,
                Err(e) if retryable_lease(&e) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not register `{name}`: too many conflicts"
        )))
    }

    async fn register_once(&self, name: &str, address: &str) -> Result<Option<Uuid>, LeaseError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "UPDATE chitin_nodes SET state = 'down' \
             WHERE name = ? AND state <> 'down' AND last_seen <= UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        )
        .bind(name)
        .bind(self.liveness())
        .execute(&mut *tx)
        .await?;
        // The database assigns the UUID.
        let id: String = sqlx::query_scalar("SELECT UUID()")
            .fetch_one(&mut *tx)
            .await?;
        let inserted = sqlx::query(
            "INSERT INTO chitin_nodes (id, name, address, state, started_at, last_seen) \
             VALUES (?, ?, ?, 'joining', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))",
        )
        .bind(&id)
        .bind(name)
        .bind(address)
        .execute(&mut *tx)
        .await;
        match inserted {
            Ok(_) => {
                tx.commit().await?;
                Ok(Some(parse_uuid(&id)?))
            }
            Err(e) if unique_violation(&e).is_some() => {
                tx.rollback().await?;
                let row = sqlx::query(
                    "SELECT id, address, last_seen FROM chitin_nodes WHERE name = ? AND state <> 'down'",
                )
                .bind(name)
                .fetch_optional(&self.pool)
                .await?;
                match row {
                    Some(row) => Err(LeaseError::NameInUse {
                        name: name.to_owned(),
                        holder: parse_uuid(&row.try_get::<String, _>("id")?)?,
                        address: row.try_get("address")?,
                        last_seen: row.try_get("last_seen")?,
                    }),
                    None => Ok(None),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    pub(super) async fn heartbeat(&self, node: Uuid) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "UPDATE chitin_nodes SET last_seen = UTC_TIMESTAMP(6) WHERE id = ? AND state <> 'down'",
        )
        .bind(node.to_string())
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
            "UPDATE chitin_nodes SET state = ?, last_seen = UTC_TIMESTAMP(6) WHERE id = ? AND state <> 'down'",
        )
        .bind(state.as_str())
        .bind(node.to_string())
        .execute(&self.pool)
        .await?;
        if done.rows_affected() == 0 {
            return Err(LeaseError::NodeNotRegistered(node));
        }
        Ok(())
    }

    pub(super) async fn deregister(&self, node: Uuid) -> Result<(), LeaseError> {
        for attempt in 0..RETRIES {
            let r: Result<(), LeaseError> = async {
                let mut tx = self.pool.begin().await?;
                sqlx::query(
                    "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
                     WHERE holder = ?",
                )
                .bind(node.to_string())
                .execute(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE chitin_nodes SET state = 'down', last_seen = UTC_TIMESTAMP(6) \
                     WHERE id = ? AND state <> 'down'",
                )
                .bind(node.to_string())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }
            .await;
            match r {
                Err(e) if retryable_lease(&e) && attempt + 1 < RETRIES => continue,
                other => return other,
            }
        }
        Ok(())
    }

    pub(super) async fn nodes(&self) -> Result<Vec<NodeRecord>, LeaseError> {
        let rows = sqlx::query(
            "SELECT id, name, address, state, started_at, last_seen, \
               CAST(state <> 'down' AND last_seen > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND AS SIGNED) AS live \
             FROM chitin_nodes ORDER BY started_at DESC, id",
        )
        .bind(self.liveness())
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(NodeRecord {
                    id: parse_uuid(&r.try_get::<String, _>("id")?)?,
                    name: r.try_get("name")?,
                    address: r.try_get("address")?,
                    state: r.try_get::<String, _>("state")?.parse()?,
                    started_at: r.try_get("started_at")?,
                    last_seen: r.try_get("last_seen")?,
                    live: r.try_get::<Option<i64>, _>("live")?.unwrap_or(0) != 0,
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
            "INSERT INTO chitin_cluster_meta (id, shard_count, lease_ttl_ms, renew_interval_ms, created_at) \
             VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE id = id",
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
                Err(e) if retryable_lease(&e) => continue,
                // A racing first insert of the lease row: look again.
                Err(LeaseError::Db(e)) if unique_violation(&e).is_some() => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not acquire `{shard}`: too many conflicts"
        )))
    }

    async fn try_acquire_once(&self, shard: &str, node: Uuid) -> Result<Option<Lease>, LeaseError> {
        let node_s = node.to_string();
        let mut tx = self.pool.begin().await?;
        let name: Option<String> =
            sqlx::query_scalar("SELECT name FROM chitin_nodes WHERE id = ? AND state <> 'down'")
                .bind(&node_s)
                .fetch_optional(&mut *tx)
                .await?;
        let Some(name) = name else {
            return Err(LeaseError::NodeNotRegistered(node));
        };
        let row = sqlx::query(CURRENT_FOR_UPDATE)
            .bind(shard)
            .fetch_optional(&mut *tx)
            .await?;
        match row.as_ref().map(current).transpose()? {
            None => {
                sqlx::query(
                    "INSERT INTO chitin_shard_leases (shard_id, holder, holder_name, epoch, expires_at) \
                     VALUES (?, ?, ?, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)",
                )
                .bind(shard)
                .bind(&node_s)
                .bind(&name)
                .bind(self.ttl())
                .execute(&mut *tx)
                .await?;
            }
            Some(cur) if cur.live => {
                tx.rollback().await?;
                return Ok(None);
            }
            Some(_) => {
                sqlx::query(
                    "UPDATE chitin_shard_leases \
                       SET holder = ?, holder_name = ?, epoch = epoch + 1, \
                           expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                     WHERE shard_id = ?",
                )
                .bind(&node_s)
                .bind(&name)
                .bind(self.ttl())
                .bind(shard)
                .execute(&mut *tx)
                .await?;
            }
        }
        let (epoch, expires_at): (i64, DateTime<Utc>) =
            sqlx::query_as("SELECT epoch, expires_at FROM chitin_shard_leases WHERE shard_id = ?")
                .bind(shard)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES (?, ?, ?, ?, 'acquire', UTC_TIMESTAMP(6))",
        )
        .bind(shard)
        .bind(epoch)
        .bind(&node_s)
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
        for _ in 0..RETRIES {
            match self.renew_once(lease).await {
                Err(e) if retryable_lease(&e) => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not renew `{}`: too many conflicts",
            lease.shard
        )))
    }

    async fn renew_once(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        let mut tx = self.pool.begin().await?;
        let done = sqlx::query(
            "UPDATE chitin_shard_leases SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE shard_id = ? AND holder = ? AND epoch = ? AND expires_at > UTC_TIMESTAMP(6)",
        )
        .bind(self.ttl())
        .bind(&lease.shard)
        .bind(lease.holder.to_string())
        .bind(lease.epoch)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Err(self.lost_error(&lease.token()).await);
        }
        let expires_at: DateTime<Utc> =
            sqlx::query_scalar("SELECT expires_at FROM chitin_shard_leases WHERE shard_id = ?")
                .bind(&lease.shard)
                .fetch_one(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(Lease {
            expires_at,
            ..lease.clone()
        })
    }

    pub(super) async fn release(&self, lease: &Lease) -> Result<(), LeaseError> {
        let done = sqlx::query(
            "UPDATE chitin_shard_leases SET holder = NULL, holder_name = NULL, expires_at = NULL \
             WHERE shard_id = ? AND holder = ? AND epoch = ?",
        )
        .bind(&lease.shard)
        .bind(lease.holder.to_string())
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
                Err(e) if retryable_lease(&e) => continue,
                other => return other,
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not hand over `{}`: too many conflicts",
            lease.shard
        )))
    }

    async fn handover_once(&self, lease: &Lease, to: Uuid) -> Result<Lease, LeaseError> {
        let to_s = to.to_string();
        let mut tx = self.pool.begin().await?;
        let name: Option<String> = sqlx::query_scalar(
            "SELECT name FROM chitin_nodes WHERE id = ? AND state <> 'down' \
               AND last_seen > UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND",
        )
        .bind(&to_s)
        .bind(self.liveness())
        .fetch_optional(&mut *tx)
        .await?;
        let Some(name) = name else {
            return Err(LeaseError::NodeNotLive(to));
        };
        let done = sqlx::query(
            "UPDATE chitin_shard_leases \
               SET holder = ?, holder_name = ?, epoch = epoch + 1, \
                   expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE shard_id = ? AND holder = ? AND epoch = ? AND expires_at > UTC_TIMESTAMP(6)",
        )
        .bind(&to_s)
        .bind(&name)
        .bind(self.ttl())
        .bind(&lease.shard)
        .bind(lease.holder.to_string())
        .bind(lease.epoch)
        .execute(&mut *tx)
        .await?;
        if done.rows_affected() == 0 {
            tx.rollback().await?;
            return Err(self.lost_error(&lease.token()).await);
        }
        let (epoch, expires_at): (i64, DateTime<Utc>) =
            sqlx::query_as("SELECT epoch, expires_at FROM chitin_shard_leases WHERE shard_id = ?")
                .bind(&lease.shard)
                .fetch_one(&mut *tx)
                .await?;
        sqlx::query(
            "INSERT INTO chitin_lease_history (shard_id, epoch, holder, holder_name, via, acquired_at) \
             VALUES (?, ?, ?, ?, 'handover', UTC_TIMESTAMP(6))",
        )
        .bind(&lease.shard)
        .bind(epoch)
        .bind(&to_s)
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
               CAST(holder IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) AS live \
             FROM chitin_shard_leases ORDER BY shard_id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(LeaseRow {
                    shard: r.try_get("shard_id")?,
                    holder: opt_uuid(r.try_get("holder")?)?,
                    holder_name: r.try_get("holder_name")?,
                    epoch: r.try_get("epoch")?,
                    expires_at: r.try_get("expires_at")?,
                    live: r.try_get::<Option<i64>, _>("live")?.unwrap_or(0) != 0,
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
             WHERE ? IS NULL OR shard_id = ? ORDER BY shard_id, epoch",
        )
        .bind(shard)
        .bind(shard)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HistoryEntry {
                    shard: r.try_get("shard_id")?,
                    epoch: r.try_get("epoch")?,
                    holder: parse_uuid(&r.try_get::<String, _>("holder")?)?,
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
                Err(e) if retryable_lease(&e) => continue,
                Ok(None) => continue,
                Ok(Some(done)) => return Ok(done),
                Err(e) => return Err(e),
            }
        }
        Err(LeaseError::Corrupt(format!(
            "could not append to `{stream}`: too many conflicts"
        )))
    }

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
        // Next sequence number of the stream; the row lock orders appends.
        let bumped = sqlx::query(
            "INSERT INTO chitin_journal_streams (stream, last_seq) VALUES (?, LAST_INSERT_ID(1)) \
             ON DUPLICATE KEY UPDATE last_seq = LAST_INSERT_ID(last_seq + 1)",
        )
        .bind(stream)
        .execute(&mut *tx)
        .await?;
        let seq = i64::try_from(bumped.last_insert_id())
            .map_err(|_| LeaseError::Corrupt("sequence number out of range".into()))?;
        let inserted = sqlx::query(
            "INSERT INTO chitin_journal (stream, seq, request_id, payload, shard_id, epoch, committed_at) \
             VALUES (?, ?, ?, ?, ?, ?, UTC_TIMESTAMP(6))",
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
                    "SELECT seq, epoch FROM chitin_journal WHERE stream = ? AND request_id = ?",
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
             WHERE stream = ? AND seq >= ? ORDER BY seq LIMIT ?",
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
