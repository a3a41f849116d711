//! The library's imports run one way (`host/src/lib.rs`, `docs/design.md`):
//! a module reaches only the modules below it. This reads every file under
//! `host/src` (up to its `#[cfg(test)]` block, where test helpers may reach
//! anywhere), collects each `crate::<module>` it names, and fails on an
//! import that runs upward, and on a known exception that no longer occurs,
//! so that the list of exceptions only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The top-level modules from the top down: each may import those after
/// it, never those before it. Modules on one line form one layer, whose
/// members do not import each other.
const LAYERS: &[&[&str]] = &[
    // Tools and the process: the fault suite and its test kit, the server.
    &["chaos"],
    &["testkit"],
    &["server"],
    &["api"],
    &["rollout"],
    &["node"],
    &["upgrade"],
    &["lease", "coord", "policy", "topology"],
    // Logs and traces: the node's and the policy host's spans.
    &["telemetry"],
    &["security"],
    &["settings"],
    // Leaves every layer may use.
    &["proto", "failpoint", "plant", "names", "redact"],
];

/// Upward imports that remain, each with why; each is a defect to remove,
/// and the test fails once one is gone so that it is struck from here.
const KNOWN: &[(&str, &str, &str)] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every (importing module, imported module) pair under `src`.
fn imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(src).unwrap();
            let top = rel.components().next().unwrap().as_os_str().to_str().unwrap().trim_end_matches(".rs").to_string();
            // `cli` and `main.rs` are the binary, a crate of its own above
            // the library (its `crate::` is itself).
            if top == "cli" || top == "main" || rel.file_name().unwrap().to_str().unwrap().ends_with("_tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap();
            for (i, _) in code.match_indices("crate::") {
                let name: String =
                    code[i + "crate::".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                if !name.is_empty() && name != top && layer_of(&name).is_some() {
                    edges.entry((top.clone(), name)).or_default().insert(rel.display().to_string());
                }
            }
        }
    }
    edges
}

#[test]
fn imports_run_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = imports(&src);
    assert!(edges.len() > 20, "the reader found almost no imports: {edges:?}");
    let mut upward = Vec::new();
    let mut unknown_modules = BTreeSet::new();
    for ((from, to), files) in &edges {
        let (Some(a), Some(b)) = (layer_of(from), layer_of(to)) else {
            unknown_modules.insert(from.clone());
            continue;
        };
        if a >= b && !KNOWN.iter().any(|(f, t, _)| f == from && t == to) {
            upward.push(format!("{from} → {to} ({})", files.iter().cloned().collect::<Vec<_>>().join(", ")));
        }
    }
    let top_level: BTreeSet<String> = std::fs::read_dir(&src)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let name = p.file_name()?.to_str()?.trim_end_matches(".rs").to_string();
            (p.is_dir() || p.extension().is_some_and(|x| x == "rs")).then_some(name)
        })
        .filter(|n| n != "lib" && n != "main" && n != "cli")
        .collect();
    let placed: BTreeSet<String> = LAYERS.iter().flat_map(|l| l.iter().map(|m| m.to_string())).collect();
    assert_eq!(top_level, placed, "every top-level module has a layer here (and only those)");
    assert!(unknown_modules.is_empty(), "modules without a layer: {unknown_modules:?}");
    assert!(upward.is_empty(), "imports that run upward (or across one layer):\n{}", upward.join("\n"));
    for (from, to, why) in KNOWN {
        assert!(edges.contains_key(&(from.to_string(), to.to_string())), "{from} → {to} is gone ({why}): strike it from KNOWN");
    }
}

/// The reader itself: an upward import in a file is found, one in a test
/// block is not.
#[test]
fn the_reader_finds_an_upward_import() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("lease")).unwrap();
    std::fs::write(
        dir.path().join("lease/x.rs"),
        "use crate::node::Node;\nfn f() { crate::lease::g(); }\n#[cfg(test)]\nmod tests { use crate::api::x; }\n",
    )
    .unwrap();
    let edges = imports(dir.path());
    assert_eq!(edges.keys().cloned().collect::<Vec<_>>(), [("lease".to_string(), "node".to_string())]);
}
