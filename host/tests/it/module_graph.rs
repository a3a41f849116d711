//! The library's imports run one way (`host/src/lib.rs`, `docs/design.md`):
//! a module reaches only the modules below it. This reads every file under
//! `host/src` (up to its `#[cfg(test)]` block, where test helpers may reach
//! anywhere), collects each `crate::<module>` it names, and fails on an
//! import that runs upward, and on a known exception that no longer occurs,
//! so that the list of exceptions only shrinks. Inside each top-level module
//! the second-level modules (`chaos::checker`, `policy::wit`, ...) import each
//! other without a circle: a child's use of its parent (`super::Item`) is
//! not an edge, so a version module nested under `policy::wit` may use it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// Every `.rs` file under `src`, as a path relative to it.
fn rust_files(src: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path.strip_prefix(src).unwrap().to_path_buf());
            }
        }
    }
    files
}

/// Every (importing module, imported module) pair under `src`.
fn imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<String>> {
    let mut edges: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for rel in rust_files(src) {
        let top = rel.components().next().unwrap().as_os_str().to_str().unwrap().trim_end_matches(".rs").to_string();
        // `cli` and `main.rs` are the binary, a crate of its own above
        // the library (its `crate::` is itself).
        if top == "cli" || top == "main" || rel.file_name().unwrap().to_str().unwrap().ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(src.join(&rel)).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        for (i, _) in code.match_indices("crate::") {
            let name: String =
                code[i + "crate::".len()..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && name != top && layer_of(&name).is_some() {
                edges.entry((top.clone(), name)).or_default().insert(rel.display().to_string());
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

/// A file's module path under `src`: `chaos/checker.rs` is `[chaos,
/// checker]`, `policy/wit/mod.rs` is `[policy, wit]`.
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_str().unwrap().trim_end_matches(".rs").to_string()).collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Every edge between two second-level modules of one top-level module
/// (`(chaos, checker) -> (chaos, claims)`), from `super::` and
/// `crate::<top>::` paths outside comments and test blocks.
/// `line` without its `//` comment; a `//` inside a string literal (a URL)
/// is code, and what follows it on the line is read. (A quote as a char
/// literal opens no string.)
fn without_comment(line: &str) -> &str {
    let (mut in_string, mut escaped, mut slash) = (false, false, false);
    for (i, c) in line.replace("'\"'", "'.'").char_indices() {
        match c {
            '/' if !in_string && slash => return &line[..i - 1],
            '"' if !escaped => in_string = !in_string,
            _ => {}
        }
        slash = c == '/';
        escaped = in_string && c == '\\' && !escaped;
    }
    line
}

#[test]
fn a_comment_ends_a_line_but_a_url_in_a_string_does_not() {
    for (line, code) in [
        ("use super::a; // super::b", "use super::a; "),
        ("let u = \"http://x\"; super::a::f()", "let u = \"http://x\"; super::a::f()"),
        ("let q = \"a\\\"//\"; // super::b", "let q = \"a\\\"//\"; "),
        ("/// doc", ""),
        ("match c { '\"' => x, _ => y } // super::b", "match c { '\"' => x, _ => y } "),
    ] {
        assert_eq!(without_comment(line), code, "{line}");
    }
}

fn inner_imports(src: &Path) -> BTreeMap<(String, String), BTreeSet<(String, String)>> {
    let files = rust_files(src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(f)).collect();
    let second = |path: &[String]| -> Option<(String, String)> {
        (path.len() >= 2 && modules.contains(&path[..2])).then(|| (path[0].clone(), path[1].clone()))
    };
    let mut edges: BTreeMap<(String, String), BTreeSet<(String, String)>> = BTreeMap::new();
    for rel in &files {
        let me = module_path(rel);
        if me[0] == "cli" || me[0] == "main" || me[0] == "lib" || me.last().unwrap().ends_with("_tests") {
            continue;
        }
        let Some(from) = second(&me) else { continue };
        let text = std::fs::read_to_string(src.join(rel)).unwrap();
        let code: String = text.split("#[cfg(test)]").next().unwrap().lines().map(without_comment).collect::<Vec<_>>().join("\n");
        for (i, _) in code.match_indices("super::").chain(code.match_indices("crate::")) {
            if code[..i].ends_with("::") {
                continue; // the second `super::` of `super::super::`, counted with the first
            }
            let path: Vec<String> = code[i..]
                .split("::")
                .map(|seg| seg.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect::<String>())
                .take_while(|seg| !seg.is_empty())
                .collect();
            let supers = path.iter().take_while(|s| *s == "super").count();
            let mut target: Vec<String> = if path[0] == "crate" {
                path[1..].to_vec()
            } else {
                let base = &me[..me.len() - supers.min(me.len())];
                base.iter().cloned().chain(path[supers..].iter().cloned()).collect()
            };
            target.truncate(2);
            if let Some(to) = second(&target)
                && to != from
                && to.0 == from.0
            {
                edges.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    edges
}

/// The circles of `edges`: each set of modules that reach each other.
fn circles(edges: &BTreeMap<(String, String), BTreeSet<(String, String)>>) -> Vec<Vec<String>> {
    let reach = |from: &(String, String)| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(m) = todo.pop() {
            for next in edges.get(&m).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<_, _> = edges.keys().map(|m| (m.clone(), reach(m))).collect();
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for (m, from_m) in &reached {
        if from_m.contains(m) {
            let circle = from_m
                .iter()
                .filter(|o| reached.get(*o).is_some_and(|r| r.contains(m)))
                .map(|(t, s)| format!("{t}::{s}"))
                .collect();
            found.insert(circle);
        }
    }
    found.into_iter().collect()
}

#[test]
fn modules_inside_each_top_level_module_import_each_other_without_a_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = inner_imports(&src);
    assert!(edges.len() > 20, "the reader found almost no imports: {edges:?}");
    let found = circles(&edges);
    assert!(
        found.is_empty(),
        "import circles between modules:\n{}",
        found.iter().map(|c| c.join(" <-> ")).collect::<Vec<_>>().join("\n")
    );
}

/// The reader itself: two modules naming each other are a circle, also
/// through `crate::` and `super::super::`; a child's use of its parent and a
/// module nested in another are not.
#[test]
fn the_reader_finds_a_circle_between_two_modules() {
    let dir = tempfile::tempdir().unwrap();
    let write = |path: &str, text: &str| {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("chaos/mod.rs", "mod a; mod b; pub struct Top;\n");
    write("chaos/a.rs", "use super::b::B; // super::c::C\npub struct A;\n");
    write("chaos/b.rs", "use crate::chaos::a::A;\nuse super::Top;\n");
    write("policy/wit/mod.rs", "mod v1; pub struct Answer;\n");
    write("policy/wit/v1.rs", "use super::Answer; use super::super::slot::Slot;\n");
    write("policy/slot.rs", "pub struct Slot;\n#[cfg(test)]\nmod tests { use crate::policy::wit::Answer; }\n");
    write("policy/c.rs", "pub struct C;\n");
    let edges = inner_imports(dir.path());
    let pair = |t: &str, s: &str| (t.to_string(), s.to_string());
    assert_eq!(edges.get(&pair("policy", "wit")), Some(&BTreeSet::from([pair("policy", "slot")])), "{edges:?}");
    assert_eq!(circles(&edges), vec![vec!["chaos::a".to_string(), "chaos::b".to_string()]]);
}
