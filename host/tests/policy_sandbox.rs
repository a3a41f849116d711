//! The policy host against plugins that misbehave: each yields its own clear
//! error, and the host keeps serving other calls (and the same slot) after.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chitin::policy::sdk::{Node, NodeState, PlacementRequest, Shard, SplitRequest};
use chitin::policy::{Limits, Plugin, PluginSource, PolicyCallError, PolicyLoadError, Slot, SlotRunner};

fn guest(name: &str) -> PathBuf {
    PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join(format!("{name}.wasm"))
}

fn load(name: &str) -> Result<Plugin, PolicyLoadError> {
    Plugin::load(&PluginSource::File(guest(name)), None)
}

fn runner(name: &str, limits: Limits) -> SlotRunner {
    SlotRunner::new(Arc::new(load(name).unwrap()), Slot::Placement, limits).unwrap()
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
        shards: vec![Shard {
            id: "s".into(),
            application: "app".into(),
            upper: u32::MAX,
            ..Shard::default()
        }],
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
            shard: Shard {
                id: "one".into(),
                lower: 7,
                upper: 7,
                ..Shard::default()
            },
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
