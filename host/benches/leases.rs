//! Lease benchmarks against the PostgreSQL server on 127.0.0.1:5432 and the
//! MariaDB server on 127.0.0.1:3306 (a fresh database per run, dropped at
//! the end):
//! - fenced appends per second against a bare single-statement `INSERT`
//!   into a plain table and against the same append without the lease
//!   check, and group-committed appends against the same `INSERT`: same
//!   run, same database, 1, 16 and 64 concurrent writers on one shard, on
//!   each server; on MariaDB also the transactional path (one statement a
//!   round trip) the single procedure call replaced;
//! - on PostgreSQL, the WAL bytes one fenced append writes against the
//!   bare insert and the unfenced statement;
//! - time from a holder's death (it stops renewing) until another node has
//!   taken all 16 of its shards, as a multiple of the lease TTL, at TTL 1 s
//!   and 15 s with the renew interval a third of the TTL.
//!
//! Run: `cargo bench -p chitin --profile dev --bench leases`
//! (`CHITIN_BENCH_POSTGRES_URL` and `CHITIN_BENCH_MYSQL_URL` override the servers.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::lease::{NewEntry, Store, StoreOptions};
use chitin::node::group_commit::GroupCommit;

mod common;
use common::{admin_url, drop_db_on, fresh_db_on, mysql_admin_url};

async fn store(url: &str, ttl: Duration) -> Store {
    let s = Store::connect_with(
        url,
        StoreOptions { lease_ttl: ttl, liveness_timeout: ttl, max_connections: 32, ..StoreOptions::default() },
    )
    .await
    .unwrap();
    s.migrate().await.unwrap();
    s
}

/// How one measured append is made.
#[derive(Clone, Copy, PartialEq)]
enum Path {
    /// `Store::append_fenced`: the fence, the sequence bump and the insert (one statement on PostgreSQL).
    Fenced,
    /// The same without the fence.
    Unfenced,
    /// Through the node's group commit: concurrent appends share fenced transactions.
    Group,
    /// `Store::append_batch` of one entry: the fenced transaction one
    /// statement a round trip (BEGIN, fence, lookup, bump, insert, COMMIT).
    Transaction,
    /// A bare single-statement `INSERT` into a plain table: the physical limit of this client.
    Bare,
}

/// The bare insert's connection pool, on either server.
#[derive(Clone)]
enum Bare {
    Pg(sqlx::PgPool),
    My(sqlx::MySqlPool),
}

impl Bare {
    async fn connect(url: &str) -> Bare {
        // No ping before each use (the driver's default): the baseline is
        // one round trip per insert, as the store's append is.
        let bare = if url.starts_with("postgres") {
            Bare::Pg(
                sqlx::postgres::PgPoolOptions::new().max_connections(32).test_before_acquire(false).connect(url).await.unwrap(),
            )
        } else {
            Bare::My(
                sqlx::mysql::MySqlPoolOptions::new().max_connections(32).test_before_acquire(false).connect(url).await.unwrap(),
            )
        };
        let table = match &bare {
            Bare::Pg(_) => "CREATE TABLE bench_bare (id bigserial PRIMARY KEY, stream text NOT NULL, payload bytea NOT NULL)",
            Bare::My(_) => {
                "CREATE TABLE bench_bare (id BIGINT AUTO_INCREMENT PRIMARY KEY, stream VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL) ENGINE = InnoDB"
            }
        };
        bare.run(table, None).await;
        bare
    }

    async fn insert(&self, stream: &str) {
        self.run("INSERT INTO bench_bare (stream, payload) VALUES (?, ?)", Some(stream)).await
    }

    async fn run(&self, sql: &str, stream: Option<&str>) {
        match self {
            Bare::Pg(pool) => {
                let sql = sql.replacen('?', "$1", 1).replacen('?', "$2", 1);
                let q = sqlx::query(sqlx::AssertSqlSafe(sql));
                let q = match stream {
                    Some(s) => q.bind(s).bind(&b"payload"[..]),
                    None => q,
                };
                q.execute(pool).await.unwrap();
            }
            Bare::My(pool) => {
                let q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
                let q = match stream {
                    Some(s) => q.bind(s).bind(&b"payload"[..]),
                    None => q,
                };
                q.execute(pool).await.unwrap();
            }
        }
    }

    async fn close(&self) {
        match self {
            Bare::Pg(pool) => pool.close().await,
            Bare::My(pool) => pool.close().await,
        }
    }
}

/// Commits per second of `writers` tasks doing `per_writer` appends each.
async fn rate(
    store: &Store,
    bare: &Bare,
    writers: usize,
    per_writer: usize,
    path: Path,
    token: &chitin::lease::LeaseToken,
    tag: &str,
) -> f64 {
    let group = Arc::new(GroupCommit::default());
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, bare, token, tag, group) = (store.clone(), bare.clone(), token.clone(), tag.to_string(), group.clone());
            tokio::spawn(async move {
                for i in 0..per_writer {
                    let stream = format!("{tag}-{w}");
                    let id = format!("{tag}-{w}-{i}");
                    match path {
                        Path::Fenced => drop(store.append_fenced(&token, &stream, &id, b"payload").await.unwrap()),
                        Path::Unfenced => drop(store.append_unfenced(&token, &stream, &id, b"payload").await.unwrap()),
                        Path::Group => {
                            let entry = NewEntry { stream, request_id: id, payload: b"payload".to_vec() };
                            group.append(&store, &token, entry).await.unwrap();
                        }
                        Path::Transaction => {
                            let entry = NewEntry { stream, request_id: id, payload: b"payload".to_vec() };
                            drop(store.append_batch(&token, &[entry]).await.unwrap());
                        }
                        Path::Bare => bare.insert(&stream).await,
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (writers * per_writer) as f64 / started.elapsed().as_secs_f64()
}

async fn takeover(url: &str, ttl: Duration) -> Duration {
    let renew = ttl / 3;
    let store = store(url, ttl).await;
    let dead = store.register_node(&format!("dead-{}", ttl.as_secs()), "127.0.0.1:1").await.unwrap();
    let heir = store.register_node(&format!("heir-{}", ttl.as_secs()), "127.0.0.1:2").await.unwrap();
    let shards: Vec<String> = (0..16).map(|i| format!("t{}-{i}", ttl.as_secs())).collect();
    for s in &shards {
        store.try_acquire(s, dead, None).await.unwrap().unwrap();
    }
    // The holder dies right after acquiring: its leases run their full TTL.
    let died = Instant::now();
    let mut left: Vec<String> = shards.clone();
    while !left.is_empty() {
        // The heir's lease round: every renew interval.
        tokio::time::sleep(renew).await;
        let mut still = Vec::new();
        for s in left {
            if store.try_acquire(&s, heir, None).await.unwrap().is_none() {
                still.push(s);
            }
        }
        left = still;
    }
    store.close().await;
    died.elapsed()
}

/// The append rows on the server of `admin` (a fresh database).
async fn appends(server: &str, admin: &str) {
    let (name, url) = fresh_db_on(admin).await;
    let s = store(&url, Duration::from_secs(600)).await;
    s.set_leases_on_liveness(true);
    let node = s.register_node("bench", "127.0.0.1:1").await.unwrap();
    s.heartbeat(node, 1).await.unwrap();
    let lease = s.try_acquire("bench-shard", node, None).await.unwrap().unwrap();
    let token = lease.token();
    let bare = Bare::connect(&url).await;
    let mut paths = vec![Path::Bare, Path::Unfenced, Path::Fenced, Path::Group];
    if matches!(bare, Bare::My(_)) {
        paths.push(Path::Transaction);
    }
    for writers in [1usize, 16, 64] {
        let per = (2000 / writers).max(50);
        for &path in &paths {
            rate(&s, &bare, writers, 20, path, &token, &format!("warm{writers}")).await;
        }
        // Interleaved rounds, so that drift falls on every path alike.
        let mut sums = vec![0.0f64; paths.len()];
        for round in 0..3 {
            for (k, &path) in paths.iter().enumerate() {
                sums[k] += rate(&s, &bare, writers, per, path, &token, &format!("r{round}-{k}-{writers}")).await;
            }
        }
        let avg: Vec<f64> = sums.iter().map(|x| x / 3.0).collect();
        let (bare_rate, unfenced, fenced, group) = (avg[0], avg[1], avg[2], avg[3]);
        let row = |what: &str, figure: f64, baseline: &str, base: f64| {
            println!(
                "| {what}, {writers} writer(s) on one shard, {server} | {figure:.0} | {baseline} | {base:.0} | {:.2}x |",
                figure / base
            );
        };
        row("fenced appends/s", fenced, "bare single-statement INSERT", bare_rate);
        row("fenced appends/s", fenced, "the same statement without the fence", unfenced);
        row("group-committed appends/s", group, "bare single-statement INSERT", bare_rate);
        if let Some(&transaction) = avg.get(4) {
            row("fenced appends/s", fenced, "the fenced transaction, a statement a round trip", transaction);
        }
    }
    if let Bare::Pg(pool) = &bare {
        wal_rows(server, pool, &s, &bare, &token).await;
    }
    bare.close().await;
    s.close().await;
    drop_db_on(admin, &name).await;
}

/// Appends per WAL measurement: the bytes are the same every time, so a
/// thousand is plenty.
const WAL_APPENDS: usize = 1_000;

/// What one append writes to PostgreSQL's WAL, one writer, against the bare
/// insert and the unfenced statement: `pg_current_wal_lsn()` around
/// [`WAL_APPENDS`] appends of each path. Unlike appends/s it does not move
/// with a noisy machine; it does count whatever else the server writes
/// meanwhile, so run it on a quiet server.
async fn wal_rows(server: &str, pool: &sqlx::PgPool, s: &Store, bare: &Bare, token: &chitin::lease::LeaseToken) {
    let mut per_append = Vec::new();
    for (k, path) in [Path::Bare, Path::Unfenced, Path::Fenced].into_iter().enumerate() {
        let from: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text").fetch_one(pool).await.unwrap();
        rate(s, bare, 1, WAL_APPENDS, path, token, &format!("wal-{k}")).await;
        let bytes: f64 = sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
            .bind(from)
            .fetch_one(pool)
            .await
            .unwrap();
        per_append.push(bytes / WAL_APPENDS as f64);
    }
    let [bare_bytes, unfenced, fenced] = per_append[..] else { unreachable!("three paths") };
    let row = |baseline: &str, base: f64| {
        println!(
            "| WAL bytes per fenced append, 1 writer, {server} | {fenced:.0} | {baseline} | {base:.0} | {:.2}x |",
            fenced / base
        );
    };
    row("bare single-statement INSERT", bare_bytes);
    row("the same statement without the fence", unfenced);
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        println!("| measurement | figure | baseline | baseline figure | ratio |");
        println!("|---|---:|---|---:|---:|");
        appends("PostgreSQL", &admin_url()).await;
        appends("MariaDB", &mysql_admin_url()).await;
        let (name, url) = fresh_db_on(&admin_url()).await;
        for ttl in [Duration::from_secs(1), Duration::from_secs(15)] {
            let took = takeover(&url, ttl).await;
            println!(
                "| takeover of 16 shards after the holder dies, TTL {}s, renew TTL/3 | {:.2} s | lease TTL | {} s | {:.2}x |",
                ttl.as_secs(),
                took.as_secs_f64(),
                ttl.as_secs(),
                took.as_secs_f64() / ttl.as_secs_f64()
            );
        }
        drop_db_on(&admin_url(), &name).await;
    });
}
