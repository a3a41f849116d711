//! Control sequences against real `chitin node` processes on a fresh
//! PostgreSQL database, driven through the real `chitin cluster …` CLI:
//! bootstrap three unprovisioned nodes, add a fourth, move a shard onto it,
//! split shards in two and in four — each while a client appends to the
//! journal — kill the CLI mid-sequence and resume, refuse a second sequence
//! while one is unfinished, restart a node mid-sequence, and refuse an
//! invalid transition pushed straight to a node.
//! Lease timing: a 2 s TTL renewed every 0.5 s.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Context, Result};
use chitin::api::proto;
use chitin::node::shard_map::ShardMap;
use chitin::topology::{ClusterConfig, ShardState};
use tokio::io::{AsyncBufReadExt, BufReader};

/// One cluster at a time: each runs several processes with a 2 s TTL.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

// ---------------------------------------------------------------- helpers

/// `chitin <args>`; returns (success, stdout, stderr).
async fn chitin(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("run chitin");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

async fn chitin_ok(args: &[&str]) -> String {
    let (ok, out, err) = chitin(args).await;
    assert!(ok, "chitin {} failed:\n{out}\n{err}", args.join(" "));
    out
}

fn load(path: &Path) -> ClusterConfig {
    ClusterConfig::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Three nodes bootstrapped from their config file, all ready; and that file.
async fn bootstrapped_cluster(shards: u32) -> (Cluster, String) {
    let mut c = unprovisioned_cluster(shards).await.unwrap();
    let config = cfg(&c);
    chitin_ok(&["cluster", "bootstrap-nodes", "--config", &config]).await;
    for n in &mut c.nodes {
        n.wait_ready(Duration::from_secs(60)).await.unwrap();
    }
    (c, config)
}

/// A fourth node process, started and answering its admin plane.
async fn started_extra_node(c: &Cluster, name: &str) -> NodeProc {
    let n = extra_node(c, name).unwrap();
    wait_admin(&n.api, Duration::from_secs(60)).await.unwrap();
    n
}

/// A cluster of three unprovisioned node processes (not bootstrapped yet:
/// their settings name no seed config).
async fn unprovisioned_cluster(shards: u32) -> Result<Cluster> {
    let mut c = Cluster::new(Dialect::Postgres, 3, shards, 0, |_, s| s.cluster.config_file = None).await?;
    for n in &mut c.nodes {
        n.start()?;
    }
    for n in &c.nodes {
        wait_admin(&n.api, Duration::from_secs(60)).await.with_context(|| n.log_text())?;
    }
    Ok(c)
}

/// A port no node of `c` uses.
fn unused_port(c: &Cluster, also: &[u16]) -> u16 {
    loop {
        let p = free_port().expect("a free port");
        let taken = c.nodes.iter().any(|n| n.api.ends_with(&format!(":{p}")) || n.metrics.ends_with(&format!(":{p}")));
        if !taken && !also.contains(&p) {
            return p;
        }
    }
}

/// A fourth node process (`name`), not in the config, unprovisioned: the
/// first node's settings with its own name, addresses and data dir.
fn extra_node(c: &Cluster, name: &str) -> Result<NodeProc> {
    let api_port = unused_port(c, &[]);
    let (api, metrics) = (format!("127.0.0.1:{api_port}"), format!("127.0.0.1:{}", unused_port(c, &[api_port])));
    let mut s = node_settings::read(&c.nodes[0].settings)?;
    s.cluster.instance_id = Some(name.to_string());
    s.cluster.config_file = None;
    s.node.data_dir = c.dir.path().join(name);
    s.api.listen = api.clone();
    s.metrics.listen = metrics.clone();
    let settings = c.dir.path().join(format!("{name}.toml"));
    node_settings::write(&settings, &s)?;
    spawn_node(name, settings, api, metrics, c.dir.path().join(format!("{name}.log")))
}

async fn versions(c: &Cluster, extra: &[&NodeProc]) -> Vec<(String, u64, String)> {
    let mut out = Vec::new();
    for n in c.nodes.iter().chain(extra.iter().copied()) {
        match wait_admin(&n.api, Duration::from_secs(5)).await {
            Ok(r) => out.push((n.name.clone(), r.config_version, r.state)),
            Err(e) => out.push((n.name.clone(), 0, format!("unreachable: {e}"))),
        }
    }
    out
}

async fn assert_all_at(c: &Cluster, extra: &[&NodeProc], version: u64) {
    let v = versions(c, extra).await;
    assert!(v.iter().all(|(_, ver, _)| *ver == version), "not all nodes at version {version}: {v:?}");
}

/// A client appending round-robin over `streams` until `stop`; on failure it
/// retries the same request id on the next node. Returns the acknowledged
/// (stream, request id, shard) and the longest time one append took.
async fn client(
    nodes: Vec<String>,
    streams: Vec<String>,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> (Vec<(String, String, String)>, Duration) {
    let mut acked = Vec::new();
    let mut longest = Duration::ZERO;
    let mut next = 0usize;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let stream = &streams[i as usize % streams.len()];
        let request_id = format!("r-{i}");
        let started = Instant::now();
        loop {
            let api = &nodes[next % nodes.len()];
            let result = async {
                let mut j = proto::journal_client::JournalClient::connect(format!("http://{api}"))
                    .await
                    .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                j.append(proto::AppendRequest {
                    stream: stream.clone(),
                    request_id: request_id.clone(),
                    payload: b"x".to_vec(),
                    forwarded: false,
                })
                .await
            }
            .await;
            match result {
                Ok(ack) => {
                    acked.push((stream.clone(), request_id.clone(), ack.into_inner().shard));
                    count.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    next += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("append {request_id} failed for 30 s: {e}"),
            }
        }
        longest = longest.max(started.elapsed());
    }
    (acked, longest)
}

/// Every acknowledged append is in the journal once, and committed under an
/// epoch that was current at its commit.
async fn check_journal(c: &Cluster, streams: &[String], acked: &[(String, String, String)]) {
    let store = c.store().await;
    let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
    for stream in streams {
        let entries = store.read(stream, 1, 100_000).await.unwrap();
        let ids: Vec<&str> = entries.iter().map(|e| e.request_id.as_str()).collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(ids.len(), unique.len(), "a request id applied twice in {stream}");
        seen.insert(stream.clone(), unique.into_iter().map(str::to_string).collect());
        for e in &entries {
            let history = store.history(Some(&e.shard)).await.unwrap();
            let granted = history.iter().find(|h| h.epoch == e.epoch);
            assert!(granted.is_some(), "entry {} of {stream}: epoch {} of {} never granted", e.seq, e.epoch, e.shard);
            assert!(granted.unwrap().acquired_at <= e.committed_at, "entry {} committed before its epoch", e.seq);
            if let Some(next) = history.iter().find(|h| h.epoch > e.epoch) {
                assert!(
                    e.committed_at <= next.acquired_at,
                    "entry {} of {stream} committed under a stale epoch {}",
                    e.seq,
                    e.epoch
                );
            }
        }
    }
    for (stream, id, _) in acked {
        assert!(seen[stream].contains(id), "acknowledged append {id} of {stream} is missing");
    }
    store.close().await;
}

/// Runs `f` while a client appends to `streams` through every node in `apis`.
async fn under_load<F, Fut>(c: &Cluster, apis: Vec<String>, streams: Vec<String>, f: F) -> Vec<(String, String, String)>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let load = tokio::spawn(client(apis, streams.clone(), stop.clone(), count.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    f().await;
    // Keep appending after the change: at least 0.5 s and 40 appends in all.
    let until = Instant::now() + Duration::from_secs(20);
    tokio::time::sleep(Duration::from_millis(500)).await;
    while count.load(Ordering::Relaxed) < 40 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let (acked, longest) = load.await.unwrap();
    assert!(acked.len() > 20, "too few appends to prove anything: {}", acked.len());
    // A handoff, not a takeover: no append waited for a lease to expire.
    assert!(longest < TTL * 3, "an append took {longest:?}\n{}", c.logs());
    check_journal(c, &streams, &acked).await;
    acked
}

fn cfg(c: &Cluster) -> String {
    c.config.display().to_string()
}

// ---------------------------------------------------------------- tests

/// Bootstrap three nodes; add a fourth; move a shard onto it; split one
/// shard in two at a point and another in four — each under load.
#[tokio::test(flavor = "multi_thread")]
async fn bootstrap_add_move_split_under_load() {
    let _serial = SERIAL.lock().await;
    let mut c = unprovisioned_cluster(8).await.unwrap();
    let config = cfg(&c);
    for n in &c.nodes {
        let r = wait_admin(&n.api, Duration::from_secs(5)).await.unwrap();
        assert!(r.config_json.is_empty() && r.state.eq_ignore_ascii_case("unprovisioned"), "{}: {r:?}", n.name);
    }

    // Bootstrap.
    let out = chitin_ok(&["cluster", "bootstrap-nodes", "--config", &config]).await;
    assert_eq!(out.matches("bootstrapped").count(), 3, "{out}");
    for n in &mut c.nodes {
        n.wait_ready(Duration::from_secs(60)).await.unwrap();
    }
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    assert_all_at(&c, &[], 1).await;
    // Again: nothing to do.
    let out = chitin_ok(&["cluster", "bootstrap-node", "--config", &config, "--node-id", "node-02"]).await;
    assert!(out.contains("already provisioned at version 1"), "{out}");
    let live = chitin_ok(&["cluster", "get-config", "--node-address", &c.nodes[1].api]).await;
    assert_eq!(ClusterConfig::from_json(&live).unwrap(), load(&c.config));

    let map = ShardMap::from_config(&load(&c.config));
    let streams: Vec<String> = ["journal_00_1f", "journal_20_3f", "journal_40_5f", "journal_60_7f", "journal_80_9f"]
        .iter()
        .flat_map(|s| [stream_on(&map, s, "s"), format!("{}-b", stream_on(&map, s, "s"))])
        .filter(|s| map.route_stream(s).is_ok())
        .collect();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();

    // Add node-04 (started unprovisioned; the sequence bootstraps it).
    let mut n4 = extra_node(&c, "node-04").unwrap();
    wait_admin(&n4.api, Duration::from_secs(60)).await.unwrap();
    let n4_api = n4.api.clone();
    under_load(&c, apis.clone(), streams.clone(), || async {
        let out =
            chitin_ok(&["cluster", "add-node", "--config", &config, "--node-id", "node-04", "--node-address", &n4_api]).await;
        assert!(out.contains("step 1/1: version 2") && out.contains("converged"), "{out}");
    })
    .await;
    n4.wait_ready(Duration::from_secs(60)).await.unwrap();
    assert_all_at(&c, &[&n4], 2).await;
    assert_eq!(load(&c.config).version, 2);

    // Move journal_00_1f from node-01 to node-04.
    under_load(&c, apis.clone(), streams.clone(), || async {
        let out = chitin_ok(&[
            "cluster",
            "move-shard",
            "--config",
            &config,
            "--shard-id",
            "journal_00_1f",
            "--from-node",
            "node-01",
            "--to-node",
            "node-04",
            "--bake-secs",
            "2",
        ])
        .await;
        assert!(out.contains("step 1/2: version 3") && out.contains("step 2/2: version 4"), "{out}");
    })
    .await;
    assert_all_at(&c, &[&n4], 4).await;
    let after = load(&c.config);
    let moved = after.shards().find(|(_, s)| s.id == "journal_00_1f").unwrap().1;
    let nodes: HashSet<&str> = moved.replicas.iter().map(|r| r.node_id.as_str()).collect();
    assert_eq!(nodes, HashSet::from(["node-02", "node-03", "node-04"]));
    let s = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    let holder = s.leases.iter().find(|l| l.shard == "journal_00_1f").map(|l| l.holder.clone());
    assert_ne!(holder.as_deref(), Some("node-01"), "node-01 holds a shard it has no replica of: {:?}", s.leases);

    // Split journal_20_3f in two at 30000000.
    let acked = under_load(&c, apis.clone(), streams.clone(), || async {
        let out = chitin_ok(&[
            "cluster",
            "split-shard",
            "--config",
            &config,
            "--shard-id",
            "journal_20_3f",
            "--split-at",
            "30000000",
            "--bake-secs",
            "1",
        ])
        .await;
        assert!(out.contains("step 2/2: version 6"), "{out}");
    })
    .await;
    let after = load(&c.config);
    let state = |id: &str| after.shards().find(|(_, s)| s.id == id).map(|(_, s)| s.state);
    assert_eq!(state("journal_20_3f"), Some(ShardState::Inactive));
    assert_eq!(state("journal_20_2f"), Some(ShardState::Active));
    assert_eq!(state("journal_30_3f"), Some(ShardState::Active));
    // Keys of the range route to the children now.
    let map = ShardMap::from_config(&after);
    for s in &streams {
        if let Ok(l) = map.route_stream(s) {
            assert_ne!(l.id, "journal_20_3f");
        }
    }
    // The last append of each stream of the split range was served by a child.
    let children = ["journal_20_2f", "journal_30_3f"];
    let mut in_range = 0;
    for s in &streams {
        if !children.contains(&map.route_stream(s).unwrap().id.as_str()) {
            continue;
        }
        in_range += 1;
        let (_, id, shard) = acked.iter().rev().find(|(st, _, _)| st == s).expect("appends to every stream");
        assert!(children.contains(&shard.as_str()), "append {id} of {s} after the split was served by {shard}");
    }
    assert!(in_range > 0, "no stream in the split range");

    // Split journal_40_5f in four (the split policy chooses).
    under_load(&c, apis.clone(), streams.clone(), || async {
        let out = chitin_ok(&[
            "cluster",
            "split-shard",
            "--config",
            &config,
            "--shard-id",
            "journal_40_5f",
            "--children",
            "4",
            "--bake-secs",
            "1",
        ])
        .await;
        assert!(out.contains("step 2/2: version 8"), "{out}");
    })
    .await;
    let after = load(&c.config);
    let kids: Vec<&str> =
        after.shards().filter(|(_, s)| s.parent_id.as_deref() == Some("journal_40_5f")).map(|(_, s)| s.id.as_str()).collect();
    assert_eq!(kids, ["journal_40_47", "journal_48_4f", "journal_50_57", "journal_58_5f"]);
    assert_all_at(&c, &[&n4], 8).await;
    let s = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    for k in &kids {
        assert!(s.leases.iter().any(|l| l.shard == *k), "child {k} has no holder: {:?}", s.leases);
    }
    drop(n4);
    c.teardown().await.unwrap();
}

/// Kill the CLI during a move's bake; a different sequence is refused while
/// the move is unfinished; a node restarted mid-sequence comes back with its
/// stored config; the same command resumes and finishes.
#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_sequence_resumes_and_blocks_others() {
    let _serial = SERIAL.lock().await;
    let (mut c, config) = bootstrapped_cluster(8).await;
    let n4 = started_extra_node(&c, "node-04").await;
    chitin_ok(&["cluster", "add-node", "--config", &config, "--node-id", "node-04", "--node-address", &n4.api.clone()]).await;

    // Start a move with a long bake and kill the CLI once step 1 converged.
    let move_args = |bake: &str| -> Vec<String> {
        [
            "cluster",
            "move-shard",
            "--config",
            &config,
            "--shard-id",
            "journal_80_9f",
            "--from-node",
            "node-02",
            "--to-node",
            "node-04",
            "--bake-secs",
            bake,
        ]
        .iter()
        .map(|a| a.to_string())
        .collect()
    };
    let mut cli = tokio::process::Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(move_args("60"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(cli.stdout.take().unwrap()).lines();
    let mut seen = Vec::new();
    let found = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(l) = lines.next_line().await.unwrap() {
            seen.push(l.clone());
            if l.contains("baking") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(found, Ok(true)), "no bake line: {seen:?}");
    cli.kill().await.unwrap();
    let _ = cli.wait().await;
    assert_all_at(&c, &[&n4], 3).await;
    let checkpoint = PathBuf::from(format!("{config}.rollout.json"));
    let cp: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&checkpoint).unwrap()).unwrap();
    assert_eq!(cp["done"], 1, "{cp}");
    assert_eq!(load(&c.config).version, 3);

    // Another sequence is refused, naming the unfinished one.
    let (ok, out, err) = chitin(&["cluster", "split-shard", "--config", &config, "--shard-id", "journal_00_1f"]).await;
    assert!(!ok, "{out}");
    assert!(
        err.contains("move-shard --shard-id journal_80_9f --from-node node-02 --to-node node-04") && err.contains("unfinished"),
        "{err}"
    );
    assert_all_at(&c, &[&n4], 3).await;

    // Restart node-03: it comes back with its stored config.
    c.node("node-03").terminate(Duration::from_secs(30)).unwrap();
    c.node("node-03").start().unwrap();
    let api3 = c.node("node-03").api.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    let r = loop {
        let r = wait_admin(&api3, Duration::from_secs(60)).await.unwrap();
        if !r.config_json.is_empty() || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(r.config_version, 3, "{r:?}");

    // Resume: the same command finishes the move.
    let resume = move_args("1");
    let resume: Vec<&str> = resume.iter().map(String::as_str).collect();
    let out = chitin_ok(&resume).await;
    assert!(out.contains("resuming") && out.contains("step 2/2: version 4"), "{out}");
    assert!(!out.contains("step 1/2"), "step 1 ran again: {out}");
    assert_all_at(&c, &[&n4], 4).await;
    let out = chitin_ok(&resume).await;
    assert!(out.contains("already finished"), "{out}");
    // Now another sequence may start.
    chitin_ok(&["cluster", "split-shard", "--config", &config, "--shard-id", "journal_00_1f", "--bake-secs", "0"]).await;
    assert_all_at(&c, &[&n4], 6).await;
    drop(n4);
    c.teardown().await.unwrap();
}

/// A node pushed an invalid transition refuses it with the rule and keeps
/// its config; a sequence whose base the nodes do not run is refused.
#[tokio::test(flavor = "multi_thread")]
async fn invalid_transitions_are_refused() {
    let _serial = SERIAL.lock().await;
    let (c, config) = bootstrapped_cluster(4).await;
    let base = load(&c.config);

    // Remove a replica and add another in one version: refused.
    let mut bad = base.clone();
    bad.version = 2;
    let s = &mut bad.applications[0].shards[0];
    s.replicas.pop();
    s.replicas.push(chitin::topology::Replica { id: "x_new".into(), node_id: "node-03".into(), metadata: vec![] });
    let mut admin = c.nodes[0].admin().await.unwrap();
    let e = admin.update_config(proto::UpdateConfigRequest { config_json: bad.to_json() }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    let r = admin.get_config(proto::GetConfigRequest {}).await.unwrap().into_inner();
    assert_eq!(r.config_version, 1);
    assert_eq!(ClusterConfig::from_json(&r.config_json).unwrap(), base);

    // The same version again: refused (the version must increase).
    let e = admin.update_config(proto::UpdateConfigRequest { config_json: base.to_json() }).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");

    // A stale config file: the nodes run version 1, the file claims 5.
    let mut stale = base.clone();
    stale.version = 5;
    std::fs::write(&c.config, stale.to_json()).unwrap();
    let (ok, _, err) =
        chitin(&["cluster", "split-shard", "--config", &config, "--shard-id", &base.applications[0].shards[0].id]).await;
    assert!(!ok && err.contains("do not all run the config file's version 5"), "{err}");
    assert!(!Path::new(&format!("{config}.rollout.json")).exists(), "a refused start left a checkpoint");
    c.teardown().await.unwrap();
}

/// `add-node --rebalance`: the placement policy's moves onto the new node, in
/// rounds of at most `--max-handoffs-per-round`, each round an add and a
/// (baked) remove; every shard keeps a holder.
#[tokio::test(flavor = "multi_thread")]
async fn add_node_with_rebalance() {
    let _serial = SERIAL.lock().await;
    let (c, config) = bootstrapped_cluster(4).await;
    let n4 = started_extra_node(&c, "node-04").await;
    let out = chitin_ok(&[
        "cluster",
        "add-node",
        "--config",
        &config,
        "--node-id",
        "node-04",
        "--node-address",
        &n4.api.clone(),
        "--rebalance",
        "--max-handoffs-per-round",
        "2",
        "--bake-secs",
        "0",
    ])
    .await;
    // 12 replicas over 4 nodes: 3 move to node-04, in rounds of 2 and 1.
    assert!(out.contains("step 5/5: version 6") && out.contains("round 2/2"), "{out}");
    let after = load(&c.config);
    let on4 = after.shards().flat_map(|(_, s)| &s.replicas).filter(|r| r.node_id == "node-04").count();
    assert_eq!(on4, 3, "{}", after.to_json());
    assert_all_at(&c, &[&n4], 6).await;
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    // Already balanced: nothing to do.
    let out = chitin_ok(&["cluster", "rebalance", "--config", &config]).await;
    assert!(out.contains("nothing to do"), "{out}");
    drop(n4);
    c.teardown().await.unwrap();
}
