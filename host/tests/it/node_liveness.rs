//! Session-bound liveness through real node processes: a killed holder's
//! shards are writable elsewhere within a second at the default 15 s TTL
//! (PostgreSQL and MariaDB); a paused holder keeps its session and its
//! shards until their TTL; a database restart marks no live node down; a
//! node whose session is ended while it lives stops serving, and nothing
//! commits under its epochs after the takeover.

mod cluster_common;

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use chitin::api::proto;
use chitin::lease::{NodeState, Store};
use chitin::testkit::PrivatePostgres;
use cluster_common::*;

/// One cluster at a time: three processes each, on two cores.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The default lease timing, which the kill test runs at.
fn default_timing(_: &str, s: &mut chitin::settings::Settings) {
    s.leases.ttl_secs = 15.0;
    s.leases.renew_interval_secs = 5.0;
}

/// The live registration of `name`.
async fn registration(store: &Store, name: &str) -> Result<chitin::lease::NodeRecord> {
    let nodes = store.nodes().await?;
    nodes.into_iter().find(|n| n.name == name).ok_or_else(|| anyhow::anyhow!("no registration of {name}"))
}

async fn killed_holder_is_replaced_at_once(dialect: Dialect) -> Result<()> {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(dialect, 3, 16, 3, default_timing).await?;
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

/// A paused process keeps its socket, so its session and lock: its shards
/// go only when their leases expire, and nobody marks it down.
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holder_keeps_its_shards_until_their_ttl() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    let p = c.busiest(&status);
    let paused = c.nodes[p].name.clone();
    let shards: Vec<String> = status.leases.iter().filter(|l| l.holder == paused).map(|l| l.shard.clone()).collect();
    let store = c.store().await;

    let paused_at = store.now().await.unwrap();
    c.nodes[p].pause().unwrap();
    tokio::time::sleep(TTL * 2 + RENEW).await;
    let registration_while_paused = registration(&store, &paused).await.unwrap();
    c.nodes[p].resume().unwrap();

    assert_ne!(registration_while_paused.state, NodeState::Down, "a paused node was marked down");
    // Its last renewal was at most a renew interval (and a round) before the
    // pause; a takeover sooner than that renewal's TTL came from elsewhere.
    let earliest = paused_at + chrono::Duration::from_std(TTL - RENEW - Duration::from_millis(250)).unwrap();
    for shard in &shards {
        let history = store.history(Some(shard)).await.unwrap();
        let next = history.iter().find(|h| h.acquired_at > paused_at && h.holder_name != paused);
        let next = next.unwrap_or_else(|| panic!("{shard} of the paused {paused} never taken over: {history:?}"));
        assert!(
            next.acquired_at >= earliest,
            "{shard} taken over {:?} after the pause, before its TTL ({TTL:?})",
            (next.acquired_at - paused_at).to_std().unwrap_or_default()
        );
    }
    tokio::time::sleep(RENEW * 4).await;
    assert!(c.nodes[p].is_running(), "the resumed node stopped:\n{}", c.nodes[p].log_tail(20));
    assert_ne!(registration(&store, &paused).await.unwrap().state, NodeState::Down);
    store.close().await;
    c.teardown().await.unwrap();
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
    let db = cluster_common::TestDb::create_on(Dialect::Postgres, &pg.url("127.0.0.1")).await.unwrap();
    let mut c = Cluster::on(db, 3, 8, 3, default_timing).await.unwrap();
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

/// The liveness session of a live node is ended by the server (an operator's
/// `pg_terminate_backend`): its watcher takes the lock, marks it down and
/// frees its shards; the node stops serving and exits with the reason, and
/// no append commits under its epochs after the takeover.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_session_ends_stops_and_commits_nothing_after_the_takeover() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, default_timing).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(90)).await.unwrap();
    let v = c.busiest(&status);
    let victim = c.nodes[v].name.clone();
    let shard = status.leases.iter().find(|l| l.holder == victim).unwrap().shard.clone();
    let stream = stream_on(&c.shard_map(), &shard, "e");
    let store = c.store().await;
    let uuid = registration(&store, &victim).await.unwrap().id;

    // A client writing through the victim the whole time.
    let writer = {
        let node = c.nodes[v].api.clone();
        let stream = stream.clone();
        tokio::spawn(async move {
            let mut acked = 0;
            for i in 0..10_000 {
                let Ok(mut j) = proto::journal_client::JournalClient::connect(format!("http://{node}")).await else { break };
                let request = proto::AppendRequest { stream: stream.clone(), request_id: format!("w-{i}"), payload: vec![1], forwarded: false };
                if j.append(request).await.is_ok() {
                    acked += 1;
                }
            }
            acked
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = sqlx::PgPool::connect(&c.db.as_ref().unwrap().url).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1")
        .bind(chitin::lease::session::session_label(uuid))
        .fetch_all(&admin)
        .await
        .unwrap();
    assert_eq!(ended, vec![true], "the victim's liveness session");
    let ended_at = Instant::now();

    // Its watcher marks it down and frees its shards, which others take.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let row = store.lease(&shard).await.unwrap().unwrap();
        if row.live && row.holder != Some(uuid) {
            break;
        }
        assert!(Instant::now() < deadline, "{shard} not taken over after the session ended: {row:?}\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let taken = ended_at.elapsed();
    let down = store.nodes().await.unwrap().into_iter().find(|n| n.id == uuid).unwrap();
    assert_eq!(down.state, NodeState::Down, "{down:?}");
    // The node finds its registration down at its next heartbeat and exits.
    let deadline = Instant::now() + Duration::from_secs(15);
    while c.nodes[v].is_running() {
        assert!(Instant::now() < deadline, "{victim} still running after its registration was marked down:\n{}", c.nodes[v].log_tail(40));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(c.nodes[v].log_text().contains("registration marked down"), "{}", c.nodes[v].log_tail(20));
    let acked = writer.await.unwrap();
    assert!(acked > 0, "the writer never got an append through before the session ended");
    // Whatever the victim acknowledged or attempted: every entry committed
    // under an epoch current at its commit.
    let n = assert_epochs_current(&store, &stream).await.unwrap();
    assert!(n >= acked, "{n} entries stored, {acked} acknowledged");
    println!("taken over {taken:?} after the session ended; {acked} appends acknowledged through the victim");
    admin.close().await;
    store.close().await;
    c.teardown().await.unwrap();
}
