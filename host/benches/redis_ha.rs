//! Affinity claims on Redis beyond one server, each started privately by the
//! test kit in the same run: one server, a Redis Cluster of three masters
//! (the namespace hash-tagged, so every claim goes to one master), and a
//! master behind Redis Sentinel. Each against `redis-benchmark SET NX` on
//! the server that holds the namespace (the physical limit of that server
//! from one connection), and then the Sentinel failover as a node sees it:
//! from the master's SIGKILL to the Sentinel naming the new master, and to
//! the node's first claim acknowledged by it. Prints markdown.
//!
//!     cargo bench -p chitin --profile dev --bench redis_ha
//!
//! Environment: CHITIN_BENCH_N (claims per measurement, 20000).

mod figures;

use std::process::Command;
use std::time::{Duration, Instant};

use chitin::coord::{Affinity, Keys, RedisConn, RedisSettings};
use chitin::testkit::{PrivateRedis, PrivateRedisCluster, PrivateSentinel};

use figures::thousands;

/// `redis-benchmark -p {port} SET {ns}:rb:__rand_int__ v NX` → ops/s.
fn set_nx(port: u16, ns: &str, n: usize, pipeline: usize) -> f64 {
    let args = ["-c".to_string(), "1".into(), "-n".into(), n.to_string(), "-P".into(), pipeline.to_string()];
    let command = ["SET".to_string(), format!("{ns}:rb:__rand_int__"), "v".into(), "NX".into()];
    figures::redis_benchmark("127.0.0.1", port, &args, &command)
}

/// Claims of `n` fresh targets, `pipeline` per call → claims/s.
async fn claims(a: &Affinity, label: &str, n: usize, pipeline: usize) -> f64 {
    let targets: Vec<String> = (0..n).map(|i| format!("{label}-{pipeline}-{i:08}")).collect();
    let start = Instant::now();
    for chunk in targets.chunks(pipeline) {
        if pipeline == 1 {
            a.claim(&chunk[0]).await.expect("claim");
        } else {
            let outcomes = a.claim_many(chunk).await.expect("claim_many");
            assert!(outcomes.iter().all(Result::is_ok));
        }
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// An affinity on `url` answering within `timeout` per command.
fn affinity(url: &str, ns: &str, timeout: Duration) -> Affinity {
    let mut settings = RedisSettings::new(url);
    settings.response_timeout = timeout;
    let conn = RedisConn::new(settings).expect("url");
    Affinity::new(conn, Keys::new(ns), "bench-node", Duration::from_secs(600)).unwrap()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench` passes --bench; anything else runs a quick pass.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("CHITIN_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick { 500 } else { 20_000 });
    let dir = tempfile::Builder::new().prefix("chitin-bench-redis-ha-").tempdir().unwrap();
    let sub = |name: &str| {
        let d = dir.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let single = PrivateRedis::start(&sub("single"), None).expect("redis-server");
    let cluster = PrivateRedisCluster::start(&sub("cluster"), 3, 0).expect("a Redis Cluster");
    let mut sentinel = PrivateSentinel::start(&sub("sentinel")).expect("a Sentinel");

    let ns = "{bench}";
    let master_port = cluster.master_of(ns).unwrap().port;
    let setups: [(&str, String, u16); 3] = [
        ("one server (`redis://`)", single.url("127.0.0.1"), single.port),
        ("Redis Cluster, 3 masters (`redis+cluster://`)", cluster.url(), master_port),
        ("Sentinel (`redis+sentinel://`)", sentinel.url(&[]), sentinel.master_port().unwrap()),
    ];
    println!(
        "Affinity claims per second from one node, {n} fresh targets per measurement, against `redis-benchmark SET NX` \
         (one connection) on the server holding the namespace, same run, best of 3.\n"
    );
    println!("| Redis | pipeline | `SET NX` ops/s | claims/s | vs `SET NX` |");
    println!("|---|---:|---:|---:|---:|");
    for (name, url, port) in &setups {
        // Generous: a loaded machine must slow the figures, not fail the run.
        let a = affinity(url, ns, Duration::from_secs(30));
        for pipeline in [1, 64] {
            let (mut base, mut got) = (0f64, 0f64);
            for rep in 0..3 {
                base = base.max(set_nx(*port, ns, n, pipeline));
                got = got.max(claims(&a, &format!("r{rep}"), n, pipeline).await);
                a.release_all().await.expect("release");
            }
            println!("| {name} | {pipeline} | {} | {} | {:.2}× |", thousands(base), thousands(got), got / base);
        }
    }

    // The failover as the node sees it, with a node's default timeouts.
    let a = affinity(&sentinel.url(&[]), "chitin", RedisSettings::new("").response_timeout);
    a.claim("warm").await.expect("claim");
    let old = sentinel.master_port().unwrap();
    let killed = Instant::now();
    sentinel.kill(old);
    let named = tokio::task::spawn_blocking({
        let port = sentinel.sentinel.port;
        move || loop {
            let out = Command::new("redis-cli")
                .args(["-p", &port.to_string(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", PrivateSentinel::MASTER])
                .output()
                .unwrap();
            if !String::from_utf8_lossy(&out.stdout).contains(&old.to_string()) {
                return killed.elapsed();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    let mut k = 0;
    let served = loop {
        k += 1;
        if a.claim(&format!("after-{k}")).await.is_ok() {
            break killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let named = named.await.unwrap();
    println!("\nSentinel failover (down-after-milliseconds 1000), from the master's SIGKILL:\n");
    println!("| event | after | vs the Sentinel naming the new master |");
    println!("|---|---:|---:|");
    println!("| the Sentinel names the new master | {} ms | 1.00× |", named.as_millis());
    println!(
        "| the node's first claim acknowledged by it | {} ms | {:.2}× |",
        served.as_millis(),
        served.as_secs_f64() / named.as_secs_f64()
    );
}
