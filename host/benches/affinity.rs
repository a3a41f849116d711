//! Affinity claims per second from one node against `redis-benchmark` on the
//! same server, in the same run, at the same pipeline depth and with one
//! connection each (a node has one multiplexed connection). Two baselines per
//! row: `SET key v NX` (the bare command), and the very claim script chitin
//! sends, run by `redis-benchmark` as `EVALSHA` (what a C client with no
//! overhead of its own gets from the same server work). A second table
//! splits a pipeline-1 claim into server time (`INFO commandstats` deltas)
//! and round trips. Prints markdown.
//!
//!     cargo bench -p chitin --profile dev --bench affinity
//!
//! Environment: CHITIN_BENCH_REDIS_URL (redis://127.0.0.1:6379),
//! CHITIN_BENCH_N (claims per measurement, 100000).
//!
//! A pipeline of P for chitin is one `claim_many` call of P targets (P = 1:
//! one `claim` per round trip); for redis-benchmark `SET NX` it is `-P P`, and
//! for the script one `EVALSHA` of the batch script with P random targets.
//! "in flight" rows keep several such calls outstanding at once on the one
//! connection, against `redis-benchmark -c <same>`.

mod figures;

use std::time::{Duration, Instant};

use chitin::coord::{Affinity, Claim, Keys, RedisConn, RedisSettings};

use figures::thousands;

fn host_port(url: &str) -> (String, u16) {
    let rest = url.trim_start_matches("redis://");
    let rest = rest.rsplit('@').next().unwrap();
    let hp = rest.split('/').next().unwrap();
    match hp.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().expect("port")),
        None => (hp.to_string(), 6379),
    }
}

/// `redis-benchmark … --csv <command>` → requests per second.
fn redis_benchmark_cmd(url: &str, n: usize, pipeline: usize, clients: usize, command: &[String]) -> f64 {
    let (h, p) = host_port(url);
    let args = ["-n".to_string(), n.to_string(), "-P".into(), pipeline.to_string(), "-c".into(), clients.to_string()];
    figures::redis_benchmark(&h, p, &args, command)
}

/// `SET {ns}:rb:__rand_int__ v NX` → ops/s.
fn redis_benchmark(url: &str, ns: &str, n: usize, pipeline: usize, clients: usize) -> f64 {
    let cmd: Vec<String> = ["SET", &format!("{ns}:rb:__rand_int__"), "v", "NX"].iter().map(|s| s.to_string()).collect();
    redis_benchmark_cmd(url, n, pipeline, clients, &cmd)
}

/// chitin's own claim script (batch script for P > 1) through
/// `redis-benchmark` on fresh random targets → claims/s. `__rand_int__` is
/// drawn afresh at each place, so keys and target ids differ; the work per
/// target (a free key claimed, one set member added) is the same.
fn redis_benchmark_script(url: &str, ns: &str, n: usize, pipeline: usize, clients: usize, value: &str, ttl: u64) -> f64 {
    let set = format!("{ns}:rbs:affinity:by-instance:rb");
    let key = format!("{ns}:rbs:affinity:__rand_int__");
    let mut cmd = vec!["EVALSHA".to_string()];
    if pipeline == 1 {
        cmd.push(redis::Script::new(Affinity::claim_script()).get_hash().into());
        let limit = u64::MAX.to_string();
        cmd.extend(["2".into(), key, set, value.into(), ttl.to_string(), "__rand_int__".into(), limit]);
        redis_benchmark_cmd(url, n, 1, clients, &cmd)
    } else {
        cmd.push(redis::Script::new(Affinity::claim_many_script()).get_hash().into());
        cmd.push((1 + pipeline).to_string());
        cmd.push(set);
        cmd.extend(std::iter::repeat_n(key, pipeline));
        cmd.extend([value.into(), ttl.to_string(), "1".into(), u64::MAX.to_string()]);
        cmd.extend(std::iter::repeat_n("__rand_int__".to_string(), pipeline));
        pipeline as f64 * redis_benchmark_cmd(url, n / pipeline, 1, clients, &cmd)
    }
}

/// (calls, µs) of one command in `INFO commandstats`.
async fn commandstat(conn: &RedisConn, command: &str) -> (u64, u64) {
    let mut c = conn.get().await.unwrap();
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await.unwrap();
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else { return (0, 0) };
    let field = |name: &str| -> u64 {
        line.split([':', ',']).find_map(|f| f.strip_prefix(name)).and_then(|v| v.parse().ok()).unwrap_or(0)
    };
    (field("calls="), field("usec="))
}

/// Server µs per call of `command` over what `run` does.
async fn server_us<F: std::future::Future<Output = f64>>(conn: &RedisConn, command: &str, run: F) -> (f64, f64) {
    let (c0, u0) = commandstat(conn, command).await;
    let rate = run.await;
    let (c1, u1) = commandstat(conn, command).await;
    (rate, (u1 - u0) as f64 / (c1 - c0).max(1) as f64)
}

/// Bare `SET NX` at pipeline 1 through chitin's connection (the redis
/// crate's `ConnectionManager` over its multiplexed connection): the
/// client's own cost with no script.
async fn client_set_nx(conn: &RedisConn, ns: &str, round: usize, n: usize) -> f64 {
    let mut c = conn.get().await.unwrap();
    let start = Instant::now();
    for i in 0..n {
        let _: Option<String> =
            redis::cmd("SET").arg(format!("{ns}:cs{round}:{i}")).arg("v").arg("NX").query_async(&mut c).await.unwrap();
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// The same `SET NX` written to a plain tokio socket and its reply read
/// back, no multiplexer task in between: what the hop costs.
async fn raw_set_nx(url: &str, ns: &str, round: usize, n: usize) -> f64 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (h, p) = host_port(url);
    let mut s = tokio::net::TcpStream::connect((h.as_str(), p)).await.unwrap();
    s.set_nodelay(true).unwrap();
    let mut buf = [0u8; 64];
    let start = Instant::now();
    for i in 0..n {
        let cmd = redis::cmd("SET").arg(format!("{ns}:rs{round}:{i}")).arg("v").arg("NX").get_packed_command();
        s.write_all(&cmd).await.unwrap();
        // "+OK\r\n" or "$-1\r\n": one read suffices on loopback for a 5-byte reply.
        let k = s.read(&mut buf).await.unwrap();
        assert!(k > 0 && buf[k - 1] == b'\n', "short reply");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

async fn claims(a: &Affinity, targets: &[String], pipeline: usize, in_flight: usize, want: Claim) -> f64 {
    let start = Instant::now();
    if pipeline == 1 && in_flight == 1 {
        // Inline, the way a dispatch calls it: a task per claim would add a
        // spawn and a join to every round trip that `redis-benchmark` does not pay.
        for t in targets {
            assert_eq!(a.claim(t).await.expect("claim"), want, "unexpected claim outcome");
        }
        return targets.len() as f64 / start.elapsed().as_secs_f64();
    }
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

fn us(rate: f64) -> String {
    format!("{:.1} µs", 1e6 / rate)
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `cargo bench` passes --bench; `cargo test --benches` passes nothing useful: run quickly then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let url = std::env::var("CHITIN_BENCH_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let n: usize =
        std::env::var("CHITIN_BENCH_N").ok().and_then(|v| v.parse().ok()).unwrap_or(if quick { 2000 } else { 100_000 });
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
    let ttl = 120u64;
    let a = Affinity::new(conn.clone(), Keys::new(&ns), "bench-node", Duration::from_secs(ttl)).unwrap();
    // redis-benchmark only sends EVALSHA: load both scripts first.
    {
        let mut c = conn.get().await.unwrap();
        for src in [Affinity::claim_script(), Affinity::claim_many_script()] {
            let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(src).query_async(&mut c).await.unwrap();
        }
    }
    let value = Keys::claim_value("rb");

    let reps: usize = if quick { 1 } else { 3 };
    println!(
        "Affinity claims per second from one node vs `redis-benchmark` on the same server, {n} operations per measurement, \
         same run; best of {reps} interleaved repetitions (the machine is shared).\n"
    );
    println!(
        "| pipeline | in flight | `SET NX` ops/s | same script via redis-benchmark, claims/s | fresh claims/s | vs `SET NX` | vs script | already-owned claims/s | vs `SET NX` |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let mut round = 0;
    for (pipeline, in_flight) in [(1, 1), (16, 1), (64, 1), (256, 1), (16, 4), (64, 4)] {
        let (mut rb, mut rbs, mut fresh, mut owned) = (0f64, 0f64, 0f64, 0f64);
        for _ in 0..reps {
            round += 1;
            let targets: Vec<String> = (0..n).map(|i| format!("r{round}-{i:08}")).collect();
            rb = rb.max(redis_benchmark(&url, &ns, n, pipeline, in_flight));
            rbs = rbs.max(redis_benchmark_script(&url, &ns, n, pipeline, in_flight, &value, ttl));
            fresh = fresh.max(claims(&a, &targets, pipeline, in_flight, Claim::Claimed).await);
            owned = owned.max(claims(&a, &targets, pipeline, in_flight, Claim::AlreadyOurs).await);
            clean(&conn, &ns).await;
        }
        println!(
            "| {pipeline} | {in_flight} | {} | {} | {} | {:.2}× | {:.2}× | {} | {:.2}× |",
            thousands(rb),
            thousands(rbs),
            thousands(fresh),
            fresh / rb,
            fresh / rbs,
            thousands(owned),
            owned / rb
        );
    }

    // Where a pipeline-1 claim's time goes. Server figures are Redis' own
    // accounting (`INFO commandstats`), so client scheduling does not enter them.
    let (mut rb, mut rbs, mut fresh, mut owned, mut cset, mut raw) = (0f64, 0f64, 0f64, 0f64, 0f64, 0f64);
    let (mut set_us, mut script_us, mut owned_us) = (f64::MAX, f64::MAX, f64::MAX);
    for _ in 0..reps {
        round += 1;
        let targets: Vec<String> = (0..n).map(|i| format!("p{round}-{i:08}")).collect();
        let (r, u) = server_us(&conn, "set", async { redis_benchmark(&url, &ns, n, 1, 1) }).await;
        rb = rb.max(r);
        set_us = set_us.min(u);
        rbs = rbs.max(redis_benchmark_script(&url, &ns, n, 1, 1, &value, ttl));
        let (r, u) = server_us(&conn, "evalsha", claims(&a, &targets, 1, 1, Claim::Claimed)).await;
        fresh = fresh.max(r);
        script_us = script_us.min(u);
        let (r, u) = server_us(&conn, "evalsha", claims(&a, &targets, 1, 1, Claim::AlreadyOurs)).await;
        owned = owned.max(r);
        owned_us = owned_us.min(u);
        cset = cset.max(client_set_nx(&conn, &ns, round, n).await);
        raw = raw.max(raw_set_nx(&url, &ns, round, n).await);
        clean(&conn, &ns).await;
    }
    // With a client costing nothing, a claim takes the bare command's round
    // trip plus what the script does on the server beyond a `SET NX`.
    let bound = 1.0 / (1.0 / rb + (script_us - set_us) * 1e-6);
    println!("\nOne claim at a time (pipeline 1, one connection), same run, best of {reps}:\n");
    println!("| measurement | figure | per operation | vs `SET NX` |");
    println!("|---|---:|---:|---:|");
    println!("| server time of `SET k v NX` (commandstats) | — | {set_us:.2} µs | 1.00× |");
    println!(
        "| server time of the claim script, fresh target (commandstats) | — | {script_us:.2} µs | {:.2}× |",
        script_us / set_us
    );
    println!(
        "| server time of the claim script, already ours (commandstats) | — | {owned_us:.2} µs | {:.2}× |",
        owned_us / set_us
    );
    println!("| `redis-benchmark SET NX` | {} ops/s | {} | 1.00× |", thousands(rb), us(rb));
    println!(
        "| bare `SET NX` on a plain tokio socket (no multiplexer) | {} ops/s | {} | {:.2}× |",
        thousands(raw),
        us(raw),
        raw / rb
    );
    println!("| bare `SET NX` through chitin's connection | {} ops/s | {} | {:.2}× |", thousands(cset), us(cset), cset / rb);
    println!("| claim script via `redis-benchmark` (EVALSHA) | {} claims/s | {} | {:.2}× |", thousands(rbs), us(rbs), rbs / rb);
    println!(
        "| bound: `SET NX` round trip + the script's extra server time | {} claims/s | {} | {:.2}× |",
        thousands(bound),
        us(bound),
        bound / rb
    );
    println!("| chitin claim, fresh target | {} claims/s | {} | {:.2}× |", thousands(fresh), us(fresh), fresh / rb);
    println!("| chitin claim, already ours | {} claims/s | {} | {:.2}× |", thousands(owned), us(owned), owned / rb);
    clean(&conn, &ns).await;
}
