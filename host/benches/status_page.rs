//! The status page and a `/metrics` scrape at 1,000, 10,000 and 100,000
//! shards, each against the 1,000-shard figures of the same run.
//!
//! A fresh database on the local PostgreSQL holds three registered nodes
//! and a lease row for six of every seven shards (the seventh unowned),
//! shard ids as the node's own map names them. For each size:
//! - the read: what the node's cache reads at most once a second for every
//!   page and scrape (`node::observed::read`: registrations, every lease
//!   row, the clock, versions), through a real `Store`;
//! - the page: the shards matched to their rows and the HTML rendered, as
//!   `GET /` does with the read in hand (first page, and the unowned ones);
//! - the scrape: the shard families of `/metrics` (unowned and draining
//!   counts, and a per-shard append rate for the third of the shards a node
//!   holds) registered and encoded, as `GET /metrics` does.
//!
//! Median of 5 of each. `cargo bench -p chitin --profile dev --bench status_page`

mod common;

use std::time::{Duration, Instant};

use chitin::api::status_page::{self, PageQuery, PageView};
use chitin::lease::Store;
use chitin::node::load::ShardLoad;
use chitin::node::shard_map::{ShardMap, standalone_config};
use chitin::node::{metrics, observed};
use chitin::upgrade::{BINARY_VERSION, PROTOCOL, Release, store as versions};
use prometheus_client::registry::Registry;

const SIZES: [u32; 3] = [1_000, 10_000, 100_000];
const RUNS: usize = 5;

/// Median wall time of `RUNS` calls of `f`, and its last result.
fn median<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::with_capacity(RUNS);
    let mut last = None;
    for _ in 0..RUNS {
        let started = Instant::now();
        last = Some(f());
        times.push(started.elapsed());
    }
    times.sort();
    (times[RUNS / 2], last.expect("RUNS > 0"))
}

/// Lease rows for `map`'s shards, six of every seven held by `nodes` in turn.
async fn seed(store_url: &str, map: &ShardMap, nodes: &[(uuid::Uuid, &str)]) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(store_url).await.unwrap();
    sqlx::query("DELETE FROM chitin_shard_leases").execute(&mut conn).await.unwrap();
    for (c, shards) in map.shards().chunks(5_000).enumerate() {
        let start = c * 5_000;
        let values: Vec<String> = shards
            .iter()
            .enumerate()
            .filter(|(i, _)| (start + i) % 7 != 0)
            .map(|(i, s)| {
                let (id, name) = nodes[(start + i) % nodes.len()];
                format!("('{}', '{id}'::uuid, '{name}', 1, clock_timestamp() + interval '1 hour', NULL)", s.id)
            })
            .collect();
        let sql = format!(
            "INSERT INTO chitin_shard_leases (shard_id, holder, holder_name, epoch, expires_at, liveness_epoch) VALUES {}",
            values.join(", ")
        );
        sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&mut conn).await.unwrap();
    }
}

fn page(map: &ShardMap, seen: &observed::Observed, query: &PageQuery) -> String {
    let (nodes, shards) = status_page::cluster_part(map, seen);
    let view = PageView {
        node: "node-1".into(),
        state: "active".into(),
        mode: "cluster",
        version: BINARY_VERSION,
        config_version: 1,
        nodes,
        shards,
        policies: Vec::new(),
        mismatches: Vec::new(),
        upgrade: None,
        busiest: Vec::new(),
        error: None,
        generated_at: seen.cluster.now.to_string(),
    };
    status_page::render(&view, query)
}

fn scrape(map: &ShardMap, seen: &observed::Observed) -> String {
    let load = map
        .shards()
        .iter()
        .step_by(3)
        .map(|s| ShardLoad { shard: s.id.clone(), ops_per_sec: 12.5, bytes_per_sec: 800.0, ranges: Vec::new() })
        .collect();
    let mut registry = Registry::default();
    metrics::register_shards(&mut registry, map, Some(&seen.cluster), load);
    metrics::encode(&registry)
}

struct Row {
    shards: u32,
    read: Duration,
    page: Duration,
    page_bytes: usize,
    unowned_page: Duration,
    scrape: Duration,
    scrape_bytes: usize,
}

async fn run() {
    let (name, url) = common::fresh_db().await;
    let store = Store::connect(&url).await.unwrap();
    store.migrate().await.unwrap();
    versions::init_cluster_version(&store, Release::binary()).await.unwrap();
    let mut nodes = Vec::new();
    for n in ["node-1", "node-2", "node-3"] {
        let id = store.register_node(n, "127.0.0.1:7000").await.unwrap();
        versions::record_node(&store, id, BINARY_VERSION, PROTOCOL).await.unwrap();
        nodes.push((id, n));
    }
    let mut rows = Vec::new();
    for shards in SIZES {
        let map = ShardMap::from_config(&standalone_config("node-1", "127.0.0.1:7000", shards));
        seed(&url, &map, &nodes).await;
        let mut reads = Vec::new();
        for _ in 0..RUNS {
            let started = Instant::now();
            let seen = observed::read(&store).await.unwrap();
            reads.push((started.elapsed(), seen));
        }
        reads.sort_by_key(|(t, _)| *t);
        let (read, seen) = reads.swap_remove(RUNS / 2);
        assert_eq!(seen.cluster.rows.len(), shards as usize - (shards as usize).div_ceil(7), "the seeded rows");
        let (page_time, html) = median(|| page(&map, &seen, &PageQuery::default()));
        let unowned = PageQuery { state: Some("unowned".into()), ..Default::default() };
        let (unowned_page, unowned_html) = median(|| page(&map, &seen, &unowned));
        assert!(unowned_html.contains("<b class=\"bad-text\">unowned</b>"), "the filter selects the unowned shards");
        let (scrape_time, text) = median(|| scrape(&map, &seen));
        let unowned_line = format!("chitin_shards_unowned {}", (shards as usize).div_ceil(7));
        assert!(text.lines().any(|l| l == unowned_line), "{unowned_line} missing");
        rows.push(Row {
            shards,
            read,
            page: page_time,
            page_bytes: html.len(),
            unowned_page,
            scrape: scrape_time,
            scrape_bytes: text.len(),
        });
    }
    store.close().await;
    common::drop_db(&name).await;

    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let base = &rows[0];
    println!("status page and /metrics at scale (median of {RUNS}; ratio against {} shards, same run)", base.shards);
    println!(
        "{:>8} | {:>12} {:>6} | {:>12} {:>6} {:>9} | {:>12} | {:>12} {:>6} {:>10}",
        "shards", "read ms", "ratio", "page ms", "ratio", "page KiB", "unowned ms", "scrape ms", "ratio", "scrape KiB"
    );
    for r in &rows {
        println!(
            "{:>8} | {:>12.2} {:>6.1} | {:>12.2} {:>6.1} {:>9.0} | {:>12.2} | {:>12.2} {:>6.1} {:>10.0}",
            r.shards,
            ms(r.read),
            ms(r.read) / ms(base.read),
            ms(r.page),
            ms(r.page) / ms(base.page),
            r.page_bytes as f64 / 1024.0,
            ms(r.unowned_page),
            ms(r.scrape),
            ms(r.scrape) / ms(base.scrape),
            r.scrape_bytes as f64 / 1024.0,
        );
    }
    let largest = rows.last().expect("three sizes");
    println!(
        "targets at {} shards: page {:.0} ms (≤ 1,000 ms: {}), scrape {:.1} ms (≤ 100 ms: {}); the read runs at most once a second for all of them",
        largest.shards,
        ms(largest.page),
        if largest.page <= Duration::from_secs(1) { "met" } else { "MISSED" },
        ms(largest.scrape),
        if largest.scrape <= Duration::from_millis(100) { "met" } else { "MISSED" },
    );
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
