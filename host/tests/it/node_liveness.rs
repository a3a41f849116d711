//! Session-bound liveness through real node processes: a killed holder's
//! shards are writable elsewhere within a second even at a 15 s TTL
//! (PostgreSQL and MariaDB); at the default timing a paused or cut-off
//! holder (SIGSTOP; its network namespace's link down) keeps its session,
//! its shards are writable elsewhere within a TTL and a round, and the fence
//! refuses its old tokens; a database stall of 1 s and a 500 ms
//! pause of a node move nothing; a database restart or crash-restart marks
//! no live node down; a live node whose liveness session is ended from
//! outside (one, or every node's at once) is confirmed alive by its watcher
//! and keeps its shards; a node kept from its own lock takes leases again
//! after a TTL.

use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Result, ensure};
use chitin::lease::{NodeState, Store};
use chitin::testkit::PrivatePostgres;

/// One cluster at a time: three processes each, on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The previous default timing (TTL 15 s, renew 5 s): the kill test shows
/// that a crash is taken over without waiting for it, and a database
/// restart outlasts the 2 s default TTL (every lease would then lapse, which
/// is not what those tests judge).
fn ttl_15s(_: &str, s: &mut chitin::settings::Settings) {
    s.leases.ttl_secs = Some(15.0);
    s.leases.renew_interval_secs = Some(5.0);
}

/// The default timing, as a node without lease settings runs it.
fn at_defaults(_: &str, s: &mut chitin::settings::Settings) {
    s.leases.ttl_secs = None;
    s.leases.renew_interval_secs = None;
}

/// The live registration of `name`.
async fn registration(store: &Store, name: &str) -> Result<chitin::lease::NodeRecord> {
    let nodes = store.nodes().await?;
    nodes.into_iter().find(|n| n.name == name).ok_or_else(|| anyhow::anyhow!("no registration of {name}"))
}

async fn killed_holder_is_replaced_at_once(dialect: Dialect) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(dialect, 3, 16, 3, ttl_15s).await?;
    let status = c.wait_settled(Duration::from_secs(90)).await?;
    let v = c.busiest(&status);
    let victim = c.nodes[v].name.clone();
    let shards: Vec<String> = status.leases.iter().filter(|l| l.holder == victim).map(|l| l.shard.clone()).collect();
    let map = c.shard_map();
    let streams: Vec<String> = shards.iter().map(|s| stream_on(&map, s, "k")).collect();
    let store = c.store().await;

    let survivors: Vec<String> = c.nodes.iter().enumerate().filter(|(i, _)| *i != v).map(|(_, n)| n.api.clone()).collect();
    c.nodes[v].kill9()?;
    let mut writes = tokio::task::JoinSet::new();
    for stream in streams {
        writes.spawn(append_until_acked(survivors.clone(), stream, "after-kill".into(), Duration::from_secs(30)));
    }
    let mut took = Vec::new();
    while let Some(done) = writes.join_next().await {
        took.push(done??);
    }
    took.sort();
    let slowest = took.last().copied().unwrap_or_default();
    ensure!(
        slowest <= Duration::from_secs(1),
        "after kill -9 of {victim} (TTL 15 s) its {} shards took up to {slowest:?} to be writable elsewhere: {took:?}\n{}",
        shards.len(),
        c.logs()
    );
    // The session ended, so a peer marked the registration down: the TTL
    // (15 s) had no part in it.
    ensure!(registration(&store, &victim).await?.state == NodeState::Down, "{victim} not marked down");
    for shard in &shards {
        let row = store.lease(shard).await?.expect("a lease row");
        ensure!(row.live && row.holder_name.as_deref() != Some(victim.as_str()), "{shard}: {row:?}");
    }
    println!("{dialect:?}: {} shards of the killed node writable elsewhere after {took:?}", shards.len());
    store.close().await;
    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holder_is_writable_elsewhere_within_a_second_at_a_15s_ttl_postgres() {
    killed_holder_is_replaced_at_once(Dialect::Postgres).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_holder_is_writable_elsewhere_within_a_second_at_a_15s_ttl_mariadb() {
    killed_holder_is_replaced_at_once(Dialect::MySql).await.unwrap();
}

/// How a holder stops answering while its process lives on.
#[derive(Clone, Copy, Debug)]
enum Stop {
    /// `SIGSTOP`: a frozen VM, a long GC-like pause.
    Pause,
    /// Its network namespace's link down: a partition.
    Cut,
}

/// A paused or cut-off process keeps its sockets, so the database keeps its
/// session and lock: nobody marks it down, and its shards go when their
/// leases expire. At the default timing each is writable through the other
/// nodes within a TTL and a round of the stop (2.5 s; 1.5 s more for a
/// loaded machine), not before its last renewal's TTL; the fence refuses
/// the stopped holder's tokens; resumed or reconnected, the node serves on.
async fn stopped_holder_is_replaced_within_the_bound(dialect: Dialect, stop: Stop) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = match stop {
        Stop::Pause => Cluster::new(dialect, 3, 8, 3, at_defaults).await?,
        Stop::Cut => Cluster::on_lan(dialect, 3, 8, 3, at_defaults).await?,
    };
    let status = c.wait_settled(Duration::from_secs(30)).await?;
    let p = c.busiest(&status);
    let stopped = c.nodes[p].name.clone();
    let store = c.store().await;
    let mut tokens = Vec::new();
    for l in status.leases.iter().filter(|l| l.holder == stopped) {
        let row = store.lease(&l.shard).await?.expect("a lease row");
        tokens.push(chitin::lease::LeaseToken { shard: row.shard, holder: row.holder.expect("held"), epoch: row.epoch });
    }
    let map = c.shard_map();
    let others: Vec<String> = c.nodes.iter().enumerate().filter(|(i, _)| *i != p).map(|(_, n)| n.api.clone()).collect();

    let stopped_at = store.now().await?;
    match stop {
        Stop::Pause => c.nodes[p].pause()?,
        Stop::Cut => c.cut(p)?,
    }
    let mut writes = tokio::task::JoinSet::new();
    for t in &tokens {
        writes.spawn(append_until_acked(others.clone(), stream_on(&map, &t.shard, "p"), "after-pause".into(), TTL * 10));
    }
    let mut took = Vec::new();
    while let Some(done) = writes.join_next().await {
        took.push(done??);
    }
    took.sort();
    let registration_while_stopped = registration(&store, &stopped).await?;
    let refused: Vec<bool> = {
        let mut refused = Vec::new();
        for t in &tokens {
            let stream = stream_on(&map, &t.shard, "old");
            refused.push(store.append_fenced(t, &stream, "old-token", b"stale").await.is_err_and(|e| e.is_lease_lost()));
        }
        refused
    };
    match stop {
        Stop::Pause => c.nodes[p].resume()?,
        Stop::Cut => c.heal(p)?,
    }

    let bound = TTL + RENEW + Duration::from_millis(1500);
    ensure!(
        took.last().is_some_and(|slowest| *slowest <= bound),
        "the {} shards of {stopped} (stopped by {stop:?}) took {took:?} to be writable elsewhere (bound {bound:?})\n{}",
        tokens.len(),
        c.logs()
    );
    ensure!(refused.iter().all(|r| *r), "the fence let a stopped holder's token write ({stop:?}): {refused:?}");
    ensure!(registration_while_stopped.state != NodeState::Down, "a node stopped by {stop:?} was marked down");
    // Its last renewal was at most a renew interval (and a round) before the
    // stop; a takeover sooner than that renewal's TTL came from elsewhere.
    let earliest = stopped_at + chrono::Duration::from_std(TTL - RENEW - Duration::from_millis(250))?;
    for t in &tokens {
        let history = store.history(Some(&t.shard)).await?;
        let next = history.iter().find(|h| h.acquired_at > stopped_at && h.holder_name != stopped);
        let next = next.ok_or_else(|| anyhow::anyhow!("{} of the stopped {stopped} never taken over: {history:?}", t.shard))?;
        ensure!(
            next.acquired_at >= earliest,
            "{} taken over {:?} after the stop, before its TTL ({TTL:?})",
            t.shard,
            (next.acquired_at - stopped_at).to_std().unwrap_or_default()
        );
    }
    // Long enough for a healed link's retransmissions (their back-off
    // reaches seconds) to get through.
    tokio::time::sleep(TTL * 3).await;
    ensure!(c.nodes[p].is_running(), "the node stopped after {stop:?}:\n{}", c.nodes[p].log_tail(20));
    ensure!(registration(&store, &stopped).await?.state != NodeState::Down);
    // And it serves again: an append through it is acknowledged (by it or
    // by the holder it forwards to).
    let back = stream_on(&map, &tokens[0].shard, "back");
    append_until_acked(vec![c.nodes[p].api.clone()], back, "back".into(), TTL * 10).await?;
    println!("{dialect:?}: {} shards of the node stopped by {stop:?} writable elsewhere after {took:?}", tokens.len());
    store.close().await;
    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holder_is_replaced_within_a_ttl_and_a_round_and_fenced_postgres() {
    stopped_holder_is_replaced_within_the_bound(Dialect::Postgres, Stop::Pause).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holder_is_replaced_within_a_ttl_and_a_round_and_fenced_mariadb() {
    stopped_holder_is_replaced_within_the_bound(Dialect::MySql, Stop::Pause).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_holder_is_replaced_within_a_ttl_and_a_round_and_fenced_postgres() {
    stopped_holder_is_replaced_within_the_bound(Dialect::Postgres, Stop::Cut).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_off_holder_is_replaced_within_a_ttl_and_a_round_and_fenced_mariadb() {
    stopped_holder_is_replaced_within_the_bound(Dialect::MySql, Stop::Cut).await.unwrap();
}

/// What a healthy cluster meets must not move a shard at the default
/// timing: the whole database stalled for 1 s (every backend stopped: a
/// slow disk, a frozen VM), then one node's process stopped for 500 ms (a
/// CPU stall, a long GC-like pause), each three times.
#[tokio::test(flavor = "multi_thread")]
async fn a_1s_database_stall_and_a_500ms_node_stall_move_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pg = PrivatePostgres::start(dir.path(), None, "").unwrap();
    let db = crate::support::cluster::TestDb::create_on(Dialect::Postgres, &pg.url("127.0.0.1")).await.unwrap();
    let mut c = Cluster::on(db, 3, 8, 3, at_defaults).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let store = c.store().await;
    let before = quiet_holders(&store).await.unwrap();
    let busiest = c.busiest(&status);
    for _ in 0..3 {
        pg.stall(Duration::from_secs(1)).unwrap();
        tokio::time::sleep(TTL).await;
    }
    for _ in 0..3 {
        c.nodes[busiest].pause().unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        c.nodes[busiest].resume().unwrap();
        tokio::time::sleep(TTL).await;
    }
    assert_nothing_moved(&mut c, &store, &before).await.unwrap();
    store.close().await;
    c.teardown().await.unwrap();
    drop(pg);
}

/// Every session ends when the server restarts; a free lock then proves
/// nothing (the records name the server's previous lifetime), so nobody is
/// marked down and every node serves again. (Leases may still move: a
/// round's planned handoffs go on.)
#[tokio::test(flavor = "multi_thread")]
async fn a_database_restart_marks_no_live_node_down() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let mut pg = PrivatePostgres::start(dir.path(), None, "").unwrap();
    let db = crate::support::cluster::TestDb::create_on(Dialect::Postgres, &pg.url("127.0.0.1")).await.unwrap();
    let mut c = Cluster::on(db, 3, 8, 3, ttl_15s).await.unwrap();
    let before = c.wait_settled(Duration::from_secs(90)).await.unwrap();

    pg.down().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg.up().unwrap();

    // Every shard writable again through every node.
    let map = c.shard_map();
    for (i, lease) in before.leases.iter().enumerate() {
        let api = c.nodes[i % c.nodes.len()].api.clone();
        append_until_acked(vec![api], stream_on(&map, &lease.shard, "r"), "after-restart".into(), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    }
    let store = c.store().await;
    for n in &mut c.nodes {
        assert!(n.is_running(), "{} stopped", n.name);
        assert_ne!(registration(&store, &n.name).await.unwrap().state, NodeState::Down, "{} marked down", n.name);
    }
    store.close().await;
    c.teardown().await.unwrap();
}

/// Who holds each shard, at which epoch.
async fn holders(store: &Store) -> Result<Vec<(String, Option<uuid::Uuid>, i64)>> {
    let mut rows: Vec<_> = store.holders().await?.into_iter().map(|l| (l.shard, l.holder, l.epoch)).collect();
    rows.sort();
    Ok(rows)
}

/// The holders once none has changed for 11 s (two rounds of the slowest
/// timing here, 5 s each). `Cluster::wait_settled` compares two looks a second apart,
/// and a round after them may still hand a shard over: a move a test of
/// "nothing moves" would then blame on the session it ended.
async fn quiet_holders(store: &Store) -> Result<Vec<(String, Option<uuid::Uuid>, i64)>> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let (mut last, mut since) = (holders(store).await?, Instant::now());
    while since.elapsed() < Duration::from_secs(11) {
        ensure!(Instant::now() < deadline, "the leases kept moving for two minutes: {last:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = holders(store).await?;
        if now != last {
            (last, since) = (now, Instant::now());
        }
    }
    Ok(last)
}

/// Ends the liveness sessions of `victims` from outside, as an idle-session
/// killer, a proxy restart or an operator would: `pg_terminate_backend` on
/// PostgreSQL, `KILL` of the connection holding the lock on MariaDB.
async fn end_sessions(dialect: Dialect, url: &str, victims: &[uuid::Uuid]) -> Result<()> {
    use sqlx::Connection;
    match dialect {
        Dialect::Postgres => {
            let mut admin = sqlx::PgConnection::connect(url).await?;
            for v in victims {
                let ended: Vec<bool> =
                    sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1")
                        .bind(chitin::lease::session::session_label(*v))
                        .fetch_all(&mut admin)
                        .await?;
                ensure!(ended == vec![true], "the liveness session of {v}: {ended:?}");
            }
        }
        _ => {
            let mut admin = sqlx::MySqlConnection::connect(url).await?;
            for v in victims {
                let holder: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                    .bind(format!("chitin.live.{v}"))
                    .fetch_one(&mut admin)
                    .await?;
                let holder = holder.ok_or_else(|| anyhow::anyhow!("nobody holds the liveness lock of {v}"))?;
                sqlx::query(sqlx::AssertSqlSafe(format!("KILL {holder}"))).execute(&mut admin).await?;
            }
        }
    }
    Ok(())
}

/// Waits until every node's log says its liveness session is back.
async fn wait_sessions_back(c: &Cluster, which: &[usize]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    for &i in which {
        while !c.nodes[i].log_text().contains("liveness session back") {
            ensure!(Instant::now() < deadline, "{}'s liveness session not back:\n{}", c.nodes[i].name, c.nodes[i].log_tail(30));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// Asserts that the cluster is as it was: every node running and not marked
/// down, every shard with the holder and epoch it had, and writable through
/// every node.
async fn assert_nothing_moved(c: &mut Cluster, store: &Store, before: &[(String, Option<uuid::Uuid>, i64)]) -> Result<()> {
    // A round is 5 s at the slowest timing here: give a wrong takeover the
    // time to show.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for i in 0..c.nodes.len() {
        let name = c.nodes[i].name.clone();
        ensure!(c.nodes[i].is_running(), "{name} stopped:\n{}", c.nodes[i].log_tail(30));
        ensure!(registration(store, &name).await?.state != NodeState::Down, "{name} marked down:\n{}", c.logs());
    }
    let after = holders(store).await?;
    ensure!(after == before, "leases moved although every node lived:\nbefore {before:?}\nafter {after:?}\n{}", c.logs());
    let map = c.shard_map();
    for (i, (shard, _, _)) in before.iter().enumerate() {
        let api = c.nodes[i % c.nodes.len()].api.clone();
        append_until_acked(vec![api], stream_on(&map, shard, "s"), format!("after-{i}"), Duration::from_secs(10)).await?;
    }
    Ok(())
}

/// One node's liveness session is ended from outside while the node lives.
/// Its watcher finds the lock free, probes the node, finds it alive and
/// leaves it alone; the node takes its lock again and nothing moves. (Before
/// the second signal the watcher marked it down and the node exited.)
async fn one_session_ended_moves_nothing(dialect: Dialect) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(dialect, 3, 8, 3, at_defaults).await?;
    let status = c.wait_settled(Duration::from_secs(90)).await?;
    let v = c.busiest(&status);
    let store = c.store().await;
    let victim = registration(&store, &c.nodes[v].name).await?.id;
    let before = quiet_holders(&store).await?;

    end_sessions(dialect, &c.db.as_ref().unwrap().url, &[victim]).await?;
    wait_sessions_back(&c, &[v]).await?;
    let judged = c.nodes.iter().any(|n| n.log_text().contains("answers and its heartbeat is current: left alone"));
    ensure!(judged, "no watcher judged the victim's free lock:\n{}", c.logs());
    assert_nothing_moved(&mut c, &store, &before).await?;
    store.close().await;
    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_node_whose_liveness_session_is_ended_keeps_its_shards_postgres() {
    one_session_ended_moves_nothing(Dialect::Postgres).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_node_whose_liveness_session_is_ended_keeps_its_shards_mariadb() {
    one_session_ended_moves_nothing(Dialect::MySql).await.unwrap();
}

/// A node kept from its own liveness lock (its session ended and the lock
/// taken by another session: its own old one that the server has not ended
/// yet, a peer's watch fallen silent holding it) serves on and, a TTL after
/// its session dropped, takes leases again: here the shards of a peer killed
/// meanwhile, which it is the only node left to take. Without that they
/// would wait as long as the lock is kept. (That it takes none before the
/// TTL is `liveness::may_take_leases`'s table test.)
#[tokio::test(flavor = "multi_thread")]
async fn a_node_kept_from_its_own_lock_takes_a_dead_peers_shards() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 2, at_defaults).await.unwrap();
    c.wait_settled(Duration::from_secs(90)).await.unwrap();
    let store = c.store().await;
    let (kept, dead) = (c.nodes[0].name.clone(), c.nodes[1].name.clone());
    let kept_id = registration(&store, &kept).await.unwrap().id;
    // Paused, the node cannot take its lock back before this test does. The
    // peer's watch may take it first: it finds the paused process's port
    // open and its heartbeat current, and lets go at once.
    c.nodes[0].pause().unwrap();
    let ended = end_sessions(Dialect::Postgres, &c.db.as_ref().unwrap().url, &[kept_id]).await;
    let ttl = Duration::from_secs(2);
    let held = match ended {
        Ok(()) => store.open_session(kept_id, ttl, Duration::from_secs(10)).await.map_err(anyhow::Error::from),
        Err(e) => Err(e),
    };
    c.nodes[0].resume().unwrap();
    let held = held.unwrap();
    c.nodes[0].wait_logged("liveness session dropped", 1, Duration::from_secs(10)).await.unwrap();

    let killed = Instant::now();
    c.nodes[1].kill9().unwrap();
    let deadline = killed + Duration::from_secs(30);
    loop {
        let rows = store.holders().await.unwrap();
        if rows.len() == 8 && rows.iter().all(|l| l.live && l.holder_name.as_deref() == Some(kept.as_str())) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{kept}, kept from its own lock, did not take {dead}'s shards within 30 s of its kill: {rows:?}\n{}",
            c.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("{kept}, kept from its own lock, holds every shard {:?} after {dead}'s kill", killed.elapsed());
    assert!(!c.nodes[0].log_text().contains("liveness session back"), "the lock was not kept:\n{}", c.nodes[0].log_tail(30));
    held.close().await;
    store.close().await;
    c.teardown().await.unwrap();
}

/// Every node's liveness session ended at once (a pooler or proxy restart):
/// every watcher finds a free lock at once, nobody is marked down, nothing
/// moves.
async fn every_session_ended_moves_nothing(dialect: Dialect) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(dialect, 3, 8, 3, at_defaults).await?;
    c.wait_settled(Duration::from_secs(90)).await?;
    let store = c.store().await;
    let before = quiet_holders(&store).await?;
    let mut victims = Vec::new();
    for n in &c.nodes {
        victims.push(registration(&store, &n.name).await?.id);
    }
    end_sessions(dialect, &c.db.as_ref().unwrap().url, &victims).await?;
    wait_sessions_back(&c, &[0, 1, 2]).await?;
    assert_nothing_moved(&mut c, &store, &before).await?;
    store.close().await;
    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn every_liveness_session_ended_at_once_moves_nothing_postgres() {
    every_session_ended_moves_nothing(Dialect::Postgres).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn every_liveness_session_ended_at_once_moves_nothing_mariadb() {
    every_session_ended_moves_nothing(Dialect::MySql).await.unwrap();
}

/// A backend of the database killed with SIGKILL: PostgreSQL then restarts
/// every session (crash recovery), so every liveness lock is free at once
/// and the records name the server's previous lifetime. Nobody is marked
/// down and every shard is writable again.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_crash_restart_marks_no_live_node_down() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().unwrap();
    let pg = PrivatePostgres::start(dir.path(), None, "").unwrap();
    let db = crate::support::cluster::TestDb::create_on(Dialect::Postgres, &pg.url("127.0.0.1")).await.unwrap();
    let url = db.url.clone();
    let mut c = Cluster::on(db, 3, 8, 3, ttl_15s).await.unwrap();
    let before = c.wait_settled(Duration::from_secs(90)).await.unwrap();

    let pid: i32 = {
        use sqlx::Connection;
        let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'chitin-liveness-%' LIMIT 1")
            .fetch_one(&mut admin)
            .await
            .unwrap()
    };
    let killed = std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    assert!(killed.success(), "kill -9 {pid}");

    let map = c.shard_map();
    for (i, lease) in before.leases.iter().enumerate() {
        let api = c.nodes[i % c.nodes.len()].api.clone();
        append_until_acked(vec![api], stream_on(&map, &lease.shard, "r"), "after-crash".into(), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    }
    let store = c.store().await;
    for n in &mut c.nodes {
        assert!(n.is_running(), "{} stopped:\n{}", n.name, n.log_tail(30));
        assert_ne!(registration(&store, &n.name).await.unwrap().state, NodeState::Down, "{} marked down", n.name);
    }
    store.close().await;
    c.teardown().await.unwrap();
    drop(pg);
}

/// TTL 4 s, renew 1 s: a lock wait's bound is half a TTL, 2 s, so a round
/// that waits out one lock after another is plain to see, and a node that
/// renews in time has a margin of a second and more on a loaded machine.
fn ttl_4s(_: &str, s: &mut chitin::settings::Settings) {
    s.leases.ttl_secs = Some(4.0);
    s.leases.renew_interval_secs = Some(1.0);
}

/// How old the survivor's heartbeat in the database is, in seconds.
async fn heartbeat_age(conn: &mut sqlx::PgConnection, node: &str) -> f64 {
    sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM clock_timestamp() - last_seen)::float8 FROM chitin_nodes WHERE name = $1 AND state <> 'down'",
    )
    .bind(node)
    .fetch_one(conn)
    .await
    .unwrap()
}

/// The round's budget: a dead holder's lease rows (16) each locked by a
/// session of its own, each let go 0.8 s after the survivor's round starts
/// waiting for it, well inside the 2 s lock bound. No wait runs out its
/// bound, so only the budget (past its renew interval a round starts
/// nothing more) keeps the round from taking one row after another, 0.8 s
/// each, past the 4 s TTL of the survivor's own leases before its next
/// heartbeat. Without it (checked) the heartbeat got over 4 s old and the
/// survivor stopped serving every shard it held.
#[tokio::test(flavor = "multi_thread")]
async fn a_round_past_its_interval_starts_no_more_actions_before_the_next_heartbeat() {
    use sqlx::Connection;
    let _serial = SERIAL.lock().await;
    // Without the liveness session a dead holder's rows are not freed by a
    // peer's takeover (one statement, off the round) but taken by the
    // survivor's round, one acquisition after another.
    let mut c = Cluster::new(Dialect::Postgres, 2, 32, 2, |n, s| {
        ttl_4s(n, s);
        s.cluster.session_liveness = false;
    })
    .await
    .unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let dead = c.busiest(&status);
    let (dead_name, survivor) = (c.nodes[dead].name.clone(), c.nodes[1 - dead].name.clone());
    let url = c.db.as_ref().unwrap().url.clone();

    let mut watch = sqlx::PgConnection::connect(&url).await.unwrap();
    let shards: Vec<String> = sqlx::query_scalar("SELECT shard_id FROM chitin_shard_leases WHERE holder_name = $1")
        .bind(&dead_name)
        .fetch_all(&mut watch)
        .await
        .unwrap();
    assert!(shards.len() >= 10, "{dead_name} holds {shards:?}");
    // One session per row, by its server process id.
    let mut sessions = std::collections::HashMap::new();
    for shard in &shards {
        let mut s = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("BEGIN").execute(&mut s).await.unwrap();
        sqlx::query("SELECT 1 FROM chitin_shard_leases WHERE shard_id = $1 FOR UPDATE")
            .bind(shard)
            .execute(&mut s)
            .await
            .unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()").fetch_one(&mut s).await.unwrap();
        sessions.insert(pid, s);
    }
    c.nodes[dead].kill9().unwrap();

    let releaser = tokio::spawn({
        let url = url.clone();
        async move {
            let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
            let (mut released, until) = (0, Instant::now() + Duration::from_secs(60));
            while !sessions.is_empty() && Instant::now() < until {
                let blocking: Vec<i32> = sqlx::query_scalar(
                    "SELECT DISTINCT unnest(pg_blocking_pids(pid)) FROM pg_stat_activity \
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_all(&mut admin)
                .await
                .unwrap();
                match blocking.into_iter().find(|pid| sessions.contains_key(pid)) {
                    Some(pid) => {
                        tokio::time::sleep(Duration::from_millis(800)).await;
                        let mut s = sessions.remove(&pid).unwrap();
                        sqlx::query("ROLLBACK").execute(&mut s).await.unwrap();
                        released += 1;
                    }
                    None => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
            released
        }
    });
    let mut oldest = 0.0f64;
    while !releaser.is_finished() {
        oldest = oldest.max(heartbeat_age(&mut watch, &survivor).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let waited_for = releaser.await.unwrap();

    let ttl = 4.0;
    assert!(
        waited_for >= 10,
        "the survivor waited for only {waited_for} of {} locked rows; the test proved nothing\n{}",
        shards.len(),
        c.logs()
    );
    assert!(
        oldest < ttl,
        "the survivor's heartbeat got {oldest:.2} s old while it took {waited_for} rows 0.8 s apart (TTL {ttl} s): \
         its leases lapsed\n{}",
        c.logs()
    );
    let lapsed = c.nodes[1 - dead].log_text().matches("lease not renewed in time").count();
    assert_eq!(lapsed, 0, "the survivor stopped serving {lapsed} leases for want of a heartbeat\n{}", c.logs());
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    println!("{waited_for} rows taken 0.8 s apart: the survivor's heartbeat at most {oldest:.2} s old");
    drop(watch);
    c.teardown().await.unwrap();
}

/// A dead holder's lease rows locked by a session cut off mid-transaction
/// (held here by an open `SELECT … FOR UPDATE`): the survivor's round tries
/// to take a row and waits out its lock bound, half a TTL. Were the round to
/// go on to the next row, eight such waits would keep the next heartbeat
/// back 16 s and the survivor's own leases would lapse; the first lock wait
/// ends the round, so the survivor's heartbeat in the database never gets a
/// TTL old. Once the locks go, the dead holder's shards are taken.
#[tokio::test(flavor = "multi_thread")]
async fn a_lock_wait_ends_the_round_before_the_survivors_leases_lapse() {
    use sqlx::Connection;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 2, 16, 2, ttl_4s).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let dead = c.busiest(&status);
    let (dead_name, survivor) = (c.nodes[dead].name.clone(), c.nodes[1 - dead].name.clone());
    let url = c.db.as_ref().unwrap().url.clone();

    let mut stuck = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut stuck).await.unwrap();
    let locked: Vec<String> = sqlx::query_scalar("SELECT shard_id FROM chitin_shard_leases WHERE holder_name = $1 FOR UPDATE")
        .bind(&dead_name)
        .fetch_all(&mut stuck)
        .await
        .unwrap();
    assert!(locked.len() >= 2, "{dead_name} holds {locked:?}");
    c.nodes[dead].kill9().unwrap();

    // Watch the survivor's heartbeat through several stuck rounds.
    let mut watch = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut oldest = 0.0f64;
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until {
        oldest = oldest.max(heartbeat_age(&mut watch, &survivor).await);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stuck_rounds = c.nodes[1 - dead].log_text().matches("waited out its whole bound").count();
    sqlx::query("ROLLBACK").execute(&mut stuck).await.unwrap();

    let ttl = 4.0;
    assert!(
        oldest < ttl,
        "the survivor's heartbeat got {oldest:.2} s old behind {} locked rows (TTL {ttl} s): its leases lapsed\n{}",
        locked.len(),
        c.logs()
    );
    assert!(stuck_rounds >= 2, "no round met a locked row ({stuck_rounds}); the test proved nothing\n{}", c.logs());
    // The locks gone, the dead holder's shards are taken.
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    println!(
        "{} rows locked: the survivor's heartbeat at most {oldest:.2} s old, {stuck_rounds} rounds ended at a lock wait",
        locked.len()
    );
    drop((stuck, watch));
    c.teardown().await.unwrap();
}
