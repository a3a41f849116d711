//! The policy host against plugins that misbehave: each yields its own clear
//! error, and the host keeps serving other calls (and the same slot) after.
//! Each way out of the sandbox (waiting on the host, randomness, a second
//! memory, the node's environment, files and sockets) has a guest under
//! `tests/guests` that tries it; the sleeping and the leaking ones also run in a real node.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::cluster::{NodeClients, NodeProc, free_ports, http_get, node_settings};
use chitin::policy::sdk::{
    InstanceContext, Node, NodeState, PlacementRequest, PolicyError, RankingRequest, RebalanceRequest, Replica, Shard,
    SplitRequest,
};
use chitin::policy::{Limits, Plugin, PluginSource, PolicyCallError, PolicyLoadError, Slot, SlotRunner};

fn guest(name: &str) -> PathBuf {
    PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join(format!("{name}.wasm"))
}

fn load(name: &str) -> Result<Plugin, PolicyLoadError> {
    Plugin::load(&PluginSource::File(guest(name)), None)
}

fn runner(name: &str, limits: Limits) -> SlotRunner {
    slot_runner(name, Slot::Placement, limits)
}

fn slot_runner(name: &str, slot: Slot, limits: Limits) -> SlotRunner {
    SlotRunner::new(Arc::new(load(name).unwrap()), slot, limits).unwrap()
}

fn request() -> PlacementRequest {
    PlacementRequest {
        nodes: (1..=3)
            .map(|i| Node {
                id: format!("n{i}"),
                address: format!("127.0.0.1:{}", 7000 + i),
                state: NodeState::Active,
                ..Node::default()
            })
            .collect(),
        shards: vec![Shard { id: "s".into(), application: "app".into(), upper: u32::MAX, ..Shard::default() }],
        new_shards: vec!["s".into()],
        replication_factor: 3,
        ..PlacementRequest::default()
    }
}

fn defaults_still_serve() {
    let defaults = chitin::policy::Policies::embedded_defaults().unwrap();
    let placed = defaults.place_replicas(request()).unwrap();
    assert_eq!(placed[0].nodes.len(), 3);
}

#[test]
fn a_trapping_plugin_reports_the_trap_and_its_panic_message() {
    let r = runner("bad_trap", Limits::default());
    for _ in 0..2 {
        match r.place_replicas(request()) {
            Err(PolicyCallError::Trap { plugin, slot, reason }) => {
                assert!(plugin.ends_with("bad_trap.wasm"), "{plugin}");
                assert_eq!(slot, Slot::Placement);
                assert!(reason.contains("bad_trap always panics"), "{reason}");
            }
            other => panic!("expected a trap, got {other:?}"),
        }
    }
    defaults_still_serve();
}

/// `policies.deadline_ms` bounds component files; the embedded default, the
/// same bytes, runs under the widest limits: at 5,000 shards on 50 nodes its
/// ranking takes some milliseconds, past a 1 ms deadline.
#[test]
fn the_embedded_default_runs_under_the_widest_limits_and_a_file_under_the_settings() {
    let (k, count) = (50, 5_000);
    let nodes: Vec<Node> = (0..k).map(|i| Node { id: format!("n{i:02}"), state: NodeState::Active, ..Node::default() }).collect();
    let shards: Vec<Shard> = (0..count).map(|i| Shard { id: format!("s{i:05}"), upper: u32::MAX, ..Shard::default() }).collect();
    let replicas = (0..count)
        .flat_map(|i| (0..3).map(move |r| (i, (i + r) % k)))
        .map(|(i, n)| Replica { id: format!("s{i:05}_{n}"), shard: format!("s{i:05}"), node: format!("n{n:02}") })
        .collect();
    let req = RankingRequest { nodes, shards, replicas };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("default-copy.wasm");
    std::fs::write(&copy, chitin::policy::plugin::EMBEDDED_DEFAULTS).unwrap();
    let with = |placement: String| {
        let settings = chitin::settings::PolicySettings { placement, deadline_ms: 1, ..Default::default() };
        chitin::policy::Policies::load(&settings, None).unwrap()
    };

    let embedded = with("default".into()).preferred_holders(req.clone()).expect("the embedded default answers");
    assert_eq!(embedded.len(), count);
    match with(copy.display().to_string()).preferred_holders(req) {
        Err(PolicyCallError::Timeout { deadline_ms: 1, .. }) => {}
        other => panic!("expected the file's call to stop at its 1 ms deadline, got {:?}", other.map(|r| r.len())),
    }
}

#[test]
fn a_looping_plugin_is_stopped_at_its_deadline() {
    let limits = Limits::new(Duration::from_millis(50), 64 << 20).unwrap();
    let r = runner("bad_loop", limits);
    for _ in 0..2 {
        let started = Instant::now();
        match r.place_replicas(request()) {
            Err(PolicyCallError::Timeout { deadline_ms, slot, .. }) => {
                assert_eq!(deadline_ms, 50);
                assert_eq!(slot, Slot::Placement);
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        // Wide margin for a loaded CI machine; the point is that it stops.
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    defaults_still_serve();
}

#[test]
fn a_hoarding_plugin_hits_its_memory_limit() {
    let limits = Limits::new(Duration::from_secs(10), 16 << 20).unwrap();
    let r = runner("bad_alloc", limits);
    for _ in 0..2 {
        match r.place_replicas(request()) {
            Err(PolicyCallError::OutOfMemory { limit_mib, .. }) => assert_eq!(limit_mib, 16),
            other => panic!("expected the memory limit, got {other:?}"),
        }
    }
    defaults_still_serve();
}

#[test]
fn a_core_module_is_not_a_component() {
    let core = wat::parse_str("(module (func (export \"f\")))").unwrap();
    let err = Plugin::from_bytes("core.wasm".into(), &core, None).err().unwrap();
    assert!(matches!(err, PolicyLoadError::NotAComponent { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("core.wasm") && text.contains("core WebAssembly module"), "{text}");
}

#[test]
fn random_bytes_are_not_a_component() {
    let bytes: Vec<u8> = (0u32..4096).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    let err = Plugin::from_bytes("noise.bin".into(), &bytes, None).err().unwrap();
    assert!(matches!(err, PolicyLoadError::NotAComponent { .. }));
    assert!(err.to_string().contains("magic"), "{err}");
    // A valid header followed by garbage is refused by the parser, still by name.
    let mut bad = b"\0asm\x0d\0\x01\0".to_vec();
    bad.extend_from_slice(&bytes);
    let err = Plugin::from_bytes("torn.wasm".into(), &bad, None).err().unwrap();
    assert!(matches!(err, PolicyLoadError::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("torn.wasm"), "{err}");
}

#[test]
fn a_plugin_for_another_interface_version_is_refused_by_version() {
    let plugin = Arc::new(load("future_version").unwrap());
    let err = SlotRunner::new(plugin, Slot::Placement, Limits::default()).err().unwrap();
    match &err {
        PolicyLoadError::UnsupportedVersion { found, supported, slot, .. } => {
            assert_eq!(found, "chitin:policy/placement@0.2.0");
            assert_eq!(supported, "chitin:policy/placement@0.1.0");
            assert_eq!(*slot, Slot::Placement);
        }
        other => panic!("expected an unsupported version, got {other}"),
    }
}

#[test]
fn a_plugin_exporting_another_interface_is_refused_by_slot() {
    let plugin = Arc::new(load("bad_foreign").unwrap());
    let err = SlotRunner::new(plugin, Slot::Placement, Limits::default()).err().unwrap();
    match &err {
        PolicyLoadError::MissingSlot { exports, slot, .. } => {
            assert!(exports.contains("acme:other/greeter@1.0.0"), "{exports}");
            assert_eq!(*slot, Slot::Placement);
        }
        other => panic!("expected a missing slot, got {other}"),
    }
}

#[test]
fn a_plugin_only_serves_the_slots_it_exports() {
    let plugin = Arc::new(load("bad_trap").unwrap());
    let err = SlotRunner::new(plugin, Slot::Split, Limits::default()).err().unwrap();
    assert!(matches!(err, PolicyLoadError::MissingSlot { slot: Slot::Split, .. }), "{err}");
}

#[test]
fn the_embedded_defaults_export_every_slot_at_the_current_version() {
    let plugin = Plugin::load(&PluginSource::Default, None).unwrap();
    for slot in Slot::ALL {
        assert_eq!(plugin.slot_version(slot).unwrap(), "0.1.0");
    }
}

#[test]
fn a_refusal_names_plugin_and_slot() {
    let defaults = chitin::policy::Policies::embedded_defaults().unwrap();
    let err = defaults
        .split_points(SplitRequest {
            shard: Shard { id: "one".into(), lower: 7, upper: 7, ..Shard::default() },
            children: 2,
            ..SplitRequest::default()
        })
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("policy `split` (default (embedded))"), "{text}");
}

#[test]
fn a_missing_file_is_named() {
    let err = Plugin::load(&PluginSource::File("/nonexistent/p.wasm".into()), None).err().unwrap();
    assert!(err.to_string().contains("/nonexistent/p.wasm"), "{err}");
}

/// A deadline of 100 ms, as a node has by default.
fn short() -> Limits {
    Limits::new(Duration::from_millis(100), 64 << 20).unwrap()
}

/// `call` fails as a blocked call naming `wasi_call`, well within the deadline:
/// the host did not wait. Returns how long it took.
fn stopped_at_once<T: std::fmt::Debug>(wasi_call: &str, call: impl FnOnce() -> Result<T, PolicyCallError>) -> Duration {
    let started = Instant::now();
    let result = call();
    let took = started.elapsed();
    match result {
        Err(PolicyCallError::Blocked { call, slot, plugin }) => {
            assert_eq!(call, wasi_call);
            assert!(!plugin.is_empty());
            let text = PolicyCallError::Blocked { call, slot, plugin }.to_string();
            assert!(text.contains("may not block") && text.contains(wasi_call), "{text}");
        }
        other => panic!("expected a blocked call in {wasi_call}, got {other:?} after {took:?}"),
    }
    // The guest asked to wait 10 s or more; a host that waited would take that long.
    assert!(took < Duration::from_secs(2), "took {took:?}");
    took
}

#[test]
fn a_sleeping_plugin_is_stopped_at_once() {
    let r = runner("sleepy", short());
    for _ in 0..2 {
        // std's sleep blocks on a monotonic-clock subscription.
        let took = stopped_at_once("wasi:io/poll.pollable.block", || r.place_replicas(request()));
        eprintln!("sleepy place-replicas stopped after {took:?}");
    }
    // A ranking sleeps once a node is active; while all are joining it answers.
    let ranking = |state: NodeState| RankingRequest {
        nodes: request().nodes.into_iter().map(|n| Node { state, ..n }).collect(),
        shards: request().shards,
        replicas: vec![Replica { id: "r".into(), shard: "s".into(), node: "n2".into() }],
    };
    for _ in 0..2 {
        let ranked = r.preferred_holders(ranking(NodeState::Joining)).unwrap();
        assert_eq!(ranked[0].nodes, ["n2"]);
        stopped_at_once("wasi:io/poll.pollable.block", || r.preferred_holders(ranking(NodeState::Active)));
    }
    defaults_still_serve();
}

#[test]
fn a_plugin_waiting_on_a_clock_is_stopped_at_once_and_stdin_ends_at_once() {
    let r = runner("waits", short());
    // `poll` on a ten-second monotonic-clock subscription.
    stopped_at_once("wasi:io/poll.poll", || r.place_replicas(request()));
    // `pollable.block` on an instant that never comes.
    stopped_at_once("wasi:io/poll.pollable.block", || r.rebalance(RebalanceRequest::default()));
    // std's blocking read of stdin: closed, so it ends at once with nothing.
    let started = Instant::now();
    assert!(r.preferred_holders(RankingRequest::default()).unwrap().is_empty());
    assert!(started.elapsed() < Duration::from_secs(2));
}

#[test]
fn randomness_is_the_same_in_every_instance() {
    let names: Vec<String> = (0..2)
        .flat_map(|_| {
            let r = slot_runner("random_bytes", Slot::InstanceId, short());
            let first = r.resolve(InstanceContext::default()).unwrap();
            r.reset();
            [first, r.resolve(InstanceContext::default()).unwrap()]
        })
        .collect();
    assert!(names.iter().all(|n| *n == names[0]), "{names:?}");
    // The documented generator: its first 16 bytes, then its next word.
    let mut generator = chitin::policy::sandbox::Deterministic::new();
    let bytes: String = generator.bytes(16).unwrap().iter().map(|b| format!("{b:02x}")).collect();
    let word = generator.next_u64();
    assert!(names[0].starts_with(&format!("{bytes}-{word:016x}-")), "{}", names[0]);
}

/// A core module in a store limited as a policy instance is.
fn instantiate_limited(wat: &str, limit: u64) -> Result<(), String> {
    use chitin::policy::budget::MemoryBudget;
    let engine = chitin::policy::engine::engine();
    let module = wasmtime::Module::new(engine, wat::parse_str(wat).unwrap()).unwrap();
    let mut store = wasmtime::Store::new(engine, MemoryBudget::new(limit));
    store.limiter(|b| b);
    store.set_epoch_deadline(1_000);
    let instance = wasmtime::Instance::new(&mut store, &module, &[]).map_err(|e| format!("{e:#}"))?;
    if let Some(grow) = instance.get_func(&mut store, "grow") {
        let mut out = [wasmtime::Val::I32(0)];
        grow.call(&mut store, &[], &mut out).map_err(|e| format!("{e:#}"))?;
    }
    Ok(())
}

#[test]
fn memories_and_tables_share_one_limit() {
    const LIMIT: u64 = 64 << 20;
    // 600 pages are 37.5 MiB: one such memory fits, two do not, although
    // each alone is within the limit.
    instantiate_limited("(module (memory 600))", LIMIT).unwrap();
    let err = instantiate_limited("(module (memory 600) (memory 600))", LIMIT).unwrap_err();
    assert!(err.contains("memory limit of 67108864 bytes"), "{err}");
    // Growing the second memory past the sum traps the same way.
    let grow = "(module (memory 600) (memory $b 1) (func (export \"grow\") (result i32) (memory.grow $b (i32.const 500))))";
    let err = instantiate_limited(grow, LIMIT).unwrap_err();
    assert!(err.contains("memory limit"), "{err}");
    // A table counts a pointer per element: 5 M elements are 40 MiB.
    instantiate_limited("(module (table 5000000 funcref))", LIMIT).unwrap();
    let err = instantiate_limited("(module (memory 600) (table 5000000 funcref))", LIMIT).unwrap_err();
    assert!(err.contains("memory limit"), "{err}");
}

#[test]
fn a_component_importing_what_the_sandbox_lacks_is_refused_by_name() {
    let wat = r#"(component (import "wasi:http/outgoing-handler@0.2.0" (instance)))"#;
    let plugin = Plugin::from_bytes("http.wasm".into(), &wat::parse_str(wat).unwrap(), None).unwrap();
    let err = chitin::policy::sandbox::check_imports(plugin.component()).unwrap_err();
    assert!(err.contains("`wasi:http/outgoing-handler@0.2.0`") && err.contains("wasi:io/poll"), "{err}");
    assert!(err.contains("wasi:sockets/tcp") && err.contains("nothing can be opened"), "{err}");
    for name in ["sleepy", "waits", "random_bytes", "env_leak", "bad_trap", "reaches_out"] {
        chitin::policy::sandbox::check_imports(load(name).unwrap().component()).unwrap();
    }
}

/// A guest importing all of `wasi:filesystem` and `wasi:sockets` (as CPython
/// does) loads, and each way out through them is refused with an error the
/// guest sees: no directory to list, no file to read or create, no TCP
/// connection or UDP datagram reaching the listeners here, no name resolved.
#[test]
fn a_plugin_reaching_for_files_and_sockets_is_denied_each_time() {
    let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let addresses = [tcp.local_addr().unwrap().to_string(), udp.local_addr().unwrap().to_string()];
    let mut req = request();
    req.nodes.truncate(2);
    for (node, address) in req.nodes.iter_mut().zip(&addresses) {
        node.address = address.clone();
    }
    let r = runner("reaches_out", short());
    let report = match r.place_replicas(req) {
        Err(PolicyCallError::Refused { error: PolicyError::Unsupported(report), .. }) => report,
        other => panic!("expected the guest's report, got {other:?}"),
    };
    eprintln!("reaches_out:\n{report}");
    let attempts: Vec<&str> = report.lines().collect();
    // Four on files, TCP and UDP to each of the two nodes, one lookup.
    assert_eq!(attempts.len(), 4 + 2 * 2 + 1, "{report}");
    // No preopened directory: wasi-libc finds no directory to resolve a
    // path in. Sockets and lookups: the host's `access-denied`.
    for line in &attempts[..4] {
        assert!(line.contains(": denied (No such file or directory"), "not refused: {line}\n{report}");
    }
    for line in &attempts[4..] {
        assert!(line.contains(": denied (Permission denied"), "not refused: {line}\n{report}");
    }
    assert_eq!(tcp.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "a guest connected");
    let mut buf = [0; 16];
    assert_eq!(udp.recv_from(&mut buf).unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "a datagram arrived");
    assert!(!std::path::Path::new("escape.txt").exists(), "the guest created a file");
}

#[test]
fn the_instance_id_policy_gets_only_the_allow_list() {
    let env: Vec<(String, String)> = [
        ("PATH", "/usr/bin"),
        ("CHITIN__DATABASE__URL", "postgres://chitin:pw@db/chitin"),
        ("POD_NAME", "web-3"),
        ("RACK", "r9"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let r = slot_runner("env_leak", Slot::InstanceId, short());
    let all = r.resolve(InstanceContext { env: env.clone(), hostname: None }).unwrap();
    assert!(all.contains("pw_db"), "the guest does leak what it is given: {all}");
    let allowed = chitin::policy::env::allowed_env(env, &["RACK".to_string()]);
    let name = r.resolve(InstanceContext { env: allowed, hostname: None }).unwrap();
    assert_eq!(name, "leak.POD_NAME_web-3.RACK_r9");
}

/// A standalone node process in `dir` with `edit` applied, not started.
fn standalone(dir: &std::path::Path, name: &str, edit: impl FnOnce(&mut chitin::settings::Settings)) -> NodeProc {
    let ports = free_ports(2).unwrap();
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let mut s = node_settings::standalone(dir.join("data"), &api, &metrics);
    s.leases.ttl_secs = Some(2.0);
    s.leases.renew_interval_secs = Some(0.5);
    edit(&mut s);
    let settings = dir.join("chitin.toml");
    node_settings::write(&settings, &s).unwrap();
    NodeProc::new(crate::support::cluster::CHITIN, name, api, metrics, settings, dir.join("node.log"))
}

/// Each held lease as `shard holder epoch`.
async fn leases(node: &NodeProc) -> (String, Vec<String>) {
    let status = node.admin().await.unwrap().status(chitin::api::proto::StatusRequest {}).await.unwrap().into_inner();
    let mut held: Vec<String> = status.leases.iter().map(|l| format!("{} {} {}", l.shard, l.holder_uuid, l.epoch)).collect();
    held.sort();
    (status.node, held)
}

/// [`leases`] once the node holds `count` of them.
async fn holding(node: &NodeProc, count: usize) -> (String, Vec<String>) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (name, held) = leases(node).await;
        if held.len() == count {
            return (name, held);
        }
        assert!(Instant::now() < deadline, "{} leases held, not {count}; log:\n{}", held.len(), node.log_tail(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The value of the sample `name` in a Prometheus text exposition.
fn sample(metrics: &str, name: &str) -> f64 {
    metrics.lines().find_map(|l| l.strip_prefix(name)?.trim().parse().ok()).unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_placement_plugin_sleeps_keeps_its_leases() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone(dir.path(), "sleeper", |s| {
        s.cluster.instance_id = Some("sleeper".into());
        s.policies.placement = guest("sleepy").display().to_string();
    });
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let (_, first) = holding(&node, 16).await;

    // Rounds every 0.5 s, every ranking of the active node sleeping for two minutes: a
    // host that waited would stall the round and lose every lease within
    // the 2 s TTL. Watch four TTLs: the same leases, never re-acquired.
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        let (_, now) = leases(&node).await;
        assert_eq!(now, first, "the leases changed while the plugin slept; log:\n{}", node.log_tail(30));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (code, metrics) = http_get(&node.metrics, "/metrics", None).await.unwrap();
    assert_eq!(code, 200);
    let blocked = r#"chitin_policy_call_duration_seconds_count{slot="placement",outcome="blocked"}"#;
    let count = sample(&metrics, blocked);
    assert!(count >= 4.0, "the sleeping rankings were not reached ({blocked} = {count})");
    let sum = sample(&metrics, &blocked.replace("_count", "_sum"));
    eprintln!("{count} sleeping calls, stopped after {:.3} ms on average", sum / count * 1000.0);
    assert!(sum / count < 0.1, "a blocked call took {} s on average", sum / count);
    assert!(node.log_text().contains("tried to wait in `wasi:io/poll.pollable.block`"), "{}", node.log_tail(30));
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(30));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_names_itself_from_the_allowed_variables_only() {
    let dir = tempfile::tempdir().unwrap();
    const SECRET: &str = "s3cr3t-t0ken-value";
    let mut node = standalone(dir.path(), "leaker", |s| {
        s.cluster.instance_id = None;
        s.policies.instance_id = guest("env_leak").display().to_string();
        s.policies.instance_id_env = vec!["RACK".into()];
    })
    .with_env("CHITIN_TEST_SECRET", SECRET)
    .with_env("POD_NAME", "web-7")
    .with_env("RACK", "r9");
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let (name, _) = holding(&node, 16).await;
    assert!(name.contains("POD_NAME_web-7") && name.contains("RACK_r9"), "{name}");
    assert!(!name.contains(SECRET) && !name.contains("PATH_"), "the node's environment leaked into its name: {name}");
    assert!(!node.log_text().contains(SECRET));
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(30));
}

/// A guest that prints 200 bytes on every call keeps answering (its output
/// buffer never fills: before, its 21st call trapped on a full buffer), and
/// a trap's message shows only its own call's output.
#[test]
fn a_guest_that_prints_keeps_answering_and_a_trap_shows_its_own_output() {
    let r = slot_runner("chatty", Slot::InstanceId, short());
    for call in 0..100 {
        let name = r.resolve(InstanceContext::default());
        assert_eq!(name.as_deref().ok(), Some("chatty"), "call {call}: {name:?}");
    }
    let trap = r.resolve(InstanceContext { hostname: Some("trap".into()), ..Default::default() }).unwrap_err().to_string();
    assert!(trap.contains("asked to trap"), "{trap}");
    assert_eq!(trap.matches(&"x".repeat(186)).count(), 1, "another call's output in the message: {trap}");
}
