//! The on-disk cache of precompiled components.

use chitin::policy::cache::Cache;
use chitin::policy::engine::engine;
use chitin::policy::plugin::EMBEDDED_DEFAULTS;
use chitin::policy::{Plugin, PluginSource, Slot};

#[test]
fn a_cached_component_is_reused_and_a_corrupt_entry_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path());
    let entry = cache.entry_path(engine(), EMBEDDED_DEFAULTS);

    Plugin::load(&PluginSource::Default, Some(&cache)).unwrap();
    let written = std::fs::read(&entry).expect("the first load writes an entry");
    assert!(cache.get(engine(), EMBEDDED_DEFAULTS).is_some());

    // Flip one byte of the payload: the checksum catches it.
    let mut corrupt = written.clone();
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    std::fs::write(&entry, &corrupt).unwrap();
    assert!(cache.get(engine(), EMBEDDED_DEFAULTS).is_none());
    assert!(!entry.exists(), "a corrupt entry is removed");

    // A foreign file under the right name (another engine's artifact, say).
    std::fs::write(&entry, b"not a compiled component at all, but long enough to have a checksum").unwrap();
    let plugin = Plugin::load(&PluginSource::Default, Some(&cache)).unwrap();
    assert_eq!(plugin.slot_version(Slot::Placement).unwrap(), "0.1.0");
    assert!(cache.get(engine(), EMBEDDED_DEFAULTS).is_some(), "the entry was rebuilt");
}
