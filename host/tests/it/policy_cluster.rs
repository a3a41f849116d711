//! The same policies on every node, through real node processes on one
//! PostgreSQL database: a node whose component differs from the cluster's
//! record takes no lease and says so (Status, /health, /metrics), a control
//! sequence planned with other components than the cluster's is refused,
//! a drain of another node hands it nothing, and `policies.allow_mismatch`
//! lets the node take leases anyway; components that trap on every call
//! leave the embedded default to rank and to plan a drain.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use chitin::api::proto;

fn other_drain() -> String {
    PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join("drain_one_round.wasm").display().to_string()
}

async fn held_by(c: &Cluster, name: &str) -> usize {
    c.status().await.unwrap().leases.iter().filter(|l| l.holder == name).count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_running_another_component_takes_no_lease_unless_allowed() {
    let guest = other_drain();
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 0, |name, s| {
        if name == "node-03" {
            s.policies.drain = guest.clone();
        }
    })
    .await
    .unwrap();
    for n in &mut c.nodes[..2] {
        n.start().unwrap();
    }
    for n in &mut c.nodes[..2] {
        n.wait_ready(Duration::from_secs(60)).await.unwrap();
    }
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    c.nodes[2].start().unwrap();
    c.nodes[2].wait_ready(Duration::from_secs(60)).await.unwrap();
    // Rounds every 0.5 s: a node that took leases would hold some by now.
    tokio::time::sleep(RENEW * 8).await;

    let mut admin = c.nodes[2].admin().await.unwrap();
    let status = admin.status(proto::StatusRequest {}).await.unwrap().into_inner();
    let drain_cluster = status.cluster_policies.get("drain").cloned().unwrap();
    let drain_ours = status.nodes.iter().find(|n| n.name == "node-03").unwrap().policies.get("drain").cloned().unwrap();
    assert_ne!(drain_cluster, drain_ours);
    assert_eq!(status.policy_mismatch.len(), 1, "{:?}", status.policy_mismatch);
    for part in ["slot drain", &drain_cluster, &drain_ours] {
        assert!(status.policy_mismatch[0].contains(part), "{:?}", status.policy_mismatch);
    }
    assert_eq!(held_by(&c, "node-03").await, 0, "a mismatched node took leases:\n{}", c.logs());
    let (_, health) = http_get(&c.nodes[2].metrics, "/health", None).await.unwrap();
    assert!(health.contains("\"policy_mismatch\":[{") && health.contains(&drain_ours), "{health}");
    let (_, metrics) = http_get(&c.nodes[2].metrics, "/metrics", None).await.unwrap();
    assert!(metrics.contains("chitin_policy_mismatch{slot=\"drain\"} 1"), "{metrics}");
    assert!(metrics.contains("chitin_policy_mismatch{slot=\"placement\"} 0"), "{metrics}");

    // A sequence planned with node-03's components is refused before it runs.
    let out = std::process::Command::new(CHITIN)
        .args(["cluster", "rebalance", "--config", c.config_path().to_str().unwrap(), "--settings"])
        .arg(&c.nodes[2].settings)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for part in ["slot drain", drain_cluster.as_str(), drain_ours.as_str(), "--settings"] {
        assert!(stderr.contains(part), "{part} missing from: {stderr}");
    }

    // A drain of node-01 hands node-03 nothing (it would not take a lease
    // up, and the shard would wait for its expiry): every shard goes to
    // node-02, and no lease was ever granted to node-03.
    let mut admin1 = c.nodes[0].admin().await.unwrap();
    let report = admin1.drain(proto::DrainRequest {}).await.unwrap().into_inner();
    // (A shard node-01's own round is handing over at that moment is kept
    // by the drain, "already being handed over"; none may name node-03.)
    assert!(report.handed_over > 0 && report.kept.iter().all(|k| !k.why.contains("node-03")), "{report:?}");
    let history = c.store().await.history(None).await.unwrap();
    let to_03: Vec<_> = history.iter().filter(|h| h.holder_name == "node-03").collect();
    assert!(to_03.is_empty(), "leases granted to the mismatched node: {to_03:?}");
    let status = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    assert!(status.leases.iter().all(|l| l.holder == "node-02"), "{:?}", status.leases);

    // Allowed, the same node takes its share.
    c.nodes[2].terminate(Duration::from_secs(30)).unwrap();
    let path = c.nodes[2].settings.clone();
    let mut s = chitin::settings::Settings::load(Some(&path), std::iter::empty::<(String, String)>()).unwrap();
    s.policies.allow_mismatch = true;
    node_settings::write(&path, &s).unwrap();
    c.nodes[2].start().unwrap();
    c.nodes[2].wait_ready(Duration::from_secs(60)).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while held_by(&c, "node-03").await == 0 {
        assert!(Instant::now() < deadline, "node-03 took no lease with allow_mismatch:\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.teardown().await.unwrap();
}

/// Components that trap on every call stop no takeover and no drain: the
/// embedded default ranks and plans instead, loudly (the node's status, a
/// metric, one warning per streak), a killed holder's shards are writable
/// elsewhere, and a drain hands every shard over. Before, no round could
/// rank, so no node ever took a lease, and a drain failed.
#[tokio::test(flavor = "multi_thread")]
async fn components_that_always_trap_leave_the_default_to_rank_and_drain_and_takeovers_go_on() {
    let guests = PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR"));
    let (placement, drain) = (guests.join("bad_trap.wasm"), guests.join("bad_drain.wasm"));
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, s| {
        s.policies.placement = placement.display().to_string();
        s.policies.drain = drain.display().to_string();
    })
    .await
    .unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    assert!(status.unowned.is_empty(), "{:?}", status.unowned);
    let fallbacks = &status.policy_fallbacks;
    assert!(
        fallbacks.len() == 1 && fallbacks[0].starts_with("placement: ") && fallbacks[0].contains("bad_trap always panics"),
        "{fallbacks:?}"
    );
    let (_, metrics) = http_get(&c.nodes[0].metrics, "/metrics", None).await.unwrap();
    let counted = metrics.lines().find_map(|l| l.strip_prefix("chitin_policy_fallbacks_total ")).unwrap_or("0");
    assert!(counted.parse::<f64>().unwrap() >= 1.0, "{metrics}");
    let warnings = c.nodes[0].log_text().matches("the embedded default answers for it").count();
    assert_eq!(warnings, 1, "one warning per streak of failures:\n{}", c.nodes[0].log_tail(30));

    let v = c.busiest(&status);
    let victim = c.nodes[v].name.clone();
    let map = c.shard_map();
    let others: Vec<String> = c.nodes.iter().enumerate().filter(|(i, _)| *i != v).map(|(_, n)| n.api.clone()).collect();
    c.nodes[v].kill9().unwrap();
    for lease in status.leases.iter().filter(|l| l.holder == victim) {
        let stream = stream_on(&map, &lease.shard, "fallback");
        append_until_acked(others.clone(), stream, "after-kill".into(), Duration::from_secs(30))
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", lease.shard, c.logs()));
    }

    // The survivor holding more drains: the default plans it, and every
    // shard goes to the other one (a shard its own round was handing over
    // at that moment is kept by the drain, and goes there too).
    let status = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    let held = |name: &str| status.leases.iter().filter(|l| l.holder == name).count();
    let mut survivors: Vec<usize> = (0..c.nodes.len()).filter(|i| *i != v).collect();
    survivors.sort_by_key(|i| std::cmp::Reverse(held(&c.nodes[*i].name)));
    let (leaving, staying) = (survivors[0], c.nodes[survivors[1]].name.clone());
    let mut admin = c.nodes[leaving].admin().await.unwrap();
    let report = admin.drain(proto::DrainRequest {}).await.unwrap_or_else(|e| panic!("{e}\n{}", c.logs())).into_inner();
    let racing = |why: &str| why.contains("already being handed over");
    assert!(report.handed_over > 0 && report.kept.iter().all(|k| racing(&k.why)), "{report:?}");
    let fallbacks = admin.status(proto::StatusRequest {}).await.unwrap().into_inner().policy_fallbacks;
    assert!(fallbacks.iter().any(|f| f.starts_with("drain: ") && f.contains("bad_drain always panics")), "{fallbacks:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let status = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
        if status.leases.iter().all(|l| l.holder == staying) {
            break;
        }
        assert!(Instant::now() < deadline, "shards left on the drained node: {:?}", status.leases);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    c.teardown().await.unwrap();
}
