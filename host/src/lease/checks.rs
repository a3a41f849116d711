//! Start checks on the database: a node refuses to start, with the reason and
//! the fix, when the database cannot keep chitin's promises.
//!
//! The decision is the pure function [`evaluate`] over [`ServerFacts`]; the
//! queries that collect the facts are [`gather`]. A fact that cannot be read
//! is `None`, and a `None` where the decision needs a value is itself a
//! refusal (an undeterminable version, durability or replication mode).
//!
//! Rules:
//! - SQLite is for standalone mode only ([`check_url`] refuses it in cluster
//!   mode before anything connects or creates a file).
//! - PostgreSQL ≥ 14; not in recovery (`pg_is_in_recovery()`); `fsync` on and
//!   `synchronous_commit` not `off` (as this node's session sees them);
//!   `lock_timeout` and `idle_in_transaction_session_timeout` not off (the
//!   node asks for them in its connection's `options`; a pooler that drops
//!   that parameter leaves a stuck holder's row locks unbounded); no sign of
//!   a pooler in transaction mode that loses prepared statements between
//!   server connections.
//! - MySQL ≥ 8.0 with `gtid_mode = ON`, or MariaDB ≥ 10.6 (its own GTID:
//!   `gtid_domain_id` exists); not `read_only` / `super_read_only` and no
//!   replication configured (`SHOW REPLICA STATUS`, when readable);
//!   `innodb_flush_log_at_trx_commit = 1`, and `sync_binlog = 1` unless the
//!   binary log is off (`log_bin = OFF`, MariaDB's default: no binlog, no
//!   binlog commit to lose).

use std::fmt;

use sqlx::Row;

use super::{Dialect, LeaseError, Store};
use crate::plant::{self, Plant};

/// What kind of server the facts describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    Postgres,
    MySql,
    MariaDb,
    Sqlite,
}

impl fmt::Display for ServerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ServerKind::Postgres => "PostgreSQL",
            ServerKind::MySql => "MySQL",
            ServerKind::MariaDb => "MariaDB",
            ServerKind::Sqlite => "SQLite",
        })
    }
}

/// What the server reports, as it reports it; `None` when it could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerFacts {
    pub kind: ServerKind,
    /// The version string (`server_version`, `VERSION()`, `sqlite_version()`).
    pub version: Option<String>,
    /// PostgreSQL: `server_version_num` (e.g. `150020`).
    pub version_num: Option<String>,
    /// PostgreSQL: `pg_is_in_recovery()`.
    pub in_recovery: Option<bool>,
    /// PostgreSQL: `fsync`.
    pub fsync: Option<String>,
    /// PostgreSQL: `synchronous_commit` (this session's value).
    pub synchronous_commit: Option<String>,
    /// PostgreSQL: `lock_timeout` (this session's value; `None` when not
    /// asked, as under the idle-bound plant).
    pub lock_timeout: Option<String>,
    /// PostgreSQL: `idle_in_transaction_session_timeout` (this session's value).
    pub idle_in_transaction_session_timeout: Option<String>,
    /// PostgreSQL: the first error met while reading these facts.
    pub unreadable: Option<String>,
    /// PostgreSQL: the role of this node's sessions (`current_user`).
    pub role: Option<String>,
    /// PostgreSQL: the lock and idle bounds this node asks for in its
    /// connection options (half a lease TTL, as `1000ms`).
    pub asked_bound: Option<String>,
    /// MySQL/MariaDB: `read_only`.
    pub read_only: Option<String>,
    /// MySQL: `super_read_only` (MariaDB has none).
    pub super_read_only: Option<String>,
    /// MySQL/MariaDB: whether `SHOW REPLICA STATUS` lists a replication source.
    pub replica_configured: Option<bool>,
    /// MySQL/MariaDB: `innodb_flush_log_at_trx_commit`.
    pub innodb_flush_log_at_trx_commit: Option<String>,
    /// MySQL/MariaDB: `sync_binlog`.
    pub sync_binlog: Option<String>,
    /// MySQL/MariaDB: `log_bin` (whether the binary log is written at all).
    pub log_bin: Option<String>,
    /// MySQL: `gtid_mode`.
    pub gtid_mode: Option<String>,
    /// MariaDB: `gtid_domain_id`.
    pub gtid_domain_id: Option<String>,
}

impl ServerFacts {
    /// Facts of this kind with nothing known.
    pub fn unknown(kind: ServerKind) -> ServerFacts {
        ServerFacts {
            kind,
            version: None,
            version_num: None,
            in_recovery: None,
            fsync: None,
            synchronous_commit: None,
            lock_timeout: None,
            idle_in_transaction_session_timeout: None,
            unreadable: None,
            role: None,
            asked_bound: None,
            read_only: None,
            super_read_only: None,
            replica_configured: None,
            innodb_flush_log_at_trx_commit: None,
            sync_binlog: None,
            log_bin: None,
            gtid_mode: None,
            gtid_domain_id: None,
        }
    }

    /// MySQL/MariaDB: whether the server is known to write no binary log
    /// (`log_bin` reads as off); an unreadable `log_bin` is not known off.
    pub fn binlog_off(&self) -> bool {
        self.log_bin.as_deref().and_then(flag) == Some(false)
    }
}

/// Which check refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Check {
    SqliteInCluster,
    Version,
    Replica,
    Durability,
    Gtid,
    ReplicationMode,
    LockBounds,
    Pooler,
}

impl Check {
    pub fn as_str(self) -> &'static str {
        match self {
            Check::SqliteInCluster => "sqlite-in-cluster",
            Check::Version => "version",
            Check::Replica => "replica",
            Check::Durability => "durability",
            Check::Gtid => "gtid",
            Check::ReplicationMode => "replication-mode",
            Check::LockBounds => "lock-bounds",
            Check::Pooler => "pooler",
        }
    }
}

/// One reason not to start, and how to fix it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub check: Check,
    pub reason: String,
    pub fix: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}. Fix: {}", self.check.as_str(), self.reason, self.fix)
    }
}

/// Why the start checks did not pass.
#[derive(Debug, thiserror::Error)]
pub enum StartCheckError {
    #[error(
        "the database fails the start checks:\n{}",
        .0.iter().map(|r| format!("  - {r}")).collect::<Vec<_>>().join("\n")
    )]
    Refused(Vec<Refusal>),
    #[error(transparent)]
    Lease(#[from] LeaseError),
}

impl StartCheckError {
    /// The refusals, if the checks ran and refused.
    pub fn refusals(&self) -> &[Refusal] {
        match self {
            StartCheckError::Refused(r) => r,
            StartCheckError::Lease(_) => &[],
        }
    }
}

fn refusal(check: Check, reason: impl Into<String>, fix: impl Into<String>) -> Refusal {
    Refusal { check, reason: reason.into(), fix: fix.into() }
}

/// Refuses a SQLite URL in cluster mode, before anything connects.
pub fn check_url(url: &str, cluster: bool) -> Result<(), StartCheckError> {
    if cluster && Dialect::from_url(url)? == Dialect::Sqlite {
        return Err(StartCheckError::Refused(vec![sqlite_in_cluster()]));
    }
    Ok(())
}

fn sqlite_in_cluster() -> Refusal {
    refusal(
        Check::SqliteInCluster,
        "cluster mode needs one database shared by every node, and [database] url points at SQLite",
        "set [database] url to a PostgreSQL (postgres://…) or MySQL/MariaDB (mysql://…) database that every \
         node shares, or set [cluster] enabled = false to run standalone",
    )
}

/// The leading `major.minor.patch` numbers of a version string.
pub fn parse_version(s: &str) -> Option<(u32, u32, u32)> {
    let head: String = s.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let mut parts = head.split('.').filter(|p| !p.is_empty()).map(|p| p.parse::<u32>());
    let major = parts.next()?.ok()?;
    let minor = parts.next().and_then(Result::ok).unwrap_or(0);
    let patch = parts.next().and_then(Result::ok).unwrap_or(0);
    Some((major, minor, patch))
}

/// `ON`/`1`/`TRUE`/`YES` → true, `OFF`/`0`/`FALSE`/`NO` → false.
fn flag(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "on" | "1" | "true" | "yes" => Some(true),
        "off" | "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// The start-check decision: every refusal, in a fixed order (empty: start).
pub fn evaluate(facts: &ServerFacts, cluster: bool) -> Vec<Refusal> {
    let mut out = Vec::new();
    match facts.kind {
        ServerKind::Sqlite => {
            if cluster {
                out.push(sqlite_in_cluster());
            }
        }
        ServerKind::Postgres => evaluate_pg(facts, &mut out),
        ServerKind::MySql | ServerKind::MariaDb => evaluate_mysql(facts, &mut out),
    }
    out
}

fn evaluate_pg(f: &ServerFacts, out: &mut Vec<Refusal>) {
    pg_session(f, out);
    pg_version(f, out);
    pg_primary(f, out);
    pg_durability(f, out);
}

/// What sits between the node and PostgreSQL: a pooler that loses prepared statements or the lock bounds.
fn pg_session(f: &ServerFacts, out: &mut Vec<Refusal>) {
    if let Some(e) = f.unreadable.as_deref().filter(|e| e.contains("prepared statement") && e.contains("does not exist")) {
        out.push(refusal(
            Check::Pooler,
            format!(
                "a statement prepared on one server connection was missing on the next ({e}): a pooler in \
                 transaction mode sits between this node and PostgreSQL and does not keep prepared statements"
            ),
            "run the pooler in session mode for chitin's connections, or use PgBouncer 1.21 or newer with \
             max_prepared_statements > 0 (and cluster.session_liveness = false)",
        ));
    }
    for (name, value) in
        [("lock_timeout", &f.lock_timeout), ("idle_in_transaction_session_timeout", &f.idle_in_transaction_session_timeout)]
    {
        if value.as_deref().is_some_and(|v| v.trim() == "0") {
            out.push(refusal(
                Check::LockBounds,
                format!(
                    "{name} is off in this node's sessions, though the node asks for half a lease TTL in its \
                     connection options: something between them dropped the options (a pooler's \
                     ignore_startup_parameters?), and a holder stuck mid-transaction would keep its rows locked"
                ),
                format!(
                    "set it at the server for the node's role, at the bound the node asks for (half its lease \
                     TTL): ALTER ROLE {} SET {name} = '{}'; then let the pooler open its server connections again",
                    f.role.as_deref().map_or_else(|| "<chitin's role>".to_owned(), quote_ident),
                    f.asked_bound.as_deref().unwrap_or("<half the lease TTL>")
                ),
            ));
        }
    }
}

/// PostgreSQL 14 or newer.
fn pg_version(f: &ServerFacts, out: &mut Vec<Refusal>) {
    let shown = f.version.as_deref().unwrap_or("unknown");
    match f.version_num.as_deref().and_then(|v| v.trim().parse::<u32>().ok()) {
        None => out.push(refusal(
            Check::Version,
            "cannot determine the PostgreSQL version (server_version_num is unreadable)",
            "connect to a PostgreSQL 14 or newer server with a role that can read server settings",
        )),
        Some(n) if n / 10000 < 14 => out.push(refusal(
            Check::Version,
            format!("PostgreSQL {shown} is older than 14"),
            "upgrade the server to PostgreSQL 14 or newer",
        )),
        Some(_) => {}
    }
}

/// The primary, not a replica.
fn pg_primary(f: &ServerFacts, out: &mut Vec<Refusal>) {
    match f.in_recovery {
        None => out.push(refusal(
            Check::ReplicationMode,
            "cannot determine whether the server is a primary or a replica (pg_is_in_recovery() is unreadable)",
            "connect to the primary with a role that may call pg_is_in_recovery()",
        )),
        Some(true) => out.push(refusal(
            Check::Replica,
            "the server is a replica (pg_is_in_recovery() is true): leases and commits need the primary",
            "point [database] url at the primary server",
        )),
        Some(false) => {}
    }
}

/// fsync and synchronous_commit on.
fn pg_durability(f: &ServerFacts, out: &mut Vec<Refusal>) {
    match f.fsync.as_deref().map(flag) {
        None | Some(None) => out.push(refusal(
            Check::Durability,
            format!("cannot determine whether fsync is on (fsync = {:?})", f.fsync),
            "check the server's fsync setting and make it readable to this role",
        )),
        Some(Some(false)) => out.push(refusal(
            Check::Durability,
            "durability is off: fsync = off, so a crash can lose acknowledged commits",
            "set fsync = on in postgresql.conf (ALTER SYSTEM SET fsync = on; SELECT pg_reload_conf())",
        )),
        Some(Some(true)) => {}
    }
    match f.synchronous_commit.as_deref().map(|v| v.trim().to_ascii_lowercase()) {
        None => out.push(refusal(
            Check::Durability,
            "cannot determine synchronous_commit",
            "check the server's synchronous_commit setting",
        )),
        Some(v) if v == "off" || v == "false" || v == "0" || v == "no" => out.push(refusal(
            Check::Durability,
            "durability is off: synchronous_commit = off, so a crash can lose acknowledged commits",
            "set synchronous_commit = on (postgresql.conf, or ALTER SYSTEM / ALTER ROLE / ALTER DATABASE … \
             SET synchronous_commit = on, whichever set it off)",
        )),
        Some(_) => {}
    }
}

fn evaluate_mysql(f: &ServerFacts, out: &mut Vec<Refusal>) {
    mysql_version(f, out);
    mysql_source(f, out);
    mysql_durability(f, out);
    mysql_gtid(f, out);
}

/// MySQL 8.0 or MariaDB 10.6, or newer.
fn mysql_version(f: &ServerFacts, out: &mut Vec<Refusal>) {
    let mariadb = f.kind == ServerKind::MariaDb;
    let shown = f.version.as_deref().unwrap_or("unknown");
    match f.version.as_deref().and_then(parse_version) {
        None => out.push(refusal(
            Check::Version,
            "cannot determine the server version (VERSION() is unreadable)",
            "connect to MySQL 8.0 or newer, or MariaDB 10.6 or newer",
        )),
        Some(v) if mariadb && v < (10, 6, 0) => out.push(refusal(
            Check::Version,
            format!("MariaDB {shown} is older than 10.6"),
            "upgrade the server to MariaDB 10.6 or newer",
        )),
        Some(v) if !mariadb && v < (8, 0, 0) => out.push(refusal(
            Check::Version,
            format!("MySQL {shown} is older than 8.0"),
            "upgrade the server to MySQL 8.0 or newer",
        )),
        Some(_) => {}
    }
}

/// The source (primary), not a replica.
fn mysql_source(f: &ServerFacts, out: &mut Vec<Refusal>) {
    match f.read_only.as_deref().map(flag) {
        None | Some(None) => out.push(refusal(
            Check::ReplicationMode,
            format!("cannot determine whether the server is a replica (read_only = {:?})", f.read_only),
            "connect to the source (primary) server with a user that can read global variables",
        )),
        Some(Some(true)) => out.push(refusal(
            Check::Replica,
            "the server is read-only (read_only = ON), as a replica is: leases and commits need the source",
            "point [database] url at the source (primary) server, or SET GLOBAL read_only = OFF if it is one",
        )),
        Some(Some(false)) => {}
    }
    if f.super_read_only.as_deref().and_then(flag) == Some(true) {
        out.push(refusal(
            Check::Replica,
            "the server is read-only (super_read_only = ON), as a replica is",
            "point [database] url at the source (primary) server",
        ));
    }
    if f.replica_configured == Some(true) {
        out.push(refusal(
            Check::Replica,
            "the server replicates from another server (SHOW REPLICA STATUS lists a source)",
            "point [database] url at the source (primary) server",
        ));
    }
}

/// Every commit flushed: the redo log, and the binary log when there is one.
fn mysql_durability(f: &ServerFacts, out: &mut Vec<Refusal>) {
    let durable = |name: &str, value: &Option<String>, out: &mut Vec<Refusal>| match value.as_deref() {
        None => out.push(refusal(
            Check::Durability,
            format!("cannot determine {name}"),
            format!("make {name} readable (SHOW GLOBAL VARIABLES) and set it to 1"),
        )),
        Some(v) if v.trim() != "1" => out.push(refusal(
            Check::Durability,
            format!("durability is off: {name} = {v}, so a crash can lose acknowledged commits"),
            format!("SET GLOBAL {name} = 1, and set {name} = 1 under [mysqld] in the server's configuration"),
        )),
        Some(_) => {}
    };
    durable("innodb_flush_log_at_trx_commit", &f.innodb_flush_log_at_trx_commit, out);
    // Without a binary log a commit is InnoDB's redo alone; only a server
    // known to write none is spared the binlog's flush.
    if !f.binlog_off() {
        durable("sync_binlog", &f.sync_binlog, out);
    }
}

/// Global transaction ids on.
fn mysql_gtid(f: &ServerFacts, out: &mut Vec<Refusal>) {
    let mariadb = f.kind == ServerKind::MariaDb;
    if mariadb {
        if f.gtid_domain_id.is_none() {
            out.push(refusal(
                Check::Gtid,
                "MariaDB without GTID (gtid_domain_id is missing)",
                "use MariaDB 10.6 or newer, whose global transaction ids are always on",
            ));
        }
    } else {
        match f.gtid_mode.as_deref().map(|v| v.trim().to_ascii_uppercase()) {
            None => out.push(refusal(
                Check::ReplicationMode,
                "cannot determine the replication mode (gtid_mode is unreadable)",
                "connect with a user that can read global variables, on MySQL 8.0 or newer",
            )),
            Some(v) if v != "ON" => out.push(refusal(
                Check::Gtid,
                format!("MySQL without GTID: gtid_mode = {v}"),
                "enable GTIDs: SET PERSIST enforce_gtid_consistency = ON, then step SET PERSIST gtid_mode through \
                 OFF_PERMISSIVE, ON_PERMISSIVE and ON",
            )),
            Some(_) => {}
        }
    }
}

/// Reads the facts the checks need from the server behind `store`.
pub async fn gather(store: &Store) -> Result<ServerFacts, LeaseError> {
    match store {
        Store::Postgres(s) => {
            let pool = &s.pool;
            let mut f = ServerFacts::unknown(ServerKind::Postgres);
            let u = &mut f.unreadable;
            f.version = pg_read(pool, "SELECT current_setting('server_version')", u).await;
            f.version_num = pg_read(pool, "SELECT current_setting('server_version_num')", u).await;
            f.fsync = pg_read(pool, "SELECT current_setting('fsync')", u).await;
            f.synchronous_commit = pg_read(pool, "SELECT current_setting('synchronous_commit')", u).await;
            // Under the idle-bound plant the node does not ask for the bounds.
            if !plant::active(Plant::IdleBound) {
                f.lock_timeout = pg_read(pool, "SELECT current_setting('lock_timeout')", u).await;
                f.idle_in_transaction_session_timeout =
                    pg_read(pool, "SELECT current_setting('idle_in_transaction_session_timeout')", u).await;
                f.asked_bound = Some(super::pg::session_bound(&s.options));
            }
            f.role = pg_read(pool, "SELECT current_user::text", u).await;
            f.in_recovery = sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()").fetch_one(pool).await.ok();
            Ok(f)
        }
        Store::MySql(s) => {
            let pool = &s.pool;
            let rows = sqlx::raw_sql(
                "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('version', 'read_only', 'super_read_only', \
                 'innodb_flush_log_at_trx_commit', 'sync_binlog', 'log_bin', 'gtid_mode', 'gtid_domain_id')",
            )
            .fetch_all(pool)
            .await?;
            let mut f = ServerFacts::unknown(ServerKind::MySql);
            for row in &rows {
                let name: String = row.try_get(0)?;
                let value: String = row.try_get(1)?;
                match name.to_ascii_lowercase().as_str() {
                    "version" => f.version = Some(value),
                    "read_only" => f.read_only = Some(value),
                    "super_read_only" => f.super_read_only = Some(value),
                    "innodb_flush_log_at_trx_commit" => f.innodb_flush_log_at_trx_commit = Some(value),
                    "sync_binlog" => f.sync_binlog = Some(value),
                    "log_bin" => f.log_bin = Some(value),
                    "gtid_mode" => f.gtid_mode = Some(value),
                    "gtid_domain_id" => f.gtid_domain_id = Some(value),
                    _ => {}
                }
            }
            if f.version.as_deref().is_some_and(|v| v.to_ascii_lowercase().contains("mariadb")) {
                f.kind = ServerKind::MariaDb;
            }
            f.replica_configured = match sqlx::raw_sql("SHOW REPLICA STATUS").fetch_all(pool).await {
                Ok(rows) => Some(!rows.is_empty()),
                Err(_) => match sqlx::raw_sql("SHOW SLAVE STATUS").fetch_all(pool).await {
                    Ok(rows) => Some(!rows.is_empty()),
                    Err(_) => None,
                },
            };
            Ok(f)
        }
        Store::Sqlite(s) => {
            let mut f = ServerFacts::unknown(ServerKind::Sqlite);
            f.version = sqlx::query_scalar::<_, String>("SELECT sqlite_version()").fetch_one(&s.pool).await.ok();
            Ok(f)
        }
    }
}

/// One text value read on PostgreSQL; the first error is kept in
/// `unreadable` (a transaction-mode pooler shows itself there).
async fn pg_read(pool: &sqlx::PgPool, sql: &'static str, unreadable: &mut Option<String>) -> Option<String> {
    let read = sqlx::query_scalar::<_, String>(sql).fetch_one(pool).await;
    read.map_err(|e| unreadable.get_or_insert(e.to_string()).clone()).ok()
}

/// `name` as a PostgreSQL identifier, quoted.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Gathers the facts and evaluates them; `Err(Refused)` lists every refusal.
pub async fn run(store: &Store, cluster: bool) -> Result<ServerFacts, StartCheckError> {
    let facts = gather(store).await?;
    let refusals = evaluate(&facts, cluster);
    if refusals.is_empty() { Ok(facts) } else { Err(StartCheckError::Refused(refusals)) }
}
