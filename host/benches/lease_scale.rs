//! What lease upkeep costs the shared database as the cluster grows: 100
//! simulated nodes holding 1,000, 10,000 and 100,000 shards between them,
//! on PostgreSQL (a private server of its own, so that its CPU is ours
//! alone) and on the local MariaDB (whose CPU is the whole server's: run
//! it on a quiet machine).
//!
//! One round of upkeep, two ways, in the same run on the same rows:
//! - per-lease renewal (0.1, and 0.2 before finalize): every node renews
//!   each of its leases, one transaction per lease (`Store::renew`);
//! - leases on liveness (gate `node-leases`): every node heartbeats once
//!   (`Store::heartbeat`), which renews all of its leases.
//!
//! For each: statements the database ran (its own counters), rows it
//! updated, the round's wall time, and the database's CPU time for the
//! round — also as CPU per second at the default 5 s renew interval. Last,
//! what a node's round reads to plan: once the whole lease table
//! (`Store::holders`), now its own rows and those it could act on
//! (`Store::round_leases`).
//!
//! `cargo bench -p chitin --profile dev --bench lease_scale`

use std::time::{Duration, Instant};

use chitin::lease::{Lease, Store, StoreOptions};
use chitin::testkit::servers::PrivatePostgres;
use sqlx::{Connection, Row};
use uuid::Uuid;

const NODES: usize = 100;
const SIZES: [usize; 3] = [1_000, 10_000, 100_000];
/// Concurrent renewals in the per-lease round (the nodes do it side by side).
const WORKERS: usize = 16;
const RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// Longer than PostgreSQL's statistics flush interval (1 s).
const FLUSH: Duration = Duration::from_millis(1_500);

/// CPU seconds the database server has used so far.
fn server_cpu(pids: &[u32]) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    let mut total = 0.0;
    for pid in all_with_children(pids) {
        if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // Fields after the command's closing parenthesis: utime, stime,
            // and the reaped children's cutime, cstime are the 12th to 15th
            // (a PostgreSQL backend's time moves to the postmaster's
            // cutime when it exits).
            let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
            let f: Vec<f64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
            let reaped = if pids.contains(&pid) { f[13] + f[14] } else { 0.0 };
            total += (f[11] + f[12] + reaped) / tick;
        }
    }
    total
}

/// `pids` and every process whose parent is one of them.
fn all_with_children(pids: &[u32]) -> Vec<u32> {
    let mut all = pids.to_vec();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        let after = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if let Some(ppid) = after.split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok())
            && pids.contains(&ppid)
        {
            all.push(pid);
        }
    }
    all
}

/// The database's own count of statements and updated rows so far.
#[derive(Clone, Copy, Default)]
struct Counters {
    statements: f64,
    updated: f64,
}

impl std::ops::Sub for Counters {
    type Output = Counters;
    fn sub(self, o: Counters) -> Counters {
        Counters { statements: self.statements - o.statements, updated: self.updated - o.updated }
    }
}

enum Db {
    Pg { url: String, pids: Vec<u32> },
    My { url: String, pids: Vec<u32> },
}

impl Db {
    fn url(&self) -> &str {
        match self {
            Db::Pg { url, .. } | Db::My { url, .. } => url,
        }
    }

    fn name(&self) -> &str {
        match self {
            Db::Pg { .. } => "PostgreSQL",
            Db::My { .. } => "MariaDB",
        }
    }

    fn pids(&self) -> &[u32] {
        match self {
            Db::Pg { pids, .. } | Db::My { pids, .. } => pids,
        }
    }

    /// PostgreSQL counts transactions per database (statements outside an
    /// explicit transaction are one each); MariaDB counts statements.
    async fn counters(&self) -> Counters {
        match self {
            Db::Pg { url, .. } => {
                let mut c = sqlx::PgConnection::connect(url).await.unwrap();
                // The statistics are flushed by the backends at the end of their transactions.
                sqlx::query("SELECT pg_stat_clear_snapshot()").execute(&mut c).await.unwrap();
                let r = sqlx::query("SELECT xact_commit + xact_rollback AS s, tup_updated AS u FROM pg_stat_database WHERE datname = current_database()")
                    .fetch_one(&mut c)
                    .await
                    .unwrap();
                Counters { statements: r.get::<i64, _>("s") as f64, updated: r.get::<i64, _>("u") as f64 }
            }
            Db::My { url, .. } => {
                let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
                let rows = sqlx::query("SHOW GLOBAL STATUS WHERE Variable_name IN ('Questions', 'Handler_update')")
                    .fetch_all(&mut c)
                    .await
                    .unwrap();
                let get = |name: &str| {
                    rows.iter()
                        .find(|r| r.get::<String, _>(0) == name)
                        .map_or(0.0, |r| r.get::<String, _>(1).parse().unwrap_or(0.0))
                };
                Counters { statements: get("Questions"), updated: get("Handler_update") }
            }
        }
    }

    /// Rows for `shards` leases held by `nodes` round-robin, with their own
    /// expiry (`liveness_epoch` NULL) or on liveness epoch 1.
    async fn seed(&self, nodes: &[(Uuid, String)], shards: usize, on_liveness: bool) {
        let batch = 1_000;
        for start in (0..shards).step_by(batch) {
            let mut values = Vec::with_capacity(batch);
            for i in start..(start + batch).min(shards) {
                let (id, name) = &nodes[i % nodes.len()];
                let epoch = if on_liveness { "1" } else { "NULL" };
                values.push(match self {
                    Db::Pg { .. } => {
                        format!("('s{i}', '{id}'::uuid, '{name}', 1, clock_timestamp() + interval '1 hour', {epoch})")
                    }
                    Db::My { .. } => format!("('s{i}', '{id}', '{name}', 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR, {epoch})"),
                });
            }
            let sql = format!(
                "INSERT INTO chitin_shard_leases (shard_id, holder, holder_name, epoch, expires_at, liveness_epoch) VALUES {}",
                values.join(", ")
            );
            match self {
                Db::Pg { url, .. } => {
                    sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                        .execute(&mut sqlx::PgConnection::connect(url).await.unwrap())
                        .await
                        .unwrap();
                }
                Db::My { url, .. } => {
                    sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                        .execute(&mut sqlx::MySqlConnection::connect(url).await.unwrap())
                        .await
                        .unwrap();
                }
            }
        }
    }

    async fn truncate(&self) {
        let sql = "DELETE FROM chitin_shard_leases";
        match self {
            Db::Pg { url, .. } => {
                sqlx::query(sql).execute(&mut sqlx::PgConnection::connect(url).await.unwrap()).await.unwrap();
            }
            Db::My { url, .. } => {
                sqlx::query(sql).execute(&mut sqlx::MySqlConnection::connect(url).await.unwrap()).await.unwrap();
            }
        }
    }
}

/// One measured round.
struct Round {
    wall: Duration,
    cpu: f64,
    counted: Counters,
}

async fn measure<F: Future<Output = ()>>(db: &Db, round: F) -> Round {
    // PostgreSQL's backends flush their statistics at most once a second.
    tokio::time::sleep(FLUSH).await;
    let (before, cpu) = (db.counters().await, server_cpu(db.pids()));
    let started = Instant::now();
    round.await;
    let wall = started.elapsed();
    tokio::time::sleep(FLUSH).await;
    let cpu = server_cpu(db.pids()) - cpu;
    let after = db.counters().await;
    Round { wall, cpu, counted: after - before }
}

fn lease(shard: usize, nodes: &[(Uuid, String)]) -> Lease {
    let (holder, name) = nodes[shard % nodes.len()].clone();
    Lease {
        shard: format!("s{shard}"),
        holder,
        holder_name: name,
        epoch: 1,
        liveness_epoch: None,
        expires_at: Default::default(),
    }
}

async fn bench(db: &Db) {
    let store = connect(db).await;
    store.migrate().await.unwrap();
    let mut nodes = Vec::new();
    for i in 0..NODES {
        let name = format!("sim-{i:03}");
        nodes.push((store.register_node(&name, "127.0.0.1:1").await.unwrap(), name));
    }
    for (id, _) in &nodes {
        store.heartbeat(*id, 1).await.unwrap();
    }
    store.close().await;
    for shards in SIZES {
        // Per-lease renewal: every lease, by WORKERS at a time.
        db.truncate().await;
        db.seed(&nodes, shards, false).await;
        // Each round on a pool of its own, closed at its end: PostgreSQL's
        // backends flush their statistics when they exit.
        let store = connect(db).await;
        let per_lease = measure(db, async {
            let tasks: Vec<_> = (0..WORKERS)
                .map(|w| {
                    let (store, nodes) = (store.clone(), nodes.clone());
                    tokio::spawn(async move {
                        for i in (w..shards).step_by(WORKERS) {
                            store.renew(&lease(i, &nodes)).await.unwrap();
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
            store.close().await;
        })
        .await;
        // Leases on liveness: one heartbeat per node.
        db.truncate().await;
        db.seed(&nodes, shards, true).await;
        let store = connect(db).await;
        let on_liveness = measure(db, async {
            for (id, _) in &nodes {
                store.heartbeat(*id, 1).await.unwrap();
            }
            store.close().await;
        })
        .await;
        let store = connect(db).await;
        let started = Instant::now();
        let rows = store.holders().await.unwrap();
        let read = started.elapsed();
        assert_eq!(rows.len(), shards);
        assert!(rows.iter().all(|r| r.live), "every lease on liveness is live after the heartbeats");
        for (how, r) in [("per-lease renewal", &per_lease), ("heartbeats (leases on liveness)", &on_liveness)] {
            println!(
                "| {} | {shards} | {how} | {:.0} | {:.0} | {:.1} ms | {:.2} s | {:.3} |",
                db.name(),
                r.counted.statements,
                r.counted.updated,
                r.wall.as_secs_f64() * 1e3,
                r.cpu,
                r.cpu / RENEW_INTERVAL.as_secs_f64()
            );
        }
        println!(
            "| {} | {shards} | ratio heartbeats / per-lease | {:.4}× | {:.4}× | {:.4}× | {:.4}× | |",
            db.name(),
            on_liveness.counted.statements / per_lease.counted.statements,
            on_liveness.counted.updated / per_lease.counted.updated.max(1.0),
            on_liveness.wall.as_secs_f64() / per_lease.wall.as_secs_f64(),
            on_liveness.cpu / per_lease.cpu.max(0.01)
        );
        println!(
            "| {} | {shards} | a round's read of the whole lease table (`holders`, before) | 1 | 0 | {:.1} ms | | |",
            db.name(),
            read.as_secs_f64() * 1e3
        );
        store.close().await;
        // What a round reads now (`round_leases`): the node's own rows, and
        // the rows it could act on — none when steady, a dead peer's
        // shards when it is their next node.
        let me = nodes[0].0;
        let dead_peers: Vec<String> = (1..shards).step_by(NODES).map(|i| format!("s{i}")).collect();
        for (how, to_read) in [("steady (its own rows)", &[][..]), ("taking over a dead peer's shards", &dead_peers[..])] {
            let store = connect(db).await;
            let mut rows = 0;
            let r = measure(db, async {
                rows = store.round_leases(me, to_read).await.unwrap().len();
                store.close().await;
            })
            .await;
            assert_eq!(rows, shards / NODES + to_read.len(), "a round reads its own rows and those it named");
            println!(
                "| {} | {shards} | a round's read, {how}: {rows} rows (`round_leases`) | {:.0} | 0 | {:.1} ms | {:.3} s | |",
                db.name(),
                r.counted.statements,
                r.wall.as_secs_f64() * 1e3,
                r.cpu
            );
        }
    }
}

async fn connect(db: &Db) -> Store {
    Store::connect_with(db.url(), StoreOptions { max_connections: WORKERS as u32 + 2, ..StoreOptions::default() }).await.unwrap()
}

fn mariadb_pids() -> Vec<u32> {
    let out = std::process::Command::new("pidof")
        .args(["mariadbd", "mysqld"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
        .unwrap_or_default();
    out.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

async fn run() {
    println!(
        "| database | shards | upkeep of one round | statements | rows updated | wall time | database CPU | CPU s per s at a 5 s renew interval |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|");
    let dir = tempfile::tempdir().unwrap();
    let pg = PrivatePostgres::start(dir.path(), None, "").unwrap();
    let postmaster: u32 =
        std::fs::read_to_string(pg.data_dir().join("postmaster.pid")).unwrap().lines().next().unwrap().trim().parse().unwrap();
    let admin = pg.url("127.0.0.1");
    chitin::testkit::create_database(&admin, "scale").await.unwrap();
    bench(&Db::Pg { url: chitin::testkit::with_database(&admin, "scale"), pids: vec![postmaster] }).await;
    drop(pg);

    let admin = std::env::var("CHITIN_BENCH_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
    let name = format!("chitin_scale_{}", Uuid::new_v4().simple());
    chitin::testkit::create_database(&admin, &name).await.unwrap();
    let url = chitin::testkit::with_database(&admin, &name);
    bench(&Db::My { url, pids: mariadb_pids() }).await;
    chitin::testkit::drop_database(&admin, &name).await.unwrap();
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
