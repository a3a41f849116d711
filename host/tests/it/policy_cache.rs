//! The on-disk cache of precompiled components: entries this node wrote are
//! reused; anything else under an entry's name (planted, torn, corrupt) is
//! never deserialized, and the component is compiled afresh.

use std::io::Write;

use chitin::policy::cache::Cache;
use chitin::policy::engine::engine;
use chitin::policy::plugin::EMBEDDED_DEFAULTS;
use chitin::policy::{Plugin, PluginSource, Policies, PolicySettings, Slot};
use sha2::{Digest, Sha256};

thread_local! {
    static LOG: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Everything this thread logged while `f` ran, as text. One global
/// subscriber writes each thread's events to that thread's buffer (a scoped
/// subscriber per test would race with tracing's per-callsite cache when
/// tests run in parallel).
fn logged<T>(f: impl FnOnce() -> T) -> (T, String) {
    struct ThreadBuffer;
    impl Write for ThreadBuffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            LOG.with(|l| l.borrow_mut().extend_from_slice(buf));
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static INIT: std::sync::Once = std::sync::Once::new();
    INIT.call_once(|| {
        tracing_subscriber::fmt().with_ansi(false).with_writer(|| ThreadBuffer).init();
    });
    LOG.with(|l| l.borrow_mut().clear());
    let out = f();
    (out, LOG.with(|l| String::from_utf8_lossy(&l.borrow()).into_owned()))
}

#[test]
fn a_cached_component_is_reused_and_a_corrupt_entry_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::with_key_file(dir.path().join("cache"), dir.path().join("cache.key"));
    let entry = cache.entry_path(engine(), EMBEDDED_DEFAULTS);

    Plugin::load(&PluginSource::Default, Some(&cache)).unwrap();
    let written = std::fs::read(&entry).expect("the first load writes an entry");
    assert!(cache.get(engine(), EMBEDDED_DEFAULTS).is_some());

    // Flip one byte of the payload: the tag catches it.
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

    // A second cache with the same key file (the node after a restart) trusts it.
    let again = Cache::with_key_file(dir.path().join("cache"), dir.path().join("cache.key"));
    assert!(again.get(engine(), EMBEDDED_DEFAULTS).is_some());
}

#[test]
fn a_planted_entry_with_a_valid_checksum_is_not_executed() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::with_key_file(dir.path().join("cache"), dir.path().join("cache.key"));
    let entry = cache.entry_path(engine(), EMBEDDED_DEFAULTS);

    // Someone who can write the cache dir plants native code under the
    // defaults' entry name: a real precompiled component (another one,
    // exporting only `placement`), behind the SHA-256 checksum an entry
    // used to carry. Deserializing it would run that code outside the sandbox.
    let guest = std::path::Path::new(env!("CHITIN_TEST_GUESTS_DIR")).join("bad_trap.wasm");
    let other = wasmtime::component::Component::new(engine(), std::fs::read(guest).unwrap()).unwrap();
    let payload = other.serialize().unwrap();
    let mut planted = Sha256::digest(&payload).to_vec();
    planted.extend_from_slice(&payload);
    std::fs::create_dir_all(cache.dir()).unwrap();
    std::fs::write(&entry, &planted).unwrap();

    let (plugin, log) = logged(|| Plugin::load(&PluginSource::Default, Some(&cache)).unwrap());
    // What runs is the defaults, compiled afresh: every slot is there.
    for slot in Slot::ALL {
        assert_eq!(plugin.slot_version(slot).unwrap(), "0.1.0", "slot {slot}");
    }
    assert!(log.contains("did not write") && log.contains(&entry.display().to_string()), "{log}");
    let rewritten = std::fs::read(&entry).unwrap();
    assert_ne!(rewritten, planted, "the planted entry was replaced by this node's own");

    // The same with a tag made under another key: still not this node's.
    let foreign = Cache::with_key_file(dir.path().join("cache"), dir.path().join("other.key"));
    let (_, log) = logged(|| assert!(foreign.get(engine(), EMBEDDED_DEFAULTS).is_none()));
    assert!(log.contains("did not write"), "{log}");
}

#[cfg(unix)]
#[test]
fn the_key_is_made_private_on_first_use_and_a_readable_key_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let settings = PolicySettings::default();
    Policies::load(&settings, Some(data.join("policy-cache"))).unwrap();
    let key = data.join("policy-cache.key");
    let meta = std::fs::metadata(&key).expect("the node's first load makes a key in the data dir");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert_eq!(meta.len(), 32);
    let key_bytes = std::fs::read(&key).unwrap();
    Policies::load(&settings, Some(data.join("policy-cache"))).unwrap();
    assert_eq!(std::fs::read(&key).unwrap(), key_bytes, "the key is kept across loads");

    // A key others can read could forge entries: the cache is not used.
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let cache = Cache::with_key_file(data.join("policy-cache"), &key);
    let (hit, log) = logged(|| cache.get(engine(), EMBEDDED_DEFAULTS));
    assert!(hit.is_none());
    assert!(log.contains("chmod 600") && log.contains(&key.display().to_string()), "{log}");
}
