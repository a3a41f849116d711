//! The default policies' fixtures, run through `chitin policy test` exactly
//! as an operator would run them.

use std::process::Command;

#[test]
fn every_default_policy_fixture_passes_through_the_cli() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/policies");
    let out =
        Command::new(env!("CARGO_BIN_EXE_chitin")).args(["policy", "test", "--plugin", "default", fixtures]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let summary = stdout.lines().last().unwrap_or_default();
    let passed: usize = summary.split(' ').next().unwrap().parse().unwrap();
    assert!(passed >= 40, "only {passed} fixtures ran: {summary}");
    assert!(summary.ends_with(" 0 failed"), "{summary}");
}

#[test]
fn a_failing_fixture_shows_a_diff_and_fails_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wrong.json");
    std::fs::write(
        &path,
        r#"{"slot": "split", "call": "split-points",
            "input": {"shard": {"id": "s", "lower": 0, "upper": 4294967295, "state": "active"}, "children": 2},
            "expect": {"ok": [1]}}"#,
    )
    .unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_chitin")).args(["policy", "test", "--plugin", "default"]).arg(&path).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(stdout.contains("FAIL"), "{stdout}");
    assert!(stdout.contains("+  2147483648"), "{stdout}");
    assert!(stdout.trim_end().ends_with("0 passed, 1 failed"), "{stdout}");
}

#[test]
fn inspect_lists_the_slots_of_a_component() {
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["policy", "inspect", "default"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for slot in ["instance-id", "placement", "split", "drain"] {
        assert!(stdout.contains(&format!("chitin:policy/{slot}@0.1.0")), "{stdout}");
    }
}
