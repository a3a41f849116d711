//! What the checker judges a run by: the stored journal rows and lease
//! grants and split retirements, each with the time it counts as
//! committed, and an account of what that time is.
//!
//! A statement time (the INSERT's `clock_timestamp()`) is not a commit time:
//! a fence that is broken so that its INSERT precedes a takeover and its
//! COMMIT follows it would pass a judgement by statement times. PostgreSQL
//! with `track_commit_timestamp = on` (the chaos lab's private server runs
//! with it) records when each transaction committed, which
//! `pg_xact_commit_timestamp(xmin)` reads for every row: journal rows,
//! history rows and retirements are written once and never updated, so
//! their `xmin` is the transaction that wrote them.

use serde::{Deserialize, Serialize};
use sqlx::Connection;

use crate::lease::{Dialect, LeaseError, Store, Via};

use super::ChaosError;
use super::checker::{Grant, Retired, Row};

/// What the times of the rows and grants are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "basis", rename_all = "snake_case")]
pub enum Basis {
    /// `pg_xact_commit_timestamp(xmin)` of every row and grant.
    CommitTime {
        /// Rows whose commit time was gone (a frozen `xmin`), judged by
        /// their statement time instead.
        fallbacks: usize,
    },
    /// The time each INSERT ran, inside its transaction.
    StatementTime { why: String },
}

impl Basis {
    /// One line for the report: what the evidence is, and its limit.
    pub fn describe(&self) -> String {
        match self {
            Basis::CommitTime { fallbacks: 0 } => {
                "commit times (pg_xact_commit_timestamp(xmin)) of every journal row and lease grant".into()
            }
            Basis::CommitTime { fallbacks } => format!(
                "commit times (pg_xact_commit_timestamp(xmin)) of every journal row and lease grant, \
                 except {fallbacks} whose commit time was no longer kept (judged by statement time)"
            ),
            Basis::StatementTime { why } => format!(
                "statement times, because {why}; limit: a commit whose INSERT ran before a takeover and whose \
                 COMMIT came after it is judged as if it committed before, so a fence broken that way passes"
            ),
        }
    }
}

/// The rows and grants of a run, and what their times are.
pub(crate) struct Evidence {
    pub rows: Vec<Row>,
    pub grants: Vec<Grant>,
    pub retirements: Vec<Retired>,
    pub basis: Basis,
}

/// Reads the evidence of `streams` from the run's database at `url`.
pub(crate) async fn read(store: &Store, url: &str, streams: &[String]) -> Result<Evidence, ChaosError> {
    let why = match store.dialect() {
        Dialect::Postgres => match commit_timestamps_on(url).await? {
            true => return read_commit_times(url, streams).await,
            false => "track_commit_timestamp is off on this PostgreSQL server (the private one of --private-postgres has it on)",
        },
        Dialect::MySql => "MySQL and MariaDB keep no commit time of a transaction",
        Dialect::Sqlite => "SQLite keeps no commit time of a transaction",
    };
    read_statement_times(store, streams, why.to_string()).await
}

fn sql_error(what: &str) -> impl FnOnce(sqlx::Error) -> ChaosError + '_ {
    move |source| ChaosError::Sql { what: what.to_string(), source }
}

async fn commit_timestamps_on(url: &str) -> Result<bool, ChaosError> {
    let mut c = sqlx::PgConnection::connect(url).await.map_err(sql_error("connect to the run's database"))?;
    let on: String = sqlx::query_scalar("SELECT current_setting('track_commit_timestamp')")
        .fetch_one(&mut c)
        .await
        .map_err(sql_error("read track_commit_timestamp"))?;
    let _ = c.close().await;
    Ok(on == "on")
}

/// Microseconds since the Unix epoch of a timestamptz expression.
fn micros(expr: &str) -> String {
    format!("(EXTRACT(EPOCH FROM {expr}) * 1000000)::bigint")
}

async fn read_commit_times(url: &str, streams: &[String]) -> Result<Evidence, ChaosError> {
    let mut c = sqlx::PgConnection::connect(url).await.map_err(sql_error("connect to the run's database"))?;
    let commit = micros("pg_xact_commit_timestamp(xmin)");
    let rows_sql = format!(
        "SELECT stream, seq, request_id, shard_id, epoch, {}, {commit} FROM chitin_journal WHERE stream = ANY($1)",
        micros("committed_at")
    );
    let stored: Vec<(String, i64, String, String, i64, i64, Option<i64>)> = sqlx::query_as(sqlx::AssertSqlSafe(rows_sql))
        .bind(streams)
        .fetch_all(&mut c)
        .await
        .map_err(sql_error("read the journal with commit times"))?;
    let grants_sql =
        format!("SELECT shard_id, epoch, holder_name, via, {}, {commit} FROM chitin_lease_history", micros("acquired_at"));
    let granted: Vec<(String, i64, String, String, i64, Option<i64>)> = sqlx::query_as(sqlx::AssertSqlSafe(grants_sql))
        .fetch_all(&mut c)
        .await
        .map_err(sql_error("read the lease history with commit times"))?;
    let retired_sql = format!("SELECT shard_id, epoch, {}, {commit} FROM chitin_shard_retirements", micros("retired_at"));
    let retired: Vec<(String, i64, i64, Option<i64>)> = sqlx::query_as(sqlx::AssertSqlSafe(retired_sql))
        .fetch_all(&mut c)
        .await
        .map_err(sql_error("read the split retirements with commit times"))?;
    let _ = c.close().await;
    let mut fallbacks = 0;
    let mut at = |statement: i64, commit: Option<i64>| {
        fallbacks += usize::from(commit.is_none());
        commit.unwrap_or(statement)
    };
    let rows = stored
        .into_iter()
        .map(|(stream, seq, request_id, shard, epoch, statement, commit)| Row {
            stream,
            seq,
            request_id,
            shard,
            epoch,
            committed_us: at(statement, commit),
        })
        .collect();
    let grants = granted
        .into_iter()
        .map(|(shard, epoch, holder, via, statement, commit)| {
            Ok(Grant { shard, epoch, holder, acquired_us: at(statement, commit), via: Via::from_column(&via)? })
        })
        .collect::<Result<_, LeaseError>>()?;
    let retirements = retired
        .into_iter()
        .map(|(shard, epoch, statement, commit)| Retired { shard, epoch, retired_us: at(statement, commit) })
        .collect();
    Ok(Evidence { rows, grants, retirements, basis: Basis::CommitTime { fallbacks } })
}

async fn read_statement_times(store: &Store, streams: &[String], why: String) -> Result<Evidence, ChaosError> {
    let mut rows = Vec::new();
    for s in streams {
        let mut from = 0;
        loop {
            let page = store.read(s, from, 5000).await?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            rows.extend(page.into_iter().map(|e| Row {
                stream: e.stream,
                seq: e.seq,
                request_id: e.request_id,
                shard: e.shard,
                epoch: e.epoch,
                committed_us: e.committed_at.timestamp_micros(),
            }));
        }
    }
    let grants = store
        .history(None)
        .await?
        .into_iter()
        .map(|h| Grant {
            via: h.via,
            shard: h.shard,
            epoch: h.epoch,
            holder: h.holder_name,
            acquired_us: h.acquired_at.timestamp_micros(),
        })
        .collect();
    let retirements = store
        .retirements()
        .await?
        .into_iter()
        .map(|r| Retired { shard: r.shard, epoch: r.epoch, retired_us: r.retired_at.timestamp_micros() })
        .collect();
    Ok(Evidence { rows, grants, retirements, basis: Basis::StatementTime { why } })
}

#[cfg(test)]
mod tests {
    use super::Basis;

    #[test]
    fn the_report_says_what_the_evidence_is_and_its_limit() {
        let cases = [
            (Basis::CommitTime { fallbacks: 0 }, "commit times", None),
            (Basis::CommitTime { fallbacks: 3 }, "except 3", None),
            (
                Basis::StatementTime { why: "MySQL and MariaDB keep no commit time".into() },
                "statement times, because MySQL",
                Some("limit:"),
            ),
        ];
        for (basis, says, limit) in cases {
            let text = basis.describe();
            assert!(text.contains(says), "{text}");
            assert_eq!(text.contains("limit:"), limit.is_some(), "{text}");
        }
    }
}
