//! Loading a policy component and reading what it exports.

use std::path::{Path, PathBuf};

use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::cache::Cache;
pub use super::wit::SUPPORTED_VERSIONS;
use super::{PolicyLoadError, Slot, engine::engine};

/// The default policies, built from `policies/default` by `build.rs`.
pub static EMBEDDED_DEFAULTS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/chitin_default_policies.wasm"));

/// The WIT package policies are exported from.
pub const PACKAGE: &str = "chitin:policy";

/// Where a plugin comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginSource {
    /// The component embedded in the binary.
    Default,
    /// A component file.
    File(PathBuf),
}

impl PluginSource {
    /// `"default"` or a path.
    pub fn parse(value: &str) -> Self {
        if value == "default" { PluginSource::Default } else { PluginSource::File(PathBuf::from(value)) }
    }
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Default => f.write_str("default (embedded)"),
            PluginSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

/// One exported `chitin:policy` interface: slot and version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportedInterface {
    /// The full export name, e.g. `chitin:policy/placement@0.1.0`.
    pub name: String,
    /// The slot, when the interface is one of chitin's.
    pub slot: Option<Slot>,
    /// The version after `@`, when there is one.
    pub version: Option<String>,
}

/// A compiled component and what it exports.
pub struct Plugin {
    name: String,
    component: Component,
    exports: Vec<ExportedInterface>,
    /// Hex SHA-256 of the component's bytes: what tells two nodes' policies apart.
    sha256: String,
}

impl Plugin {
    /// Loads `source`, through `cache` when given.
    pub fn load(source: &PluginSource, cache: Option<&Cache>) -> Result<Self, PolicyLoadError> {
        match source {
            PluginSource::Default => Self::from_bytes(source.to_string(), EMBEDDED_DEFAULTS, cache),
            PluginSource::File(path) => Self::from_file(path, cache),
        }
    }

    /// Loads the component file at `path`.
    pub fn from_file(path: &Path, cache: Option<&Cache>) -> Result<Self, PolicyLoadError> {
        let bytes = std::fs::read(path).map_err(|source| PolicyLoadError::Read { path: path.to_path_buf(), source })?;
        Self::from_bytes(path.display().to_string(), &bytes, cache)
    }

    /// Compiles (or fetches from `cache`) the component in `bytes`, named `name` in errors.
    pub fn from_bytes(name: String, bytes: &[u8], cache: Option<&Cache>) -> Result<Self, PolicyLoadError> {
        let not_a_component = |reason: String| PolicyLoadError::NotAComponent { plugin: name.clone(), reason };
        match bytes.get(0..8) {
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err(not_a_component("it is a core WebAssembly module, not a component".into()));
            }
            Some([0, b'a', b's', b'm', ..]) => {}
            _ => return Err(not_a_component("it does not start with the WebAssembly magic `\\0asm`".into())),
        }
        let engine = engine();
        let component = match cache.and_then(|c| c.get(engine, bytes)) {
            Some(component) => component,
            None => {
                let component = Component::new(engine, bytes).map_err(|e| not_a_component(format!("{e:#}")))?;
                if let Some(cache) = cache {
                    cache.put(engine, bytes, &component);
                }
                component
            }
        };
        let exports = exported_interfaces(&component);
        let sha256 = super::cache::hex(&<sha2::Sha256 as sha2::Digest>::digest(bytes));
        Ok(Plugin { name, component, exports, sha256 })
    }

    /// The name used in errors and logs: the file path or `default (embedded)`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Hex SHA-256 of the component's bytes.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// The compiled component.
    pub fn component(&self) -> &Component {
        &self.component
    }

    /// Every interface the component exports.
    pub fn exports(&self) -> &[ExportedInterface] {
        &self.exports
    }

    /// The supported version at which the component exports `slot`'s interface.
    pub fn slot_version(&self, slot: Slot) -> Result<&'static str, PolicyLoadError> {
        let of_slot: Vec<&ExportedInterface> = self.exports.iter().filter(|e| e.slot == Some(slot)).collect();
        for export in &of_slot {
            if let Some(v) =
                SUPPORTED_VERSIONS.iter().find(|v| export.version.as_deref().is_some_and(|found| semver_compatible(found, v)))
            {
                return Ok(v);
            }
        }
        let supported = SUPPORTED_VERSIONS.iter().map(|v| format!("{PACKAGE}/{slot}@{v}")).collect::<Vec<_>>().join(", ");
        if let Some(found) = of_slot.first() {
            return Err(PolicyLoadError::UnsupportedVersion {
                plugin: self.name.clone(),
                slot,
                found: found.name.clone(),
                supported,
            });
        }
        let exports = if self.exports.is_empty() {
            "no interfaces".to_string()
        } else {
            self.exports.iter().map(|e| e.name.as_str()).collect::<Vec<_>>().join(", ")
        };
        Err(PolicyLoadError::MissingSlot { plugin: self.name.clone(), slot, expected: supported, exports })
    }
}

/// The interfaces a component exports (functions and types exported at the
/// top level are not interfaces and are left out).
fn exported_interfaces(component: &Component) -> Vec<ExportedInterface> {
    let ty = component.component_type();
    ty.exports(engine())
        .filter(|(_, item)| matches!(item.ty, ComponentItem::ComponentInstance(_)))
        .map(|(name, _)| {
            let (path, version) = match name.split_once('@') {
                Some((p, v)) => (p, Some(v.to_string())),
                None => (name, None),
            };
            let slot = path.strip_prefix(PACKAGE).and_then(|rest| rest.strip_prefix('/')).and_then(Slot::from_interface);
            ExportedInterface { name: name.to_string(), slot, version }
        })
        .collect()
}

/// Component-model semver compatibility: for `0.x` the minor must match,
/// from `1.0` the major.
fn semver_compatible(found: &str, supported: &str) -> bool {
    let parts = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.split('.');
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    match (parts(found), parts(supported)) {
        (Some((0, fm)), Some((0, sm))) => fm == sm,
        (Some((found_major, _)), Some((supported_major, _))) => found_major == supported_major && found_major > 0,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::semver_compatible;

    #[test]
    fn semver_rules_of_the_component_model() {
        assert!(semver_compatible("0.1.0", "0.1.0"));
        assert!(semver_compatible("0.1.3", "0.1.0"));
        assert!(!semver_compatible("0.2.0", "0.1.0"));
        assert!(semver_compatible("1.4.0", "1.0.0"));
        assert!(!semver_compatible("2.0.0", "1.0.0"));
        assert!(!semver_compatible("garbage", "0.1.0"));
    }
}
