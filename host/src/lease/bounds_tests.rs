//! A holder cut off in the middle of a fenced transaction (its session open,
//! idle, holding the lease row shared) does not block a taker beyond about
//! half a TTL: the server ends the idle transaction, and the taker's lock
//! wait is bounded and ends its attempt (the next round tries again). And
//! the heartbeat never waits for the pool: it has a connection of its own. PostgreSQL and MariaDB (MySQL has no
//! idle-transaction timeout: see `mysql`). A liveness watcher that falls
//! silent holding a peer's lock lets go of it within its idle bound.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use sqlx::Row;
use uuid::Uuid;

use super::engine::Backend;
use super::{LeaseError, Store, StoreOptions, mysql, pg};
use crate::testkit::{create_database, drop_database, with_database};

/// A fenced transaction left open.
#[allow(dead_code)] // held for its locks, never read
enum Stuck {
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
    My(sqlx::Transaction<'static, sqlx::MySql>),
}

/// Opens a transaction on one of the store's own data sessions and takes
/// the fence's shared lock on `shard`, as an append does first.
async fn fence_and_stall(store: &Store, shard: &str) -> Result<Stuck> {
    Ok(match store {
        Store::Postgres(e) => {
            let mut tx = e.data().begin().await?;
            sqlx::query(pg::Pg::SQL.lease_for_share).bind(shard).fetch_one(&mut *tx).await?;
            Stuck::Pg(tx)
        }
        Store::MySql(e) => {
            let mut tx = e.data().begin().await?;
            sqlx::query(mysql::My::SQL.lease_for_share).bind(shard).fetch_one(&mut *tx).await?;
            Stuck::My(tx)
        }
        Store::Sqlite(_) => anyhow::bail!("SQLite has one writer and no sessions to bound"),
    })
}

/// Whether a MySQL-family server ends idle transactions (MariaDB does).
async fn ends_idle_transactions(store: &Store) -> Result<bool> {
    let Store::MySql(e) = store else { return Ok(true) };
    let rows = sqlx::raw_sql("SHOW SESSION VARIABLES LIKE 'idle_transaction_timeout'").fetch_all(&e.pool).await?;
    let Some(row) = rows.first() else { return Ok(false) };
    let secs: String = row.try_get(1)?;
    assert_eq!(secs, mysql::bound_secs(&e.options).to_string(), "the session's idle-transaction bound");
    let wait: i64 = sqlx::query_scalar("SELECT CAST(@@SESSION.innodb_lock_wait_timeout AS SIGNED)").fetch_one(&e.pool).await?;
    assert_eq!(wait as u64, mysql::bound_secs(&e.options), "the session's lock-wait bound");
    Ok(true)
}

async fn scenario(url: &str) -> Result<()> {
    let ttl = Duration::from_secs(4);
    let options = StoreOptions {
        lease_ttl: ttl,
        liveness_timeout: Duration::from_secs(30),
        max_connections: 4,
        acquire_timeout: Duration::from_secs(30),
        ..StoreOptions::default()
    };
    let s = Store::connect_with(url, options).await?;
    s.migrate().await?;
    if !ends_idle_transactions(&s).await? {
        eprintln!("this server has no idle-transaction timeout (MySQL): nothing to test");
        s.close().await;
        return Ok(());
    }
    let holder = s.register_node("holder", "a1").await?;
    let taker = s.register_node("taker", "a2").await?;
    let lease = s.try_acquire("s", holder, None).await?.context("grant")?;
    let stuck = fence_and_stall(&s, "s").await?;
    let started = Instant::now();
    let got = s.try_acquire("s", taker, None).await;
    let waited = started.elapsed();
    // The server ends the stuck transaction (idle bound) and the taker's
    // wait (lock bound) at about the same moment, half a TTL: whichever is
    // first, the taker is back within it, and never waits a second time.
    match got {
        Ok(None) | Err(LeaseError::LockWait { .. }) => {}
        other => panic!("the taker got {other:?}; the lease is live and a lock wait ends the attempt"),
    }
    assert!(waited <= ttl / 2 + Duration::from_millis(1_500), "the taker waited {waited:?} (TTL {ttl:?})");
    // The holder's renewals are not stuck behind it either: once the server
    // ended it, well within the lease's lifetime.
    let renewed = loop {
        match s.renew(&lease).await {
            Err(LeaseError::LockWait { .. }) if started.elapsed() < ttl / 2 + Duration::from_millis(1_500) => continue,
            other => break other,
        }
    };
    renewed?;
    drop(stuck);
    s.close().await;
    Ok(())
}

/// The heartbeat has a connection of its own: with every connection of the
/// pools taken (client reads, appends, a round stuck behind a lock), it
/// still goes through at once instead of queueing for the pool's acquire
/// timeout, past which the node's leases on liveness would lapse. And the
/// lease round's pool is not the appends': with every data connection
/// taken, a grant still goes through.
async fn heartbeat_scenario(url: &str) -> Result<()> {
    let options = StoreOptions {
        max_connections: 2,
        acquire_timeout: Duration::from_secs(30),
        liveness_timeout: Duration::from_secs(30),
        ..StoreOptions::default()
    };
    let s = Store::connect_with(url, options).await?;
    s.migrate().await?;
    let node = s.register_node("n", "a1").await?;
    macro_rules! starved {
        ($e:expr) => {{
            // Every connection of the appends' pool taken.
            let mut data = Vec::new();
            for _ in 0..$e.data().options().get_max_connections() {
                data.push($e.data().acquire().await?);
            }
            let grant = tokio::time::timeout(Duration::from_secs(10), s.try_acquire("s", node, None)).await;
            grant.context("the grant queued behind the appends' taken connections")??.context("granted")?;
            let taken = ($e.pool.acquire().await?, data);
            let beat = tokio::time::timeout(Duration::from_secs(10), s.heartbeat(node, 1)).await;
            drop(taken);
            beat.context("the heartbeat queued behind the pool's taken connections")??;
        }};
    }
    match &s {
        Store::Postgres(e) => starved!(e),
        Store::MySql(e) => starved!(e),
        Store::Sqlite(_) => anyhow::bail!("SQLite's heartbeat shares its one writer"),
    }
    s.close().await;
    Ok(())
}

/// A watcher that falls silent while it holds a peer's liveness lock (cut
/// off or paused in the moment of judging it; after a server restart every
/// watcher takes the free locks it waits on before their nodes take them
/// back) lets go of it once its idle bound ends its server session: the
/// peer's own session opens then. Without the bound the watch's session
/// lasts minutes (MySQL's `wait_timeout`; on PostgreSQL until keepalives
/// fail, and on loopback they never do), the peer's wait runs out, and the
/// peer takes no lease meanwhile.
async fn silent_watcher_scenario(url: &str) -> Result<()> {
    let ttl = Duration::from_secs(2);
    let options = StoreOptions { lease_ttl: ttl, liveness_timeout: Duration::from_secs(30), ..StoreOptions::default() };
    let s = Store::connect_with(url, options).await?;
    s.migrate().await?;
    let peer = s.register_node("peer", "a1").await?;
    let mut watch = s.open_watch().await?;
    anyhow::ensure!(watch.wait(peer, Duration::ZERO).await?, "the peer has no session yet: its lock is free");
    // The watcher sends nothing more, as one cut off sends nothing.
    let wait = super::session::watch_idle_bound(ttl) + Duration::from_secs(5);
    let session = s.open_session(peer, ttl, wait).await.context("the peer's own session, behind the silent watcher")?;
    assert!(watch.release().await.is_err(), "the server ended the silent watch's session");
    session.close().await;
    s.close().await;
    Ok(())
}

/// Runs `scenario` on a fresh database of the server at `admin`, dropped
/// after.
async fn on_fresh_database<F: std::future::Future<Output = Result<()>>>(admin: &str, scenario: impl FnOnce(String) -> F) {
    let name = format!("chitin_t_{}", Uuid::new_v4().simple());
    create_database(admin, &name).await.expect("create a test database");
    let outcome = scenario(with_database(admin, &name)).await;
    drop_database(admin, &name).await.expect("drop the test database");
    outcome.expect("scenario");
}

/// A test on PostgreSQL and one on MariaDB running `scenario` on a fresh
/// database each.
macro_rules! on_both_servers {
    ($scenario:ident => $postgres:ident, $mysql:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $postgres() {
            on_fresh_database(&postgres_admin(), |url| async move { $scenario(&url).await }).await
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $mysql() {
            on_fresh_database(&mysql_admin(), |url| async move { $scenario(&url).await }).await
        }
    };
}

on_both_servers!(scenario => postgres_stuck_holder_is_bounded, mysql_stuck_holder_is_bounded);
on_both_servers!(heartbeat_scenario => postgres_heartbeat_never_waits_for_the_pool, mysql_heartbeat_never_waits_for_the_pool);
on_both_servers!(silent_watcher_scenario => postgres_silent_watcher_lets_go_of_a_peers_lock, mysql_silent_watcher_lets_go_of_a_peers_lock);

fn postgres_admin() -> String {
    std::env::var("CHITIN_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

fn mysql_admin() -> String {
    std::env::var("CHITIN_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into())
}
