//! The example plugins of `plugins/` and freshly scaffolded ones, built for
//! wasm32-wasip2 and run through `chitin policy test` exactly as a plugin
//! author runs them.
//!
//! The plugins build with a nested cargo into `target/plugin-examples` (a
//! target directory of their own, so the build never waits on the outer
//! build's lock nor touches `target/guests`, where `build.rs` builds the
//! embedded defaults), in a scrubbed environment as `build.rs` does.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use chitin::policy::{Plugin, PluginSource, Policies, Slot};
use chitin::rollout::plan;
use chitin::topology::ClusterConfig;

/// (crate directory under `plugins/`, component file stem, slot).
const EXAMPLES: [(&str, &str, Slot); 4] = [
    ("zone-placement", "zone_placement", Slot::Placement),
    ("load-split", "load_split", Slot::Split),
    ("priority-drain", "priority_drain", Slot::Drain),
    ("pod-instance-id", "pod_instance_id", Slot::InstanceId),
];

const GUEST_TARGET: &str = "wasm32-wasip2";

fn target_dir() -> PathBuf {
    crate::support::repo_root().join("target").join("plugin-examples")
}

/// A cargo command without the outer build's environment (as `build.rs`).
fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME" || key == "RUSTFLAGS" || key == "RUSTC_WRAPPER" {
            cmd.env_remove(&key);
        }
    }
    cmd
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Builds every example once per test process; returns the `.wasm` directory.
fn examples_built() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let mut cmd = cargo();
        cmd.args(["build", "--release", "--target", GUEST_TARGET, "--manifest-path"])
            .arg(crate::support::repo_root().join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target_dir());
        for (dir, _, _) in EXAMPLES {
            cmd.args(["-p", dir]);
        }
        run(&mut cmd);
        target_dir().join(GUEST_TARGET).join("release")
    })
}

fn chitin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_chitin")).args(args).output().expect("run chitin")
}

fn fixture_count(dir: &Path) -> usize {
    std::fs::read_dir(dir).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "json")).count()
}

/// Runs `chitin policy test` and asserts every fixture of `fixtures` passed.
fn assert_fixtures_pass(wasm: &Path, fixtures: &Path) {
    assert!(wasm.is_file(), "no component at {}", wasm.display());
    let out = chitin(&["policy", "test", "--plugin", wasm.to_str().unwrap(), fixtures.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}:\n{stdout}\n{}", wasm.display(), String::from_utf8_lossy(&out.stderr));
    let n = fixture_count(fixtures);
    assert!(n >= 1, "no fixtures in {}", fixtures.display());
    let summary = stdout.lines().last().unwrap_or_default();
    assert_eq!(summary, format!("{n} passed, 0 failed"), "{stdout}");
}

#[test]
fn every_example_passes_its_fixtures_through_the_cli() {
    let wasm_dir = examples_built();
    for (dir, stem, _) in EXAMPLES {
        let fixtures = crate::support::repo_root().join("plugins").join(dir).join("fixtures");
        assert!(fixture_count(&fixtures) >= 4, "{dir}: fewer than 4 fixtures");
        assert_fixtures_pass(&wasm_dir.join(format!("{stem}.wasm")), &fixtures);
    }
}

#[test]
fn every_example_exports_exactly_its_slot_at_the_current_version() {
    let wasm_dir = examples_built();
    for (_, stem, slot) in EXAMPLES {
        let path = wasm_dir.join(format!("{stem}.wasm"));
        let plugin = Plugin::load(&PluginSource::File(path.clone()), None).unwrap();
        let names: Vec<&str> = plugin.exports().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, [format!("chitin:policy/{slot}@0.1.0")], "{}", path.display());
        assert_eq!(plugin.slot_version(slot).unwrap(), "0.1.0");
        for other in Slot::ALL.into_iter().filter(|s| *s != slot) {
            assert!(plugin.slot_version(other).is_err(), "{stem} serves {other}");
        }
    }
}

#[test]
fn the_embedded_defaults_built_with_the_sdk_macro_export_all_four_slots() {
    let out = chitin(&["policy", "inspect", "default"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for slot in Slot::ALL {
        let line = stdout.lines().find(|l| l.starts_with(&slot.to_string())).unwrap_or_default();
        assert!(line.contains("ok") && line.contains(&format!("chitin:policy/{slot}@0.1.0")), "{stdout}");
    }
}

/// Builds the example in `plugins/<dir>` with its `build.sh` into
/// `target/plugin-examples/<stem>.wasm` and runs its fixtures; prints how
/// long each step took (the component embeds a language runtime).
fn build_and_pass_fixtures(dir: &str, stem: &str) {
    let dir = crate::support::repo_root().join("plugins").join(dir);
    let wasm = target_dir().join(format!("{stem}.wasm"));
    let started = std::time::Instant::now();
    run(Command::new(dir.join("build.sh")).arg(&wasm));
    let built = started.elapsed();
    assert_fixtures_pass(&wasm, &dir.join("fixtures"));
    let size = std::fs::metadata(&wasm).unwrap().len() >> 20;
    eprintln!("{stem}: {size} MiB, built in {built:.1?}, fixtures passed in {:.1?}", started.elapsed() - built);
}

/// The Python example (plugins/py-load-split), built with componentize-py.
/// CPython imports all of `wasi:filesystem` and `wasi:sockets`; the sandbox
/// links them with nothing to open, so the component loads and passes.
#[test]
fn the_python_example_passes_the_same_fixtures() {
    if crate::support::tool("componentize-py") {
        build_and_pass_fixtures("py-load-split", "py_load_split");
    }
}

/// The JavaScript example (plugins/js-instance-id), built with ComponentizeJS.
#[test]
fn the_javascript_example_passes_the_same_fixtures() {
    if crate::support::tool("componentize-js") {
        build_and_pass_fixtures("js-instance-id", "js_instance_id");
    }
}

#[test]
fn a_scaffolded_plugin_of_every_slot_builds_and_passes_as_generated() {
    let tmp = tempfile::tempdir().unwrap();
    let target = target_dir().join("scaffolded");
    for slot in Slot::ALL {
        let name = format!("my-{slot}");
        let out = chitin(&["policy", "new", "--slot", &slot.to_string(), &name, "--dir", tmp.path().to_str().unwrap()]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let crate_dir = tmp.path().join(&name);
        for file in ["Cargo.toml", "README.md", "src/lib.rs", "tests/fixtures.rs"] {
            assert!(crate_dir.join(file).is_file(), "{name}: no {file}");
        }
        // The repository's lock file pins the same dependency versions (and
        // spares the registry); cargo drops the entries the crate does not use.
        std::fs::copy(crate::support::repo_root().join("Cargo.lock"), crate_dir.join("Cargo.lock")).unwrap();
        let manifest = crate_dir.join("Cargo.toml");
        // Its own tests (logic + fixture, natively)…
        run(cargo().arg("test").arg("--manifest-path").arg(&manifest).arg("--target-dir").arg(&target));
        // …then the component, through the CLI.
        run(cargo()
            .args(["build", "--release", "--target", GUEST_TARGET, "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target));
        let wasm = target.join(GUEST_TARGET).join("release").join(format!("{}.wasm", name.replace('-', "_")));
        assert_fixtures_pass(&wasm, &crate_dir.join("fixtures"));
        let plugin = Plugin::load(&PluginSource::File(wasm), None).unwrap();
        assert_eq!(plugin.slot_version(slot).unwrap(), "0.1.0");
    }
}

#[test]
fn scaffolding_refuses_an_unknown_slot_and_an_existing_crate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_str().unwrap();
    let out = chitin(&["policy", "new", "--slot", "lease", "x", "--dir", dir]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown slot `lease`"));
    assert!(chitin(&["policy", "new", "--slot", "split", "x", "--dir", dir]).status.success());
    let again = chitin(&["policy", "new", "--slot", "split", "x", "--dir", dir]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}

/// The zone plugin example, built.
fn zone_wasm() -> String {
    examples_built().join("zone_placement.wasm").display().to_string()
}

/// Writes to `path` a config of `nodes` (id, address, zone) with one
/// `journal` application of 16 shards at replication factor 3, placed by
/// `chitin config add-application` with the `[policies]` of `settings`, or
/// with the embedded defaults when `None`; returns it.
fn zoned_config(path: &Path, nodes: &[(String, String, String)], settings: Option<&Path>) -> ClusterConfig {
    let cfg = path.to_str().unwrap();
    let mut init = vec!["config", "init", "--force", "--file", cfg];
    for (id, addr, _) in nodes {
        init.extend(["--node-id", id, "--node-address", addr]);
    }
    ok(chitin(&init));
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    for node in json["nodes"].as_array_mut().unwrap() {
        let zone = &nodes.iter().find(|(id, _, _)| node["id"] == id.as_str()).unwrap().2;
        node["metadata"] = serde_json::json!([{ "key": "zone", "value": zone }]);
    }
    std::fs::write(path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    let mut add = vec!["config", "add-application", "--config", cfg, "--name", "journal", "--implementation", "chitin-journal"];
    add.extend(["--shards-count", "16"]);
    let s = settings.map(|s| s.to_str().unwrap());
    if let Some(s) = s {
        add.extend(["--settings", s]);
    }
    ok(chitin(&add));
    load(path)
}

fn load(path: &Path) -> ClusterConfig {
    ClusterConfig::from_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// How many zones (the `zone` metadata of the config's nodes) each shard's
/// replicas span, in shard order.
fn zones_of_every_shard(config: &ClusterConfig) -> Vec<usize> {
    let zone = |id: &str| {
        let node = config.node(id).unwrap();
        node.metadata.iter().find(|m| m.key == "zone").map(|m| m.value.clone()).unwrap()
    };
    config
        .shards()
        .map(|(_, shard)| shard.replicas.iter().map(|r| zone(&r.node_id)).collect::<BTreeSet<String>>().len())
        .collect()
}

/// Six nodes `n1` … `n6`, two per zone in id order (`n1`, `n2` in `z1`, …).
fn six_zoned_nodes() -> Vec<(String, String, String)> {
    (1..=6).map(|i| (format!("n{i}"), format!("10.0.0.{i}:7000"), format!("z{}", (i + 1) / 2))).collect()
}

/// Six nodes in three zones, two each, in id order (`n1`, `n2` in `z1`, …):
/// the default placement fills the least-loaded nodes by id and so puts
/// two replicas of a shard in one zone; the zone plugin named in the
/// `--settings` file never does. Without the flag the CLI would decide with
/// the defaults, whatever the nodes run.
#[test]
fn add_application_places_with_the_placement_plugin_of_the_settings_file() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("chitin.toml");
    std::fs::write(&settings, format!("[policies]\nplacement = {:?}\n", zone_wasm())).unwrap();
    let with_plugin = zones_of_every_shard(&zoned_config(&dir.path().join("plugin.json"), &six_zoned_nodes(), Some(&settings)));
    assert!(with_plugin.iter().all(|&z| z == 3), "the zone plugin left shards in fewer zones: {with_plugin:?}");
    let with_defaults = zones_of_every_shard(&zoned_config(&dir.path().join("defaults.json"), &six_zoned_nodes(), None));
    assert!(
        with_defaults.iter().any(|&z| z < 3),
        "the defaults spread every shard too; the test shows nothing: {with_defaults:?}"
    );
}

/// Node processes on a fresh PostgreSQL database, all running the zone
/// plugin; node `i` (from 0) is in `zones[i]`. The first `in_config` are in
/// the config file, its shards placed by the defaults (so that some sit
/// twice in one zone), and serve it; the others run unprovisioned, for
/// `add-node`.
async fn zoned_cluster(zones: &[&str], in_config: usize) -> crate::support::cluster::Cluster {
    use crate::support::cluster::*;
    let wasm = zone_wasm();
    let names: Vec<String> = (1..=zones.len()).map(|i| format!("node-{i:02}")).collect();
    let mut c = Cluster::new(Dialect::Postgres, zones.len(), 16, 0, |name, s| {
        s.policies.placement = wasm.clone();
        if !names[..in_config].iter().any(|n| n == name) {
            s.cluster.config_file = None;
        }
    })
    .await
    .unwrap();
    let nodes: Vec<(String, String, String)> =
        c.nodes[..in_config].iter().zip(zones).map(|(n, z)| (n.name.clone(), n.api.clone(), z.to_string())).collect();
    zoned_config(&c.config.clone(), &nodes, None);
    for n in &mut c.nodes {
        n.start().unwrap();
    }
    for n in &mut c.nodes[..in_config] {
        n.wait_ready(Duration::from_secs(60)).await.unwrap();
    }
    for n in &c.nodes[in_config..] {
        wait_admin(&n.api, Duration::from_secs(60)).await.unwrap();
    }
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    c
}

/// Every shard of the cluster takes an append (through node-01, which
/// forwards to the holder).
async fn every_shard_appends(c: &crate::support::cluster::Cluster) {
    let map = c.shard_map();
    for shard in map.shards() {
        let stream = crate::support::cluster::stream_on(&map, &shard.id, "zoned");
        crate::support::cluster::append_until_acked(
            vec![c.nodes[0].api.clone()],
            stream,
            format!("after-{}", shard.id),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    }
}

/// A running cluster of six nodes in three zones, its shards placed by the
/// defaults (some twice in one zone), its nodes running the zone plugin:
/// `chitin cluster rebalance --settings` plans with the plugin and spreads
/// every shard over the three zones, and the nodes then serve that config.
/// The defaults' rebalance would leave the shards as they are.
#[tokio::test(flavor = "multi_thread")]
async fn rebalance_spreads_a_running_cluster_with_the_placement_plugin_of_the_settings_file() {
    let c = zoned_cluster(&["z1", "z1", "z2", "z2", "z3", "z3"], 6).await;
    let before = load(&c.config);
    let zones = zones_of_every_shard(&before);
    assert!(zones.iter().any(|&z| z < 3), "the defaults spread every shard: the test shows nothing: {zones:?}");
    let defaults = Policies::embedded_defaults().unwrap();
    let moves = defaults.rebalance(plan::rebalance_request(&before)).unwrap();
    let by_defaults = zones_of_every_shard(plan::rebalance(&before, &moves, 4).unwrap().last());
    assert!(by_defaults.iter().any(|&z| z < 3), "the defaults' rebalance spreads them too: {by_defaults:?}");

    let settings = c.nodes[0].settings.display().to_string();
    let config = c.config_path().display().to_string();
    ok(chitin(&["cluster", "rebalance", "--config", &config, "--settings", &settings, "--bake-secs", "0"]));
    let after = load(&c.config);
    let zones = zones_of_every_shard(&after);
    assert!(zones.iter().all(|&z| z == 3), "rebalance left shards in fewer zones: {zones:?}\n{}", after.to_json());
    assert!(after.version > before.version);
    c.wait_serving_config(Duration::from_secs(60)).await.unwrap();
    every_shard_appends(&c).await;
    c.teardown().await.unwrap();
}

/// Five running nodes, zone `z3` with one of them, the shards placed by the
/// defaults: `chitin cluster add-node --rebalance --settings` adds a sixth
/// node in `z3` and moves replicas as the zone plugin says, so that every
/// shard spans three zones; the defaults' moves onto the new node would not.
#[tokio::test(flavor = "multi_thread")]
async fn add_node_rebalances_with_the_placement_plugin_of_the_settings_file() {
    let c = zoned_cluster(&["z1", "z1", "z2", "z2", "z3", "z3"], 5).await;
    let before = load(&c.config);
    let new = &c.nodes[5];
    let metadata = vec![chitin::topology::model::Metadata::new("zone", "z3")];
    let defaults = Policies::embedded_defaults().unwrap();
    let by_defaults = plan::add_node_and_rebalance(&before, &new.name, &new.api, metadata, 4, |r| defaults.rebalance(r)).unwrap();
    let by_defaults = zones_of_every_shard(by_defaults.last());
    assert!(by_defaults.iter().any(|&z| z < 3), "the defaults' rebalance spreads them too: {by_defaults:?}");

    let settings = c.nodes[0].settings.display().to_string();
    let config = c.config_path().display().to_string();
    let args =
        ["cluster", "add-node", "--config", &config, "--node-id", &new.name, "--node-address", &new.api, "--metadata", "zone=z3"];
    let mut args = args.to_vec();
    args.extend(["--rebalance", "--settings", &settings, "--bake-secs", "0"]);
    ok(chitin(&args));
    let after = load(&c.config);
    assert!(after.node(&new.name).is_some(), "{}", after.to_json());
    let zones = zones_of_every_shard(&after);
    assert!(zones.iter().all(|&z| z == 3), "add-node --rebalance left shards in fewer zones: {zones:?}\n{}", after.to_json());
    let on_new = after.shards().flat_map(|(_, s)| &s.replicas).filter(|r| r.node_id == new.name).count();
    assert!(on_new > 0, "no replica moved to {}: {}", new.name, after.to_json());
    c.wait_serving_config(Duration::from_secs(60)).await.unwrap();
    every_shard_appends(&c).await;
    c.teardown().await.unwrap();
}

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "chitin failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Skewed appends through real nodes that run the load-aware split plugin:
/// every append lands in the lowest eighth of one shard, so `split-shard`
/// without `--split-at` must cut inside that eighth (the default would cut
/// at the midpoint). The nodes count the load; the CLI hands it to the
/// plugin of `--settings` as samples.
#[tokio::test(flavor = "multi_thread")]
async fn split_shard_hands_the_counted_load_to_the_split_plugin() {
    use crate::support::cluster::*;
    let split = examples_built().join("load_split.wasm").display().to_string();
    let c = Cluster::new(Dialect::Postgres, 3, 4, 3, |_, s| s.policies.split = split.clone()).await.unwrap();
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    let map = c.shard_map();
    let shard = map.shards().iter().min_by_key(|s| s.lower).unwrap().clone();
    let hot_end = shard.lower + (shard.upper - shard.lower) / 8;
    let streams: Vec<String> = (0..100_000)
        .map(|i| format!("hot-{i}"))
        .filter(|s| (shard.lower..=hot_end).contains(&chitin::node::shard_map::stream_key(s)))
        .take(16)
        .collect();
    for round in 0..6 {
        for (i, stream) in streams.iter().enumerate() {
            let api = c.nodes[i % 3].api.clone();
            append_until_acked(vec![api], stream.clone(), format!("r{round}"), Duration::from_secs(10)).await.unwrap();
        }
    }
    let load = chitin(&["cluster", "load", "--node", &c.nodes[0].api, "--shard", &shard.id, "--json"]);
    let load: serde_json::Value = serde_json::from_slice(&ok(load).stdout).unwrap();
    assert!(load[0]["ops_per_sec"].as_f64().unwrap() > 0.0, "{load}");

    let settings = c.nodes[0].settings.display().to_string();
    let config = c.config_path().display().to_string();
    let out = chitin(&[
        "cluster",
        "split-shard",
        "--config",
        &config,
        "--shard-id",
        &shard.id,
        "--settings",
        &settings,
        "--bake-secs",
        "0",
    ]);
    ok(out);
    let after = c.shard_map();
    let cut = after.shards().iter().filter(|s| s.parent.as_deref() == Some(shard.id.as_str())).map(|s| s.lower).max().unwrap();
    assert!(
        shard.lower < cut && cut <= hot_end + (shard.upper - shard.lower) / 64,
        "the split cut {} at {cut:08x}, outside the hot eighth {:08x}..{hot_end:08x}",
        shard.id,
        shard.lower
    );
    c.teardown().await.unwrap();
}
