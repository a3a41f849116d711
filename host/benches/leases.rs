//! Lease benchmarks against the PostgreSQL server on 127.0.0.1:5432 (a fresh
//! database per run, dropped at the end):
//! - fenced journal commits per second against the same insert without the
//!   lease check, same run, same database, 1 and 16 concurrent writers;
//! - time from a holder's death (it stops renewing) until another node has
//!   taken all 16 of its shards, as a multiple of the lease TTL, at TTL 1 s
//!   and 15 s with the renew interval a third of the TTL.
//!
//! Run: `cargo bench -p chitin --profile dev --bench leases`
//! (`CHITIN_BENCH_POSTGRES_URL` overrides the server.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::lease::{Store, StoreOptions};

mod common;
use common::{drop_db, fresh_db};

async fn store(url: &str, ttl: Duration) -> Store {
    let s = Store::connect_with(url, StoreOptions { lease_ttl: ttl, liveness_timeout: ttl, max_connections: 20, ..StoreOptions::default() })
        .await
        .unwrap();
    s.migrate().await.unwrap();
    s
}

/// Commits per second of `writers` tasks doing `per_writer` appends each.
async fn rate(store: &Store, writers: usize, per_writer: usize, fenced: bool, token: &chitin::lease::LeaseToken, tag: &str) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (store, token, tag) = (store.clone(), token.clone(), tag.to_string());
            tokio::spawn(async move {
                for i in 0..per_writer {
                    let stream = format!("{tag}-{w}");
                    let id = format!("{tag}-{w}-{i}");
                    if fenced {
                        store.append_fenced(&token, &stream, &id, b"payload").await.unwrap();
                    } else {
                        store.append_unfenced(&token, &stream, &id, b"payload").await.unwrap();
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
        let node = s.register_node("bench", "127.0.0.1:1").await.unwrap();
        let lease = s.try_acquire("bench-shard", node, None).await.unwrap().unwrap();
        let token = lease.token();
        let s = Arc::new(s);
        println!("| measurement | figure | baseline | baseline figure | ratio |");
        println!("|---|---:|---|---:|---:|");
        for writers in [1usize, 16] {
            let per = if writers == 1 { 2000 } else { 300 };
            // Warm both paths, then alternate to share any drift.
            rate(&s, writers, 50, true, &token, &format!("warm-f{writers}")).await;
            rate(&s, writers, 50, false, &token, &format!("warm-u{writers}")).await;
            let unfenced = rate(&s, writers, per, false, &token, &format!("u{writers}")).await;
            let fenced = rate(&s, writers, per, true, &token, &format!("f{writers}")).await;
            println!(
                "| fenced journal commits/s, {writers} writer(s), PostgreSQL | {fenced:.0} | unfenced insert | {unfenced:.0} | {:.2}x |",
                fenced / unfenced
            );
        }
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
