//! Versions on the wire, version gates and the expand/contract rule,
//! against real standalone `chitin node` processes (SQLite) and the
//! migration files themselves:
//! - every call's protocol metadata is judged before a service runs: a
//!   plain call is protocol 1 and served, a caller of a newer protocol is
//!   refused naming both versions, malformed metadata is INVALID_ARGUMENT;
//! - a new cluster starts finalized, so a 0.1.0-style peer call (no
//!   metadata) is refused; a cluster a 0.1.0 node once ran on is not, until
//!   `chitin cluster finalize-upgrade`, which `upgrade-status` reports ready
//!   (these on a one-node PostgreSQL cluster: a standalone node's Peer plane
//!   is closed);
//! - a node refuses to start on a cluster finalized past its release or
//!   one that skips a release, naming both;
//! - every migration of every dialect only adds, outside contract steps.
//!
//! The mixed-version cluster (0.1.0 and this build) is `upgrade_mixed.rs`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use chitin::lease::Store;
use chitin::proto::{self, journal_client::JournalClient, peer_client::PeerClient};
use chitin::upgrade::{self, BINARY_VERSION, expand, gates};
use tonic::Code;
use tonic::transport::Channel;

async fn chitin_json(args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new(CHITIN).args(args).env("RUST_LOG", "warn").output().await.expect("run chitin");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "chitin {} failed:\n{stdout}\n{stderr}", args.join(" "));
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("chitin {}: not JSON ({e}):\n{stdout}", args.join(" ")))
}

async fn chitin_text(args: &[&str]) -> (bool, String) {
    let out = tokio::process::Command::new(CHITIN).args(args).env("RUST_LOG", "warn").output().await.expect("run chitin");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

async fn channel(api: &str) -> Channel {
    Channel::from_shared(format!("http://{api}")).unwrap().connect().await.unwrap()
}

/// A request with exactly these metadata entries.
fn with_metadata<T>(message: T, metadata: &[(&'static str, &'static str)]) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for (k, v) in metadata {
        request.metadata_mut().insert(*k, v.parse().unwrap());
    }
    request
}

fn notice() -> proto::OwnershipNotice {
    proto::OwnershipNotice {
        shard: "none".into(),
        epoch: 1,
        holder_uuid: uuid::Uuid::new_v4().to_string(),
        holder: "elsewhere".into(),
    }
}

fn append(id: &str) -> proto::AppendRequest {
    proto::AppendRequest { stream: "versions".into(), request_id: id.into(), payload: b"x".to_vec(), forwarded: false }
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("data").join("chitin.db").display())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_is_judged_by_its_protocol() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "versions", |_| {}).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let ch = channel(&node.api).await;
    let mut journal = JournalClient::new(ch.clone());

    journal.append(append("plain")).await.expect("a call without protocol metadata is protocol 1, served");
    JournalClient::new(upgrade::wire::versioned(ch.clone())).append(append("stamped")).await.expect("this binary's own stamp");
    let newer = [("chitin-protocol", "4"), ("chitin-protocol-min", "3"), ("chitin-version", "0.4.0")];
    let e = journal.append(with_metadata(append("newer"), &newer)).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    for says in ["chitin 0.4.0, speaking protocol 3..=4", &format!("this node runs chitin {BINARY_VERSION}"), "upgrade this node"]
    {
        assert!(e.message().contains(says), "`{says}` missing: {e:?}");
    }
    for bad in [&[("chitin-protocol", "two")][..], &[("chitin-protocol", "2"), ("chitin-protocol-min", "5")]] {
        let e = journal.append(with_metadata(append("bad"), bad)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{bad:?}: {e:?}");
        assert!(e.message().contains("chitin-protocol"), "{e:?}");
    }
    let read = journal.read(proto::ReadRequest { stream: "versions".into(), from: 0, limit: 0 }).await.unwrap().into_inner();
    let ids: Vec<&str> = read.entries.iter().map(|e| e.request_id.as_str()).collect();
    assert_eq!(ids, ["plain", "stamped"], "a refused call must not have run");

    // A standalone node has no peers: its Peer plane is closed, whatever the protocol.
    for e in [
        PeerClient::new(ch.clone()).notice(notice()).await.unwrap_err(),
        PeerClient::new(upgrade::wire::versioned(ch.clone())).notice(notice()).await.unwrap_err(),
    ] {
        assert_eq!(e.code(), Code::PermissionDenied, "a peer call to a standalone node: {e:?}");
    }

    let s = chitin_json(&["cluster", "upgrade-status", "--node", &node.api, "--json"]).await;
    assert_eq!(s["cluster_version"], upgrade::Release::binary().to_string(), "{s}");
    assert_eq!(s["nodes"][0]["version"], BINARY_VERSION, "{s}");
    assert_eq!(s["nodes"][0]["protocol"], upgrade::PROTOCOL, "{s}");
    assert_eq!(s["gates"][0]["name"], gates::PEER_PROTOCOL_2.name, "{s}");
    assert_eq!(s["gates"][0]["active"], true, "{s}");
    assert_eq!(s["finalize_to"], "", "{s}");
    let status = chitin_json(&["cluster", "status", "--node", &node.api, "--json"]).await;
    assert_eq!(status["nodes"][0]["version"], BINARY_VERSION, "{status}");
    let (ok, said) = chitin_text(&["cluster", "finalize-upgrade", "--node", &node.api]).await;
    assert!(ok && said.contains("nothing changed"), "{said}");
}

/// A new cluster starts finalized at this release: the peer gate is on.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_cluster_refuses_a_0_1_0_peer_call() {
    let c = Cluster::new(Dialect::Postgres, 1, 4, 1, |_, _| {}).await.unwrap();
    let ch = channel(&c.nodes[0].api).await;
    let e = PeerClient::new(ch.clone()).notice(notice()).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "an unstamped peer call in a finalized cluster: {e:?}");
    assert!(e.message().contains("chitin 0.1.0") && e.message().contains("serves protocol 2"), "{e:?}");
    PeerClient::new(upgrade::wire::versioned(ch)).notice(notice()).await.expect("a protocol-2 peer");
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_a_0_1_0_node_ran_on_waits_for_finalize() {
    // What 0.1.0 leaves: a registration with no version recorded.
    let db = TestDb::create(Dialect::Postgres).await.unwrap();
    let store = Store::connect(&db.url).await.unwrap();
    store.migrate().await.unwrap();
    let old = store.register_node("old-node", "127.0.0.1:1").await.unwrap();
    store.deregister(old).await.unwrap();
    store.close().await;

    let c = Cluster::on(db, 1, 4, 1, |_, _| {}).await.unwrap();
    let node = &c.nodes[0];
    let ch = channel(&node.api).await;
    PeerClient::new(ch.clone()).notice(notice()).await.expect("before finalize a 0.1.0 peer is served");
    let s = chitin_json(&["cluster", "upgrade-status", "--node", &node.api, "--json"]).await;
    assert_eq!((s["cluster_version"].as_str(), s["gates"][0]["active"].as_bool()), (Some("0.1"), Some(false)), "{s}");
    assert_eq!(s["finalize_to"], upgrade::Release::binary().to_string(), "{s}");
    assert_eq!(s["blockers"], serde_json::json!([]), "{s}");

    let (ok, said) = chitin_text(&["cluster", "finalize-upgrade", "--node", &node.api]).await;
    assert!(ok && said.contains("gate on: peer-protocol-2"), "{said}");
    let s = chitin_json(&["cluster", "upgrade-status", "--node", &node.api, "--json"]).await;
    assert_eq!(s["gates"][0]["active"], true, "{s}");
    // The layer reads the cluster version again within seconds.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match PeerClient::new(ch.clone()).notice(notice()).await {
            Err(e) if e.code() == Code::FailedPrecondition => break,
            other if Instant::now() > deadline => panic!("a 0.1.0 peer is still served after finalize: {other:?}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
    PeerClient::new(upgrade::wire::versioned(ch)).notice(notice()).await.expect("a protocol-2 peer");
    c.teardown().await.unwrap();
}

/// Sets the cluster version of a stopped standalone node's database.
async fn set_cluster_version(dir: &Path, version: &str) {
    let pool = sqlx::SqlitePool::connect(&sqlite_url(dir)).await.unwrap();
    sqlx::query("UPDATE chitin_cluster_version SET version = ?1").bind(version).execute(&pool).await.unwrap();
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_refuses_a_cluster_outside_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "versions", |_| {}).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success());
    let cases = [
        ("0.9", vec!["the cluster was finalized at 0.9", "a node older than the cluster version cannot join", BINARY_VERSION]),
        ("0.0", vec!["upgrade one release at a time", "the cluster is at 0.0", BINARY_VERSION]),
    ];
    for (version, says) in cases {
        set_cluster_version(dir.path(), version).await;
        node.start().unwrap();
        let err = node.wait_ready(Duration::from_secs(60)).await.unwrap_err().to_string();
        for s in says {
            assert!(err.contains(s), "cluster at {version}: `{s}` missing from\n{err}");
        }
    }
    // Back at its own release it starts again.
    set_cluster_version(dir.path(), &upgrade::Release::binary().to_string()).await;
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
}

fn migrations_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations")
}

/// Every file of every dialect, checked against the expand/contract rule.
#[test]
fn every_migration_only_expands_outside_contract_steps() {
    let mut problems = Vec::new();
    let mut dialects: Vec<(String, Vec<String>)> = Vec::new();
    let mut checked = 0;
    for dialect in std::fs::read_dir(migrations_root()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()) {
        let mut names = Vec::new();
        for file in std::fs::read_dir(&dialect).unwrap().map(|e| e.unwrap().path()) {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let shown = format!("host/migrations/{}/{name}", dialect.file_name().unwrap().to_string_lossy());
            if !name.ends_with(".sql") {
                problems.push(format!("{shown}: not a .sql file; migrations are <number>_<name>.sql"));
                continue;
            }
            names.push(name);
            let sql = std::fs::read_to_string(&file).unwrap();
            checked += 1;
            match expand::contract_gate(&sql) {
                Some(gate) if gates::gate(gate).is_none() => problems.push(format!(
                    "{shown}: its contract header names gate `{gate}`, which is not in chitin::upgrade::gates::GATES ({})",
                    gates::GATES.iter().map(|g| g.name).collect::<Vec<_>>().join(", ")
                )),
                Some(_) => {}
                None => problems.extend(expand::destructive(&sql).into_iter().map(|f| {
                    format!(
                        "{shown}: statement {} `{}` {}. A migration must only add while the previous release runs on the \
                         schema; ship this a release later as a contract step, a file of its own headed \
                         `-- contract: gated by <gate>` naming the gate that must be finalized first (docs/upgrades.md)",
                        f.statement, f.sql, f.why
                    )
                })),
            }
        }
        names.sort();
        dialects.push((dialect.file_name().unwrap().to_string_lossy().into_owned(), names));
    }
    let (first, names) = &dialects[0];
    for (other, theirs) in &dialects[1..] {
        if theirs != names {
            problems.push(format!("the dialects have different migrations: {first} has {names:?}, {other} has {theirs:?}"));
        }
    }
    assert_eq!(dialects.len(), 3, "postgres, mysql and sqlite: {dialects:?}");
    assert!(checked >= 9, "too few migrations read ({checked}): is {} the migrations directory?", migrations_root().display());
    assert!(problems.is_empty(), "migrations break the expand/contract rule:\n{}", problems.join("\n"));
}
