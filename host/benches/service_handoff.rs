//! The application-level stall of planned handoffs: the example service
//! (`examples/kv-service`, its data in its own PostgreSQL database, every
//! write fenced) beside three real `chitin node` processes (2 s TTL, 0.5 s
//! renew interval, 16 shards), four clients writing without pause. Each
//! client routes a key from its own copy of the assignment map
//! (`Client::assignment_map`) to the instance beside the shard's holder, and
//! follows a `421` or moves on with the same request id otherwise; the
//! instances take part in each handoff (drain before `RELEASED`, fence claim
//! before `READY`).
//!
//! Phases: steady; a drain of the busiest node; a SIGTERM of one node and
//! its restart; a rolling restart of every node. Each phase's latency (of
//! the writes started in it) is printed against the steady phase's of the
//! same run, with the share of writes that were sent to the wrong instance
//! first (the routing map's miss rate).
//!
//! `cargo build -p chitin-example-kv && cargo bench -p chitin --bench
//! service_handoff` (needs the local PostgreSQL and Redis).

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/phases.rs"]
mod phases;

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chitin::chaos::service::{Answer, Service, ServiceOptions, next_instance, post};
use chitin_client::{AssignmentMap, Client, Nodes};
use support::cluster::*;

/// One write as a client saw it.
#[derive(Clone, Copy)]
struct Sample {
    started: Instant,
    took: Duration,
    ok: bool,
    /// The first instance asked was not the one serving the key.
    missed: bool,
}

/// Writes to `keys` until `stop`, routing each by `map`.
async fn client(
    instances: Arc<Vec<(String, String)>>,
    map: AssignmentMap,
    keys: Vec<String>,
    k: usize,
    stop: Arc<AtomicBool>,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = &keys[(i * 7 + k) % keys.len()];
        let path = format!("/write?key={key}&request_id=b{k}-{i}");
        let holder = map.current().route("journal", chitin_client::stream_key(key)).map(|a| a.holder_address.clone());
        let mut at = holder.and_then(|h| instances.iter().position(|(n, _)| *n == h)).unwrap_or(k % instances.len());
        let (started, mut missed) = (Instant::now(), false);
        let ok = loop {
            let answer = post(&instances[at].1, &path, Duration::from_secs(10)).await;
            if answer == Answer::Stored {
                break true;
            }
            missed = true;
            if started.elapsed() > Duration::from_secs(30) {
                break false;
            }
            let pause;
            (at, pause) = next_instance(&answer, &instances, at);
            if pause {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        samples.push(Sample { started, took: started.elapsed(), ok, missed });
    }
    samples
}

/// Latency figures of the writes started within `[from, to)`.
struct Figures {
    count: usize,
    failed: usize,
    missed: usize,
    p50: Duration,
    p99: Duration,
    max: Duration,
}

fn figures(samples: &[Sample], from: Instant, to: Instant) -> Figures {
    let window: Vec<&Sample> = samples.iter().filter(|s| s.started >= from && s.started < to).collect();
    let mut took: Vec<Duration> = window.iter().filter(|s| s.ok).map(|s| s.took).collect();
    took.sort();
    let at = |q: f64| took.get(((took.len() as f64 * q).ceil() as usize).saturating_sub(1)).copied().unwrap_or_default();
    Figures {
        count: window.len(),
        failed: window.iter().filter(|s| !s.ok).count(),
        missed: window.iter().filter(|s| s.missed).count(),
        p50: at(0.5),
        p99: at(0.99),
        max: took.last().copied().unwrap_or_default(),
    }
}

fn example_service() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_BIN_EXE_chitin")).with_file_name("chitin-example-kv");
    assert!(path.exists(), "{} is missing: run `cargo build -p chitin-example-kv` first", path.display());
    path
}

async fn run() {
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();
    let opts = ServiceOptions { program: example_service(), args: Vec::new(), table: "kv_writes".into(), writers: 4, keys: 256 };
    let run_id = uuid::Uuid::new_v4().simple().to_string();
    let service = Service::start(&opts, &apis, &common::admin_url(), c.dir.path(), &run_id[..12]).await.unwrap();
    let instances = service.instances();
    let keys: Vec<String> = (0..opts.keys).map(|k| format!("key-{k}")).collect();
    let map = Client::new(Nodes::new(apis.clone()).unwrap()).assignment_map();
    assert!(map.ready(Duration::from_secs(30)).await, "no assignment map");
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> =
        (0..opts.writers).map(|k| tokio::spawn(client(instances.clone(), map.clone(), keys.clone(), k, stop.clone()))).collect();

    let mut phases: Vec<phases::Phase> = Vec::new();
    tokio::time::sleep(Duration::from_secs(2)).await; // every instance serving, connections warm
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    phases.push(("steady", t, Instant::now()));

    let (handoffs, _) = phases::planned_handoffs(&mut c, &status).await;
    phases.extend(handoffs);
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for k in clients {
        samples.extend(k.await.unwrap());
    }
    let (rows, db) = service.finish(&opts.table).await.unwrap();
    db.drop_db().await.unwrap();
    c.teardown().await.unwrap();

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let steady = figures(&samples, phases[0].1, phases[0].2);
    println!("{} writes stored by the service", rows.len());
    println!("| phase | writes | failed | sent to the wrong instance first | p50 | p99 | max | p99 − steady p99 | max |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, from, to) in &phases {
        let f = figures(&samples, *from, *to);
        println!(
            "| {name} | {} | {} | {} ({:.2} %) | {:.1} ms | {:.1} ms | {:.1} ms | {:+.1} ms | {:.1} ms |",
            f.count,
            f.failed,
            f.missed,
            100.0 * f.missed as f64 / f.count.max(1) as f64,
            ms(f.p50),
            ms(f.p99),
            ms(f.max),
            ms(f.p99) - ms(steady.p99),
            ms(f.max)
        );
    }
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
