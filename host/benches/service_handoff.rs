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
//! first (the routing map's miss rate); beside them the physical limit of
//! the same server (`pgbench` running the write's transaction shape), and
//! on stderr the phases' events and each phase's slowest write over 100 ms
//! with every attempt that did not store.
//!
//! `cargo build -p chitin-example-kv && cargo bench -p chitin --bench
//! service_handoff` (needs the local PostgreSQL and Redis).

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/phases.rs"]
mod phases;

mod figures;

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chitin::chaos::service::{Answer, Service, ServiceOptions, next_instance, post};
use chitin_client::{AssignmentMap, Client, Nodes};
use phases::{Figures, Sample};
use support::cluster::*;

/// One write as a client saw it.
struct Write {
    sample: Sample,
    /// The first instance asked was not the one serving the key.
    missed: bool,
    /// The key and the request id, and each attempt that did not store:
    /// when it ended (since the write started), the instance asked, its
    /// answer. Kept for the slowest writes' account.
    key: String,
    request_id: String,
    attempts: Vec<(Duration, usize, Answer)>,
}

/// Writes to `keys` until `stop`, routing each by `map`.
async fn client(
    instances: Arc<Vec<(String, String)>>,
    map: AssignmentMap,
    keys: Vec<String>,
    k: usize,
    stop: Arc<AtomicBool>,
) -> Vec<Write> {
    let mut samples = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let key = &keys[(i * 7 + k) % keys.len()];
        let request_id = format!("b{k}-{i}");
        let path = format!("/write?key={key}&request_id={request_id}");
        let holder = map.current().route("journal", chitin_client::stream_key(key)).map(|a| a.holder_address.clone());
        let mut at = holder.and_then(|h| instances.iter().position(|(n, _)| *n == h)).unwrap_or(k % instances.len());
        let (started, mut missed, mut attempts) = (Instant::now(), false, Vec::new());
        let ok = loop {
            let answer = post(&instances[at].1, &path, Duration::from_secs(10)).await;
            if answer == Answer::Stored {
                break true;
            }
            missed = true;
            attempts.push((started.elapsed(), at, answer.clone()));
            if started.elapsed() > Duration::from_secs(30) {
                break false;
            }
            let pause;
            (at, pause) = next_instance(&answer, &instances, at);
            if pause {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        let sample = Sample { started, took: started.elapsed(), ok };
        samples.push(Write { sample, missed, key: key.clone(), request_id, attempts });
    }
    samples
}

async fn run() {
    phases::ms(Instant::now()); // the clock's zero
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();
    let opts = ServiceOptions {
        program: support::example_service(),
        args: Vec::new(),
        table: "kv_writes".into(),
        writers: 4,
        keys: 256,
    };
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
    let mut writes = Vec::new();
    for k in clients {
        writes.extend(k.await.unwrap());
    }
    let samples: Vec<Sample> = writes.iter().map(|w| w.sample).collect();
    let limit = physical_limit(&common::admin_url(), opts.writers).await;
    let slow_logged = slow_writes_logged(c.dir.path());
    let rows = service.finish(&opts.table, true).await.unwrap();
    c.teardown().await.unwrap();

    let steady = Figures::of(&samples, phases[0].1, phases[0].2);
    println!("{} writes stored by the service", rows.len());
    println!(
        "| phase | writes | failed | sent to the wrong instance first | p50 | p99 | max | p99 − steady p99 | max − steady max |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (name, from, to) in &phases {
        let f = Figures::of(&samples, *from, *to);
        let missed = writes.iter().filter(|w| w.missed && w.sample.started >= *from && w.sample.started < *to).count();
        println!(
            "| {name} | {} | {} | {missed} ({:.2} %) | {:.1} ms | {:.1} ms | {:.1} ms | {:+.1} ms | {:+.1} ms |",
            f.count,
            f.failed,
            100.0 * missed as f64 / f.count.max(1) as f64,
            ms(f.p50),
            ms(f.p99),
            ms(f.max),
            ms(f.p99) - ms(steady.p99),
            ms(f.max) - ms(steady.max),
        );
    }
    match limit {
        Ok(mut took) => {
            took.sort();
            println!(
                "| the limit: pgbench, {} clients, 5 s, a bare fenced write's transaction | {} | | | {:.1} ms | {:.1} ms | {:.1} ms | | |",
                opts.writers,
                took.len(),
                ms(figures::pct(&took, 50.0)),
                ms(figures::pct(&took, 99.0)),
                ms(took[took.len() - 1])
            );
        }
        Err(e) => println!("(the limit not measured: {e})"),
    }
    eprintln!("{} writes took 50 ms or more inside an instance (its database steps)", slow_logged.len());
    for (name, from, to) in &phases {
        slowest(name, &writes, *from, *to, &slow_logged);
    }
}

/// The instances' log lines of writes that took 50 ms or more from the
/// start of their transaction to its commit.
fn slow_writes_logged(dir: &std::path::Path) -> Vec<String> {
    let logs = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("service-"));
    logs.flat_map(|e| std::fs::read_to_string(e.path()).unwrap_or_default().lines().map(str::to_owned).collect::<Vec<_>>())
        .filter(|l| l.contains("slow write"))
        .collect()
}

/// The same-run physical limit of the service's write: `pgbench` running
/// its transaction shape (a shared row lock, as the fence check takes, and
/// an insert) on a fresh database of the same server, `clients` at once,
/// with the cluster still up (its heartbeats and leases on that server).
async fn physical_limit(admin: &str, clients: usize) -> Result<Vec<Duration>, String> {
    let (name, url) = common::fresh_db_on(admin).await;
    let setup = "CREATE TABLE fence (shard text PRIMARY KEY, epoch bigint); INSERT INTO fence VALUES ('s', 1); \
                 CREATE TABLE writes (seq bigserial PRIMARY KEY, item_key text, epoch bigint)";
    let created = std::process::Command::new("psql").args(["-q", "-v", "ON_ERROR_STOP=1", &url, "-c", setup]).output();
    let script = "BEGIN;\nSELECT epoch FROM fence WHERE shard = 's' FOR SHARE;\n\
                  INSERT INTO writes (item_key, epoch) VALUES ('k', 1);\nCOMMIT;\n";
    let took = match created {
        Ok(out) if out.status.success() => tokio::task::block_in_place(|| figures::pgbench(&url, script, clients, &["-T", "5"])),
        Ok(out) => Err(format!("psql: {}", String::from_utf8_lossy(&out.stderr))),
        Err(e) => Err(format!("cannot run psql: {e}")),
    };
    common::drop_db_on(admin, &name).await;
    took
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Prints the phase's slowest write, if it took over 100 ms, with every
/// attempt that did not store and the instance's account of its database
/// steps when they took 50 ms or more: where a tail comes from.
fn slowest(phase: &str, writes: &[Write], from: Instant, to: Instant, slow_logged: &[String]) {
    let in_phase = writes.iter().filter(|w| w.sample.started >= from && w.sample.started < to);
    let Some(s) = in_phase.max_by_key(|w| w.sample.took) else { return };
    if s.sample.took <= Duration::from_millis(100) {
        return;
    }
    eprintln!(
        "{phase}: slowest write, of {}, started at [{:9.1} ms], took {:.1} ms:",
        s.key,
        phases::ms(s.sample.started),
        s.sample.took.as_secs_f64() * 1000.0
    );
    // Runs of one answer from one instance print as one line.
    let mut k = 0;
    while k < s.attempts.len() {
        let (first, at, answer) = &s.attempts[k];
        let run = s.attempts[k..].iter().take_while(|(_, a, w)| a == at && w == answer).count();
        let last = s.attempts[k + run - 1].0;
        eprintln!(
            "  +{:7.1} … {:7.1} ms instance {at} ×{run}: {answer:?}",
            first.as_secs_f64() * 1000.0,
            last.as_secs_f64() * 1000.0
        );
        k += run;
    }
    let mine = format!("slow write {} ", s.request_id);
    match slow_logged.iter().find(|l| l.contains(&mine)) {
        Some(line) => eprintln!("  the instance: {line}"),
        None => eprintln!("  the instance stored it in under 50 ms: the rest was outside its database steps"),
    }
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
