//! Lease benchmarks against the PostgreSQL server on 127.0.0.1:5432 (a fresh
//! database per run, dropped at the end):
//! - fenced appends per second against a bare single-statement `INSERT`
//!   into a plain table and against the same append without the lease
//!   check, and group-committed appends against the same `INSERT`: same
//!   run, same database, 1, 16 and 64 concurrent writers on one shard;
//! - time from a holder's death (it stops renewing) until another node has
//!   taken all 16 of its shards, as a multiple of the lease TTL, at TTL 1 s
//!   and 15 s with the renew interval a third of the TTL.
//!
//! Run: `cargo bench -p chitin --profile dev --bench leases`
//! (`CHITIN_BENCH_POSTGRES_URL` overrides the server.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::lease::{NewEntry, Store, StoreOptions};
use chitin::node::group_commit::GroupCommit;

mod common;
use common::{drop_db, fresh_db};

async fn store(url: &str, ttl: Duration) -> Store {
    let s = Store::connect_with(url, StoreOptions { lease_ttl: ttl, liveness_timeout: ttl, max_connections: 32, ..StoreOptions::default() })
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
    /// A bare single-statement `INSERT` into a plain table: the physical limit of this client.
    Bare,
}

/// Commits per second of `writers` tasks doing `per_writer` appends each.
async fn rate(store: &Store, pool: &sqlx::PgPool, writers: usize, per_writer: usize, path: Path, token: &chitin::lease::LeaseToken, tag: &str) -> f64 {
    let group = Arc::new(GroupCommit::default());
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, pool, token, tag, group) = (store.clone(), pool.clone(), token.clone(), tag.to_string(), group.clone());
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
                        Path::Bare => {
                            sqlx::query("INSERT INTO bench_bare (stream, payload) VALUES ($1, $2)")
                                .bind(&stream)
                                .bind(&b"payload"[..])
                                .execute(&pool)
                                .await
                                .unwrap();
                        }
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

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (name, url) = fresh_db().await;
        let s = store(&url, Duration::from_secs(600)).await;
        s.set_leases_on_liveness(true);
        let node = s.register_node("bench", "127.0.0.1:1").await.unwrap();
        s.heartbeat(node, 1).await.unwrap();
        let lease = s.try_acquire("bench-shard", node, None).await.unwrap().unwrap();
        let token = lease.token();
        let pool = sqlx::postgres::PgPoolOptions::new().max_connections(32).connect(&url).await.unwrap();
        sqlx::query("CREATE TABLE bench_bare (id bigserial PRIMARY KEY, stream text NOT NULL, payload bytea NOT NULL)")
            .execute(&pool)
            .await
            .unwrap();
        println!("| measurement | figure | baseline | baseline figure | ratio |");
        println!("|---|---:|---|---:|---:|");
        for writers in [1usize, 16, 64] {
            let per = (2000 / writers).max(50);
            for path in [Path::Bare, Path::Unfenced, Path::Fenced, Path::Group] {
                rate(&s, &pool, writers, 20, path, &token, &format!("warm{writers}")).await;
            }
            // Interleaved rounds, so that drift falls on every path alike.
            let mut sums = [0.0f64; 4];
            for round in 0..3 {
                for (k, path) in [Path::Bare, Path::Unfenced, Path::Fenced, Path::Group].into_iter().enumerate() {
                    sums[k] += rate(&s, &pool, writers, per, path, &token, &format!("r{round}-{k}-{writers}")).await;
                }
            }
            let [bare, unfenced, fenced, group] = sums.map(|x| x / 3.0);
            println!("| fenced appends/s, {writers} writer(s) on one shard | {fenced:.0} | bare single-statement INSERT | {bare:.0} | {:.2}x |", fenced / bare);
            println!("| fenced appends/s, {writers} writer(s) on one shard | {fenced:.0} | the same statement without the fence | {unfenced:.0} | {:.2}x |", fenced / unfenced);
            println!("| group-committed appends/s, {writers} writer(s) on one shard | {group:.0} | bare single-statement INSERT | {bare:.0} | {:.2}x |", group / bare);
        }
        pool.close().await;
        s.close().await;
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
        drop_db(&name).await;
    });
}
