//! Shadow comparison through the CLI, with real components: `chitin policy
//! diff` of the default against itself finds nothing, the zone-aware
//! placement example (built from `plugins/zone-placement`) moves exactly
//! the shards its own answers place elsewhere (each into three zones), a
//! snapshot of a running cluster (`chitin cluster snapshot`) round-trips
//! through `policy diff` and `policy fixture` → `policy test`, and a
//! malformed snapshot is refused saying where.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::support::cluster::*;
use chitin::policy::{Limits, Plugin, PluginSource, Slot, SlotRunner, sdk};
use chitin::rollout::shadow::Report;
use chitin::topology::ClusterConfig;
use chitin::topology::model::Metadata;
use chitin::topology::snapshot::{Snapshot, SnapshotLease, SnapshotLoad, SnapshotNode, VERSION};

const GUEST_TARGET: &str = "wasm32-wasip2";

/// The zone-aware placement example, built once per test process (into the
/// target directory `plugin_examples.rs` uses, in a scrubbed environment).
fn zone_placement() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = crate::support::repo_root().join("target").join("plugin-examples");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        for (key, _) in std::env::vars() {
            if key.starts_with("CARGO_") && key != "CARGO_HOME" || key == "RUSTFLAGS" || key == "RUSTC_WRAPPER" {
                cmd.env_remove(&key);
            }
        }
        cmd.args(["build", "--release", "--target", GUEST_TARGET, "-p", "zone-placement", "--manifest-path"])
            .arg(crate::support::repo_root().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(&target);
        let out = cmd.output().expect("run cargo");
        assert!(out.status.success(), "building zone-placement failed:\n{}", String::from_utf8_lossy(&out.stderr));
        let wasm = target.join(GUEST_TARGET).join("release").join("zone_placement.wasm");
        assert!(wasm.is_file(), "no {}", wasm.display());
        wasm
    })
}

fn chitin(args: &[&str]) -> Output {
    Command::new(CHITIN).args(args).output().expect("run chitin")
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "exit {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

fn diff_json(plugin: &str, snapshot: &Path) -> Report {
    let out = chitin(&["policy", "diff", "--plugin", plugin, "--json", snapshot.to_str().unwrap()]);
    serde_json::from_str(&ok(&out)).expect("the --json report parses")
}

const ZONES: [&str; 3] = ["a", "b", "c"];

/// Six live nodes, two in each zone, 16 shards of rf 3 (every node a
/// replica, as the lab's configs have it), leases spread round-robin.
fn zoned_snapshot() -> Snapshot {
    let pairs: Vec<(String, String)> = (1..=6).map(|i| (format!("node-{i:02}"), format!("10.0.0.{i}:7000"))).collect();
    let mut config = ClusterConfig::from_json(&chitin::chaos::lab::cluster_config(&pairs, 16, 3)).unwrap();
    for (i, n) in config.nodes.iter_mut().enumerate() {
        n.metadata = vec![Metadata::new("zone", ZONES[i / 2])];
    }
    let nodes = pairs
        .iter()
        .enumerate()
        .map(|(i, (name, address))| SnapshotNode {
            name: name.clone(),
            id: format!("00000000-0000-0000-0000-{:012}", i + 1),
            address: address.clone(),
            state: sdk::NodeState::Active,
            live: true,
            zone: None,
            labels: vec![],
        })
        .collect();
    let leases = config
        .shards()
        .enumerate()
        .map(|(i, (_, s))| SnapshotLease {
            shard: s.id.clone(),
            holder: pairs[i % 6].0.clone(),
            holder_id: String::new(),
            epoch: 1,
            live: true,
        })
        .collect();
    let hot = config.applications[0].shards[0].clone();
    let load = vec![SnapshotLoad {
        shard: hot.id.clone(),
        ops_per_sec: 64.0,
        bytes_per_sec: 640.0,
        // All of it in the first sub-range.
        ranges: vec![sdk::RangeLoad { lower: hot.lower, upper: hot.lower + 1000, keys: 0, bytes: 640, ops_per_sec: 64.0 }],
    }];
    let mut snap = Snapshot {
        version: VERSION,
        taken_at: String::new(),
        taken_via: String::new(),
        config,
        nodes,
        leases,
        load,
        policies: BTreeMap::new(),
    };
    snap.complete_nodes();
    snap
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

fn assert_no_differences(report: &Report) {
    assert!(report.identical, "{report:#?}");
    assert!(report.placement.is_empty() && report.holders.is_empty() && report.splits.is_empty(), "{report:#?}");
    assert!(report.drains.is_empty() && report.failures.is_empty() && report.rebalance.is_none(), "{report:#?}");
    assert!(report.calls.iter().all(|c| c.differing == 0 && c.cases > 0), "{report:#?}");
}

#[test]
fn the_default_against_itself_differs_in_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let snap = write(tmp.path(), "snap.json", &zoned_snapshot().to_json());
    let report = diff_json("default", &snap);
    assert_no_differences(&report);
    // Every call of every slot but instance-id ran.
    let calls: BTreeSet<&str> = report.calls.iter().map(|c| c.call.as_str()).collect();
    assert_eq!(calls, BTreeSet::from(["place-replicas", "rebalance", "preferred-holders", "split-points", "plan-drain"]));
    let drains = report.calls.iter().find(|c| c.call == "plan-drain").unwrap();
    assert_eq!(drains.cases, 6, "one drain per live node holding leases");
    assert_eq!(report.skipped.iter().map(|s| s.slot).collect::<Vec<_>>(), vec![Slot::InstanceId]);
    let human = ok(&chitin(&["policy", "diff", "--plugin", "default", "--against", "default", snap.to_str().unwrap()]));
    assert!(human.contains("no differences"), "{human}");
}

/// Each shard's replica nodes as `plugin` places the whole application from
/// scratch, asked directly (not through the diff's request builder).
fn placed_by(plugin: Arc<Plugin>, snap: &Snapshot) -> BTreeMap<String, BTreeSet<String>> {
    let runner = SlotRunner::new(plugin, Slot::Placement, Limits::default()).unwrap();
    let nodes: Vec<sdk::Node> = snap
        .config
        .nodes
        .iter()
        .map(|n| sdk::Node {
            id: n.id.clone(),
            address: n.grpc_address.clone(),
            zone: Some(n.metadata[0].value.clone()),
            labels: vec![sdk::Label { key: "zone".into(), value: n.metadata[0].value.clone() }],
            state: sdk::NodeState::Active,
        })
        .collect();
    let shards: Vec<sdk::Shard> = snap
        .config
        .shards()
        .map(|(a, s)| sdk::Shard {
            id: s.id.clone(),
            application: a.name.clone(),
            lower: s.lower,
            upper: s.upper,
            ..Default::default()
        })
        .collect();
    let request = sdk::PlacementRequest {
        new_shards: shards.iter().map(|s| s.id.clone()).collect(),
        nodes,
        shards,
        replicas: vec![],
        replication_factor: 3,
    };
    runner.place_replicas(request).unwrap().into_iter().map(|p| (p.shard, p.nodes.into_iter().collect())).collect()
}

#[test]
fn zone_placement_against_the_default_reports_exactly_its_moves() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = zoned_snapshot();
    let snap = write(tmp.path(), "snap.json", &snapshot.to_json());
    let zone = zone_placement();
    let report = diff_json(zone.to_str().unwrap(), &snap);

    let default = Arc::new(Plugin::load(&PluginSource::Default, None).unwrap());
    let candidate = Arc::new(Plugin::load(&PluginSource::File(zone.to_path_buf()), None).unwrap());
    let (old, new) = (placed_by(default, &snapshot), placed_by(candidate, &snapshot));
    let expected: Vec<(String, Vec<String>, Vec<String>)> = old
        .iter()
        .filter(|(shard, nodes)| new[*shard] != **nodes)
        .map(|(shard, nodes)| (shard.clone(), nodes.iter().cloned().collect(), new[shard].iter().cloned().collect()))
        .collect();
    assert!(!expected.is_empty(), "the default put no two replicas of a shard in one zone: a weak test");
    let got: Vec<(String, Vec<String>, Vec<String>)> =
        report.placement.iter().map(|p| (p.shard.clone(), p.old.clone(), p.new.clone())).collect();
    assert_eq!(got, expected);
    assert!(!report.identical);

    let zone_of = |node: &str| ZONES[node[5..].parse::<usize>().unwrap().saturating_sub(1) / 2];
    for p in &report.placement {
        assert_eq!(p.application, "journal");
        let zones: BTreeSet<&str> = p.new.iter().map(|n| zone_of(n)).collect();
        assert_eq!(zones.len(), 3, "{} moved into zones {zones:?}", p.shard);
    }
    // Every shard the default put twice in one zone is among the moves (the
    // others may move too: the example breaks ties by load, then node id).
    for (shard, nodes) in &old {
        let zones: BTreeSet<&str> = nodes.iter().map(|n| zone_of(n)).collect();
        if zones.len() < 3 {
            assert!(report.placement.iter().any(|p| &p.shard == shard), "{shard} stays in zones {zones:?}");
        }
    }
    // It ranks holders as the default does, and serves placement alone.
    assert!(report.holders.is_empty(), "{:?}", report.holders);
    let skipped: BTreeSet<Slot> = report.skipped.iter().map(|s| s.slot).collect();
    assert_eq!(skipped, BTreeSet::from([Slot::InstanceId, Slot::Split, Slot::Drain]));
    assert!(report.calls.iter().all(|c| c.slot == Slot::Placement), "{:?}", report.calls);

    let human = ok(&chitin(&["policy", "diff", "--plugin", zone.to_str().unwrap(), snap.to_str().unwrap()]));
    assert!(human.contains(&format!("replicas moved ({} shards", expected.len())), "{human}");
    let (shard, before, after) = &expected[0];
    assert!(human.contains(&format!("{shard}: {} -> {}", before.join(", "), after.join(", "))), "{human}");
    assert!(human.contains("not compared"), "{human}");
}

#[test]
fn a_malformed_snapshot_or_component_is_refused_saying_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let good = zoned_snapshot().to_json();
    let cases: Vec<(String, Vec<&str>)> = vec![
        (good.replacen("\"live\": true", "\"live\": true, \"colour\": \"red\"", 1), vec!["unknown field `colour`", "line "]),
        (good.replacen("\"epoch\": 1", "\"epoch\": -1", 1), vec!["invalid value: integer `-1`", "line "]),
        (good.replacen("\"version\": 1,", "\"version\": 7,", 1), vec!["layout version 7 is not supported"]),
        (good.replacen("\"lower_bound\": \"10\"", "\"lower_bound\": \"1g\"", 1), vec!["lower_bound `1g`", "line "]),
        (
            good.replacen("\"holder\": \"node-01\"", "\"holder\": \"node-01\", \"shard\": \"nope\"", 1),
            vec!["duplicate field `shard`"],
        ),
        (good[..good.len() / 3].to_string(), vec!["EOF"]),
    ];
    for (i, (text, needles)) in cases.iter().enumerate() {
        let path = write(tmp.path(), &format!("bad-{i}.json"), text);
        for args in [vec!["policy", "diff", "--plugin", "default"], vec!["policy", "fixture", "--slot", "split", "--from"]] {
            let mut args = args.clone();
            args.push(path.to_str().unwrap());
            let out = chitin(&args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?} accepted case {i}");
            assert!(stderr.contains(&format!("bad-{i}.json")), "{stderr}");
            for needle in needles {
                assert!(stderr.contains(needle), "case {i}: `{needle}` missing from: {stderr}");
            }
        }
    }
    let snap = write(tmp.path(), "snap.json", &good);
    let not_wasm = write(tmp.path(), "plugin.wasm", "hello");
    let out = chitin(&["policy", "diff", "--plugin", not_wasm.to_str().unwrap(), snap.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a WebAssembly component"), "{out:?}");
    let out = chitin(&["policy", "diff", "--plugin", "default", tmp.path().join("missing.json").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read the snapshot"), "{out:?}");
}

#[test]
fn fixtures_from_a_snapshot_pass_for_their_component_and_catch_another() {
    let tmp = tempfile::tempdir().unwrap();
    let snap = write(tmp.path(), "snap.json", &zoned_snapshot().to_json());
    // One call to stdout, TOML, accepted by `policy test`.
    let one = ok(&chitin(&[
        "policy",
        "fixture",
        "--from",
        snap.to_str().unwrap(),
        "--call",
        "split-points",
        "--subject",
        "journal_00_0f",
    ]));
    assert!(one.contains("call = \"split-points\""), "{one}");
    let file = write(tmp.path(), "split.toml", &one);
    let test = ok(&chitin(&["policy", "test", "--plugin", "default", file.to_str().unwrap()]));
    assert!(test.ends_with("1 passed, 0 failed\n"), "{test}");
    // Several matches need --out.
    let out = chitin(&["policy", "fixture", "--from", snap.to_str().unwrap(), "--slot", "split"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("--out DIR"), "{out:?}");
    // All of them, in both formats.
    for (dir, extra) in [("toml", None), ("json", Some("--json"))] {
        let dir = tmp.path().join(dir);
        let mut args = vec!["policy", "fixture", "--from", snap.to_str().unwrap(), "--out", dir.to_str().unwrap()];
        args.extend(extra);
        ok(&chitin(&args));
        let files = std::fs::read_dir(&dir).unwrap().count();
        // 1 place-replicas, 1 rebalance, 1 preferred-holders, 16 split-points, 6 plan-drain.
        assert_eq!(files, 25);
        let test = ok(&chitin(&["policy", "test", "--plugin", "default", dir.to_str().unwrap()]));
        assert!(test.ends_with("25 passed, 0 failed\n"), "{test}");
    }
    // The placement fixture catches the zone-aware component's other placement.
    let dir = tmp.path().join("place");
    ok(&chitin(&[
        "policy",
        "fixture",
        "--from",
        snap.to_str().unwrap(),
        "--call",
        "place-replicas",
        "--out",
        dir.to_str().unwrap(),
    ]));
    let out = chitin(&["policy", "test", "--plugin", zone_placement().to_str().unwrap(), dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && stdout.contains("0 passed, 1 failed"), "{stdout}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_snapshot_of_a_running_cluster_round_trips_through_diff_and_fixtures() {
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let api = c.nodes[0].api.clone();
    for i in 0..40 {
        append_until_acked(vec![api.clone()], format!("stream-{}", i % 4), format!("req-{i}"), Duration::from_secs(20))
            .await
            .unwrap();
    }
    let out = chitin(&["cluster", "snapshot", "--node", &api]);
    let text = ok(&out);
    let snap = Snapshot::from_json(&text).unwrap();
    assert_eq!(snap.version, VERSION);
    let names: Vec<&str> = snap.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["node-01", "node-02", "node-03"]);
    assert!(snap.nodes.iter().all(|n| n.live && n.state == sdk::NodeState::Active && !n.id.is_empty()), "{:?}", snap.nodes);
    for n in &status.nodes {
        assert_eq!(snap.node(&n.name).unwrap().id, n.uuid);
    }
    assert_eq!(snap.leases.len(), 16, "{:?}", snap.leases);
    assert_eq!(snap.config.version, status.config_version);
    assert_eq!(snap.config.shard_count(), 16);
    assert_eq!(snap.policies.len(), 4);
    assert_eq!(snap.policies, status.cluster_policies.clone().into_iter().collect::<BTreeMap<_, _>>());
    let counted: f64 = snap.load.iter().map(|l| l.ops_per_sec).sum();
    assert!(counted > 0.0, "the appends left no load: {:?}", snap.load);
    assert!(snap.load.iter().all(|l| l.ranges.len() == 64), "64 sub-ranges per shard");
    // A drain's request carries the load recorded for the shards it hands over, as the node's does.
    let drains: Vec<sdk::DrainRequest> = chitin::rollout::shadow::cases(&snap, &Default::default())
        .into_iter()
        .filter_map(|c| match c.request {
            chitin::rollout::shadow::Request::PlanDrain(d) => Some(d.request),
            _ => None,
        })
        .collect();
    assert!(!drains.is_empty());
    for d in &drains {
        let handed: BTreeSet<&str> = d.holders.iter().map(|h| h.shard.as_str()).collect();
        let loaded: BTreeSet<&str> = d.load.iter().map(|l| l.shard.as_str()).collect();
        let recorded: BTreeSet<&str> = snap.load.iter().map(|l| l.shard.as_str()).filter(|s| handed.contains(s)).collect();
        assert_eq!(loaded, recorded, "the drain of {} carries the load of its shards", d.leaving);
    }
    assert!(drains.iter().any(|d| !d.load.is_empty()), "no drain carried any load: {drains:?}");

    let tmp = tempfile::tempdir().unwrap();
    let path = write(tmp.path(), "snap.json", &text);
    assert_eq!(Snapshot::from_json(&snap.to_json()).unwrap(), snap);
    assert_no_differences(&diff_json("default", &path));
    let dir = tmp.path().join("fixtures");
    ok(&chitin(&["policy", "fixture", "--from", path.to_str().unwrap(), "--out", dir.to_str().unwrap()]));
    let test = ok(&chitin(&["policy", "test", "--plugin", "default", dir.to_str().unwrap()]));
    assert!(test.contains(" passed, 0 failed"), "{test}");
    c.teardown().await.unwrap();
}

#[test]
fn a_drain_component_ignoring_the_round_cap_is_shown_as_the_node_would_carry_it_out() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshot = zoned_snapshot();
    let snap = write(tmp.path(), "snap.json", &snapshot.to_json());
    let guest = PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join("drain_one_round.wasm");
    let out = chitin(&[
        "policy",
        "diff",
        "--plugin",
        guest.to_str().unwrap(),
        "--max-handoffs-per-round",
        "1",
        "--json",
        snap.to_str().unwrap(),
    ]);
    let report: Report = serde_json::from_str(&ok(&out)).unwrap();
    assert!(!report.drains.is_empty(), "{report:#?}");
    // The guest sends each held shard to its first other replica node in
    // one round; the host cuts that into rounds of one, in shard order.
    for d in &report.drains {
        let mut held: Vec<&str> = snapshot.leases.iter().filter(|l| l.holder == d.node).map(|l| l.shard.as_str()).collect();
        held.sort();
        let expected: Vec<Vec<(String, String)>> = held
            .iter()
            .map(|shard| {
                let (_, s) = snapshot.config.shards().find(|(_, s)| s.id == *shard).unwrap();
                let to = s.replicas.iter().find(|r| r.node_id != d.node).unwrap().node_id.clone();
                vec![(shard.to_string(), to)]
            })
            .collect();
        let got: Vec<Vec<(String, String)>> =
            d.new.rounds.iter().map(|r| r.iter().map(|h| (h.shard.clone(), h.to.clone())).collect()).collect();
        assert_eq!(got, expected, "{}", d.node);
        assert!(d.old.rounds.iter().all(|r| r.len() == 1), "the default's rounds are capped too: {:?}", d.old);
        assert_ne!(d.old, d.new);
    }
    let drains = report.calls.iter().find(|c| c.call == "plan-drain").unwrap();
    assert_eq!((drains.cases, drains.differing), (6, report.drains.len()));
    let human = ok(&chitin(&[
        "policy",
        "diff",
        "--plugin",
        guest.to_str().unwrap(),
        "--max-handoffs-per-round",
        "1",
        snap.to_str().unwrap(),
    ]));
    assert!(human.contains(&format!("drains changed ({} nodes)", report.drains.len())) && human.contains("round 2: "), "{human}");
}
