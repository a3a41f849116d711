//! Shared scenarios for the durable-store tests. Each test gets its own fresh
//! database (PostgreSQL/MariaDB: `chitin_t_<random>`, dropped at the end;
//! SQLite: a file in a temporary directory), so tests run in parallel.
//!
//! Servers: `CHITIN_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/postgres`) and `CHITIN_TEST_MYSQL_URL`
//! (default `mysql://root@127.0.0.1:3306/test`); the test databases are
//! created beside the one named.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use chitin::lease::{Dialect, LeaseError, LeaseToken, LostReason, SplitSeed, Store, StoreOptions};
use chitin::testkit::FreshDb;
use sqlx::Connection;

pub fn postgres_admin_url() -> String {
    std::env::var("CHITIN_TEST_POSTGRES_URL").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

pub fn mysql_admin_url() -> String {
    std::env::var("CHITIN_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// A fresh database for one test.
pub struct TestDb {
    pub url: String,
    /// The server's database (PostgreSQL, MariaDB); `None` for SQLite.
    fresh: Option<FreshDb>,
    _dir: Option<tempfile::TempDir>,
}

impl TestDb {
    pub async fn create(dialect: Dialect) -> Result<TestDb> {
        let admin = match dialect {
            Dialect::Postgres => postgres_admin_url(),
            Dialect::MySql => mysql_admin_url(),
            Dialect::Sqlite => {
                let dir = tempfile::tempdir()?;
                let url = format!("sqlite://{}", dir.path().join("chitin.db").display());
                return Ok(TestDb { url, fresh: None, _dir: Some(dir) });
            }
        };
        TestDb::create_on(dialect, &admin).await
    }

    /// A fresh database on the server of `admin_url` (a private server).
    pub async fn create_on(dialect: Dialect, admin_url: &str) -> Result<TestDb> {
        let fresh = FreshDb::create(admin_url, "chitin_t_").await.with_context(|| format!("a fresh {dialect:?} database"))?;
        Ok(TestDb { url: fresh.url.clone(), fresh: Some(fresh), _dir: None })
    }

    pub async fn drop_db(self) -> Result<()> {
        if let Some(fresh) = &self.fresh {
            fresh.drop_db().await?;
        }
        Ok(())
    }
}

/// Runs `scenario` against a fresh database of `dialect`, then drops the
/// database whatever happened, then reports the scenario's outcome.
pub async fn run<F, Fut>(dialect: Dialect, scenario: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let db = TestDb::create(dialect).await.expect("create a test database");
    let outcome = tokio::spawn(scenario(db.url.clone())).await;
    let dropped = db.drop_db().await;
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("scenario failed: {e:?}"),
        Err(join) => std::panic::resume_unwind(join.into_panic()),
    }
    dropped.expect("drop the test database");
}

/// A migrated store with a lease TTL and liveness timeout in milliseconds,
/// and a handoff budget no scenario but the budget's own reaches.
pub async fn store(url: &str, ttl_ms: u64, liveness_ms: u64) -> Result<Store> {
    store_with(
        url,
        StoreOptions {
            lease_ttl: Duration::from_millis(ttl_ms),
            liveness_timeout: Duration::from_millis(liveness_ms),
            max_handoffs_per_round: 1_000,
            ..StoreOptions::default()
        },
    )
    .await
}

async fn store_with(url: &str, options: StoreOptions) -> Result<Store> {
    let s = Store::connect_with(url, StoreOptions { max_connections: 4, acquire_timeout: Duration::from_secs(30), ..options })
        .await?;
    s.migrate().await?;
    Ok(s)
}

/// Two stores (two nodes' pools) share one budget: the third handover of a
/// window is refused before it changes anything, with the wait until a slot
/// frees; after that wait it passes. A budget that only counted one store's
/// handovers would let the second store's through.
pub async fn handoff_budget_is_database_wide(url: String) -> Result<()> {
    let window = Duration::from_secs(2);
    let options = StoreOptions {
        lease_ttl: Duration::from_secs(30),
        liveness_timeout: Duration::from_secs(30),
        max_handoffs_per_round: 2,
        handoff_window: window,
        ..StoreOptions::default()
    };
    let (a, b) = (store_with(&url, options.clone()).await?, store_with(&url, options).await?);
    let n1 = a.register_node("n1", "a1").await?;
    let n2 = b.register_node("n2", "a2").await?;
    let mut held = Vec::new();
    for shard in ["s1", "s2", "s3"] {
        held.push(a.try_acquire(shard, n1, None).await?.context("grant")?);
    }
    a.handover(&held[0], n2).await?;
    b.handoff_budget().await?;
    let theirs = b.try_acquire("t1", n2, None).await?.context("grant")?;
    b.handover(&theirs, n1).await?;
    let refused = a.handover(&held[1], n2).await;
    let Err(LeaseError::HandoffBudget { cap: 2, retry_after, .. }) = refused else {
        anyhow::bail!("a third handover within the window passed: {refused:?}");
    };
    ensure!(retry_after <= window, "waits {retry_after:?}, longer than the window {window:?}");
    ensure!(matches!(b.handoff_budget().await, Err(LeaseError::HandoffBudget { .. })));
    let row = a.lease("s2").await?.context("row")?;
    ensure!(row.holder == Some(n1) && row.epoch == held[1].epoch, "the refused handover changed the lease: {row:?}");
    tokio::time::sleep(retry_after + Duration::from_millis(50)).await;
    let moved = a.handover(&held[1], n2).await?;
    ensure!(moved.holder == n2);
    a.close().await;
    b.close().await;
    Ok(())
}

fn expect_lost(r: Result<impl std::fmt::Debug, LeaseError>) -> Result<LostReason> {
    match r {
        Err(LeaseError::LeaseLost { reason, .. }) => Ok(reason),
        other => bail!("expected LeaseLost, got {other:?}"),
    }
}

// ---- scenarios ----------------------------------------------------------------

/// The schema migrates, twice and concurrently, without error.
pub async fn migrate_idempotent(url: String) -> Result<()> {
    // Four nodes starting at once on an empty database: each migration is
    // applied once (the others wait for the lock, then find it applied).
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Store::connect(&url).await?);
    }
    let mut tasks = Vec::new();
    for s in &stores {
        let s = s.clone();
        tasks.push(tokio::spawn(async move { s.migrate().await }));
    }
    for t in tasks {
        t.await??;
    }
    let a = &stores[0];
    a.migrate().await?;
    ensure!(a.holders().await?.is_empty());
    ensure!(a.nodes().await?.is_empty());
    for s in &stores {
        s.close().await;
    }
    Ok(())
}

/// Each start gets a fresh database-assigned UUID; a live duplicate name is
/// refused; a deregistered or stale one frees the name.
pub async fn registration(url: String) -> Result<()> {
    // Liveness 3 s so the stale case below is quick.
    let s = store(&url, 2_000, 3_000).await?;
    let a1 = s.register_node("node-a", "127.0.0.1:7001").await?;
    match s.register_node("node-a", "127.0.0.1:7009").await {
        Err(LeaseError::NameInUse { name, holder, address, .. }) => {
            ensure!(name == "node-a" && holder == a1 && address == "127.0.0.1:7001");
        }
        other => bail!("expected NameInUse, got {other:?}"),
    }
    // Another name is fine.
    let b1 = s.register_node("node-b", "127.0.0.1:7002").await?;
    ensure!(b1 != a1);

    // A clean stop frees the name; the next start gets a new UUID.
    s.deregister(a1).await?;
    let a2 = s.register_node("node-a", "127.0.0.1:7001").await?;
    ensure!(a2 != a1, "a restart must get a fresh UUID");
    ensure!(matches!(s.heartbeat(a1, 1).await, Err(LeaseError::NodeNotRegistered(id)) if id == a1));
    s.heartbeat(a2, 1).await?;
    s.set_node_state(a2, chitin::lease::NodeState::Active).await?;

    // A crashed registration (no heartbeats) is free again after the liveness timeout.
    tokio::time::sleep(Duration::from_millis(4_000)).await;
    let a3 = s.register_node("node-a", "127.0.0.1:7001").await?;
    ensure!(a3 != a2);
    ensure!(matches!(s.heartbeat(a2, 1).await, Err(LeaseError::NodeNotRegistered(_))));

    let nodes = s.nodes().await?;
    let find = |id| nodes.iter().find(|n| n.id == id).ok_or_else(|| anyhow!("node {id} missing"));
    ensure!(find(a1)?.state == chitin::lease::NodeState::Down);
    ensure!(find(a2)?.state == chitin::lease::NodeState::Down, "the stale registration is marked down");
    ensure!(find(a3)?.live && find(a3)?.state == chitin::lease::NodeState::Joining);
    ensure!(!find(b1)?.live, "node-b sent no heartbeat within the liveness timeout");
    ensure!(nodes.len() == 4);

    // Names are validated.
    ensure!(matches!(s.register_node("", "x").await, Err(LeaseError::InvalidArgument(_))));
    ensure!(matches!(s.register_node("a:b", "x").await, Err(LeaseError::InvalidArgument(_))));

    // Concurrent registrations of one name: exactly one wins.
    let mut tasks = Vec::new();
    for i in 0..6 {
        let s = s.clone();
        tasks.push(tokio::spawn(async move { s.register_node("racer", &format!("127.0.0.1:{}", 8000 + i)).await }));
    }
    let mut won = 0;
    for t in tasks {
        match t.await? {
            Ok(_) => won += 1,
            Err(LeaseError::NameInUse { .. }) => {}
            Err(e) => bail!("unexpected error in racing registration: {e}"),
        }
    }
    ensure!(won == 1, "{won} concurrent registrations of one name succeeded");
    s.close().await;
    Ok(())
}

/// Nodes that start together register at once, each under its own name
/// and through its own connections: every registration succeeds at the
/// first try, with no deadlock for the store to retry (InnoDB's gap locks
/// deadlocked them when the stale-down and the insert shared a transaction).
pub async fn concurrent_registration(url: String) -> Result<()> {
    let mut nodes = Vec::new();
    for _ in 0..8 {
        nodes.push(store(&url, 2_000, 30_000).await?);
    }
    // The count is the process's; nextest runs each test in its own.
    let before = chitin::lease::contention_retries("register");
    for round in 0..6 {
        let start = Arc::new(tokio::sync::Barrier::new(nodes.len()));
        let tasks: Vec<_> = nodes
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (s, start) = (s.clone(), start.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    s.register_node(&format!("node-{round}-{i:02}"), "127.0.0.1:7001").await
                })
            })
            .collect();
        for t in tasks {
            t.await?.context("a registration under a fresh name")?;
        }
    }
    ensure!(nodes[0].nodes().await?.len() == 48);
    let retried = chitin::lease::contention_retries("register") - before;
    ensure!(retried == 0, "registrations were run again {retried} times after contention");
    for s in nodes {
        s.close().await;
    }
    Ok(())
}

/// Acquire, renew and expiry, all judged by the database clock.
pub async fn acquire_renew_expire(url: String) -> Result<()> {
    let s = store(&url, 2_000, 30_000).await?;
    let n1 = s.register_node("n1", "127.0.0.1:7001").await?;
    let n2 = s.register_node("n2", "127.0.0.1:7002").await?;

    let before = s.now().await?;
    let l1 = s.try_acquire("shard-1", n1, None).await?.context("a free shard is granted")?;
    let after = s.now().await?;
    ensure!(l1.epoch == 1 && l1.holder == n1 && l1.holder_name == "n1" && l1.shard == "shard-1");
    // Expiry = database now + TTL at the grant.
    let ttl = chrono::Duration::milliseconds(2_000);
    ensure!(l1.expires_at >= before + ttl - chrono::Duration::milliseconds(5), "{l1:?} vs {before}");
    ensure!(l1.expires_at <= after + ttl + chrono::Duration::milliseconds(5), "{l1:?} vs {after}");

    // Held: nobody else gets it, not even a second time by the holder.
    ensure!(s.try_acquire("shard-1", n2, None).await?.is_none());
    ensure!(s.try_acquire("shard-1", n1, None).await?.is_none());

    // Renewal extends the expiry and keeps the epoch.
    let r = s.renew(&l1).await?;
    ensure!(r.epoch == l1.epoch && r.expires_at >= l1.expires_at);
    let rows = s.holders().await?;
    ensure!(rows.len() == 1 && rows[0].live && rows[0].holder == Some(n1) && rows[0].epoch == 1);

    // Let it expire (TTL 2 s; wait 3 s): it is free for others, at epoch + 1.
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let rows = s.holders().await?;
    ensure!(!rows[0].live, "expired by the database clock");
    ensure!(matches!(expect_lost(s.renew(&r).await)?, LostReason::Expired { .. }));
    let l2 = s.try_acquire("shard-1", n2, None).await?.context("an expired lease is granted")?;
    ensure!(l2.epoch == 2 && l2.holder == n2);

    // The old holder can neither renew nor release.
    ensure!(matches!(
        expect_lost(s.renew(&r).await)?,
        LostReason::Superseded { holder: Some(h), epoch: 2 } if h == n2
    ));
    ensure!(expect_lost(s.release(&r).await).is_ok());

    // Release frees it at once; the next grant goes one higher.
    s.release(&l2).await?;
    let rows = s.holders().await?;
    ensure!(rows[0].holder.is_none() && !rows[0].live && rows[0].epoch == 2);
    let l3 = s.try_acquire("shard-1", n1, None).await?.context("a released lease is granted")?;
    ensure!(l3.epoch == 3);

    // A down node cannot acquire.
    s.deregister(n2).await?;
    ensure!(matches!(s.try_acquire("shard-2", n2, None).await, Err(LeaseError::NodeNotRegistered(_))));
    s.close().await;
    Ok(())
}

/// The epoch strictly increases with every change of holder, and the
/// history records every grant.
pub async fn epochs_increase(url: String) -> Result<()> {
    let s = store(&url, 5_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let n3 = s.register_node("n3", "a3").await?;

    let mut epochs = Vec::new();
    let l = s.try_acquire("s", n1, None).await?.context("grant")?;
    epochs.push(l.epoch);
    let l = s.handover(&l, n2).await?;
    ensure!(l.holder == n2 && l.holder_name == "n2");
    epochs.push(l.epoch);
    let l = s.handover(&l, n3).await?;
    epochs.push(l.epoch);
    s.release(&l).await?;
    let l = s.try_acquire("s", n3, None).await?.context("grant")?;
    epochs.push(l.epoch);
    let l = s.handover(&l, n1).await?;
    epochs.push(l.epoch);
    ensure!(epochs.windows(2).all(|w| w[1] > w[0]), "epochs {epochs:?} must strictly increase");
    ensure!(epochs == vec![1, 2, 3, 4, 5]);

    // The old token cannot hand over again.
    let stale = chitin::lease::Lease { holder: n3, epoch: 4, ..l.clone() };
    ensure!(expect_lost(s.handover(&stale, n2).await).is_ok());
    // Handover to oneself or to a node that is not live is refused.
    ensure!(matches!(s.handover(&l, n1).await, Err(LeaseError::InvalidArgument(_))));
    s.deregister(n2).await?;
    ensure!(matches!(s.handover(&l, n2).await, Err(LeaseError::NodeNotLive(id)) if id == n2));

    let h = s.history(Some("s")).await?;
    let got: Vec<(i64, uuid::Uuid, &str)> = h.iter().map(|e| (e.epoch, e.holder, e.via.as_str())).collect();
    ensure!(
        got == vec![(1, n1, "acquire"), (2, n2, "handover"), (3, n3, "handover"), (4, n3, "acquire"), (5, n1, "handover")],
        "history {got:?}"
    );
    ensure!(h.windows(2).all(|w| w[1].acquired_at >= w[0].acquired_at));
    ensure!(s.history(None).await?.len() == 5 && s.history(Some("other")).await?.is_empty());

    // Many nodes racing for one free shard: exactly one wins per round.
    let s2 = s.clone();
    let racers = [n1, n3];
    s.release(&l).await?;
    let mut tasks = Vec::new();
    for &n in racers.iter().chain(racers.iter()) {
        let s = s2.clone();
        tasks.push(tokio::spawn(async move { s.try_acquire("s", n, None).await }));
    }
    let mut granted = Vec::new();
    for t in tasks {
        if let Some(l) = t.await?? {
            granted.push(l);
        }
    }
    ensure!(granted.len() == 1 && granted[0].epoch == 6, "granted {granted:?}");
    s.close().await;
    Ok(())
}

/// A stale token's append aborts with LeaseLost and writes nothing.
pub async fn stale_token_writes_nothing(url: String) -> Result<()> {
    let s = store(&url, 5_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let l1 = s.try_acquire("s1", n1, None).await?.context("grant")?;
    let t1 = l1.token();
    let a = s.append_fenced(&t1, "stream", "req-1", b"one").await?;
    ensure!(a.seq == 1 && a.epoch == 1 && a.fresh);

    // Not yet held by anyone: NoLease.
    let ghost = chitin::lease::LeaseToken { shard: "nope".into(), holder: n1, epoch: 1 };
    ensure!(expect_lost(s.append_fenced(&ghost, "stream", "req-x", b"x").await)? == LostReason::NoLease);
    // A wrong epoch for the right holder.
    let wrong = chitin::lease::LeaseToken { epoch: 7, ..t1.clone() };
    ensure!(matches!(expect_lost(s.append_fenced(&wrong, "stream", "req-x", b"x").await)?, LostReason::Superseded { .. }));

    // Handed over: the old holder's token is stale.
    let l2 = s.handover(&l1, n2).await?;
    let reason = expect_lost(s.append_fenced(&t1, "stream", "req-2", b"stale").await)?;
    ensure!(reason == LostReason::Superseded { holder: Some(n2), epoch: 2 }, "{reason:?}");
    // … also for another stream of the shard.
    ensure!(expect_lost(s.append_fenced(&t1, "stream-b", "req-2", b"stale").await).is_ok());

    // The new holder commits at the new epoch, right after the old entry.
    let b = s.append_fenced(&l2.token(), "stream", "req-3", b"three").await?;
    ensure!(b.seq == 2 && b.epoch == 2);

    // Released: the old token is Released.
    s.release(&l2).await?;
    ensure!(expect_lost(s.append_fenced(&l2.token(), "stream", "req-4", b"x").await)? == LostReason::Released);

    let entries = s.read("stream", 1, 100).await?;
    let got: Vec<(i64, &str, i64, &[u8])> =
        entries.iter().map(|e| (e.seq, e.request_id.as_str(), e.epoch, e.payload.as_slice())).collect();
    ensure!(got == vec![(1, "req-1", 1, &b"one"[..]), (2, "req-3", 2, &b"three"[..])], "journal {got:?}");
    ensure!(s.read("stream-b", 1, 100).await?.is_empty(), "nothing committed under a stale token");
    ensure!(entries.iter().all(|e| e.shard == "s1"));

    // What a fault checker proves from the tables: every entry's epoch was
    // granted before the entry committed, and the next epoch after it.
    let history = s.history(Some("s1")).await?;
    for e in &entries {
        let granted = history.iter().find(|h| h.epoch == e.epoch).context("epoch in history")?;
        ensure!(granted.acquired_at <= e.committed_at, "{granted:?} vs {e:?}");
        if let Some(next) = history.iter().find(|h| h.epoch == e.epoch + 1) {
            ensure!(next.acquired_at >= e.committed_at, "{next:?} vs {e:?}");
        }
    }
    s.close().await;
    Ok(())
}

/// Expiry also fences: once the TTL passes, the holder's token is refused.
pub async fn expired_token_writes_nothing(url: String) -> Result<()> {
    let s = store(&url, 1_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let l = s.try_acquire("s1", n1, None).await?.context("grant")?;
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    ensure!(matches!(expect_lost(s.append_fenced(&l.token(), "st", "r", b"late").await)?, LostReason::Expired { .. }));
    ensure!(s.read("st", 0, 10).await?.is_empty());
    s.close().await;
    Ok(())
}

/// A repeated request id returns the original (seq, epoch) and writes nothing.
pub async fn request_id_idempotent(url: String) -> Result<()> {
    let s = store(&url, 5_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let l1 = s.try_acquire("s1", n1, None).await?.context("grant")?;
    let first = s.append_fenced(&l1.token(), "st", "req-1", b"original").await?;
    let again = s.append_fenced(&l1.token(), "st", "req-1", b"different").await?;
    ensure!(again.seq == first.seq && again.epoch == first.epoch && !again.fresh && first.fresh);
    let next = s.append_fenced(&l1.token(), "st", "req-2", b"two").await?;
    ensure!(next.seq == 2, "a deduplicated request consumes no sequence number: {next:?}");

    // Retried through the next holder: still the original outcome.
    let l2 = s.handover(&l1, n2).await?;
    let retried = s.append_fenced(&l2.token(), "st", "req-1", b"retry").await?;
    ensure!(retried.seq == 1 && retried.epoch == 1 && !retried.fresh);
    // The same request id in another stream is another request.
    let other = s.append_fenced(&l2.token(), "other", "req-1", b"x").await?;
    ensure!(other.seq == 1 && other.epoch == 2 && other.fresh);

    // Racing duplicates: exactly one is applied.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (s, t) = (s.clone(), l2.token());
        tasks.push(tokio::spawn(async move { s.append_fenced(&t, "st", "req-race", b"r").await }));
    }
    let mut fresh = 0;
    let mut seqs = std::collections::BTreeSet::new();
    for t in tasks {
        let a = t.await??;
        fresh += usize::from(a.fresh);
        seqs.insert(a.seq);
    }
    ensure!(fresh == 1 && seqs.len() == 1, "fresh {fresh}, seqs {seqs:?}");

    let entries = s.read("st", 1, 100).await?;
    let ids: Vec<&str> = entries.iter().map(|e| e.request_id.as_str()).collect();
    ensure!(ids == vec!["req-1", "req-2", "req-race"], "{ids:?}");
    ensure!(entries[0].payload == b"original");
    ensure!(entries.iter().map(|e| e.seq).collect::<Vec<_>>() == vec![1, 2, 3]);
    s.close().await;
    Ok(())
}

/// Many tasks appending under one holder all succeed, gapless and in order.
pub async fn concurrent_appends(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let l = s.try_acquire("s1", n1, None).await?.context("grant")?;
    const TASKS: usize = 12;
    const EACH: usize = 10;
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (s, token) = (s.clone(), l.token());
        tasks.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for i in 0..EACH {
                // Two streams: one shared by all tasks, one per task.
                let a = s.append_fenced(&token, "shared", &format!("t{t}-{i}"), format!("{t}:{i}").as_bytes()).await?;
                s.append_fenced(&token, &format!("own-{t}"), &format!("r{i}"), b"x").await?;
                seqs.push(a.seq);
            }
            anyhow::Ok(seqs)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let seqs = t.await??;
        ensure!(seqs.windows(2).all(|w| w[1] > w[0]), "one task's appends are ordered: {seqs:?}");
        all.extend(seqs);
    }
    all.sort();
    ensure!(all == (1..=(TASKS * EACH) as i64).collect::<Vec<_>>(), "gapless, no duplicates");
    let entries = s.read("shared", 1, 1_000).await?;
    ensure!(entries.len() == TASKS * EACH);
    ensure!(entries.iter().enumerate().all(|(i, e)| e.seq == i as i64 + 1 && e.epoch == 1));
    // Each task's entries appear in its own order.
    for t in 0..TASKS {
        let mine: Vec<String> = entries
            .iter()
            .filter(|e| e.request_id.starts_with(&format!("t{t}-")))
            .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
            .collect();
        ensure!(mine == (0..EACH).map(|i| format!("{t}:{i}")).collect::<Vec<_>>());
        ensure!(s.read(&format!("own-{t}"), 1, 100).await?.len() == EACH);
    }
    // Paging.
    let page = s.read("shared", 50, 5).await?;
    ensure!(page.iter().map(|e| e.seq).collect::<Vec<_>>() == vec![50, 51, 52, 53, 54]);
    // The unfenced baseline writes the same rows.
    let u = s.append_unfenced(&l.token(), "shared", "unfenced-1", b"u").await?;
    ensure!(u.seq == (TASKS * EACH) as i64 + 1 && u.fresh);
    s.close().await;
    Ok(())
}

/// Cluster meta is recorded on first start; a mismatch is refused with both values.
pub async fn cluster_meta(url: String) -> Result<()> {
    let s = store(&url, 15_000, 30_000).await?;
    let secs = Duration::from_secs;
    let m = s.check_cluster_meta(16, secs(15), secs(5)).await?;
    ensure!(m.shard_count == 16 && m.lease_ttl == secs(15) && m.renew_interval == secs(5));
    s.check_cluster_meta(16, secs(15), secs(5)).await?;
    match s.check_cluster_meta(32, Duration::from_millis(2_500), secs(5)).await {
        Err(LeaseError::ClusterMetaMismatch { mismatches }) => {
            ensure!(mismatches.len() == 2, "{mismatches:?}");
            ensure!(mismatches[0].field == "shard count" && mismatches[0].cluster == "16" && mismatches[0].ours == "32");
            ensure!(mismatches[1].cluster == "15" && mismatches[1].ours == "2.5");
            let text = LeaseError::ClusterMetaMismatch { mismatches }.to_string();
            ensure!(text.contains("the cluster has 16, this node has 32"), "{text}");
        }
        other => bail!("expected ClusterMetaMismatch, got {other:?}"),
    }
    match s.check_cluster_meta(16, secs(15), Duration::from_millis(500)).await {
        Err(LeaseError::ClusterMetaMismatch { mismatches }) => {
            ensure!(mismatches.len() == 1 && mismatches[0].field == "leases.renew_interval_secs");
            ensure!(mismatches[0].cluster == "5" && mismatches[0].ours == "0.5");
        }
        other => bail!("expected ClusterMetaMismatch, got {other:?}"),
    }
    s.close().await;
    Ok(())
}

/// Deregistering frees the node's leases (same epoch; the next grant is higher).
pub async fn deregister_frees_leases(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let a = s.try_acquire("a", n1, None).await?.context("grant")?;
    let b = s.try_acquire("b", n1, None).await?.context("grant")?;
    let c = s.try_acquire("c", n2, None).await?.context("grant")?;
    s.deregister(n1).await?;
    s.deregister(n1).await?; // idempotent
    let rows = s.holders().await?;
    ensure!(rows.iter().filter(|r| r.holder.is_none()).count() == 2);
    ensure!(rows.iter().any(|r| r.shard == "c" && r.holder == Some(n2) && r.live));
    ensure!(expect_lost(s.append_fenced(&a.token(), "x", "r", b"x").await)? == LostReason::Released);
    let a2 = s.try_acquire("a", n2, None).await?.context("grant")?;
    ensure!(a2.epoch == a.epoch + 1);
    ensure!(b.epoch == 1 && c.epoch == 1);
    s.close().await;
    Ok(())
}

/// A round's read: the node's own live leases and the rows it names (those
/// never leased have none), not the others; a list longer than one
/// statement's share of parameters is read in parts.
pub async fn round_leases(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    for (shard, node) in [("a", n1), ("b", n1), ("c", n2), ("d", n2), ("e", n1)] {
        s.try_acquire(shard, node, None).await?.context("grant")?;
    }
    let e = s.lease("e").await?.context("row e")?;
    s.release(&chitin::lease::Lease {
        shard: "e".into(),
        holder: n1,
        holder_name: "n1".into(),
        epoch: e.epoch,
        liveness_epoch: None,
        expires_at: Default::default(),
    })
    .await?;
    let shards = |rows: Vec<chitin::lease::LeaseRow>| rows.into_iter().map(|r| r.shard).collect::<Vec<_>>();
    ensure!(shards(s.round_leases(n1, &[]).await?) == ["a", "b"], "its own live leases only");
    let named: Vec<String> = ["c", "never", "e", "a"].map(String::from).into();
    ensure!(shards(s.round_leases(n1, &named).await?) == ["a", "b", "c", "e"]);
    let many: Vec<String> = (0..1_200).map(|i| format!("x{i}")).chain(["d".to_string()]).collect();
    ensure!(shards(s.round_leases(n1, &many).await?) == ["a", "b", "d"], "a long list is read whole");
    s.close().await;
    Ok(())
}

/// The fence SQL documented for applications (`Dialect::fence_sql`) finds
/// the current token, and nothing for a stale one, inside the
/// application's own transaction.
pub async fn application_fence_sql(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let l1 = s.try_acquire("s1", n1, None).await?.context("grant")?;
    let l2 = s.handover(&l1, n2).await?;
    let sql = s.dialect().fence_sql();
    // (shard, holder, epoch, expected to hold)
    let cases = [
        (l2.shard.clone(), n2, l2.epoch, true),
        (l1.shard.clone(), n1, l1.epoch, false),
        (l2.shard.clone(), n2, l1.epoch, false),
        ("other".to_owned(), n2, l2.epoch, false),
    ];
    for (shard, holder, epoch, want) in cases {
        let found = match s.dialect() {
            Dialect::Postgres => {
                let mut c = sqlx::PgConnection::connect(&url).await?;
                let mut tx = c.begin().await?;
                let row: Option<i32> =
                    sqlx::query_scalar(sql).bind(&shard).bind(holder).bind(epoch).fetch_optional(&mut *tx).await?;
                tx.rollback().await?;
                row.is_some()
            }
            Dialect::MySql => {
                let mut c = sqlx::MySqlConnection::connect(&url).await?;
                let mut tx = c.begin().await?;
                let row: Option<i64> =
                    sqlx::query_scalar(sql).bind(&shard).bind(holder.to_string()).bind(epoch).fetch_optional(&mut *tx).await?;
                tx.rollback().await?;
                row.is_some()
            }
            Dialect::Sqlite => {
                let mut c = sqlx::SqliteConnection::connect(&url).await?;
                let mut tx = sqlx::Connection::begin_with(&mut c, "BEGIN IMMEDIATE").await?;
                let row: Option<i64> =
                    sqlx::query_scalar(sql).bind(&shard).bind(holder.to_string()).bind(epoch).fetch_optional(&mut *tx).await?;
                tx.rollback().await?;
                row.is_some()
            }
        };
        ensure!(found == want, "fence for ({shard}, {holder}, {epoch}): found {found}, want {want}");
    }
    if s.dialect() == Dialect::Postgres {
        // The single-statement shape of examples/ownership.md: the fence in a
        // WITH, the write selected from it.
        let mut c = sqlx::PgConnection::connect(&url).await?;
        sqlx::query("CREATE TABLE app_orders (id bigint PRIMARY KEY)").execute(&mut c).await?;
        let write = format!("WITH fence AS ({sql}) INSERT INTO app_orders (id) SELECT $4 FROM fence RETURNING id");
        for (holder, epoch, id, want) in [(n2, l2.epoch, 1i64, true), (n1, l1.epoch, 2, false)] {
            let row: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(write.clone()))
                .bind(&l2.shard)
                .bind(holder)
                .bind(epoch)
                .bind(id)
                .fetch_optional(&mut c)
                .await?;
            ensure!(row.is_some() == want, "single-statement fenced write by epoch {epoch}: {row:?}");
        }
        let stored: Vec<i64> = sqlx::query_scalar("SELECT id FROM app_orders").fetch_all(&mut c).await?;
        ensure!(stored == vec![1], "a stale token wrote through the single-statement fence: {stored:?}");
    }
    s.close().await;
    Ok(())
}

/// A change of holder waits for an application transaction that passed the
/// fence: the old holder's in-flight commit lands before the new epoch.
pub async fn handover_waits_for_fenced_transaction(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let l1 = s.try_acquire("s1", n1, None).await?.context("grant")?;
    let sql = s.dialect().fence_sql();

    // Opens the application's transaction, passes the fence, then starts a
    // handover and checks that it waits until the transaction ends.
    macro_rules! check {
        ($tx:expr, $sql:expr, $holder:expr) => {{
            let mut tx = $tx;
            let row: Option<i64> =
                sqlx::query_scalar($sql).bind(&l1.shard).bind($holder).bind(l1.epoch).fetch_optional(&mut *tx).await?;
            ensure!(row.is_some(), "the holder passes the fence");
            let (s2, l) = (s.clone(), l1.clone());
            let handover = tokio::spawn(async move { s2.handover(&l, n2).await });
            tokio::time::sleep(Duration::from_millis(700)).await;
            ensure!(!handover.is_finished(), "the handover must wait for the fenced transaction");
            tx.commit().await?;
            let l2 = tokio::time::timeout(Duration::from_secs(30), handover).await???;
            ensure!(l2.epoch == l1.epoch + 1 && l2.holder == n2);
        }};
    }
    match s.dialect() {
        Dialect::Postgres => {
            let mut c = sqlx::PgConnection::connect(&url).await?;
            // PostgreSQL's `SELECT 1` is int4; read it as int8 like the others.
            let sql = sql.replacen("SELECT 1", "SELECT 1::int8", 1);
            check!(c.begin().await?, sqlx::AssertSqlSafe(sql), n1);
        }
        Dialect::MySql => {
            let mut c = sqlx::MySqlConnection::connect(&url).await?;
            check!(c.begin().await?, sql, n1.to_string());
        }
        Dialect::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&url).await?;
            check!(sqlx::Connection::begin_with(&mut c, "BEGIN IMMEDIATE").await?, sql, n1.to_string());
        }
    }
    s.close().await;
    Ok(())
}

/// An application transaction (on its own connection) that passed the
/// documented fence and is still open.
pub enum FencedTx {
    Pg(sqlx::Transaction<'static, sqlx::Postgres>),
    My(sqlx::Transaction<'static, sqlx::MySql>),
    Lite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl FencedTx {
    pub async fn commit(self) -> Result<()> {
        match self {
            FencedTx::Pg(t) => t.commit().await?,
            FencedTx::My(t) => t.commit().await?,
            FencedTx::Lite(t) => t.commit().await?,
        }
        Ok(())
    }
}

/// Runs `Dialect::fence_sql` for `token` as the first statement of a new
/// application transaction: `Some` (still open) when the token passes.
pub async fn fence(url: &str, dialect: Dialect, token: &LeaseToken) -> Result<Option<FencedTx>> {
    fence_with(url, dialect, dialect.fence_sql(), token).await
}

/// The fence of 0.1, which judges a lease by its own expiry only.
fn fence_of_0_1(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => {
            "SELECT 1 FROM chitin_shard_leases WHERE shard_id = $1 AND holder = $2 AND epoch = $3 \
             AND expires_at > clock_timestamp() FOR SHARE"
        }
        Dialect::MySql => {
            "SELECT 1 FROM chitin_shard_leases WHERE shard_id = ? AND holder = ? AND epoch = ? \
             AND expires_at > UTC_TIMESTAMP(6) LOCK IN SHARE MODE"
        }
        Dialect::Sqlite => {
            "SELECT 1 FROM chitin_shard_leases WHERE shard_id = ?1 AND holder = ?2 AND epoch = ?3 \
             AND expires_at > CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)"
        }
    }
}

async fn fence_with(url: &str, dialect: Dialect, sql: &'static str, token: &LeaseToken) -> Result<Option<FencedTx>> {
    Ok(match dialect {
        Dialect::Postgres => {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(url).await?;
            let mut tx = pool.begin().await?;
            let row: Option<i32> =
                sqlx::query_scalar(sql).bind(&token.shard).bind(token.holder).bind(token.epoch).fetch_optional(&mut *tx).await?;
            row.map(|_| FencedTx::Pg(tx))
        }
        Dialect::MySql => {
            let pool = sqlx::mysql::MySqlPoolOptions::new().max_connections(1).connect(url).await?;
            let mut tx = pool.begin().await?;
            let row: Option<i64> = sqlx::query_scalar(sql)
                .bind(&token.shard)
                .bind(token.holder.to_string())
                .bind(token.epoch)
                .fetch_optional(&mut *tx)
                .await?;
            row.map(|_| FencedTx::My(tx))
        }
        Dialect::Sqlite => {
            let pool = sqlx::sqlite::SqlitePoolOptions::new().max_connections(1).connect(url).await?;
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            let row: Option<i64> = sqlx::query_scalar(sql)
                .bind(&token.shard)
                .bind(token.holder.to_string())
                .bind(token.epoch)
                .fetch_optional(&mut *tx)
                .await?;
            row.map(|_| FencedTx::Lite(tx))
        }
    })
}

/// Whether `token` passes the documented fence right now.
pub async fn passes_fence(url: &str, dialect: Dialect, token: &LeaseToken) -> Result<bool> {
    Ok(match fence(url, dialect, token).await? {
        Some(tx) => {
            tx.commit().await?;
            true
        }
        None => false,
    })
}

/// Leases on liveness (gate `node-leases`): one heartbeat renews every
/// lease of a node and a fenced writer never holds it up; the leases end
/// with the node's liveness; a takeover ends the liveness epoch, so a node
/// that comes back revives none of them; a lease with its own expiry moves
/// onto liveness at its renewal; the 0.1 fence refuses a lease on liveness
/// (an application still on it fails safe). Removing any of these makes a
/// check below fail.
pub async fn leases_on_liveness(url: String) -> Result<()> {
    let s = store(&url, 1_500, 30_000).await?;
    let dialect = s.dialect();
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let own = s.try_acquire("own", n1, None).await?.context("grant before the gate")?;
    ensure!(own.liveness_epoch.is_none(), "{own:?}");
    s.set_leases_on_liveness(true);
    ensure!(
        matches!(s.try_acquire("a", n1, None).await, Err(LeaseError::LivenessLapsed(id)) if id == n1),
        "a node whose liveness has not started (no heartbeat yet) takes nothing"
    );
    ensure!(s.heartbeat(n1, 1).await? == 1);
    let mut held = Vec::new();
    for shard in ["a", "b", "c"] {
        let l = s.try_acquire(shard, n1, None).await?.context("grant")?;
        ensure!(l.liveness_epoch == Some(1), "{l:?}");
        held.push(l);
    }
    let moved = s.renew(&own).await?;
    ensure!(moved.liveness_epoch == Some(1) && moved.epoch == own.epoch, "moved onto liveness at renewal: {moved:?}");
    held.push(moved);
    ensure!(fence_with(&url, dialect, fence_of_0_1(dialect), &held[0].token()).await?.is_none(), "the 0.1 fence refuses");

    // Heartbeats alone keep every lease live for several TTLs, and a writer
    // inside its fenced transaction does not hold a heartbeat up.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let writer = if dialect == Dialect::Sqlite { None } else { fence(&url, dialect, &held[0].token()).await? };
        ensure!(dialect == Dialect::Sqlite || writer.is_some(), "the fence passes on a heartbeated lease");
        tokio::time::timeout(Duration::from_secs(1), s.heartbeat(n1, 1)).await.context("the heartbeat waited for a writer")??;
        if let Some(tx) = writer {
            tx.commit().await?;
        }
    }
    for l in &held {
        ensure!(passes_fence(&url, dialect, &l.token()).await?, "{} renewed by heartbeats alone", l.shard);
        ensure!(s.lease(&l.shard).await?.context("row")?.live);
    }
    ensure!(s.leases_of(n1).await?.len() == 4);

    // No heartbeat for longer than the TTL: every lease ends with it.
    tokio::time::sleep(Duration::from_millis(1_800)).await;
    for l in &held {
        ensure!(!passes_fence(&url, dialect, &l.token()).await?, "{} outlived its node's liveness", l.shard);
        ensure!(!s.lease(&l.shard).await?.context("row")?.live);
    }
    ensure!(expect_lost(s.append_fenced(&held[0].token(), "st", "r1", b"x").await).is_ok());

    // A peer takes one over: that ends n1's liveness epoch, so n1 coming
    // back moves to epoch 2 and none of its other leases lives again.
    ensure!(s.heartbeat(n2, 1).await? == 1);
    let taken = s.try_acquire("a", n2, None).await?.context("takeover")?;
    ensure!(taken.epoch == held[0].epoch + 1 && taken.liveness_epoch == Some(1), "{taken:?}");
    ensure!(s.heartbeat(n1, 1).await? == 2, "the heartbeat reports the epoch a peer ended");
    for l in &held[1..] {
        ensure!(!passes_fence(&url, dialect, &l.token()).await?, "{} revived by a returning node", l.shard);
        ensure!(expect_lost(s.renew(l).await).is_ok());
    }
    let again = s.try_acquire("b", n1, None).await?.context("n1 takes b again")?;
    ensure!(again.liveness_epoch == Some(2) && again.epoch == held[1].epoch + 1, "{again:?}");
    ensure!(passes_fence(&url, dialect, &again.token()).await?);

    // Marked down: every lease on its liveness ends at once.
    s.deregister(n1).await?;
    ensure!(!passes_fence(&url, dialect, &again.token()).await?);
    ensure!(matches!(s.heartbeat(n1, 2).await, Err(LeaseError::NodeNotRegistered(_))));
    s.close().await;
    Ok(())
}

/// A batch is one fenced transaction: each entry gets its own sequence, a
/// repeat (earlier in the batch, or applied before) its original outcome;
/// a lost lease writes none of them. Concurrent appends through the node's
/// group commit share transactions (PostgreSQL shows it: one `xmin` per
/// transaction) and are still numbered without gaps.
pub async fn append_batch(url: String) -> Result<()> {
    use chitin::lease::NewEntry;
    let s = store(&url, 30_000, 30_000).await?;
    s.set_leases_on_liveness(true);
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    s.heartbeat(n1, 1).await?;
    s.heartbeat(n2, 1).await?;
    let l = s.try_acquire("s", n1, None).await?.context("grant")?;
    let entry =
        |stream: &str, id: &str| NewEntry { stream: stream.into(), request_id: id.into(), payload: id.as_bytes().to_vec() };
    let got = s.append_batch(&l.token(), &[entry("x", "r1"), entry("x", "r2"), entry("y", "r1"), entry("x", "r1")]).await?;
    let seqs: Vec<(i64, bool)> = got.iter().map(|a| (a.seq, a.fresh)).collect();
    ensure!(seqs == vec![(1, true), (2, true), (1, true), (1, false)], "{seqs:?}");
    let again = s.append_batch(&l.token(), &[entry("x", "r2"), entry("x", "r3")]).await?;
    ensure!(again.iter().map(|a| (a.seq, a.fresh)).collect::<Vec<_>>() == vec![(2, false), (3, true)], "{again:?}");

    let moved = s.handover(&l, n2).await?;
    ensure!(expect_lost(s.append_batch(&l.token(), &[entry("x", "r4"), entry("z", "r1")]).await).is_ok());
    ensure!(s.read("x", 0, 100).await?.len() == 3 && s.read("z", 0, 100).await?.is_empty(), "a lost batch wrote something");

    let group = Arc::new(chitin::node::group_commit::GroupCommit::default());
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let (group, s, token) = (group.clone(), s.clone(), moved.token());
            tokio::spawn(async move { group.append(&s, &token, entry("g", &format!("g{i}"))).await })
        })
        .collect();
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await??.seq);
    }
    seqs.sort();
    ensure!(seqs == (1..=32).collect::<Vec<i64>>(), "group commit numbered {seqs:?}");
    if s.dialect() == Dialect::Postgres {
        let mut c = sqlx::PgConnection::connect(&url).await?;
        let transactions: i64 = sqlx::query_scalar("SELECT count(DISTINCT xmin::text) FROM chitin_journal WHERE stream = 'g'")
            .fetch_one(&mut c)
            .await?;
        ensure!(transactions <= 16, "32 concurrent appends took {transactions} transactions: no group commit");
    }
    s.close().await;
    Ok(())
}

/// When the caller of the append in flight is cancelled mid-statement, the
/// appends that queued behind it still commit, rather than waiting for a
/// leader that is gone.
pub async fn group_commit_survives_a_cancelled_caller(url: String) -> Result<()> {
    use chitin::lease::NewEntry;
    let s = store(&url, 30_000, 30_000).await?;
    s.set_leases_on_liveness(true);
    let n1 = s.register_node("n1", "a1").await?;
    s.heartbeat(n1, 1).await?;
    let token = s.try_acquire("s", n1, None).await?.context("grant")?.token();
    let group = Arc::new(chitin::node::group_commit::GroupCommit::default());
    let append = |id: &str| {
        let (group, s, token) = (group.clone(), s.clone(), token.clone());
        let entry = NewEntry { stream: "c".into(), request_id: id.into(), payload: id.as_bytes().to_vec() };
        tokio::spawn(async move { group.append(&s, &token, entry).await })
    };

    // Another transaction holds the lease row: every append waits at its fence.
    let held = hold_lease_row(&url, s.dialect(), "s").await?;
    let lone = append("lone");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let queued: Vec<_> = ["q1", "q2", "q3"].into_iter().map(append).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    ensure!(!lone.is_finished() && queued.iter().all(|t| !t.is_finished()), "the appends must wait for the held lease row");
    lone.abort();
    let _ = lone.await;
    held.release().await?;

    let mut seqs = Vec::new();
    for t in queued {
        let done = tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .context("an append queued behind a cancelled caller was stranded")???;
        seqs.push(done.seq);
    }
    seqs.sort();
    ensure!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "the queued appends are numbered without gaps: {seqs:?}");
    s.close().await;
    Ok(())
}

/// A transaction holding a lease row exclusively, until [`HeldRow::release`].
pub enum HeldRow {
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    MySql(sqlx::Transaction<'static, sqlx::MySql>),
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
}

impl HeldRow {
    pub async fn release(self) -> Result<()> {
        match self {
            HeldRow::Postgres(tx) => tx.rollback().await?,
            HeldRow::MySql(tx) => tx.rollback().await?,
            HeldRow::Sqlite(tx) => tx.rollback().await?,
        }
        Ok(())
    }
}

/// Locks `shard`'s lease row (on SQLite: the database) in a transaction of its own.
pub async fn hold_lease_row(url: &str, dialect: Dialect, shard: &str) -> Result<HeldRow> {
    Ok(match dialect {
        Dialect::Postgres => {
            let pool = sqlx::PgPool::connect(url).await?;
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT 1 FROM chitin_shard_leases WHERE shard_id = $1 FOR UPDATE").bind(shard).execute(&mut *tx).await?;
            HeldRow::Postgres(tx)
        }
        Dialect::MySql => {
            let pool = sqlx::MySqlPool::connect(url).await?;
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT 1 FROM chitin_shard_leases WHERE shard_id = ? FOR UPDATE").bind(shard).execute(&mut *tx).await?;
            HeldRow::MySql(tx)
        }
        Dialect::Sqlite => {
            let pool = sqlx::SqlitePool::connect(url).await?;
            HeldRow::Sqlite(pool.begin_with("BEGIN IMMEDIATE").await?)
        }
    })
}

fn names(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

/// `lease(shard)` reads one row; `leases_of(node)` the node's live leases only.
pub async fn targeted_queries(url: String) -> Result<()> {
    let s = store(&url, 1_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    ensure!(s.lease("a").await?.is_none() && s.leases_of(n1).await?.is_empty());
    let a = s.try_acquire("a", n1, None).await?.context("grant")?;
    let b = s.try_acquire("b", n1, None).await?.context("grant")?;
    s.try_acquire("c", n2, None).await?.context("grant")?;
    let row = s.lease("a").await?.context("row")?;
    ensure!(row.holder == Some(n1) && row.epoch == a.epoch && row.live && row.holder_name.as_deref() == Some("n1"));
    let mine: Vec<String> = s.leases_of(n1).await?.into_iter().map(|r| r.shard).collect();
    ensure!(mine == names(&["a", "b"]), "{mine:?}");
    s.release(&b).await?;
    let mine: Vec<String> = s.leases_of(n1).await?.into_iter().map(|r| r.shard).collect();
    ensure!(mine == names(&["a"]), "a released lease is not the node's: {mine:?}");
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    ensure!(s.leases_of(n1).await?.is_empty(), "an expired lease is not live");
    let row = s.lease("a").await?.context("row")?;
    ensure!(row.holder == Some(n1) && !row.live);
    s.close().await;
    Ok(())
}

/// A split retires the parent (its token fails the fence at once, it is never
/// granted again) and seeds the children on the seeding node; a child is not
/// granted before its parent is retired; a parent held live by another token
/// is left alone.
pub async fn split_retires_parent(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let dialect = s.dialect();
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let children = names(&["p.0", "p.1"]);

    ensure!(s.try_acquire("p.0", n2, Some("p")).await?.is_none(), "a child before its parent's split");
    let p = s.try_acquire("p", n1, None).await?.context("grant")?;
    ensure!(passes_fence(&url, dialect, &p.token()).await?);

    let got = s.split_seed("p", &children, n2, None).await?;
    ensure!(got == SplitSeed::HeldElsewhere { holder: n1, epoch: p.epoch }, "{got:?}");
    let stale = LeaseToken { epoch: p.epoch + 5, ..p.token() };
    let got = s.split_seed("p", &children, n1, Some(&stale)).await?;
    ensure!(matches!(got, SplitSeed::HeldElsewhere { .. }), "a stale token is not the holder: {got:?}");
    ensure!(passes_fence(&url, dialect, &p.token()).await?, "a refused split changes nothing");
    ensure!(s.try_acquire("p.0", n2, Some("p")).await?.is_none());

    let SplitSeed::Seeded(leases) = s.split_seed("p", &children, n1, Some(&p.token())).await? else {
        bail!("the holder's split must seed");
    };
    ensure!(!passes_fence(&url, dialect, &p.token()).await?, "the parent's token fails the fence after the split");
    ensure!(expect_lost(s.append_fenced(&p.token(), "st", "r1", b"x").await).is_ok());
    ensure!(expect_lost(s.renew(&p).await).is_ok());
    let got: Vec<(String, uuid::Uuid, i64)> = leases.iter().map(|l| (l.shard.clone(), l.holder, l.epoch)).collect();
    ensure!(got == vec![("p.0".into(), n1, 1), ("p.1".into(), n1, 1)], "{got:?}");
    for l in &leases {
        ensure!(passes_fence(&url, dialect, &l.token()).await?, "a child's token passes");
        let h = s.history(Some(&l.shard)).await?;
        ensure!(h.len() == 1 && h[0].holder == n1 && h[0].via == chitin::lease::Via::Handover, "{h:?}");
    }
    let parent = s.lease("p").await?.context("parent row")?;
    ensure!(parent.holder.is_none() && !parent.live && parent.epoch == p.epoch + 1, "{parent:?}");
    ensure!(s.is_retired("p").await? && !s.is_retired("p.0").await?);
    let r = s.retirements().await?;
    ensure!(r.len() == 1 && r[0].shard == "p" && r[0].epoch == p.epoch + 1 && r[0].holder == n1, "{r:?}");
    ensure!(r[0].children == children && r[0].holder_name == "n1");

    // Never granted again, to anyone; a second split finds it retired.
    ensure!(s.try_acquire("p", n2, None).await?.is_none() && s.try_acquire("p", n1, None).await?.is_none());
    ensure!(s.split_seed("p", &children, n2, None).await? == SplitSeed::AlreadyRetired);

    // A child is granted to others once free, now that its parent is retired.
    ensure!(s.try_acquire("p.0", n2, Some("p")).await?.is_none(), "held by the seeding node");
    s.release(&leases[0]).await?;
    let c = s.try_acquire("p.0", n2, Some("p")).await?.context("a free child of a retired parent")?;
    ensure!(c.epoch == 2 && c.holder == n2);

    // A free parent is seeded by anyone (grants via acquire); a live child is corrupt.
    let SplitSeed::Seeded(q) = s.split_seed("q", &names(&["q.0"]), n2, None).await? else {
        bail!("a free parent is seeded");
    };
    ensure!(q[0].holder == n2 && s.history(Some("q.0")).await?[0].via == chitin::lease::Via::Acquire);
    match s.split_seed("r", &names(&["p.1"]), n2, None).await {
        Err(LeaseError::Corrupt(m)) => ensure!(m.contains("p.1"), "{m}"),
        other => bail!("expected Corrupt for a live child, got {other:?}"),
    }
    ensure!(!s.is_retired("r").await?, "a failed split changes nothing");
    ensure!(matches!(s.split_seed("x", &names(&["x"]), n1, None).await, Err(LeaseError::InvalidArgument(_))));
    s.close().await;
    Ok(())
}

/// Racing splits of one parent: exactly one seeds, the others find it retired.
pub async fn concurrent_split_seed(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let nodes = [s.register_node("n1", "a1").await?, s.register_node("n2", "a2").await?];
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (s, node) = (s.clone(), nodes[i % 2]);
        tasks.push(tokio::spawn(async move { s.split_seed("c", &names(&["c.0", "c.1"]), node, None).await }));
    }
    let (mut seeded, mut retired) = (0, 0);
    for t in tasks {
        match t.await?? {
            SplitSeed::Seeded(_) => seeded += 1,
            SplitSeed::AlreadyRetired => retired += 1,
            other => bail!("unexpected {other:?}"),
        }
    }
    ensure!(seeded == 1 && retired == 5, "seeded {seeded}, retired {retired}");
    ensure!(s.history(Some("c.0")).await?.len() == 1 && s.retirements().await?.len() == 1);
    s.close().await;
    Ok(())
}

/// A split waits for a fenced transaction in flight on the parent: it
/// commits before the seed; after the seed the parent's token fails.
pub async fn split_waits_for_fenced_transaction(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let dialect = s.dialect();
    let n1 = s.register_node("n1", "a1").await?;
    let p = s.try_acquire("p", n1, None).await?.context("grant")?;
    let tx = fence(&url, dialect, &p.token()).await?.context("the holder passes the fence")?;
    let (s2, token) = (s.clone(), p.token());
    let split = tokio::spawn(async move { s2.split_seed("p", &names(&["p.0", "p.1"]), n1, Some(&token)).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    ensure!(!split.is_finished(), "the split must wait for the fenced transaction");
    tx.commit().await?;
    let got = tokio::time::timeout(Duration::from_secs(30), split).await???;
    ensure!(matches!(got, SplitSeed::Seeded(ref l) if l.len() == 2), "{got:?}");
    ensure!(!passes_fence(&url, dialect, &p.token()).await?);
    ensure!(expect_lost(s.append_fenced(&p.token(), "st", "late", b"x").await).is_ok());
    ensure!(s.read("st", 0, 10).await?.is_empty());
    s.close().await;
    Ok(())
}

/// No lease is handed to a node that is leaving.
pub async fn handover_refuses_leaving(url: String) -> Result<()> {
    let s = store(&url, 30_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let n2 = s.register_node("n2", "a2").await?;
    let l = s.try_acquire("s", n1, None).await?.context("grant")?;
    s.set_node_state(n2, chitin::lease::NodeState::Leaving).await?;
    match s.handover(&l, n2).await {
        Err(e @ LeaseError::NodeLeaving(id)) if id == n2 => ensure!(e.to_string().contains("leaving"), "{e}"),
        other => bail!("expected NodeLeaving, got {other:?}"),
    }
    ensure!(s.lease("s").await?.context("row")?.holder == Some(n1), "the lease stays");
    s.close().await;
    Ok(())
}

/// A statement that waits out the lock bound (half a TTL) behind a session
/// that holds the lease row and sits idle (a peer cut off mid-transaction)
/// ends its operation at once: another wait of the bound, up to the retry
/// count, would take a lease round past its own leases' expiry. Once the
/// lock is gone the next attempt (the next round) passes.
pub async fn lock_wait_ends_the_attempt(url: String) -> Result<()> {
    // TTL 2 s: the lock bound is 1 s on PostgreSQL and MariaDB alike.
    let s = store(&url, 2_000, 30_000).await?;
    let n1 = s.register_node("n1", "a1").await?;
    let l1 = s.try_acquire("s1", n1, None).await?.context("grant")?;
    let lock = "SELECT shard_id FROM chitin_shard_leases WHERE shard_id = 's1' FOR UPDATE";
    macro_rules! blocked_renewal {
        ($conn:expr) => {{
            let mut conn = $conn;
            let mut tx = conn.begin().await?;
            sqlx::query(lock).fetch_all(&mut *tx).await?;
            let started = std::time::Instant::now();
            let renewed = s.renew(&l1).await;
            let waited = started.elapsed();
            ensure!(
                matches!(renewed, Err(LeaseError::LockWait { .. })),
                "a lock wait must end the attempt, not be retried: {renewed:?} after {waited:?}"
            );
            tx.rollback().await?;
        }};
    }
    match s.dialect() {
        Dialect::Postgres => blocked_renewal!(sqlx::PgConnection::connect(&url).await?),
        Dialect::MySql => blocked_renewal!(sqlx::MySqlConnection::connect(&url).await?),
        Dialect::Sqlite => bail!("SQLite serves one node; its lock waits are not bounded per statement"),
    }
    let renewed = s.renew(&l1).await?;
    ensure!(renewed.epoch == l1.epoch, "the lease is renewed once the lock is gone");
    s.close().await;
    Ok(())
}
