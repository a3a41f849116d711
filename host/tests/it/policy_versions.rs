//! Versioned WIT: a plugin built for the interface version this chitin
//! supports loads; one built against another version (`tests/guests/
//! future_version`, built against `chitin:policy@0.2.0`) is refused with an
//! error naming what the plugin targets and what chitin supports. And the
//! rule that keeps this true: every supported version has its frozen WIT
//! folder and its host module.

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;

use chitin::policy::plugin::{EMBEDDED_DEFAULTS, PACKAGE, SUPPORTED_VERSIONS};
use chitin::policy::{Limits, Plugin, PluginSource, PolicyLoadError, Slot, SlotRunner};

fn future_version() -> PathBuf {
    PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join("future_version.wasm")
}

#[test]
fn a_plugin_built_for_the_current_version_loads_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("current.wasm");
    std::fs::write(&path, EMBEDDED_DEFAULTS).unwrap();
    let plugin = Arc::new(Plugin::load(&PluginSource::File(path), None).unwrap());
    for slot in Slot::ALL {
        assert_eq!(plugin.slot_version(slot).unwrap(), SUPPORTED_VERSIONS[0]);
        SlotRunner::new(plugin.clone(), slot, Limits::default()).unwrap();
    }
}

#[test]
fn a_plugin_built_against_another_version_is_refused_naming_both_versions() {
    let path = future_version();
    let plugin = Arc::new(Plugin::load(&PluginSource::File(path.clone()), None).unwrap());
    let err = SlotRunner::new(plugin, Slot::Placement, Limits::default()).err().expect("refused");
    let PolicyLoadError::UnsupportedVersion { found, supported, .. } = &err else {
        panic!("expected an unsupported version, got {err}");
    };
    assert_eq!(found, "chitin:policy/placement@0.2.0");
    assert_eq!(supported, "chitin:policy/placement@0.1.0");
    let text = err.to_string();
    for part in
        [path.to_str().unwrap(), "`placement`", "exports chitin:policy/placement@0.2.0", "supports chitin:policy/placement@0.1.0"]
    {
        assert!(text.contains(part), "{text:?} does not name {part:?}");
    }
}

#[test]
fn the_cli_names_both_versions_too() {
    let wasm = future_version();
    let inspect = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["policy", "inspect"]).arg(&wasm).output().unwrap();
    let stdout = String::from_utf8_lossy(&inspect.stdout);
    let line = stdout.lines().find(|l| l.starts_with("placement")).unwrap_or_default();
    assert!(line.contains("unsupported"), "{stdout}");
    assert!(line.contains("@0.2.0") && line.contains("@0.1.0"), "{line}");

    let fixture = crate::support::repo_root().join("plugins/zone-placement/fixtures/placement-place-replicas-one-per-zone.json");
    let test = Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(["policy", "test", "--plugin"])
        .arg(&wasm)
        .arg(&fixture)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&test.stdout);
    assert!(!test.status.success(), "{stdout}");
    assert!(stdout.contains("placement@0.2.0") && stdout.contains("placement@0.1.0"), "{stdout}");
}

/// Each supported version `X.Y.Z` has its frozen WIT in `wit/since_vX.Y.Z/`
/// (declaring `package chitin:policy@X.Y.Z;`) and its bindings module
/// `host/src/policy/wit/since_vX_Y_Z.rs`; the newest is first.
#[test]
fn every_supported_version_has_its_frozen_wit_and_host_module() {
    assert!(!SUPPORTED_VERSIONS.is_empty());
    for version in SUPPORTED_VERSIONS {
        let wit = crate::support::repo_root().join(format!("wit/since_v{version}/policy.wit"));
        let text = std::fs::read_to_string(&wit).unwrap_or_else(|e| panic!("{}: {e}", wit.display()));
        assert!(
            text.contains(&format!("package {PACKAGE}@{version};")),
            "{} does not declare {PACKAGE}@{version}",
            wit.display()
        );
        let module = crate::support::repo_root().join(format!("host/src/policy/wit/since_v{}.rs", version.replace('.', "_")));
        assert!(module.is_file(), "no host module {}", module.display());
    }
    // Every frozen folder is a version the host still supports.
    for entry in std::fs::read_dir(crate::support::repo_root().join("wit")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(version) = name.strip_prefix("since_v") {
            assert!(SUPPORTED_VERSIONS.contains(&version), "wit/{name} is not in SUPPORTED_VERSIONS");
        }
    }
}
