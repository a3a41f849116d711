//! Policy benchmarks: each default policy through wasmtime against the same
//! Rust logic called natively, in the same run; cold against cached loading;
//! the 10,000-shard placement, and the balancing decision (preferred
//! holders) at 100,000 shards on 100 nodes. Prints a markdown table of figures and
//! ratios (the baseline of each row is named in it).
//!
//! Run: `cargo bench -p chitin --bench policies`

use std::hint::black_box;
use std::time::{Duration, Instant};

use chitin::policy::cache::Cache;
use chitin::policy::engine::engine;
use chitin::policy::plugin::EMBEDDED_DEFAULTS;
use chitin::policy::sdk::*;
use chitin::policy::{Plugin, PluginSource, Policies, Slot};
use chitin_default_policies::Defaults;

/// Median time per iteration over `rounds` rounds of `iters` iterations.
fn measure(rounds: usize, iters: usize, mut f: impl FnMut()) -> Duration {
    f(); // warm up
    let mut samples: Vec<Duration> = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iters {
                f();
            }
            start.elapsed() / iters as u32
        })
        .collect();
    samples.sort();
    samples[samples.len() / 2]
}

fn nodes(n: usize) -> Vec<Node> {
    (0..n)
        .map(|i| Node {
            id: format!("node-{i:03}"),
            address: format!("10.0.0.{i}:7000"),
            zone: Some(format!("z{}", i % 3)),
            labels: vec![Label { key: "zone".into(), value: format!("z{}", i % 3) }],
            state: NodeState::Active,
        })
        .collect()
}

fn shards(n: usize) -> Vec<Shard> {
    let step = (1u64 << 32) / n as u64;
    (0..n)
        .map(|i| Shard {
            id: format!("app_{i:05}"),
            application: "app".into(),
            lower: (i as u64 * step) as u32,
            upper: ((i as u64 + 1) * step - 1) as u32,
            state: ShardState::Active,
            parent: None,
        })
        .collect()
}

fn placement_request(shard_count: usize, node_count: usize) -> PlacementRequest {
    let shards = shards(shard_count);
    PlacementRequest {
        nodes: nodes(node_count),
        new_shards: shards.iter().map(|s| s.id.clone()).collect(),
        shards,
        replicas: Vec::new(),
        replication_factor: 3,
    }
}

/// A ranking request over `shard_count` shards placed at RF 3 on
/// `node_count` nodes by the default placement.
fn ranking_request(shard_count: usize, node_count: usize) -> RankingRequest {
    let req = placement_request(shard_count, node_count);
    let placed = <Defaults as PlacementPolicy>::place_replicas(req.clone()).unwrap();
    let replicas = placed
        .iter()
        .flat_map(|p| {
            p.nodes.iter().enumerate().map(|(i, n)| Replica {
                id: format!("{}_{i}", p.shard),
                shard: p.shard.clone(),
                node: n.clone(),
            })
        })
        .collect();
    RankingRequest { nodes: req.nodes, shards: req.shards, replicas }
}

struct Row {
    what: String,
    figure: Duration,
    baseline_name: &'static str,
    baseline: Duration,
}

fn main() {
    let policies = Policies::embedded_defaults().unwrap();
    let mut rows = Vec::new();
    let mut row =
        |what: &str, figure, baseline_name, baseline| rows.push(Row { what: what.into(), figure, baseline_name, baseline });

    // Small calls on a warm instance against native.
    let ctx =
        InstanceContext { env: vec![("CHITIN__CLUSTER__INSTANCE_ID".into(), "node-01".into())], hostname: Some("h".into()) };
    let native = measure(31, 2000, || {
        black_box(<Defaults as InstanceIdPolicy>::resolve(black_box(ctx.clone())).unwrap());
    });
    let wasm = measure(31, 2000, || {
        black_box(policies.instance_id(black_box(ctx.clone())).unwrap());
    });
    row("instance-id resolve, warm instance", wasm, "native", native);

    let split = SplitRequest { shard: shards(1).remove(0), children: 2, ..SplitRequest::default() };
    let native = measure(31, 2000, || {
        black_box(<Defaults as SplitPolicy>::split_points(black_box(split.clone())).unwrap());
    });
    let wasm = measure(31, 2000, || {
        black_box(policies.split_points(black_box(split.clone())).unwrap());
    });
    row("split-points, warm instance", wasm, "native", native);

    let small = placement_request(1, 5);
    let native = measure(31, 1000, || {
        black_box(<Defaults as PlacementPolicy>::place_replicas(black_box(small.clone())).unwrap());
    });
    let wasm = measure(31, 1000, || {
        black_box(policies.place_replicas(black_box(small.clone())).unwrap());
    });
    row("place-replicas 1 shard / 5 nodes, warm", wasm, "native", native);

    let ranking = ranking_request(16, 5);
    let native = measure(31, 500, || {
        black_box(<Defaults as PlacementPolicy>::preferred_holders(black_box(ranking.clone())).unwrap());
    });
    let wasm = measure(31, 500, || {
        black_box(policies.preferred_holders(black_box(ranking.clone())).unwrap());
    });
    row("preferred-holders 16 shards, warm", wasm, "native", native);

    let holders: Vec<Holder> = ranking.shards.iter().map(|s| Holder { shard: s.id.clone(), node: "node-000".into() }).collect();
    let drain = DrainRequest {
        leaving: "node-000".into(),
        nodes: ranking.nodes.clone(),
        shards: ranking.shards.clone(),
        replicas: ranking.replicas.clone(),
        holders,
        load: Vec::new(),
        max_per_round: 4,
    };
    let native = measure(31, 500, || {
        black_box(<Defaults as DrainPolicy>::plan_drain(black_box(drain.clone())).unwrap());
    });
    let wasm = measure(31, 500, || {
        black_box(policies.plan_drain(black_box(drain.clone())).unwrap());
    });
    row("plan-drain 16 shards, warm", wasm, "native", native);

    // A call that needs a fresh instance (after a failure, or the first call).
    let warm = measure(31, 500, || {
        black_box(policies.split_points(black_box(split.clone())).unwrap());
    });
    let runner = policies.slot(Slot::Split);
    let fresh = measure(31, 100, || {
        runner.reset();
        black_box(policies.split_points(black_box(split.clone())).unwrap());
    });
    row("split-points on a fresh instance", fresh, "warm instance", warm);

    // Loading: compile from bytes against a cached artifact.
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    Plugin::load(&PluginSource::Default, Some(&cache)).unwrap();
    let cold = measure(5, 1, || {
        black_box(Plugin::load(&PluginSource::Default, None).unwrap());
    });
    let cached = measure(11, 5, || {
        black_box(cache.get(engine(), EMBEDDED_DEFAULTS).unwrap());
    });
    row("load the default component from the cache", cached, "compile (cold)", cold);

    // The large placement.
    let big = placement_request(10_000, 100);
    let native = measure(5, 1, || {
        black_box(<Defaults as PlacementPolicy>::place_replicas(black_box(big.clone())).unwrap());
    });
    let wasm = measure(5, 1, || {
        black_box(policies.place_replicas(black_box(big.clone())).unwrap());
    });
    row("place-replicas 10,000 shards x RF 3 on 100 nodes", wasm, "native", native);

    // The balancing decision at the largest cluster the docs measure: every
    // node active, then one down (its first places seated again around the
    // others', which stay).
    let huge = ranking_request(100_000, 100);
    let mut one_down = huge.clone();
    one_down.nodes[0].state = NodeState::Down;
    for (what, req) in [("all active", &huge), ("one node down", &one_down)] {
        let native = measure(3, 1, || {
            black_box(<Defaults as PlacementPolicy>::preferred_holders(black_box(req.clone())).unwrap());
        });
        let wasm = measure(3, 1, || {
            black_box(policies.preferred_holders(black_box(req.clone())).unwrap());
        });
        row(&format!("preferred-holders 100,000 shards x RF 3 on 100 nodes, {what}"), wasm, "native", native);
    }

    println!("| measurement | time | baseline | baseline time | ratio |");
    println!("|---|---:|---|---:|---:|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {:.2}x |",
            r.what,
            fmt(r.figure),
            r.baseline_name,
            fmt(r.baseline),
            r.figure.as_secs_f64() / r.baseline.as_secs_f64()
        );
    }
}

fn fmt(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.2} ms", ns / 1e6)
    }
}
