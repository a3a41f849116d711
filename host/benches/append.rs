//! Append latency against the physical limit, measured in the same run on
//! the same PostgreSQL (a fresh database):
//! - the limit: a bare single-statement `INSERT` by `pgbench` (1 client,
//!   per-transaction log), and the same `INSERT` from a Rust client (sqlx),
//!   each with its latency distribution and rate;
//! - the fenced append of the library (`Store::append_fenced`: the fence,
//!   the stream's sequence bump and the insert), and the same statement
//!   without the fence;
//! - appends through real `chitin node` processes (three nodes, 16 shards):
//!   one gRPC client on the holder, four clients, and one client whose
//!   appends every node forwards to the holder;
//! - an RPC to the holder that does no database work, to split the
//!   holder's latency into the statement, gRPC and the node's own path.
//!
//! `cargo bench -p chitin --profile dev --bench append` (needs the local
//! PostgreSQL and Redis; `pgbench` for its row, skipped with the reason
//! when it is missing).

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

mod figures;

use std::time::{Duration, Instant};

use chitin::lease::{Store, StoreOptions};
use chitin::proto::{self, journal_client::JournalClient};
use sqlx::Connection;
use support::cluster::*;

/// Appends (or inserts) per measurement.
const N: usize = 3_000;

/// Interleaved rounds of each measurement.
const ROUNDS: usize = 6;

/// Latencies and the wall time they took.
#[derive(Default)]
struct Dist {
    took: Vec<Duration>,
    wall: Duration,
    p50: Duration,
    p99: Duration,
    max: Duration,
    per_sec: f64,
}

impl Dist {
    fn of(mut took: Vec<Duration>, wall: Duration) -> Dist {
        took.sort();
        let at = |q: f64| took[((took.len() as f64 * q).ceil() as usize).saturating_sub(1)];
        let (p50, p99, max) = (at(0.5), at(0.99), *took.last().unwrap());
        let per_sec = took.len() as f64 / wall.as_secs_f64();
        Dist { took, wall, p50, p99, max, per_sec }
    }

    /// The rounds of one measurement as one distribution.
    fn merge(rounds: Vec<Dist>) -> Option<Dist> {
        if rounds.is_empty() {
            return None;
        }
        let wall = rounds.iter().map(|d| d.wall).sum();
        Some(Dist::of(rounds.into_iter().flat_map(|d| d.took).collect(), wall))
    }
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

const BARE: &str = "CREATE TABLE bench_bare (id bigserial PRIMARY KEY, stream text NOT NULL, payload bytea NOT NULL)";

/// `pgbench` inserting into `bench_bare`, one client, `N` transactions.
fn pgbench(url: &str, n: usize) -> Result<Dist, String> {
    let script = "INSERT INTO bench_bare (stream, payload) VALUES ('pgbench', '\\x78');\n";
    let took = figures::pgbench(url, script, 1, &["-t", &n.to_string()])?;
    // One client: its wall time is the sum of its transactions (the
    // process's start and connection are not pgbench's rate).
    let wall = took.iter().sum();
    Ok(Dist::of(took, wall))
}

/// The same bare `INSERT` from sqlx, one connection.
async fn bare_sqlx(url: &str, n: usize) -> Dist {
    let mut c = sqlx::PgConnection::connect(url).await.unwrap();
    let mut took = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        sqlx::query("INSERT INTO bench_bare (stream, payload) VALUES ($1, $2)")
            .bind("sqlx")
            .bind(&b"x"[..])
            .execute(&mut c)
            .await
            .unwrap();
        took.push(t.elapsed());
    }
    Dist::of(took, started.elapsed())
}

/// `Store::append_fenced` (or unfenced) on one stream, one writer.
async fn library(url: &str, fenced: bool, round: usize) -> Dist {
    let store = Store::connect_with(
        url,
        StoreOptions {
            lease_ttl: Duration::from_secs(600),
            liveness_timeout: Duration::from_secs(600),
            ..StoreOptions::default()
        },
    )
    .await
    .unwrap();
    store.set_leases_on_liveness(true);
    let me = store.register_node(&format!("bench-lib-{fenced}-{round}"), "127.0.0.1:1").await.unwrap();
    store.heartbeat(me, 1).await.unwrap();
    let token = store.try_acquire(&format!("bench-lib-{fenced}-{round}"), me, None).await.unwrap().unwrap().token();
    let stream = format!("lib-{fenced}");
    let n = N / ROUNDS;
    let mut took = Vec::with_capacity(n);
    let started = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        let id = format!("r{round}-{i}");
        if fenced {
            store.append_fenced(&token, &stream, &id, b"x").await.unwrap();
        } else {
            store.append_unfenced(&token, &stream, &id, b"x").await.unwrap();
        }
        took.push(t.elapsed());
    }
    let d = Dist::of(took, started.elapsed());
    store.close().await;
    d
}

/// `n` appends over one channel to `api`, round-robin over `streams`.
async fn through(api: String, streams: Vec<String>, tag: String, n: usize) -> Vec<Duration> {
    let mut j = JournalClient::connect(format!("http://{api}")).await.unwrap();
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let request = proto::AppendRequest {
            stream: streams[i % streams.len()].clone(),
            request_id: format!("{tag}-{i}"),
            payload: b"x".to_vec(),
            forwarded: false,
        };
        let t = Instant::now();
        j.append(request).await.unwrap();
        took.push(t.elapsed());
    }
    took
}

/// `n` calls over one channel to `api` of an RPC that does no database
/// work (`Ownership.Held`): what gRPC and the node cost without the append.
async fn no_work(api: String, n: usize) -> Dist {
    let mut o = proto::ownership_client::OwnershipClient::connect(format!("http://{api}")).await.unwrap();
    let mut took = Vec::with_capacity(n);
    let started = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        o.held(proto::HeldRequest {}).await.unwrap();
        took.push(t.elapsed());
    }
    Dist::of(took, started.elapsed())
}

async fn clients(count: usize, api: &str, streams: &[String], tag: &str, n: usize) -> Dist {
    let started = Instant::now();
    let tasks: Vec<_> =
        (0..count).map(|k| tokio::spawn(through(api.to_string(), streams.to_vec(), format!("{tag}{k}"), n / count))).collect();
    let mut took = Vec::new();
    for t in tasks {
        took.extend(t.await.unwrap());
    }
    Dist::of(took, started.elapsed())
}

async fn run() {
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let url = c.db.as_ref().unwrap().url.clone();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query(BARE).execute(&mut conn).await.unwrap();

    // The streams of the shards node `holder` holds, and a node that holds none of them.
    let holder = c.busiest(&status);
    let other = (holder + 1) % c.nodes.len();
    let map = c.shard_map();
    let streams: Vec<String> =
        status.leases.iter().filter(|l| l.holder == c.nodes[holder].name).map(|l| stream_on(&map, &l.shard, "bench")).collect();
    let (api, far) = (c.nodes[holder].api.clone(), c.nodes[other].api.clone());

    // Warm every path once, then measure them in interleaved rounds, so
    // that the load of a noisy machine falls on all of them alike.
    bare_sqlx(&url, 200).await;
    clients(1, &api, &streams, "warm", 200).await;
    clients(1, &far, &streams, "warmf", 200).await;
    let mut runs: [Vec<Dist>; 8] = Default::default();
    let mut pg_error = None;
    for round in 0..ROUNDS {
        match pgbench(&url, N / ROUNDS) {
            Ok(d) => runs[0].push(d),
            Err(why) => pg_error = Some(why),
        }
        runs[1].push(bare_sqlx(&url, N / ROUNDS).await);
        runs[2].push(library(&url, true, round).await);
        runs[3].push(library(&url, false, round).await);
        runs[4].push(clients(1, &api, &streams, &format!("one{round}-"), N / ROUNDS).await);
        runs[5].push(clients(4, &api, &streams, &format!("four{round}-"), N / ROUNDS).await);
        runs[6].push(clients(1, &far, &streams, &format!("fwd{round}-"), N / ROUNDS).await);
        runs[7].push(no_work(api.clone(), N / ROUNDS).await);
    }
    let [pg, bare, fenced, unfenced, one, four, forwarded, rpc] = runs.map(Dist::merge);
    let pg = match (pg_error, pg) {
        (Some(why), _) => Err(why),
        (None, pg) => Ok(pg.expect("pgbench rounds")),
    };
    let [bare, fenced, unfenced, one, four, forwarded, rpc] =
        [bare, fenced, unfenced, one, four, forwarded, rpc].map(|d| d.expect("rounds"));

    let limit = match &pg {
        Ok(d) => ("`pgbench` bare INSERT", d),
        Err(why) => {
            println!("pgbench row skipped: {why}");
            ("sqlx bare INSERT", &bare)
        }
    };
    println!("| path (1 client unless said) | p50 | p99 | max | per s | p50 vs {0} | p99 vs {0} | per s vs {0} |", limit.0);
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let row = |name: &str, d: &Dist| {
        println!(
            "| {name} | {} | {} | {} | {:.0} | {:.2}× | {:.2}× | {:.2}× |",
            ms(d.p50),
            ms(d.p99),
            ms(d.max),
            d.per_sec,
            d.p50.as_secs_f64() / limit.1.p50.as_secs_f64(),
            d.p99.as_secs_f64() / limit.1.p99.as_secs_f64(),
            d.per_sec / limit.1.per_sec
        )
    };
    if let Ok(d) = &pg {
        row("`pgbench` bare INSERT", d);
    }
    row("sqlx bare INSERT", &bare);
    row("library: fenced append (one statement)", &fenced);
    row("library: the same statement without the fence", &unfenced);
    row("through the holder node (gRPC)", &one);
    row("through the holder node, 4 clients", &four);
    row("forwarded by another node to the holder", &forwarded);
    row("an RPC to the holder with no database work (`Ownership.Held`)", &rpc);
    println!();
    let ms_of = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "holder p50 {:.2} ms = library fenced append {:.2} ms + no-work RPC {:.2} ms + {:.2} ms of the append's own path in the node",
        ms_of(one.p50),
        ms_of(fenced.p50),
        ms_of(rpc.p50),
        ms_of(one.p50) - ms_of(fenced.p50) - ms_of(rpc.p50)
    );
    println!("fenced / unfenced appends per second, library: {:.2}×", fenced.per_sec / unfenced.per_sec);
    println!(
        "forwarded p50 / holder p50: {:.2}×; forwarded p99 / its p50: {:.2}×",
        forwarded.p50.as_secs_f64() / one.p50.as_secs_f64(),
        forwarded.p99.as_secs_f64() / forwarded.p50.as_secs_f64()
    );
    c.teardown().await.unwrap();
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
