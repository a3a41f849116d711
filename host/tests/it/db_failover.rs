//! The database's own failover, as a managed PostgreSQL or Patroni does it,
//! under a cluster of real nodes appending: the primary crashes, its
//! synchronous standby is promoted, and the address the nodes use moves to
//! it (a [`Switch`]: sqlx connects to one host, so the move is made in front
//! of it, as a virtual IP or a DNS name moves). Every acknowledged append is
//! on the promoted server with its sequence and payload, every entry was
//! committed under the epoch current at its commit, every shard is writable
//! again, and no node exits. The same load behind PgBouncer, with a node
//! killed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Context as _, Result, ensure};
use chitin::testkit::{PrivatePgBouncer, PrivatePostgres, Switch};

/// One acknowledged append: where, its request id (also its payload), and
/// the sequence it was acknowledged with.
struct Acked {
    stream: String,
    request_id: String,
    sequence: u64,
}

/// Appends to `streams` in turn through `apis` until `stop`, each request
/// retried with its own id through the next node until acknowledged, as a
/// client does; what was acknowledged.
async fn writer(w: usize, apis: Vec<String>, streams: Vec<String>, stop: Arc<AtomicBool>) -> Result<Vec<Acked>> {
    let mut acked = Vec::new();
    for k in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let stream = streams[k % streams.len()].clone();
        let request_id = format!("w{w}-{k}");
        let started = Instant::now();
        let mut last = String::new();
        let sequence = 'attempts: {
            for attempt in 0.. {
                ensure!(started.elapsed() < Duration::from_secs(60), "{request_id} on {stream} not acknowledged in 60 s: {last}");
                match append_via(&apis[(w + k + attempt) % apis.len()], &stream, &request_id).await {
                    Ok(r) => break 'attempts r.sequence,
                    Err(e) => last = e.to_string(),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            unreachable!("the attempts end by an acknowledgement or the deadline")
        };
        acked.push(Acked { stream, request_id, sequence });
    }
    Ok(acked)
}

/// Writers appending to every shard through every node while a fault is
/// made ([`writer`]).
struct Load {
    stop: Arc<AtomicBool>,
    writers: Vec<tokio::task::JoinHandle<Result<Vec<Acked>>>>,
}

impl Load {
    fn start(apis: &[String], streams: &[String]) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let writers = (0..4).map(|w| tokio::spawn(writer(w, apis.to_vec(), streams.to_vec(), stop.clone()))).collect();
        Load { stop, writers }
    }

    /// Stops the writers; every append they had acknowledged.
    async fn finish(self) -> Result<Vec<Acked>> {
        self.stop.store(true, Ordering::SeqCst);
        let mut acked = Vec::new();
        for w in self.writers {
            acked.extend(w.await??);
        }
        Ok(acked)
    }
}

/// How long until one append to each of `streams`, each through one node
/// of `apis`, is acknowledged (all at once).
async fn writable_again(apis: &[String], streams: &[String]) -> Result<Duration> {
    let mut probes = tokio::task::JoinSet::new();
    for (i, stream) in streams.iter().enumerate() {
        let apis = vec![apis[i % apis.len()].clone()];
        probes.spawn(append_until_acked(apis, stream.clone(), format!("probe-{i}"), Duration::from_secs(60)));
    }
    let mut slowest = Duration::ZERO;
    while let Some(took) = probes.join_next().await {
        slowest = slowest.max(took??);
    }
    Ok(slowest)
}

/// A stream on each shard of a settled cluster, and every node's API.
async fn streams_and_apis(c: &mut Cluster) -> Result<(Vec<String>, Vec<String>)> {
    let status = c.wait_settled(Duration::from_secs(60)).await?;
    let map = c.shard_map();
    let streams = status.leases.iter().map(|l| stream_on(&map, &l.shard, "f")).collect();
    Ok((streams, c.nodes.iter().map(|n| n.api.clone()).collect()))
}

/// Every acknowledged append is in the database at `url` with its sequence
/// and payload, and every entry of `streams` was committed under the epoch
/// current at its commit; the number of entries.
async fn assert_kept(c: &Cluster, url: &str, streams: &[String], acked: &[Acked]) -> Result<usize> {
    let lost = lost_appends(url, acked).await?;
    ensure!(lost.is_empty(), "{} of {} acknowledged appends lost: {:?}", lost.len(), acked.len(), &lost[..lost.len().min(5)]);
    ensure!(acked.len() >= 20, "too little load to judge: {} appends acknowledged", acked.len());
    let store = c.store().await;
    let mut entries = 0;
    for stream in streams {
        entries += assert_epochs_current(&store, stream).await?;
    }
    store.close().await;
    Ok(entries)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_promoted_synchronous_standby_keeps_every_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut primary = PrivatePostgres::start_primary(&dir.path().join("primary")).unwrap();
    let standby = PrivatePostgres::start_standby(&dir.path().join("standby"), &primary).unwrap();
    let switch = Switch::start(primary.port).await.unwrap();
    let db =
        TestDb::create_on(Dialect::Postgres, &format!("postgres://postgres@127.0.0.1:{}/postgres", switch.port)).await.unwrap();
    let database = db.url.rsplit('/').next().unwrap().to_string();
    let mut c = Cluster::on(db, 3, 8, 3, |_, _| {}).await.unwrap();
    let (streams, apis) = streams_and_apis(&mut c).await.unwrap();
    let load = Load::start(&apis, &streams);
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The failover: the primary crashes, the standby is promoted, the
    // address moves (every open connection through it reset).
    let crashed = Instant::now();
    primary.down().unwrap();
    standby.promote().unwrap();
    switch.point_at(standby.port);
    let promoted = crashed.elapsed();
    let writable = promoted + writable_again(&apis, &streams).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let acked = load.finish().await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));

    // The promoted server, read directly.
    let promoted_url = format!("postgres://postgres@127.0.0.1:{}/{database}", standby.port);
    let entries = assert_kept(&c, &promoted_url, &streams, &acked).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    for n in &mut c.nodes {
        assert!(n.is_running(), "{} exited over the failover:\n{}", n.name, n.log_tail(30));
    }
    println!(
        "failover: {} appends acknowledged, 0 lost, {entries} entries each under its current epoch; \
         promoted {promoted:?} after the crash, every shard writable {writable:?} after it",
        acked.len()
    );
    c.teardown().await.unwrap();
}

/// A cluster behind PgBouncer in session mode (each node connection one
/// server session, so session locks hold and `session_liveness` stays on).
/// PgBouncer drops the connection options in which a node asks for its lock
/// bounds, so a node first refuses to start, naming the setting and the fix;
/// with the bounds set on the database, under the same load with the busiest
/// node killed, every acknowledged append is kept, every entry under its
/// current epoch, and the killed node's shards are writable elsewhere.
///
/// Transaction mode is not run: sqlx prepares each statement and binds it
/// in a second exchange, which PgBouncer before 1.21 may hand to another
/// server connection, and the PgBouncer here is older; the start checks
/// refuse that with the fix (`checks::evaluate`, its table test).
#[tokio::test(flavor = "multi_thread")]
async fn behind_pgbouncer_in_session_mode_every_acknowledged_append_is_kept() {
    if !crate::support::tool("pgbouncer") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let pg = PrivatePostgres::start(&dir.path().join("server"), None, "max_connections = 150").unwrap();
    let bouncer = PrivatePgBouncer::start(dir.path(), pg.port, "session").unwrap();
    let mut db = TestDb::create_on(Dialect::Postgres, &pg.url("127.0.0.1")).await.unwrap();
    let direct = db.url.clone();
    db.url = direct.replace(&format!("127.0.0.1:{}/", pg.port), &format!("127.0.0.1:{}/", bouncer.port));
    let mut c = Cluster::on(db, 3, 8, 0, |_, _| {}).await.unwrap();

    // The bounds the node asked for did not arrive: it says so and stops.
    c.nodes[0].start().unwrap();
    let refused = c.nodes[0].wait_ready(Duration::from_secs(30)).await;
    assert!(refused.is_err(), "a node without its lock bounds started");
    let log = c.nodes[0].log_text();
    assert!(
        log.contains("lock_timeout is off") && log.contains("ALTER ROLE \"postgres\" SET lock_timeout = '1000ms'"),
        "the refusal does not name the setting and the fix:\n{log}"
    );
    let database = direct.rsplit('/').next().unwrap();
    for setting in ["lock_timeout", "idle_in_transaction_session_timeout"] {
        pg.psql(&format!("ALTER DATABASE {database} SET {setting} = '1000ms'")).unwrap();
    }
    // The server sessions PgBouncer keeps were opened before.
    bouncer.reconnect().unwrap();
    for n in &mut c.nodes {
        n.start().unwrap();
    }
    for n in &mut c.nodes {
        n.wait_ready(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{e}\n{}", n.log_tail(30)));
    }

    let (streams, apis) = streams_and_apis(&mut c).await.unwrap();
    let busiest = c.busiest(&c.status().await.unwrap());
    let load = Load::start(&apis, &streams);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let killed = Instant::now();
    c.nodes[busiest].kill9().unwrap();
    let others: Vec<String> = apis.iter().enumerate().filter(|(i, _)| *i != busiest).map(|(_, a)| a.clone()).collect();
    let writable = killed.elapsed() + writable_again(&others, &streams).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let acked = load.finish().await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));

    let entries = assert_kept(&c, &direct, &streams, &acked).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    println!(
        "behind PgBouncer (session mode): {} appends acknowledged, 0 lost, {entries} entries each under its current \
         epoch; every shard writable {writable:?} after the kill of {}",
        acked.len(),
        c.nodes[busiest].name
    );
    c.teardown().await.unwrap();
}

/// The acknowledged appends that the database at `url` does not hold with
/// their sequence and payload.
async fn lost_appends(url: &str, acked: &[Acked]) -> Result<Vec<String>> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await.context("connect to the promoted server")?;
    let mut lost = Vec::new();
    for a in acked {
        let row: Option<(i64, Vec<u8>)> =
            sqlx::query_as("SELECT seq, payload FROM chitin_journal WHERE stream = $1 AND request_id = $2")
                .bind(&a.stream)
                .bind(&a.request_id)
                .fetch_optional(&mut conn)
                .await?;
        if row != Some((a.sequence as i64, a.request_id.clone().into_bytes())) {
            lost.push(format!("{} {} seq {}: stored {row:?}", a.stream, a.request_id, a.sequence));
        }
    }
    Ok(lost)
}
