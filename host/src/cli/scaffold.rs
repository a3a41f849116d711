//! `chitin policy new --slot SLOT NAME`: writes a plugin crate that uses the
//! policy SDK, with one fixture, ready to build and pass `chitin policy test`.
//!
//! The crate depends on `chitin-policy-sdk` by path. The path is, in order:
//! the `--sdk-path` argument, the environment variable [`SDK_PATH_ENV`], or
//! the `plugins/sdk` directory of the chitin checkout this binary was built
//! from (when it still exists). The templates live in `host/templates/plugin/`
//! and are compiled into the binary.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail, ensure};

/// Environment variable naming the SDK directory (the one holding its `Cargo.toml`).
pub const SDK_PATH_ENV: &str = "CHITIN_SDK_PATH";

/// `plugins/sdk` of the checkout this binary was built from.
const BUILT_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../plugins/sdk");

macro_rules! template {
    ($path:literal) => {
        include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/templates/plugin/", $path))
    };
}

const CARGO_TOML: &str = template!("Cargo.toml.tmpl");
const README: &str = template!("README.md.tmpl");
const TESTS: &str = template!("tests-fixtures.rs.tmpl");

/// One slot's templates: (slot, SDK trait, macro ident, lib.rs, fixture).
const SLOTS: [(&str, &str, &str, &str, &str); 4] = [
    (
        "instance-id",
        "InstanceIdPolicy",
        "instance_id",
        template!("src/instance-id.rs.tmpl"),
        template!("fixtures/instance-id.json"),
    ),
    ("placement", "PlacementPolicy", "placement", template!("src/placement.rs.tmpl"), template!("fixtures/placement.json")),
    ("split", "SplitPolicy", "split", template!("src/split.rs.tmpl"), template!("fixtures/split.json")),
    ("drain", "DrainPolicy", "drain", template!("src/drain.rs.tmpl"), template!("fixtures/drain.json")),
];

/// Writes the plugin crate `NAME` for `slot` into `dir/NAME` and returns that
/// directory. The SDK is found as the module documentation says.
#[cfg_attr(not(test), allow(dead_code))] // the CLI passes `--sdk-path` through `new_plugin_with_sdk`
pub fn new_plugin(slot: &str, name: &str, dir: &Path) -> anyhow::Result<PathBuf> {
    new_plugin_with_sdk(slot, name, dir, None)
}

/// [`new_plugin`] with an explicit SDK directory (`--sdk-path`).
pub fn new_plugin_with_sdk(slot: &str, name: &str, dir: &Path, sdk: Option<&Path>) -> anyhow::Result<PathBuf> {
    let slot_key = slot.replace('_', "-");
    let Some(&(slot, trait_name, slot_ident, lib_rs, fixture)) = SLOTS.iter().find(|s| s.0 == slot_key) else {
        bail!("unknown slot `{slot}`; the slots are instance-id, placement, split and drain");
    };
    check_name(name)?;
    let sdk = sdk_path(sdk)?;
    let root = dir.join(name);
    if root.exists() && std::fs::read_dir(&root).map(|mut d| d.next().is_some()).unwrap_or(true) {
        bail!("{} already exists and is not empty; choose another name or directory", root.display());
    }
    let crate_name = name.replace('-', "_");
    let type_name: String = name
        .split(['-', '_'])
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect();
    // `{{sdk_path}}` lands in a TOML string: forward slashes, quotes escaped.
    let sdk_text = sdk.display().to_string().replace('\\', "/").replace('"', "\\\"");
    let fill = |text: &str| {
        text.replace("{{name}}", name)
            .replace("{{crate}}", &crate_name)
            .replace("{{type}}", &type_name)
            .replace("{{trait}}", trait_name)
            .replace("{{slot_ident}}", slot_ident)
            .replace("{{slot}}", slot)
            .replace("{{sdk_path}}", &sdk_text)
    };
    let files = [
        ("Cargo.toml", fill(CARGO_TOML)),
        ("README.md", fill(README)),
        ("src/lib.rs", fill(lib_rs)),
        ("tests/fixtures.rs", fill(TESTS)),
        (&format!("fixtures/{slot}-example.json") as &str, fixture.to_owned()),
        (".gitignore", "/target\n".to_owned()),
    ];
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().expect("files lie in the crate"))
            .with_context(|| format!("cannot create {}", root.display()))?;
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(root)
}

/// A Cargo package name that also makes a Rust type name.
fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    ensure!(ok, "`{name}` is not a valid plugin name: use letters, digits, `-` and `_`, starting with a letter");
    Ok(())
}

/// The SDK directory: `explicit`, else `$CHITIN_SDK_PATH`, else the checkout's.
fn sdk_path(explicit: Option<&Path>) -> anyhow::Result<PathBuf> {
    let (path, from) = match (explicit, std::env::var_os(SDK_PATH_ENV)) {
        (Some(p), _) => (p.to_path_buf(), "--sdk-path"),
        (None, Some(p)) if !p.is_empty() => (PathBuf::from(p), SDK_PATH_ENV),
        _ => (PathBuf::from(BUILT_SDK), "the chitin checkout this binary was built from"),
    };
    let manifest = path.join("Cargo.toml");
    ensure!(
        manifest.is_file(),
        "the policy SDK is not at {} (from {from}): no Cargo.toml there; pass --sdk-path or set {SDK_PATH_ENV} \
         to the plugins/sdk directory of a chitin checkout",
        path.display()
    );
    Ok(std::fs::canonicalize(&path).unwrap_or(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_crate_per_slot() {
        let dir = std::env::temp_dir().join(format!("chitin-scaffold-unit-{}", std::process::id()));
        for slot in ["instance-id", "placement", "split", "drain"] {
            let name = format!("my-{slot}");
            let root = new_plugin(slot, &name, &dir).unwrap();
            let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
            assert!(!lib.contains("{{"), "{lib}");
            assert!(root.join(format!("fixtures/{slot}-example.json")).is_file());
            let toml = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
            assert!(toml.contains(&format!("name = \"{name}\"")), "{toml}");
        }
        assert!(new_plugin("split", "my-split", &dir).is_err(), "refuses to overwrite");
        assert!(new_plugin("lease", "x", &dir).is_err());
        assert!(new_plugin("split", "9lives", &dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
