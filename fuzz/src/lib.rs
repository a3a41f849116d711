//! The bodies of chitin's fuzz targets, one function per target over the
//! raw input, so that `cargo fuzz` (the binaries in `fuzz_targets/`, built
//! with the `libfuzzer` feature by `scripts/fuzz`) and the suite's replay of
//! the committed corpus (`tests/corpus.rs`) run the same code. A target
//! fails by panicking: on a parser's own panic, or on a property of what it
//! accepted (each named beside its assertion).
#![deny(missing_docs)]

use std::collections::{HashMap, HashSet};

use arbitrary::{Arbitrary, Unstructured};
use chitin::node::plan::{self, DrainInput, LiveNode};
use chitin::node::rankings;
use chitin::node::shard_map::ShardMap;
use chitin::settings::Settings;
use chitin::topology::{self, ClusterConfig};
use chitin_policy_sdk as sdk;
use prost::Message;

/// Every target by the name of its corpus directory and binary.
pub const TARGETS: &[(&str, fn(&[u8]))] = &[
    ("settings_toml", settings_toml),
    ("cluster_config", cluster_config),
    ("config_transition", config_transition),
    ("policy_answers", policy_answers),
    ("requests", requests),
];

/// The settings file and its `CHITIN__SECTION__KEY` overlay: the input is
/// the TOML text, then (after the first NUL byte) one `NAME=value` per line.
/// Accepted settings pass their own validation again.
pub fn settings_toml(data: &[u8]) {
    let (file, env) = split_at_nul(data);
    let Ok(text) = std::str::from_utf8(file) else { return };
    let env = String::from_utf8_lossy(env);
    let vars = env.lines().filter_map(|line| line.split_once('='));
    match Settings::from_toml(text, "fuzz.toml", vars) {
        Ok(settings) => {
            if let Err(e) = settings.validate() {
                panic!("accepted settings fail their own validation: {e}");
            }
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// A cluster config: parsed, validated, and when accepted, written back and
/// read again to the same config; every key of a valid config routes to the
/// one active shard whose bounds hold it.
pub fn cluster_config(data: &[u8]) {
    let Some(config) = config_of(data) else { return };
    let violations = topology::validate(&config);
    for v in &violations {
        let _ = v.to_string();
    }
    let json = serde_json::to_string(&config).expect("a parsed config serializes");
    let again = ClusterConfig::from_json(&json).unwrap_or_else(|e| panic!("a written config does not read back: {e}\n{json}"));
    assert_eq!(again, config, "a config changed through a write and a read");
    if !violations.is_empty() {
        return;
    }
    let router = topology::Router::new(&config);
    let key = data.iter().fold(0u32, |k, &b| k.rotate_left(5) ^ u32::from(b));
    for app in &config.applications {
        for key in [0, key, u32::MAX] {
            let shard = router
                .shard(&config, &app.name, key)
                .unwrap_or_else(|| panic!("key {key:08x} of `{}` routes nowhere in a valid config", app.name));
            assert!(shard.lower <= key && key <= shard.upper, "key {key:08x} routed to {}", shard.range_string());
        }
    }
}

/// A config transition: the old and the new config (separated by the first
/// NUL byte), checked as `UpdateConfig` and `config validate-transition`
/// check them. A valid transition's new config is valid on its own.
pub fn config_transition(data: &[u8]) {
    let (old, new) = split_at_nul(data);
    let (Some(old), Some(new)) = (config_of(old), config_of(new)) else { return };
    let report = topology::validate_transition(&old, &new);
    for v in report.old.iter().chain(&report.new).chain(&report.transition) {
        let _ = v.to_string();
    }
    if report.is_valid() {
        assert!(topology::validate(&new).is_empty(), "a valid transition to an invalid config");
    }
}

/// What the policy components answer, as the host receives them, against
/// the example cluster config: a placement ranking, a drain plan, split
/// points and a node name. The host keeps only what its rules allow: ranked
/// nodes that host a replica, handoffs to live replica nodes of held shards
/// within the cap, split points inside the shard in order, and names that
/// follow the node name rule.
pub fn policy_answers(data: &[u8]) {
    let Ok(answers) = Answers::arbitrary(&mut Unstructured::new(data)) else { return };
    let config = example_config();
    let map = ShardMap::from_config(config);
    let shard_ids: Vec<String> = config.applications.iter().flat_map(|a| a.shards.iter().map(|s| s.id.clone())).collect();
    let node_ids: Vec<String> = config.nodes.iter().map(|n| n.id.clone()).collect();
    let pick = |names: &[String], i: &Pick| match i {
        Pick::Known(k) => names[*k as usize % names.len()].clone(),
        Pick::Other(s) => s.clone(),
    };

    // Placement: rankings::validated.
    let ranking: Vec<sdk::HolderRanking> = answers
        .rankings
        .iter()
        .map(|(s, ns)| sdk::HolderRanking { shard: pick(&shard_ids, s), nodes: ns.iter().map(|n| pick(&node_ids, n)).collect() })
        .collect();
    let (kept, _dropped) = rankings::validated(ranking, &map);
    for (shard, nodes) in &kept {
        let s = map.shard(shard).unwrap_or_else(|| panic!("a ranking of unknown shard `{shard}` was kept"));
        let unique: HashSet<&String> = nodes.iter().collect();
        assert_eq!(unique.len(), nodes.len(), "a ranking of `{shard}` kept a node twice: {nodes:?}");
        assert!(nodes.iter().all(|n| s.replica_nodes.contains(n)), "a ranking of `{shard}` kept a non-replica: {nodes:?}");
    }

    // Drain: plan::drain_plan.
    let held: HashSet<String> = answers.held.iter().map(|s| pick(&shard_ids, s)).collect();
    let replicas: HashMap<String, Vec<String>> =
        shard_ids.iter().filter_map(|id| map.shard(id).map(|s| (id.clone(), s.replica_nodes.clone()))).collect();
    let live: HashMap<String, LiveNode> = answers
        .live
        .iter()
        .map(|(n, leaving)| (pick(&node_ids, n), LiveNode { uuid: uuid::Uuid::nil(), leaving: *leaving }))
        .collect();
    let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: usize::from(answers.cap) };
    let placeable: Vec<String> = held.iter().cloned().collect();
    let handoffs: Vec<Vec<sdk::Handoff>> = answers
        .handoffs
        .iter()
        .map(|round| {
            round
                .iter()
                .map(|(s, t)| sdk::Handoff { shard: pick(&shard_ids, s), source: String::new(), target: pick(&node_ids, t) })
                .collect()
        })
        .collect();
    let drain = plan::drain_plan(&input, &placeable, &handoffs);
    let mut seen = HashSet::new();
    for round in &drain.rounds {
        assert!(!round.is_empty() && round.len() <= input.cap.max(1), "a drain round of {} handoffs", round.len());
        for h in round {
            assert!(held.contains(&h.shard), "a drain hands over `{}`, which is not held", h.shard);
            assert!(seen.insert(h.shard.clone()), "a drain hands `{}` over twice", h.shard);
            assert!(replicas[&h.shard].contains(&h.to), "a drain hands `{}` to a non-replica `{}`", h.shard, h.to);
            assert!(live.get(&h.to).is_some_and(|l| !l.leaving), "a drain hands `{}` to `{}`, not live", h.shard, h.to);
        }
    }
    assert!(drain.kept.iter().all(|k| !seen.contains(&k.shard)), "a drain both keeps and hands over a shard");

    // Split: the points a split policy answers, as `split-shard` takes them.
    let shard = pick(&shard_ids, &answers.split_shard);
    if let Ok(_plan) = chitin::rollout::plan::split_shard(config, &shard, &answers.split_points) {
        let s = map.shard(&shard).expect("a split of a known shard");
        assert!(answers.split_points.windows(2).all(|w| w[0] < w[1]), "unordered split points accepted");
        assert!(answers.split_points.iter().all(|&p| s.lower < p && p <= s.upper), "a split point outside the shard accepted");
    }

    // Instance id: the node name rule.
    if chitin::names::problem(&answers.name).is_none() {
        let n = &answers.name;
        assert!(!n.is_empty() && n.len() <= chitin::names::MAX_NODE_NAME, "a name of {} bytes accepted", n.len());
        assert!(!n.contains(':') && !n.chars().any(|c| c.is_whitespace() || c.is_control()), "name {n:?} accepted");
    }
}

/// A request as the node's gRPC services decode it (the first byte picks
/// the message), then the checks the services make before any work: names,
/// configs, load samples, instance and target ids. A decoded message encodes
/// and decodes to itself.
pub fn requests(data: &[u8]) {
    let Some((&which, body)) = data.split_first() else { return };
    use chitin::proto;
    match which % 8 {
        0 => {
            let Some(r) = decoded::<proto::AppendRequest>(body) else { return };
            if let Ok(append) = chitin::node::journal::Append::parse(r.clone()) {
                assert_eq!((append.stream, append.request_id, append.payload), (r.stream, r.request_id, r.payload));
            }
        }
        1 => {
            let Some(r) = decoded::<proto::ReadRequest>(body) else { return };
            let _ = chitin::node::journal::check_name("stream", &r.stream, chitin::node::journal::MAX_STREAM);
        }
        2 => {
            let Some(r) = decoded::<proto::BootstrapRequest>(body) else { return };
            let _ = chitin::names::problem(&r.node_id);
            if let Ok(c) = ClusterConfig::from_json(&r.config_json) {
                let _ = topology::validate(&c);
            }
        }
        3 => {
            let Some(r) = decoded::<proto::UpdateConfigRequest>(body) else { return };
            if let Ok(c) = ClusterConfig::from_json(&r.config_json) {
                let _ = topology::validate_transition(example_config(), &c);
            }
        }
        4 => {
            let Some(r) = decoded::<proto::ReportLoadRequest>(body) else { return };
            let map = ShardMap::from_config(example_config());
            if let Ok(samples) = chitin::node::load::check_samples(&map, &r.samples) {
                assert_eq!(samples.len(), r.samples.len(), "a load report lost samples");
            }
        }
        5 => {
            let Some(r) = decoded::<proto::DispatchRequest>(body) else { return };
            let _ = chitin::coord::affinity::validate_target(&r.target_id);
        }
        6 => {
            let Some(r) = decoded::<proto::InstanceRequest>(body) else { return };
            let _ = chitin::coord::validate_instance_id(&r.instance_id);
        }
        _ => {
            decoded::<proto::AcknowledgeRequest>(body);
        }
    }
}

/// `body` decoded as `M`, checked to encode, decode and encode again to the
/// same bytes (compared as bytes: a NaN load sample is not equal to itself).
fn decoded<M: Message + Default>(body: &[u8]) -> Option<M> {
    let m = M::decode(body).ok()?;
    let bytes = m.encode_to_vec();
    let again = M::decode(bytes.as_slice()).expect("an encoded message decodes");
    assert_eq!(again.encode_to_vec(), bytes, "a message changed through an encode and a decode");
    Some(m)
}

/// A config parsed from UTF-8 JSON, or `None`; the load error's message is
/// built either way.
fn config_of(data: &[u8]) -> Option<ClusterConfig> {
    let text = std::str::from_utf8(data).ok()?;
    ClusterConfig::from_json(text).map_err(|e| e.to_string()).ok()
}

/// The part before the first NUL byte and the part after it.
fn split_at_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}

/// The example cluster config the answers are checked against.
fn example_config() -> &'static ClusterConfig {
    static CONFIG: std::sync::OnceLock<ClusterConfig> = std::sync::OnceLock::new();
    CONFIG.get_or_init(|| {
        ClusterConfig::from_json(include_str!("../../examples/cluster/cluster_config.json"))
            .expect("the example cluster config reads")
    })
}

/// A shard or node named in an answer: one the config knows, by index, or
/// any string.
#[derive(Arbitrary, Debug)]
enum Pick {
    Known(u8),
    Other(String),
}

/// The answers of one call of each policy slot, and the node state they meet.
#[derive(Arbitrary, Debug)]
struct Answers {
    /// Placement: preferred holders per shard.
    rankings: Vec<(Pick, Vec<Pick>)>,
    /// Drain: shards this node holds, the live nodes (leaving or not), the
    /// host's cap, and the policy's handoff rounds (shard, target).
    held: Vec<Pick>,
    live: Vec<(Pick, bool)>,
    cap: u8,
    handoffs: Vec<Vec<(Pick, Pick)>>,
    /// Split: the shard and the points answered for it.
    split_shard: Pick,
    split_points: Vec<u32>,
    /// Instance id: the name answered.
    name: String,
}
