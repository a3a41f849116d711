//! `chitin chaos --service`: the fault suite drives the example service
//! (`examples/kv-service`), whose data lives in its own database, and judges
//! that database's table: every acknowledged write stored once, and per key
//! no write under a token after a newer token's write. With the service's
//! fence check taken out (its planted bug) the same kind of run fails with
//! exactly that violation.

use std::process::Command;

use serde_json::Value;

/// One run at a time, as in `chaos_short`.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One `chitin chaos --service` run; returns whether it passed, its report
/// and its printed table.
fn run(args: &[&str]) -> (bool, Value, String) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new().prefix("chitin-chaos-service-").tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (run, report) = (dir.path().join("run"), dir.path().join("run.json"));
    let service = crate::support::example_service();
    let mut all = vec!["chaos", "--dir", run.to_str().unwrap(), "--report", report.to_str().unwrap()];
    all.extend(["--service", service.to_str().unwrap()]);
    all.extend(args);
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(&all).env("RUST_LOG", "info,sqlx=warn").output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let Ok(text) = std::fs::read_to_string(&report) else {
        panic!("no report:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    };
    (out.status.success(), serde_json::from_str(&text).unwrap(), stdout)
}

/// Passed, with the service's writes judged on at least `min_acked`, none
/// lost, none stored twice, none under a deposed token; the writers were
/// sent to the holder's instance at least once; every one of `kinds` was
/// drawn (the draw deals each kind once per stretch of as many faults) and
/// took effect.
fn assert_service_clean(passed: bool, r: &Value, stdout: &str, min_acked: u64, kinds: &str) {
    assert!(passed, "{stdout}");
    let s = &r["service"];
    for zero in ["lost", "duplicates", "interleaved"] {
        assert_eq!(s[zero], 0, "service {zero} in\n{stdout}");
    }
    let acked = s["acknowledged"].as_u64().unwrap();
    assert!(acked >= min_acked, "{acked} service writes acknowledged, expected at least {min_acked}:\n{stdout}");
    assert!(s["stored"].as_u64().unwrap() >= acked, "{stdout}");
    assert!(s["redirected"].as_u64().unwrap() > 0, "no write was sent to the holder's instance:\n{stdout}");
    for f in r["faults"].as_array().unwrap() {
        assert!(f["ineffective"].is_null(), "a fault did not take effect: {f}\n{stdout}");
    }
    let by_kind = r["faults_by_kind"].as_object().unwrap();
    for kind in kinds.split(',') {
        assert!(by_kind.contains_key(kind), "the run drew no {kind}:\n{stdout}");
    }
}

#[test]
fn the_example_service_keeps_every_acknowledged_write_in_its_own_postgres_through_faults() {
    let kinds = "kill,pause,restart,drain,database,partition,split-shard";
    let (passed, r, stdout) = run(&["--faults", "12", "--seed", "20261207", "--private-postgres", "--kinds", kinds]);
    assert_service_clean(passed, &r, &stdout, 500, kinds);
    assert!(stdout.contains("| service: writes under an older token after a newer one | 0 |"), "{stdout}");
}

#[test]
fn the_example_service_keeps_every_acknowledged_write_in_its_own_mariadb_through_faults() {
    let kinds = "kill,pause,drain,database";
    let (passed, r, stdout) = run(&["--faults", "6", "--seed", "20261208", "--private-mariadb", "--kinds", kinds]);
    assert_service_clean(passed, &r, &stdout, 200, kinds);
}

/// The service's planted bug: writes skip the fence's check. A paused node's
/// instance keeps its tokens and keeps writing while the shards' new holders
/// write too, so keys are written under the deposed token after the new one.
/// The same run with the check in place is the control: clean.
#[test]
fn the_example_service_without_its_fence_check_is_caught_writing_under_a_deposed_token() {
    let args = ["--faults", "3", "--seed", "7", "--private-postgres", "--kinds", "pause", "--service-keys", "8"];
    let (passed, control, stdout) = run(&args);
    assert_service_clean(passed, &control, &stdout, 100, "pause");

    let mut all = args.to_vec();
    all.push("--service-arg=--plant-unfenced");
    let (passed, r, stdout) = run(&all);
    assert!(!passed, "the run passed with the fence check removed:\n{stdout}");
    assert!(r["service"]["interleaved"].as_u64().unwrap() > 0, "{stdout}");
    let kinds: Vec<&str> = r["violations"].as_array().unwrap().iter().filter_map(|v| v["kind"].as_str()).collect();
    assert!(kinds.contains(&"service_interleaved"), "{kinds:?}\n{stdout}");
    // The node's own journal kept its promise: only the service broke.
    assert_eq!(r["lost"], 0, "{stdout}");
}

#[test]
fn a_service_run_with_a_bad_table_name_is_refused_with_the_rule() {
    let out = Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(["chaos", "--faults", "1", "--service", "/bin/true", "--service-table", "kv; DROP TABLE x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--service-table must be a plain table name"), "{stderr}");
}
