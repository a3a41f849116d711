//! Session-bound liveness: a node's death seen in milliseconds, not a TTL.
//!
//! Each node holds, for its lifetime, a session-level lock keyed by its
//! registration on a dedicated connection ([`LiveSession`]: PostgreSQL
//! `pg_try_advisory_lock`, MySQL/MariaDB `GET_LOCK`), and records in
//! `chitin_node_sessions`, while holding it, which lifetime of the server it
//! took it in ([`ServerId`]). A process that dies on a live host closes its
//! socket at once, the server ends its session and the lock is free. A peer
//! waiting for that lock on a connection of its own ([`Watch`]) gets it at
//! that moment; finding the recorded server lifetime equal to the one its
//! own session is in, it knows the holder's session ended, not the server's
//! ([`Store::session_ended`]). A session also ends under a live process (a
//! reset connection, a proxy restart, `pg_terminate_backend`), so the peer
//! confirms the death with a second signal (`node::liveness`) before it
//! marks the node down and frees its leases ([`Store::declare_dead`]).
//!
//! Safety never rests on the lock: every write still passes the epoch fence,
//! and freeing a lease takes the row lock that waits for fenced writers. A
//! paused or partitioned process keeps its session (its kernel still answers
//! for its socket), so its shards wait for the TTL as before. The server
//! drops the session of a host that vanished after TCP keepalives give up
//! (set here to about four TTLs on PostgreSQL, ten seconds at least;
//! MySQL's `wait_timeout`, four TTLs and a minute at least), by which time
//! its leases have long expired.
//!
//! A pooler in transaction mode (PgBouncer) hands statements of one client
//! connection to different server sessions, which breaks session locks:
//! [`LiveSession::check`] notices the backend changing under it and the node
//! stops relying on the lock (`cluster.session_liveness = false` says so up
//! front).

use std::time::Duration;

use sqlx::mysql::MySqlConnection;
use sqlx::postgres::PgConnection;
use sqlx::{ConnectOptions, Connection, Row};
use uuid::Uuid;

use super::{Dialect, LeaseError, Store};

/// Which lifetime of the database server a session lives in: PostgreSQL's
/// postmaster start time; MySQL's start derived from its uptime, in whole
/// seconds (see [`ServerId::same_lifetime`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerId(pub String);

impl ServerId {
    /// Whether two identities name the same server lifetime. MySQL's start is
    /// `now - Uptime`, read at two moments, so it may differ by a second
    /// either way; a restart takes longer than two.
    pub fn same_lifetime(&self, other: &ServerId) -> bool {
        match (mysql_start(&self.0), mysql_start(&other.0)) {
            (Some(a), Some(b)) => (a - b).abs() <= 2,
            _ => self.0 == other.0,
        }
    }
}

fn mysql_start(id: &str) -> Option<i64> {
    id.strip_prefix("mysql:")?.parse().ok()
}

/// A dedicated connection of one dialect (never from the pool: the lock is
/// the connection's).
enum Conn {
    Pg(PgConnection),
    My(MySqlConnection),
}

/// The lock name (MySQL) or key (PostgreSQL) of a registration. Advisory
/// keys share one 64-bit space with the application's: chitin's are the
/// registration UUID's halves folded, random like the UUID.
fn pg_key(node: Uuid) -> i64 {
    let (hi, lo) = node.as_u64_pair();
    (hi ^ lo) as i64
}

/// The `application_name` of `node`'s liveness session on PostgreSQL.
pub fn session_label(node: Uuid) -> String {
    format!("chitin-liveness-{node}")
}

fn my_name(node: Uuid) -> String {
    format!("chitin.live.{node}")
}

/// Why the liveness session cannot be relied on.
#[derive(Debug, thiserror::Error)]
pub enum SessionLost {
    #[error("the liveness connection failed: {0}")]
    Connection(#[from] LeaseError),
    #[error(
        "the liveness connection's server session changed under it (backend {was} became {now}) without the \
         connection dropping: a pooler in transaction mode (PgBouncer) sits between this node and PostgreSQL, \
         and session locks do not work through it. Point database.url at PostgreSQL itself or at a session-mode \
         pool, or set cluster.session_liveness = false (takeovers then wait for the lease TTL)"
    )]
    Pooled { was: i64, now: i64 },
}

impl Conn {
    /// `label` names the session where the server lists them
    /// (PostgreSQL's `application_name`). Statements are not logged: a
    /// watch's lock wait lasts a second by design, not a slow query.
    async fn open(store: &Store, label: &str) -> Result<Conn, LeaseError> {
        Ok(match store {
            Store::Postgres(s) => {
                let options = (*s.pool.connect_options()).clone().application_name(label).disable_statement_logging();
                Conn::Pg(options.connect().await?)
            }
            Store::MySql(s) => Conn::My((*s.pool.connect_options()).clone().disable_statement_logging().connect().await?),
            Store::Sqlite(_) => {
                return Err(LeaseError::InvalidArgument(
                    "session liveness needs PostgreSQL or MySQL/MariaDB (SQLite runs standalone)".into(),
                ));
            }
        })
    }

    /// The server lifetime this connection's session is in.
    async fn server(&mut self) -> Result<ServerId, LeaseError> {
        Ok(match self {
            Conn::Pg(c) => {
                let start: String = sqlx::query_scalar("SELECT pg_postmaster_start_time()::text").fetch_one(c).await?;
                ServerId(format!("pg:{start}"))
            }
            Conn::My(c) => {
                let row = sqlx::query("SHOW GLOBAL STATUS LIKE 'Uptime'").fetch_one(&mut *c).await?;
                let uptime: String = row.try_get(1)?;
                let uptime: i64 = uptime.parse().map_err(|_| LeaseError::Corrupt(format!("MySQL reported Uptime `{uptime}`")))?;
                let now: i64 = sqlx::query_scalar("SELECT CAST(UNIX_TIMESTAMP() AS SIGNED)").fetch_one(c).await?;
                ServerId(format!("mysql:{}", now - uptime))
            }
        })
    }

    /// The server session's id (PostgreSQL backend pid, MySQL connection id).
    async fn backend(&mut self) -> Result<i64, LeaseError> {
        Ok(match self {
            Conn::Pg(c) => i64::from(sqlx::query_scalar::<_, i32>("SELECT pg_backend_pid()").fetch_one(c).await?),
            Conn::My(c) => sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)").fetch_one(c).await?,
        })
    }

    /// Takes `node`'s lock, waiting at most `wait` (zero: try once).
    async fn lock(&mut self, node: Uuid, wait: Duration) -> Result<bool, LeaseError> {
        match self {
            Conn::Pg(c) if wait.is_zero() => {
                Ok(sqlx::query_scalar("SELECT pg_try_advisory_lock($1)").bind(pg_key(node)).fetch_one(c).await?)
            }
            Conn::Pg(c) => {
                sqlx::query(sqlx::AssertSqlSafe(format!("SET lock_timeout = '{}ms'", wait.as_millis().max(1))))
                    .execute(&mut *c)
                    .await?;
                match sqlx::query("SELECT pg_advisory_lock($1)").bind(pg_key(node)).execute(c).await {
                    Ok(_) => Ok(true),
                    // lock_not_available: the wait ran out.
                    Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("55P03") => Ok(false),
                    Err(e) => Err(e.into()),
                }
            }
            Conn::My(c) => {
                let got: Option<i64> =
                    sqlx::query_scalar("SELECT GET_LOCK(?, ?)").bind(my_name(node)).bind(wait.as_secs_f64()).fetch_one(c).await?;
                Ok(got == Some(1))
            }
        }
    }

    async fn unlock(&mut self, node: Uuid) -> Result<(), LeaseError> {
        match self {
            Conn::Pg(c) => {
                sqlx::query("SELECT pg_advisory_unlock($1)").bind(pg_key(node)).execute(c).await?;
            }
            Conn::My(c) => {
                sqlx::query("SELECT RELEASE_LOCK(?)").bind(my_name(node)).execute(c).await?;
            }
        }
        Ok(())
    }

    /// The server lifetime `node` recorded holding its lock in, if any.
    async fn recorded(&mut self, node: Uuid) -> Result<Option<ServerId>, LeaseError> {
        let node = node.to_string();
        let server: Option<String> = match self {
            Conn::Pg(c) => {
                sqlx::query_scalar("SELECT server FROM chitin_node_sessions WHERE node_id = $1::uuid")
                    .bind(node)
                    .fetch_optional(c)
                    .await?
            }
            Conn::My(c) => {
                sqlx::query_scalar("SELECT server FROM chitin_node_sessions WHERE node_id = ?")
                    .bind(node)
                    .fetch_optional(c)
                    .await?
            }
        };
        Ok(server.map(ServerId))
    }

    async fn record(&mut self, node: Uuid, server: &ServerId) -> Result<(), LeaseError> {
        let node = node.to_string();
        match self {
            Conn::Pg(c) => {
                sqlx::query(
                    "INSERT INTO chitin_node_sessions (node_id, server) VALUES ($1::uuid, $2) \
                     ON CONFLICT (node_id) DO UPDATE SET server = EXCLUDED.server, recorded_at = clock_timestamp()",
                )
                .bind(node)
                .bind(&server.0)
                .execute(c)
                .await?;
            }
            Conn::My(c) => {
                sqlx::query(
                    "INSERT INTO chitin_node_sessions (node_id, server, recorded_at) VALUES (?, ?, UTC_TIMESTAMP(6)) \
                     ON DUPLICATE KEY UPDATE server = VALUES(server), recorded_at = VALUES(recorded_at)",
                )
                .bind(node)
                .bind(&server.0)
                .execute(c)
                .await?;
            }
        }
        Ok(())
    }

    /// TCP keepalives for the server's side of this session, so that the
    /// session of a host that vanished (no FIN ever comes) ends after about
    /// four TTLs, not after the kernel's two hours; never sooner, since a
    /// node cut off for a while must find its registration still up when
    /// the network heals (its shards went at their TTL).
    async fn keep_alive(&mut self, ttl: Duration) -> Result<(), LeaseError> {
        let secs = |d: Duration| d.as_secs().max(1);
        match self {
            Conn::Pg(c) => {
                // Dead after idle + count × interval of unanswered probes, or
                // after data unacknowledged that long: four TTLs (10 s at
                // least), so that a cut node keeps its session through a
                // partition its leases do not outlive.
                let settings = [
                    format!("SET tcp_keepalives_idle = {}", secs(ttl).max(4)),
                    format!("SET tcp_keepalives_interval = {}", secs(ttl).max(2)),
                    "SET tcp_keepalives_count = 3".to_string(),
                    format!("SET tcp_user_timeout = {}", (ttl * 4).max(Duration::from_secs(10)).as_millis()),
                ];
                for set in settings {
                    sqlx::query(sqlx::AssertSqlSafe(set)).execute(&mut *c).await?;
                }
            }
            // MySQL keeps the OS's keepalives (two hours) and has no
            // per-session ones; an idle session ends after `wait_timeout`.
            // A paused process is idle too, and must keep its session past
            // its TTL: four TTLs, at least a minute.
            Conn::My(c) => {
                let idle = secs(ttl * 4).max(60);
                sqlx::query(sqlx::AssertSqlSafe(format!("SET SESSION wait_timeout = {idle}"))).execute(c).await?;
            }
        }
        Ok(())
    }

    /// Has the server end this session after `idle` without a statement
    /// (after [`Conn::keep_alive`], whose MySQL bound it replaces). Only
    /// PostgreSQL 14 and later have `idle_session_timeout`; before it the
    /// keepalives end the session of a vanished host.
    async fn bound_idle(&mut self, idle: Duration) -> Result<(), LeaseError> {
        match self {
            Conn::Pg(c) => {
                let version: i32 =
                    sqlx::query_scalar("SELECT current_setting('server_version_num')::int").fetch_one(&mut *c).await?;
                if version >= 140_000 {
                    let set = format!("SET idle_session_timeout = '{}ms'", idle.as_millis());
                    sqlx::query(sqlx::AssertSqlSafe(set)).execute(c).await?;
                }
            }
            Conn::My(c) => {
                let set = format!("SET SESSION wait_timeout = {}", idle.as_secs().max(1));
                sqlx::query(sqlx::AssertSqlSafe(set)).execute(c).await?;
            }
        }
        Ok(())
    }
}

/// How long a watch's server session may sit idle before the server ends
/// it: half a TTL, a second at least (MySQL counts whole seconds). A watch
/// holds a peer's lock only for the moment of judging it, and after a server
/// restart it takes every free lock it waits on before their nodes take
/// them back; a watcher cut off or paused in that moment would otherwise
/// keep the peer out of its own session, so that the peer takes no lease,
/// for as long as a vanished host's connection lasts (minutes). Shards
/// whose preferred holder is that peer would wait as long.
pub(crate) fn watch_idle_bound(ttl: Duration) -> Duration {
    (ttl / 2).max(Duration::from_secs(1))
}

/// How long a watch's statement (its connect included) may go unanswered
/// beyond its own wait: a second past the idle bound. Past that bound the
/// server has ended the watch's session, and when it did so while this
/// node was cut off from it, the close may never arrive: without a limit
/// the watch would wait for an answer for good, and watch nobody once the
/// cut healed.
pub(crate) fn watch_answer_limit(ttl: Duration) -> Duration {
    watch_idle_bound(ttl) + Duration::from_secs(1)
}

/// A node's own liveness session: its lock, held for the process's lifetime.
pub struct LiveSession {
    conn: Conn,
    node: Uuid,
    backend: i64,
}

impl Store {
    /// Opens `node`'s liveness session: a dedicated connection that takes
    /// the node's lock (waiting up to `wait` for a peer that holds it for a
    /// moment while judging it) and records the server lifetime it holds it
    /// in. [`LeaseError::SessionLockHeld`] when the lock stayed taken.
    pub async fn open_session(&self, node: Uuid, ttl: Duration, wait: Duration) -> Result<LiveSession, LeaseError> {
        let mut conn = Conn::open(self, &session_label(node)).await?;
        conn.keep_alive(ttl).await?;
        if !conn.lock(node, wait).await? {
            return Err(LeaseError::SessionLockHeld { node, waited: wait });
        }
        let server = conn.server().await?;
        conn.record(node, &server).await?;
        let backend = conn.backend().await?;
        Ok(LiveSession { conn, node, backend })
    }

    /// A connection for waiting on peers' liveness locks. Its server session
    /// ends after half a TTL idle ([`watch_idle_bound`]).
    pub async fn open_watch(&self) -> Result<Watch, LeaseError> {
        let ttl = self.options().lease_ttl;
        let answer_within = watch_answer_limit(ttl);
        // A connect from a node cut off from the server would wait out the
        // kernel's SYN retries (minutes).
        let conn = answered(answer_within, async {
            let mut conn = Conn::open(self, "chitin-watch").await?;
            conn.keep_alive(ttl).await?;
            conn.bound_idle(watch_idle_bound(ttl)).await?;
            Ok(conn)
        })
        .await?;
        Ok(Watch { conn, holding: None, answer_within })
    }

    /// Reads what `node`'s free lock, held by `watch` ([`Watch::wait`]
    /// returned true), says: [`Verdict::Ended`] when the node recorded
    /// holding it in the server lifetime the watch is in (its session ended,
    /// not the server's). That alone does not make the node dead: a reset
    /// connection, a proxy restart or an operator's `pg_terminate_backend`
    /// end the session of a live process too, so the caller confirms the
    /// death by a second signal before [`Store::declare_dead`].
    pub async fn session_ended(&self, watch: &mut Watch, node: Uuid) -> Result<Verdict, LeaseError> {
        watch.holds(node)?;
        let within = watch.answer_within;
        let conn = &mut watch.conn;
        answered(within, async move {
            let now = conn.server().await?;
            Ok(match conn.recorded(node).await? {
                Some(recorded) if recorded.same_lifetime(&now) => Verdict::Ended,
                recorded => Verdict::NoEvidence { recorded, now },
            })
        })
        .await
    }

    /// Marks `node` down, its lock held by `watch`, and frees its leases for
    /// takeover (their rows' locks wait for any fenced writer still in
    /// flight); returns how many it held.
    pub async fn declare_dead(&self, watch: &mut Watch, node: Uuid) -> Result<usize, LeaseError> {
        watch.holds(node)?;
        // The lock is the watch's session's: a judgement that outlasted the
        // watch's idle bound lost it, and the node may hold it again.
        answered(watch.answer_within, watch.conn.backend()).await?;
        let freed = self.leases_of(node).await?.len();
        self.deregister(node).await?;
        Ok(freed)
    }
}

/// What [`Store::session_ended`] read of a free lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The node's session ended in this server lifetime.
    Ended,
    /// The free lock proves nothing: the node recorded no session in this
    /// server lifetime (it has not yet, or the server restarted since).
    NoEvidence { recorded: Option<ServerId>, now: ServerId },
}

impl LiveSession {
    /// Checks that the session still holds the lock: the connection answers
    /// and from the same server session it took the lock in.
    pub async fn check(&mut self) -> Result<(), SessionLost> {
        let now = self.conn.backend().await?;
        if now != self.backend {
            return Err(SessionLost::Pooled { was: self.backend, now });
        }
        Ok(())
    }

    /// The registration whose lock this is.
    pub fn node(&self) -> Uuid {
        self.node
    }

    /// Ends the session, releasing the lock (a graceful stop deregisters
    /// first, so peers do not judge it).
    pub async fn close(self) {
        let _ = match self.conn {
            Conn::Pg(c) => c.close().await,
            Conn::My(c) => c.close().await,
        };
    }
}

/// A connection that waits for peers' liveness locks, one at a time.
pub struct Watch {
    conn: Conn,
    /// The peer whose lock it holds.
    holding: Option<Uuid>,
    /// How long a statement may go unanswered beyond its own wait
    /// ([`watch_answer_limit`]).
    answer_within: Duration,
}

/// `statement`'s outcome, or [`LeaseError::WatchSilent`] after `within`.
async fn answered<T>(within: Duration, statement: impl Future<Output = Result<T, LeaseError>>) -> Result<T, LeaseError> {
    tokio::time::timeout(within, statement).await.map_err(|_| LeaseError::WatchSilent { waited: within })?
}

impl Watch {
    /// Waits up to `wait` for `node`'s lock: true when taken (its session
    /// ended, or it never recorded one; [`Store::session_ended`] tells which),
    /// false when the node still holds it. Release it with [`Watch::release`].
    pub async fn wait(&mut self, node: Uuid, wait: Duration) -> Result<bool, LeaseError> {
        let got = answered(wait + self.answer_within, self.conn.lock(node, wait)).await?;
        if got {
            self.holding = Some(node);
        }
        Ok(got)
    }

    fn holds(&self, node: Uuid) -> Result<(), LeaseError> {
        if self.holding != Some(node) {
            return Err(LeaseError::InvalidArgument(format!("the watch does not hold the liveness lock of {node}")));
        }
        Ok(())
    }

    /// Releases the lock taken by [`Watch::wait`].
    pub async fn release(&mut self) -> Result<(), LeaseError> {
        if let Some(node) = self.holding.take() {
            answered(self.answer_within, self.conn.unlock(node)).await?;
        }
        Ok(())
    }
}

/// The dialects with session liveness.
pub fn supported(dialect: Dialect) -> bool {
    dialect != Dialect::Sqlite
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_lifetimes_compare_exactly_on_postgres_and_within_two_seconds_on_mysql() {
        let id = |s: &str| ServerId(s.to_string());
        for (a, b, same) in [
            ("pg:2026-12-01 10:00:00.123+00", "pg:2026-12-01 10:00:00.123+00", true),
            ("pg:2026-12-01 10:00:00.123+00", "pg:2026-12-01 10:00:00.124+00", false),
            ("mysql:1000", "mysql:1000", true),
            ("mysql:1000", "mysql:1002", true),
            ("mysql:1000", "mysql:999", true),
            ("mysql:1000", "mysql:1003", false),
            ("mysql:1000", "pg:1000", false),
        ] {
            assert_eq!(id(a).same_lifetime(&id(b)), same, "{a} vs {b}");
        }
    }

    #[test]
    fn a_watch_idles_half_a_ttl_and_waits_for_an_answer_a_second_longer() {
        let ms = Duration::from_millis;
        // (TTL, idle bound, answer limit)
        for (ttl, idle, answer) in [
            (ms(500), ms(1_000), ms(2_000)),
            (ms(2_000), ms(1_000), ms(2_000)),
            (ms(3_000), ms(1_500), ms(2_500)),
            (ms(15_000), ms(7_500), ms(8_500)),
        ] {
            assert_eq!(watch_idle_bound(ttl), idle, "idle bound at TTL {ttl:?}");
            assert_eq!(watch_answer_limit(ttl), answer, "answer limit at TTL {ttl:?}");
        }
    }

    #[test]
    fn keys_differ_per_registration_and_names_fit_mysql() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        assert_ne!(pg_key(a), pg_key(b));
        assert_eq!(pg_key(a), pg_key(a));
        assert!(my_name(a).len() <= 64, "GET_LOCK names are at most 64 characters");
    }
}
