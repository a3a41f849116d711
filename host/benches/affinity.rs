//! Affinity claims per second from one node against `redis-benchmark`
//! `SET key v NX` on the same server, in the same run, at the same pipeline
//! depth and with one connection each (a node has one multiplexed
//! connection). Prints a markdown table.
//!
//!     cargo bench -p chitin --bench affinity
//!
//! Environment: CHITIN_BENCH_REDIS_URL (redis://127.0.0.1:6379),
//! CHITIN_BENCH_N (claims per measurement, 100000).
//!
//! A pipeline of P for chitin is one `claim_many` script call of P targets
//! (P = 1: one `claim` per round trip); for redis-benchmark it is `-P P`.
//! "in flight" rows keep several such calls outstanding at once on the one
//! connection, against `redis-benchmark -c <same>`.

use std::process::Command;
use std::time::{Duration, Instant};

use chitin::coord::{Affinity, Claim, Keys, RedisConn, RedisSettings};

fn host_port(url: &str) -> (String, u16) {
    let rest = url.trim_start_matches("redis://");
    let rest = rest.rsplit('@').next().unwrap();
    let hp = rest.split('/').next().unwrap();
    match hp.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().expect("port")),
        None => (hp.to_string(), 6379),
    }
}

/// `redis-benchmark … --csv SET {ns}:rb:__rand_int__ v NX` → requests per second.
fn redis_benchmark(url: &str, ns: &str, n: usize, pipeline: usize, clients: usize) -> f64 {
    let (h, p) = host_port(url);
    let out = Command::new("redis-benchmark")
        .args(["-h", &h, "-p", &p.to_string(), "--csv", "-r", "100000000"])
        .args(["-n", &n.to_string(), "-P", &pipeline.to_string(), "-c", &clients.to_string()])
        .args(["SET", &format!("{ns}:rb:__rand_int__"), "v", "NX"])
        .output()
        .expect("redis-benchmark must be installed");
    let text = String::from_utf8_lossy(&out.stdout);
    // "test","rps",...  then  "SET …","145772.59",...
    let line = text.lines().find(|l| l.starts_with("\"SET")).unwrap_or_else(|| panic!("redis-benchmark said:\n{text}"));
    let fields: Vec<&str> = line.split("\",\"").collect();
    fields[1].trim_matches('"').parse().expect("rps")
}

async fn claims(a: &Affinity, targets: &[String], pipeline: usize, in_flight: usize, want: Claim) -> f64 {
    let start = Instant::now();
    let chunks: Vec<Vec<String>> = targets.chunks(pipeline).map(|c| c.to_vec()).collect();
    let mut set = tokio::task::JoinSet::new();
    let mut it = chunks.into_iter();
    let mut done = 0usize;
    loop {
        while set.len() < in_flight {
            let Some(chunk) = it.next() else { break };
            let a = a.clone();
            set.spawn(async move {
                if chunk.len() == 1 {
                    vec![a.claim(&chunk[0]).await.expect("claim")]
                } else {
                    a.claim_many(&chunk).await.expect("claim_many").into_iter().map(|r| r.expect("claim")).collect()
                }
            });
        }
        let Some(r) = set.join_next().await else { break };
        let r = r.expect("task");
        assert!(r.iter().all(|c| *c == want), "unexpected claim outcome (wanted {want:?})");
        done += r.len();
    }
    assert_eq!(done, targets.len());
    targets.len() as f64 / start.elapsed().as_secs_f64()
}

async fn clean(conn: &RedisConn, ns: &str) {
    let mut c = conn.get().await.unwrap();
    let pattern = Keys::scan_pattern(&format!("{ns}:"));
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) =
            redis::cmd("SCAN").arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(5000).query_async(&mut c).await.unwrap();
        if !keys.is_empty() {
            let _: i64 = redis::cmd("UNLINK").arg(&keys).query_async(&mut c).await.unwrap();
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
}

/// Deletes the namespace's keys even when a measurement panics.
struct CleanOnDrop {
    url: String,
    ns: String,
}

impl Drop for CleanOnDrop {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else { return };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(1)) else { return };
        let pattern = Keys::scan_pattern(&format!("{}:", self.ns));
        let keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap_or_default();
        for chunk in keys.chunks(5000) {
            let _: redis::RedisResult<i64> = redis::cmd("UNLINK").arg(chunk).query(&mut c);
        }
    }
}

fn fmt(x: f64) -> String {
    let s = format!("{:.0}", x);
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful: run quickly then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let url = std::env::var("CHITIN_BENCH_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let n: usize = std::env::var("CHITIN_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick { 2000 } else { 100_000 });
    let ns = format!("chitin-bench-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    // Generous timeouts: a loaded machine must slow the figures, not fail the run.
    let mut settings = RedisSettings::new(&url);
    settings.response_timeout = Duration::from_secs(30);
    let conn = RedisConn::new(settings).expect("url");
    if let Err(e) = conn.get().await {
        eprintln!("affinity bench: Redis at {url} unreachable ({e}); skipped");
        return;
    }
    let _guard = CleanOnDrop { url: url.clone(), ns: ns.clone() };
    let a = Affinity::new(conn.clone(), Keys::new(&ns), "bench-node", Duration::from_secs(120)).unwrap();

    let reps: usize = if quick { 1 } else { 3 };
    println!(
        "Affinity claims per second from one node vs `redis-benchmark SET key v NX`, {n} operations per measurement, \
         same server, same run; best of {reps} interleaved repetitions (the machine is shared).\n"
    );
    println!("| pipeline | in flight | redis-benchmark SET NX (ops/s) | fresh claims/s | ratio | already-owned claims/s | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    let mut round = 0;
    for (pipeline, in_flight) in [(1, 1), (16, 1), (64, 1), (256, 1), (16, 4), (64, 4)] {
        let (mut rb, mut fresh, mut owned) = (0f64, 0f64, 0f64);
        for _ in 0..reps {
            round += 1;
            let targets: Vec<String> = (0..n).map(|i| format!("r{round}-{i:08}")).collect();
            rb = rb.max(redis_benchmark(&url, &ns, n, pipeline, in_flight));
            fresh = fresh.max(claims(&a, &targets, pipeline, in_flight, Claim::Claimed).await);
            owned = owned.max(claims(&a, &targets, pipeline, in_flight, Claim::AlreadyOurs).await);
            clean(&conn, &ns).await;
        }
        println!(
            "| {pipeline} | {in_flight} | {} | {} | {:.2}× | {} | {:.2}× |",
            fmt(rb),
            fmt(fresh),
            fresh / rb,
            fmt(owned),
            owned / rb
        );
    }
    clean(&conn, &ns).await;
}
