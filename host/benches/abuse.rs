//! What abuse costs a node, measured from outside: a standalone node at its
//! default `[limits]` with the client and admin tokens set, and an
//! application's client connected before, whose authenticated appends are
//! timed without and then during a flood of
//!
//! - 1,000 connections to gRPC and 300 to HTTP that never send a byte,
//! - 100 HTTP/1.1 requests whose headers trickle a byte every 300 ms,
//! - four callers sending unauthenticated calls in a loop, one in ten a
//!   `Peer/NodeDown` carrying a 1 MiB node name.
//!
//! Reported: the node's descriptors and resident memory before and at the
//! flood's peak, what its listeners refused and timed out, and the append
//! p50/p99 during the flood against the same run without it.
//!
//!     cargo bench -p chitin --profile dev --bench abuse

mod figures;

// The integration tests' kit; a bench uses only part of it.
#[allow(dead_code)]
#[path = "../tests/it/support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chitin::api::proto::{self, journal_client::JournalClient, peer_client::PeerClient};
use figures::{pct, thousands};
use support::cluster::*;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tonic::transport::Channel;

const CLIENT_TOKEN: &str = "client-secret-bench-1";
const APPENDS: usize = 400;

/// Open descriptors of process `pid`.
fn descriptors(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// `n` authenticated appends, one after another; each one's time.
async fn appends(journal: &mut JournalClient<Channel>, what: &str, n: usize) -> Vec<Duration> {
    let mut took = Vec::with_capacity(n);
    for i in 0..n {
        let id = format!("{what}-{i}");
        let mut req = tonic::Request::new(proto::AppendRequest {
            stream: format!("bench-{}", i % 16),
            payload: id.as_bytes().to_vec(),
            request_id: id,
            ..Default::default()
        });
        req.metadata_mut().insert("authorization", format!("Bearer {CLIENT_TOKEN}").parse().unwrap());
        let started = Instant::now();
        journal.append(req).await.unwrap_or_else(|e| panic!("authenticated append {i} ({what}): {e}"));
        took.push(started.elapsed());
    }
    took.sort();
    took
}

/// Unauthenticated calls in a loop until `stop`, one in ten a Peer call
/// with a 1 MiB node name; each must be refused.
async fn unauthenticated(channel: Channel, stop: Arc<AtomicBool>, calls: Arc<AtomicU64>) {
    let mut journal = JournalClient::new(channel.clone());
    let mut peer = PeerClient::new(channel).max_encoding_message_size(4 << 20);
    let huge = "n".repeat(1 << 20);
    let mut i = 0u64;
    while !stop.load(Ordering::SeqCst) {
        i += 1;
        let refused = if i.is_multiple_of(10) {
            peer.node_down(proto::NodeDownNotice { node: huge.clone(), ..Default::default() }).await.is_err()
        } else {
            let req = proto::AppendRequest { stream: "s".into(), payload: b"x".to_vec(), ..Default::default() };
            journal.append(req).await.is_err()
        };
        assert!(refused, "an unauthenticated call was served");
        calls.fetch_add(1, Ordering::Relaxed);
    }
}

async fn run() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "abused", |s| {
        s.api.client_token = Some(CLIENT_TOKEN.into());
        s.api.admin_token = Some("admin-secret-bench-1".into());
    })
    .unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let pid = node.pid().unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.api)).unwrap().connect().await.unwrap();
    let mut journal = JournalClient::new(channel);
    appends(&mut journal, "warm", 50).await;
    let (fds_before, rss_before) = (descriptors(pid), rss_kib(pid));
    let quiet = appends(&mut journal, "quiet", APPENDS).await;

    // The flood.
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let peak = Arc::new((AtomicU64::new(0), AtomicU64::new(0)));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                peak.0.fetch_max(descriptors(pid) as u64, Ordering::Relaxed);
                peak.1.fetch_max(rss_kib(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    let mut slow = Vec::new();
    for _ in 0..100 {
        let mut tcp = TcpStream::connect(&node.metrics).await.unwrap();
        tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
        slow.push(tcp);
    }
    let trickle = {
        let stop = stop.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                for tcp in &mut slow {
                    let _ = tcp.write_all(b"a").await;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        })
    };
    let mut callers = Vec::new();
    for _ in 0..4 {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.api)).unwrap().connect().await.unwrap();
        callers.push(tokio::spawn(unauthenticated(channel, stop.clone(), calls.clone())));
    }
    let started = Instant::now();
    let mut silent = Vec::new();
    for addr in std::iter::repeat_n(&node.api, 1000).chain(std::iter::repeat_n(&node.metrics, 300)) {
        // Past the listener's limit the kernel still completes the
        // handshake; the node closes those at accept.
        if let Ok(tcp) = TcpStream::connect(addr).await {
            silent.push(tcp);
        }
    }
    let flooded = appends(&mut journal, "flooded", APPENDS).await;
    let flood_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    for c in callers {
        c.await.unwrap();
    }
    trickle.await.unwrap();
    sampler.await.unwrap();
    drop(silent);
    let (fds_peak, rss_peak) = (peak.0.load(Ordering::Relaxed) as usize, peak.1.load(Ordering::Relaxed));

    let (_, text) = chitin::testkit::http_get(&node.metrics, "/metrics", None).await.unwrap();
    let metrics = support::ops::Exposition::parse(&text).unwrap();
    let refused = metrics.sum("chitin_connections_refused_total", &[]);
    let unauthenticated = metrics.sum("chitin_unauthenticated_calls_total", &[]);
    println!("abuse of a standalone node at the default [limits] (512 gRPC, 64 HTTP connections)");
    println!(
        "  flood: 1,300 silent connections, 100 slow-header requests, {} unauthenticated calls ({}/s; {} counted by the node), \
         {} connections refused at accept",
        thousands(calls.load(Ordering::Relaxed) as f64),
        thousands(calls.load(Ordering::Relaxed) as f64 / flood_secs),
        thousands(unauthenticated),
        thousands(refused)
    );
    println!("  | | without the flood | during the flood | ratio |");
    println!("  |---|---:|---:|---:|");
    println!("  | descriptors | {fds_before} | {fds_peak} (peak) | {:.2} |", fds_peak as f64 / fds_before as f64);
    println!(
        "  | resident memory | {:.1} MiB | {:.1} MiB (peak) | {:.2} |",
        rss_before as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
        rss_peak as f64 / rss_before as f64
    );
    for (what, p) in [("append p50", 50.0), ("append p99", 99.0)] {
        let (a, b) = (pct(&quiet, p), pct(&flooded, p));
        println!("  | {what} ({APPENDS} authenticated) | {a:.1?} | {b:.1?} | {:.2} |", b.as_secs_f64() / a.as_secs_f64());
    }
    node.terminate(Duration::from_secs(10)).ok();
}

fn main() {
    tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap().block_on(run());
}
