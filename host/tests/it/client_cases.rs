//! Every client passes the shared behaviour cases (`clients/CASES.md`): each
//! case id is named (`case: <id>`) by a test of each client, and no test
//! names a case the list does not have.

use std::collections::BTreeSet;
use std::path::PathBuf;

/// The case ids of the list: the first column's `id`s.
fn cases() -> BTreeSet<String> {
    let text = std::fs::read_to_string(crate::support::repo_root().join("clients/CASES.md")).expect("clients/CASES.md");
    text.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split_once('`').map(|(id, _)| id.to_string())).collect()
}

/// The case ids the files under `paths` name, with where.
fn named(paths: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut files: Vec<PathBuf> = paths.iter().map(|p| crate::support::repo_root().join(p)).collect();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        for (at, _) in text.match_indices("case: ") {
            let id: String = text[at + 6..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
            found.push((id, path.strip_prefix(crate::support::repo_root()).unwrap().display().to_string()));
        }
    }
    found
}

#[test]
fn every_client_has_a_test_for_every_shared_case() {
    let cases = cases();
    assert!(cases.len() >= 10, "the list was not read: {cases:?}");
    let clients: [(&str, &[&str]); 3] = [
        (
            "rust",
            &["clients/rust/src", "host/tests/it/rust_client.rs", "host/tests/it/app_fence.rs", "host/tests/it/node_cluster.rs"],
        ),
        ("python", &["clients/python/tests"]),
        ("typescript", &["clients/typescript/test"]),
    ];
    let mut problems = Vec::new();
    for (client, paths) in clients {
        let named = named(paths);
        let ids: BTreeSet<&str> = named.iter().map(|(id, _)| id.as_str()).collect();
        for case in &cases {
            if !ids.contains(case.as_str()) {
                problems.push(format!("{client}: no test names case `{case}`"));
            }
        }
        for (id, file) in &named {
            if !cases.contains(id) {
                problems.push(format!("{client}: {file} names case `{id}`, which clients/CASES.md does not list"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
