//! Cluster config checks at scale: 100,000 shards × 3 replicas on 1,000 nodes.
//!
//! `cargo bench -p chitin --profile dev --bench topology`. Target (issues 3
//! and 20): validating such a config, and a transition between two of them,
//! each ≤ 200 ms. The transition's baselines in the same run: validating one
//! config, and validating both one after the other (what a transition costs
//! at least if each config is checked once on one thread).

use std::hint::black_box;

use chitin::topology::model::{Application, ClusterConfig, Node, Replica, Shard, ShardState};
use chitin::topology::transition::transition_rules;
use chitin::topology::{Router, validate, validate_transition};
use criterion::{Criterion, criterion_group, criterion_main};

const SHARDS: u64 = 100_000;
const NODES: usize = 1_000;
const RF: usize = 3;

fn shard(id: String, lower: u32, upper: u32, state: ShardState, parent: Option<String>, nodes: &[usize]) -> Shard {
    Shard {
        replicas: nodes
            .iter()
            .map(|n| Replica { id: format!("{id}_{n:08x}"), node_id: format!("node-{n:04}"), metadata: vec![] })
            .collect(),
        id,
        lower,
        upper,
        state,
        parent_id: parent,
        metadata: vec![],
    }
}

/// Version 1: one application of 100,000 active shards, 3 replicas each on
/// distinct nodes, 1,000 nodes with a zone each.
fn big_config() -> ClusterConfig {
    let bound = |i: u64| ((i << 32) / SHARDS) as u32;
    let shards = (0..SHARDS)
        .map(|i| {
            let lower = bound(i);
            let upper = if i + 1 == SHARDS { u32::MAX } else { bound(i + 1) - 1 };
            let nodes: Vec<usize> = (0..RF).map(|k| (i as usize * RF + k) % NODES).collect();
            shard(format!("Big_{lower:08x}_{upper:08x}"), lower, upper, ShardState::Active, None, &nodes)
        })
        .collect();
    ClusterConfig {
        applications: vec![Application {
            name: "Big".into(),
            implementation: "Big".into(),
            shards,
            replication_factor: RF as u32,
            metadata: vec![],
        }],
        nodes: (0..NODES)
            .map(|n| Node {
                id: format!("node-{n:04}"),
                grpc_address: format!("10.0.{}.{}:7000", n / 250, n % 250),
                metadata: vec![chitin::topology::Metadata::new("zone", format!("zone-{}", n % 3))],
            })
            .collect(),
        version: 1,
        metadata: vec![],
    }
}

/// Version 2: 100 shards start splitting into 2, 1,000 shards get a 4th
/// replica, one node joins — a valid transition touching every rule.
fn next_version(old: &ClusterConfig) -> ClusterConfig {
    let mut new = old.clone();
    new.version = 2;
    new.nodes.push(Node { id: "node-new".into(), grpc_address: "10.9.9.9:7000".into(), metadata: vec![] });
    let app = &mut new.applications[0];
    let mut children = Vec::new();
    for i in (0..SHARDS as usize).step_by(1_000) {
        let s = &mut app.shards[i];
        s.state = ShardState::Splitting;
        let mid = s.lower + (s.upper - s.lower) / 2;
        let nodes: Vec<usize> = (0..RF).map(|k| (i * RF + k) % NODES).collect();
        children.push(shard(format!("{}_a", s.id), s.lower, mid, ShardState::Activating, Some(s.id.clone()), &nodes));
        children.push(shard(format!("{}_b", s.id), mid + 1, s.upper, ShardState::Activating, Some(s.id.clone()), &nodes));
    }
    for i in (1..SHARDS as usize).step_by(100) {
        let s = &mut app.shards[i];
        s.replicas.push(Replica { id: format!("{}_extra", s.id), node_id: "node-new".into(), metadata: vec![] });
    }
    app.shards.extend(children);
    new
}

fn bench(c: &mut Criterion) {
    let old = big_config();
    let new = next_version(&old);
    assert!(validate(&old).is_empty(), "{:?}", &validate(&old)[..1]);
    let report = validate_transition(&old, &new);
    assert!(report.is_valid(), "{report:?}");
    let json = new.to_json();

    let mut g = c.benchmark_group("topology_100k_shards");
    g.sample_size(10);
    g.bench_function("validate", |b| b.iter(|| black_box(validate(black_box(&new)))));
    g.bench_function("validate_old_then_new", |b| {
        b.iter(|| (black_box(validate(black_box(&old))), black_box(validate(black_box(&new)))))
    });
    g.bench_function("validate_transition", |b| b.iter(|| black_box(validate_transition(black_box(&old), black_box(&new)))));
    g.bench_function("transition_rules_alone", |b| b.iter(|| black_box(transition_rules(black_box(&old), black_box(&new)))));
    g.bench_function("parse_json", |b| b.iter(|| black_box(ClusterConfig::from_json(black_box(&json)).unwrap())));
    g.bench_function("router_build", |b| b.iter(|| black_box(Router::new(black_box(&new)))));
    g.finish();

    let router = Router::new(&new);
    c.bench_function("topology_route_one_key", |b| {
        let mut k = 0u32;
        b.iter(|| {
            k = k.wrapping_add(0x9e37_79b9);
            black_box(router.route("Big", black_box(k)))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
