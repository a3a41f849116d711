//! Node benchmarks, each against a baseline measured (or computed) in the
//! same run:
//! - drain of 1,000 shards: three in-process nodes (the library's `Node`)
//!   on a fresh PostgreSQL database at 127.0.0.1:5432; node-a holds all
//!   1,000 shards and drains to the other two through the `drain` policy.
//!   Rounds against the fewest the handoff cap allows (⌈1000 / cap⌉); wall
//!   time against the same number of bare lease handovers and of bare
//!   releases on the same store, and against that many rounds paced at the
//!   round interval (computed);
//! - idle RSS of a standalone `chitin node` process (embedded defaults, a
//!   data dir of its own) after ~10 s idle, against an idle `redis-server`
//!   started on a free port in the same run.
//!
//! Run: `cargo bench -p chitin --profile dev --bench node`
//! (`CHITIN_BENCH_POSTGRES_URL` overrides the server).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chitin::lease::{Store, StoreOptions};
use chitin::node::Node;
use chitin::node::stored::Provisioned;
use chitin::settings::Settings;
use chitin::topology::{self, Application, ClusterConfig, Replica, Shard, ShardState};

mod common;
use common::{drop_db, fresh_db};

const SHARDS: u32 = 1000;
const IDLE: Duration = Duration::from_secs(10);

fn free_ports(n: usize) -> Vec<u16> {
    chitin::testkit::free_ports(n).unwrap()
}

/// `SHARDS` shards of one application over the whole keyspace, each with a
/// replica on every node.
fn config(nodes: &[&str]) -> ClusterConfig {
    let step = (1u64 << 32) / u64::from(SHARDS);
    let shards = (0..u64::from(SHARDS))
        .map(|i| {
            let lower = (i * step) as u32;
            let upper = if i + 1 == u64::from(SHARDS) { u32::MAX } else { ((i + 1) * step - 1) as u32 };
            let id = topology::ops::shard_id("journal", lower, upper);
            Shard {
                replicas: nodes
                    .iter()
                    .enumerate()
                    .map(|(k, n)| Replica { id: format!("{id}_{k:08x}"), node_id: n.to_string(), metadata: Vec::new() })
                    .collect(),
                id,
                lower,
                upper,
                state: ShardState::Active,
                parent_id: None,
                metadata: Vec::new(),
            }
        })
        .collect();
    let config = ClusterConfig {
        applications: vec![Application {
            name: "journal".into(),
            implementation: "chitin-journal".into(),
            shards,
            replication_factor: nodes.len() as u32,
            metadata: Vec::new(),
        }],
        nodes: nodes
            .iter()
            .enumerate()
            .map(|(k, n)| topology::Node {
                id: n.to_string(),
                grpc_address: format!("127.0.0.1:{}", 1 + k),
                metadata: Vec::new(),
            })
            .collect(),
        version: 1,
        metadata: Vec::new(),
    };
    let violations = topology::validate(&config);
    assert!(violations.is_empty(), "the bench config is invalid: {violations:?}");
    config
}

/// Cluster-mode settings of one in-process node. The lease TTL is long
/// enough that none of node-a's 1,000 leases expires before its drain ends.
fn settings(data: &Path, name: &str, url: &str, cache: &Path) -> Settings {
    let mut s = Settings::default();
    s.node.data_dir = data.to_path_buf();
    s.cluster.enabled = true;
    s.cluster.instance_id = Some(name.to_string());
    s.cluster.redis_url = Some("redis://127.0.0.1:6379".into());
    s.cluster.namespace = "chitin-bench".into();
    s.database.url = Some(url.to_string());
    s.leases.ttl_secs = Some(120.0);
    // The database-wide budget paces a drain at the cap per renew interval:
    // 1,000 shards at 100 per second take about ten seconds.
    s.leases.renew_interval_secs = Some(1.0);
    s.leases.max_handoffs_per_round = 100;
    s.policies.cache_dir = Some(cache.to_path_buf());
    s
}

struct DrainFigures {
    rounds: u32,
    cap: u32,
    round_interval: Duration,
    drain: Duration,
    handovers: Duration,
    releases: Duration,
}

async fn drain_bench() -> DrainFigures {
    let (db, url) = fresh_db().await;
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("policy-cache");
    let names = ["node-a", "node-b", "node-c"];
    let config = config(&names);
    let start = |name: &str| {
        let s = settings(&dir.path().join(name), name, &url, &cache);
        let config = config.clone();
        async move { Node::start(s, Some(Provisioned { config, node_id: None })).await.unwrap() }
    };
    // node-a alone takes every shard in its first round (acquisitions are not capped).
    let a = start("node-a").await;
    a.round().await.unwrap();
    assert_eq!(a.leases.held_ids().len(), SHARDS as usize, "node-a did not take every shard");
    let b = start("node-b").await;
    let c = start("node-c").await;
    b.round().await.unwrap();
    c.round().await.unwrap();
    assert!(b.leases.held_ids().is_empty() && c.leases.held_ids().is_empty());

    let cap = a.settings.leases.max_handoffs_per_round;
    let round_interval = a.settings.renew_interval();
    let started = Instant::now();
    let report = a.drain(false).await.unwrap();
    let drain = started.elapsed();
    assert_eq!(report.handed_over, SHARDS, "{report:?}");
    assert!(report.kept.is_empty(), "{report:?}");
    // The database checked directly, as a user would.
    let store = Store::connect_with(
        &url,
        StoreOptions { lease_ttl: Duration::from_secs(120), max_handoffs_per_round: u32::MAX, ..StoreOptions::default() },
    )
    .await
    .unwrap();
    let rows = store.holders().await.unwrap();
    let on_a = rows.iter().filter(|r| r.holder == Some(a.uuid)).count();
    let on_b = rows.iter().filter(|r| r.holder == Some(b.uuid)).count();
    let on_c = rows.iter().filter(|r| r.holder == Some(c.uuid)).count();
    assert_eq!((on_a, on_b + on_c), (0, SHARDS as usize), "holders after the drain");
    eprintln!("drain: {} rounds, {drain:?}; node-b took {on_b}, node-c {on_c}", report.rounds);

    // Baselines on the same database: the same number of bare handovers,
    // then of bare releases, one after another.
    let x = store.register_node("base-x", "127.0.0.1:9").await.unwrap();
    let y = store.register_node("base-y", "127.0.0.1:10").await.unwrap();
    let mut leases = Vec::new();
    for i in 0..SHARDS {
        leases.push(store.try_acquire(&format!("base-{i}"), x, None).await.unwrap().unwrap());
    }
    let started = Instant::now();
    let mut theirs = Vec::new();
    for l in &leases {
        theirs.push(store.handover(l, y).await.unwrap());
    }
    let handovers = started.elapsed();
    let started = Instant::now();
    for l in &theirs {
        store.release(l).await.unwrap();
    }
    let releases = started.elapsed();
    store.close().await;
    for n in [&a, &b, &c] {
        n.close_store().await;
    }
    drop_db(&db).await;
    DrainFigures { rounds: report.rounds, cap, round_interval, drain, handovers, releases }
}

/// VmRSS of `pid` in KiB.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).expect("VmRSS in /proc/<pid>/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Sends `request` and returns what came back before the peer closed or
/// `limit` bytes arrived.
fn exchange(addr: &str, request: &[u8], limit: usize) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.write_all(request)?;
    let mut buf = vec![0u8; limit];
    let mut got = 0;
    while got < limit {
        match s.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if got > 0 && e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(String::from_utf8_lossy(&buf[..got]).into_owned())
}

fn wait_until(what: &str, child: &mut Child, within: Duration, ready: impl Fn() -> bool) {
    let deadline = Instant::now() + within;
    while !ready() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("{what} exited before it was ready: {status}");
        }
        assert!(Instant::now() < deadline, "{what} not ready within {within:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Kills and reaps a child this bench started.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct RssFigures {
    node_kib: u64,
    redis_kib: u64,
}

fn rss_bench() -> RssFigures {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(3);
    let (api, metrics, redis_port) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]), ports[2]);
    let log = std::fs::File::create(dir.path().join("node.log")).unwrap();
    // A standalone node on the embedded defaults, apart from its data dir
    // and loopback ports.
    let node = Command::new(env!("CARGO_BIN_EXE_chitin"))
        .arg("node")
        .current_dir(dir.path())
        .env("CHITIN__NODE__DATA_DIR", dir.path().join("data"))
        .env("CHITIN__API__LISTEN", &api)
        .env("CHITIN__METRICS__LISTEN", &metrics)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn chitin node");
    let mut node = Reaped(node);
    let redis = Command::new("redis-server")
        .args(["--port", &redis_port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn redis-server");
    let mut redis = Reaped(redis);
    let redis_addr = format!("127.0.0.1:{redis_port}");
    wait_until("redis-server", &mut redis.0, Duration::from_secs(30), || {
        exchange(&redis_addr, b"PING\r\n", 7).is_ok_and(|r| r.starts_with("+PONG"))
    });
    let readyz = format!("GET /readyz HTTP/1.0\r\nHost: {metrics}\r\n\r\n");
    wait_until("chitin node", &mut node.0, Duration::from_secs(120), || {
        exchange(&metrics, readyz.as_bytes(), 4096).is_ok_and(|r| r.starts_with("HTTP/1.1 200") || r.starts_with("HTTP/1.0 200"))
    });
    // Both idle side by side.
    std::thread::sleep(IDLE);
    let figures = RssFigures { node_kib: vm_rss_kib(node.0.id()), redis_kib: vm_rss_kib(redis.0.id()) };
    assert!(node.0.try_wait().unwrap().is_none() && redis.0.try_wait().unwrap().is_none(), "a process exited while idle");
    figures
}

fn main() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let d = rt.block_on(drain_bench());
    let r = rss_bench();

    let min_rounds = SHARDS.div_ceil(d.cap);
    // The first window's handoffs go at once; each later one waits a round.
    let paced = d.round_interval * (min_rounds - 1);
    let secs = |t: Duration| t.as_secs_f64();
    println!("| measurement | figure | baseline | baseline figure | ratio |");
    println!("|---|---:|---|---:|---:|");
    println!(
        "| drain of {SHARDS} shards to 2 nodes: rounds | {} | fewest the cap of {} handoffs/round allows | {min_rounds} | {:.2}x |",
        d.rounds,
        d.cap,
        f64::from(d.rounds) / f64::from(min_rounds)
    );
    println!(
        "| drain of {SHARDS} shards to 2 nodes: wall time | {:.2} s | {SHARDS} bare lease handovers, same store | {:.2} s | {:.2}x |",
        secs(d.drain),
        secs(d.handovers),
        secs(d.drain) / secs(d.handovers)
    );
    println!(
        "| drain of {SHARDS} shards to 2 nodes: wall time | {:.2} s | {SHARDS} bare lease releases, same store | {:.2} s | {:.2}x |",
        secs(d.drain),
        secs(d.releases),
        secs(d.drain) / secs(d.releases)
    );
    println!(
        "| drain of {SHARDS} shards to 2 nodes: wall time | {:.2} s | {min_rounds} budget windows of the {} s round interval (computed) | {:.0} s | {:.2}x |",
        secs(d.drain),
        secs(d.round_interval),
        secs(paced),
        secs(d.drain) / secs(paced)
    );
    println!(
        "| idle standalone `chitin node` RSS after {} s | {:.1} MiB | idle `redis-server` RSS | {:.1} MiB | {:.2}x |",
        IDLE.as_secs(),
        r.node_kib as f64 / 1024.0,
        r.redis_kib as f64 / 1024.0,
        r.node_kib as f64 / r.redis_kib as f64
    );
}
