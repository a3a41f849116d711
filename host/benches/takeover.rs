//! Takeover through real `chitin node` processes (three nodes, 16 shards, a
//! fresh PostgreSQL database): from a fault of the busiest node to the first
//! acknowledged append on each of its shards, retried by the client through
//! the other nodes with the same request id.
//!
//! - `kill -9` at the default timing (TTL 2 s, renew 0.5 s) and at the
//!   previous one (15 s, 5 s), with session liveness (the default) over
//!   several kills, against the TTL-only path
//!   (`cluster.session_liveness = false`);
//! - `SIGSTOP` and a network cut (the node's network namespace's link down)
//!   of a process that keeps its session, so only its leases' expiry frees
//!   its shards, at the default timing over several stops, against the
//!   previous timing. The cut needs root and `ip netns` (its nodes run on a
//!   private bridge with a private PostgreSQL and Redis).
//!
//! Then the floor under it: how long PostgreSQL and MariaDB take to free the
//! session lock of a client process killed with `kill -9` (`psql`,
//! `mariadb`), as a waiting session sees it.
//!
//! `cargo bench -p chitin --bench takeover` (needs the local PostgreSQL,
//! MariaDB and Redis, and their command-line clients).

mod figures;

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use figures::pct;
use sqlx::Connection;
use support::cluster::*;

const FAULTS: usize = 5;

/// The default timing (`None`) or the previous one, TTL 15 s and renew 5 s.
fn timing(previous: bool, session: bool) -> impl Fn(&str, &mut chitin::settings::Settings) {
    move |_, s| {
        (s.leases.ttl_secs, s.leases.renew_interval_secs) = if previous { (Some(15.0), Some(5.0)) } else { (None, None) };
        s.cluster.session_liveness = session;
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Fault {
    Kill,
    Pause,
    Cut,
}

/// Faults the busiest node of a settled cluster; the time until each of its
/// shards took an append through the others. The node is then started again
/// or resumed.
async fn fault_once(c: &mut Cluster, fault: Fault) -> Vec<Duration> {
    let status = c.wait_settled(Duration::from_secs(120)).await.unwrap();
    let v = c.busiest(&status);
    let victim = c.nodes[v].name.clone();
    let map = c.shard_map();
    let streams: Vec<String> =
        status.leases.iter().filter(|l| l.holder == victim).map(|l| stream_on(&map, &l.shard, "t")).collect();
    let survivors: Vec<String> = c.nodes.iter().enumerate().filter(|(i, _)| *i != v).map(|(_, n)| n.api.clone()).collect();
    let id = format!("fault-{}", uuid::Uuid::new_v4().simple());
    match fault {
        Fault::Kill => c.nodes[v].kill9().unwrap(),
        Fault::Pause => c.nodes[v].pause().unwrap(),
        Fault::Cut => c.cut(v).unwrap(),
    }
    let mut writes = tokio::task::JoinSet::new();
    for stream in streams {
        writes.spawn(append_until_acked(survivors.clone(), stream, id.clone(), Duration::from_secs(60)));
    }
    let mut took = Vec::new();
    while let Some(done) = writes.join_next().await {
        took.push(done.unwrap().unwrap());
    }
    match fault {
        Fault::Kill => c.nodes[v].start().unwrap(),
        Fault::Pause => c.nodes[v].resume().unwrap(),
        Fault::Cut => c.heal(v).unwrap(),
    }
    c.nodes[v].wait_ready(Duration::from_secs(60)).await.unwrap();
    took
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

/// `faults` of one kind on one cluster at one timing.
async fn measure(previous: bool, session: bool, fault: Fault, faults: usize) -> Vec<Duration> {
    let mut c = match fault {
        Fault::Cut => Cluster::on_lan(Dialect::Postgres, 3, 16, 3, timing(previous, session)).await.unwrap(),
        _ => Cluster::new(Dialect::Postgres, 3, 16, 3, timing(previous, session)).await.unwrap(),
    };
    let mut took = Vec::new();
    for _ in 0..faults {
        took.extend(fault_once(&mut c, fault).await);
    }
    c.teardown().await.unwrap();
    took
}

fn line(what: &str, took: Vec<Duration>) -> Duration {
    let (p50, p99, max, n) = summary(took);
    println!("  {what:<44} p50 {p50:>10.1?}  p99 {p99:>10.1?}  max {max:>10.1?}  ({n} shards)");
    p99
}

async fn run() {
    println!("fault of the busiest node → first acknowledged append on each of its shards elsewhere");
    let kill = line("kill -9, defaults (TTL 2 s), session", measure(false, true, Fault::Kill, FAULTS).await);
    let kill_ttl = line("kill -9, defaults, TTL only", measure(false, false, Fault::Kill, 1).await);
    let kill_prev = line("kill -9, previous (TTL 15 s), session", measure(true, true, Fault::Kill, 1).await);
    let kill_prev_ttl = line("kill -9, previous, TTL only", measure(true, false, Fault::Kill, 1).await);
    let pause = line("SIGSTOP, defaults (TTL 2 s)", measure(false, true, Fault::Pause, FAULTS).await);
    let pause_prev = line("SIGSTOP, previous (TTL 15 s)", measure(true, true, Fault::Pause, 1).await);
    let cut = line("network cut, defaults (TTL 2 s)", measure(false, true, Fault::Cut, FAULTS).await);
    let cut_prev = line("network cut, previous (TTL 15 s)", measure(true, true, Fault::Cut, 1).await);
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "  ratio p99 kill session / TTL only: defaults {:.4}, previous {:.4}",
        ratio(kill, kill_ttl),
        ratio(kill_prev, kill_prev_ttl)
    );
    println!("  ratio p99 kill defaults / previous:  {:.3}", ratio(kill, kill_prev));
    println!("  ratio p99 SIGSTOP defaults / previous: {:.3}", ratio(pause, pause_prev));
    println!("  ratio p99 network cut defaults / previous: {:.3}", ratio(cut, cut_prev));

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
