//! The client-visible stall of planned handoffs, through real `chitin node`
//! processes: three nodes on a fresh PostgreSQL database (2 s TTL, 0.5 s
//! renew interval, 16 shards), four clients appending without pause, each
//! keeping one channel per node and moving to the next node with the same
//! request id when a connection breaks (what a client library does).
//!
//! Phases: steady load; a drain of the busiest node; a SIGTERM of one node
//! and its restart; a rolling restart of every node. Each phase's latency
//! distribution (of the appends started in it) is printed against the
//! steady phase's, measured in the same run. Last, a paused holder: the
//! stall of one client whose shard's holder is SIGSTOPped, against the
//! TTL + renew interval it is bounded by.
//!
//! `cargo bench -p chitin --bench handoff` (needs the local PostgreSQL and Redis).

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

#[path = "common/phases.rs"]
mod phases;

mod figures;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use chitin::proto::{self, journal_client::JournalClient};
use phases::{Figures, Sample};
use support::cluster::*;
use tonic::transport::Channel;

/// Appends to `streams` until `stop`, over one channel per node.
async fn client(apis: Vec<String>, streams: Vec<String>, first: usize, stop: Arc<AtomicBool>) -> Vec<Sample> {
    let mut channels: Vec<Option<JournalClient<Channel>>> = vec![None; apis.len()];
    let mut next = first;
    let mut samples = Vec::new();
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let stream = streams[i % streams.len()].clone();
        let request_id = format!("{first}-{i}");
        let started = Instant::now();
        let ok = loop {
            let k = next % apis.len();
            if channels[k].is_none() {
                channels[k] = JournalClient::connect(format!("http://{}", apis[k])).await.ok();
            }
            let Some(j) = channels[k].as_mut() else {
                next += 1;
                if started.elapsed() > Duration::from_secs(30) {
                    break false;
                }
                continue;
            };
            let request = proto::AppendRequest {
                stream: stream.clone(),
                request_id: request_id.clone(),
                payload: b"x".to_vec(),
                forwarded: false,
            };
            match j.append(request).await {
                Ok(_) => break true,
                // A broken transport (a stopping node): the next node, same id.
                Err(s) if s.metadata().get(proto::outcome::KEY).is_none() && started.elapsed() < Duration::from_secs(30) => {
                    channels[k] = None;
                    next += 1;
                }
                Err(_) => break false,
            }
        };
        samples.push(Sample { started, took: started.elapsed(), ok });
    }
    samples
}

async fn run() {
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let map = c.shard_map();
    let streams: Vec<String> = map.shards().iter().map(|s| stream_on(&map, &s.id, "h")).collect();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let clients: Vec<_> = (0..4).map(|k| tokio::spawn(client(apis.clone(), streams.clone(), k, stop.clone()))).collect();

    let mut phases: Vec<phases::Phase> = Vec::new();
    tokio::time::sleep(Duration::from_secs(1)).await; // connections warm
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    phases.push(("steady", t, Instant::now()));

    let (handoffs, drained) = phases::planned_handoffs(&mut c, &status).await;
    phases.extend(handoffs);
    stop.store(true, Ordering::Relaxed);
    let mut samples = Vec::new();
    for k in clients {
        samples.extend(k.await.unwrap());
    }

    // A paused holder: one client, through another node.
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let v = c.busiest(&status);
    let shard = status.leases.iter().find(|l| l.holder == c.nodes[v].name).unwrap().shard.clone();
    let stream = stream_on(&map, &shard, "p");
    let mut j = JournalClient::connect(format!("http://{}", c.nodes[(v + 1) % 3].api)).await.unwrap();
    let append = |id: &str| proto::AppendRequest {
        stream: stream.clone(),
        request_id: id.into(),
        payload: b"x".to_vec(),
        forwarded: false,
    };
    j.append(append("before")).await.unwrap();
    c.nodes[v].pause().unwrap();
    let started = Instant::now();
    while j.append(append("during")).await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "no takeover of a paused holder's shard");
    }
    let stall = started.elapsed();
    c.nodes[v].resume().unwrap();
    c.teardown().await.unwrap();

    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let steady = Figures::of(&samples, phases[0].1, phases[0].2);
    println!(
        "drain of the busiest node: {} handed over in {} rounds, {} kept",
        drained.handed_over,
        drained.rounds,
        drained.kept.len()
    );
    println!("| phase | appends | failed | p50 | p99 | max | p99 − steady p99 | max − steady p99 |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, from, to) in &phases {
        let f = Figures::of(&samples, *from, *to);
        println!(
            "| {name} | {} | {} | {:.1} ms | {:.1} ms | {:.1} ms | {:+.1} ms | {:+.1} ms |",
            f.count,
            f.failed,
            ms(f.p50),
            ms(f.p99),
            ms(f.max),
            ms(f.p99) - ms(steady.p99),
            ms(f.max) - ms(steady.p99)
        );
    }
    println!("| measurement | figure | baseline | baseline figure | ratio |");
    println!("|---|---:|---|---:|---:|");
    println!(
        "| client stall behind a paused holder | {:.2} s | TTL + renew interval | {:.2} s | {:.2}x |",
        stall.as_secs_f64(),
        (TTL + RENEW).as_secs_f64(),
        stall.as_secs_f64() / (TTL + RENEW).as_secs_f64()
    );
}

fn main() {
    tokio::runtime::Runtime::new().unwrap().block_on(run());
}
