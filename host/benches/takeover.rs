//! Takeover after `kill -9`, through real `chitin node` processes at the
//! default lease timing (TTL 15 s, renew 5 s; three nodes, 16 shards, a fresh
//! PostgreSQL database): from the kill to the first acknowledged append on
//! each of the dead node's shards, retried by the client through the
//! surviving nodes with the same request id. Session liveness (the default)
//! is measured over several kills against the TTL-only path
//! (`cluster.session_liveness = false`) in the same run.
//!
//! Then the floor under it: how long PostgreSQL and MariaDB take to free the
//! session lock of a client process killed with `kill -9` (`psql`,
//! `mariadb`), as a waiting session sees it.
//!
//! `cargo bench -p chitin --bench takeover` (needs the local PostgreSQL,
//! MariaDB and Redis, and their command-line clients).

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::Connection;
use support::cluster::*;

const KILLS: usize = 5;

fn timing(session: bool) -> impl Fn(&str, &mut chitin::settings::Settings) {
    move |_, s| {
        s.leases.ttl_secs = 15.0;
        s.leases.renew_interval_secs = 5.0;
        s.cluster.session_liveness = session;
    }
}

/// Kills the busiest node of a settled cluster; the time until each of its
/// shards took an append through the survivors. The node is started again.
async fn kill_once(c: &mut Cluster) -> Vec<Duration> {
    let status = c.wait_settled(Duration::from_secs(120)).await.unwrap();
    let v = c.busiest(&status);
    let victim = c.nodes[v].name.clone();
    let map = c.shard_map();
    let streams: Vec<String> =
        status.leases.iter().filter(|l| l.holder == victim).map(|l| stream_on(&map, &l.shard, "t")).collect();
    let survivors: Vec<String> = c.nodes.iter().enumerate().filter(|(i, _)| *i != v).map(|(_, n)| n.api.clone()).collect();
    let id = format!("kill-{}", uuid::Uuid::new_v4().simple());
    c.nodes[v].kill9().unwrap();
    let mut writes = tokio::task::JoinSet::new();
    for stream in streams {
        writes.spawn(append_until_acked(survivors.clone(), stream, id.clone(), Duration::from_secs(60)));
    }
    let mut took = Vec::new();
    while let Some(done) = writes.join_next().await {
        took.push(done.unwrap().unwrap());
    }
    c.nodes[v].start().unwrap();
    c.nodes[v].wait_ready(Duration::from_secs(60)).await.unwrap();
    took
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn summary(mut v: Vec<Duration>) -> (Duration, Duration, Duration, usize) {
    v.sort();
    (pct(&v, 50.0), pct(&v, 99.0), *v.last().unwrap(), v.len())
}

/// A client process holding a session lock, killed; how long until a
/// session waiting for the lock gets it.
async fn lock_drop(dialect: Dialect) -> Duration {
    let db = TestDb::create(dialect).await.unwrap();
    let (program, args, take, wait, held): (&str, Vec<String>, &str, &str, &str) = match dialect {
        Dialect::Postgres => (
            "psql",
            vec![db.url.clone(), "-q".into()],
            "SELECT pg_advisory_lock(424242);\n",
            "SELECT pg_advisory_lock(424242)",
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 424242 AND granted",
        ),
        _ => (
            "mariadb",
            vec!["-h127.0.0.1".into(), "-uroot".into(), "test".into()],
            "SELECT GET_LOCK('chitin-bench', 0);\n",
            "SELECT GET_LOCK('chitin-bench', 30)",
            "SELECT CAST(IS_USED_LOCK('chitin-bench') IS NOT NULL AS SIGNED)",
        ),
    };
    let mut holder = Command::new(program).args(&args).stdin(Stdio::piped()).stdout(Stdio::null()).spawn().unwrap();
    holder.stdin.as_mut().unwrap().write_all(take.as_bytes()).unwrap();
    // Wait until the holder has the lock, start waiting for it, then kill
    // the holder; the waiter's statement returns when the server frees it.
    macro_rules! measure {
        ($conn:ty) => {{
            let mut c = <$conn>::connect(&db.url).await.unwrap();
            while sqlx::query_scalar::<_, i64>(held).fetch_one(&mut c).await.unwrap() == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let waiter = tokio::spawn(async move {
                sqlx::query(wait).execute(&mut c).await.unwrap();
                Instant::now()
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            let killed = Instant::now();
            holder.kill().unwrap();
            waiter.await.unwrap() - killed
        }};
    }
    let took = match dialect {
        Dialect::Postgres => measure!(sqlx::PgConnection),
        _ => measure!(sqlx::MySqlConnection),
    };
    let _ = holder.wait();
    db.drop_db().await.unwrap();
    took
}

async fn run() {
    let mut with_session = Vec::new();
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, timing(true)).await.unwrap();
    for _ in 0..KILLS {
        with_session.extend(kill_once(&mut c).await);
    }
    c.teardown().await.unwrap();

    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, timing(false)).await.unwrap();
    let ttl_only = kill_once(&mut c).await;
    c.teardown().await.unwrap();

    let (s50, s99, smax, sn) = summary(with_session);
    let (t50, t99, tmax, tn) = summary(ttl_only);
    println!("takeover after kill -9, TTL 15 s, renew 5 s (kill → first acknowledged append per shard)");
    println!("  session liveness: p50 {s50:?}  p99 {s99:?}  max {smax:?}  ({sn} shards over {KILLS} kills)");
    println!("  TTL only:         p50 {t50:?}  p99 {t99:?}  max {tmax:?}  ({tn} shards, 1 kill)");
    println!("  ratio p99 session / TTL-only: {:.4}", s99.as_secs_f64() / t99.as_secs_f64());
    println!("  ratio p99 session / TTL:      {:.4}", s99.as_secs_f64() / 15.0);

    for dialect in [Dialect::Postgres, Dialect::MySql] {
        let mut drops: Vec<Duration> = Vec::new();
        for _ in 0..5 {
            drops.push(lock_drop(dialect).await);
        }
        let (p50, _, max, n) = summary(drops);
        println!("session lock freed after kill -9 of its client, {dialect:?}: median {p50:?}  max {max:?}  ({n} runs)");
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(run());
}
