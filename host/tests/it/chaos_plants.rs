//! The fault suite catches what it claims to: each planted bug (a safety
//! mechanism turned off, see `chitin::plant`) makes a short `chitin chaos`
//! run fail with the violation that mechanism prevents, and the same run
//! without the plant passes. The test build carries the `planted-bugs` and
//! `failpoints` features (host/Cargo.toml's dev-dependency on itself).

use std::process::Command;

use serde_json::Value;

/// One run at a time: two clusters on two cores would stretch takeovers.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Parks three appends in ten for 2.5 s after the node's own lease check: with
/// eight clients, a paused holder is all but certain to hold some of them,
/// and it resumes with appends that passed its check under a lease it lost
/// meanwhile. Only the database fence stops them.
const BEFORE_FENCE: &str = "append.before_fence=0.3:2500";
/// Parks one append in fifty for 8 s holding the lease row shared: a holder
/// paused there keeps its transaction open. Only the session bounds end it
/// before the taker has waited past the takeover bound.
const BEFORE_COMMIT: &str = "append.before_commit=0.02:8000";

/// Parks one append in twenty for 8 s of the node's running time, holding
/// the lease row shared: eight clients spend most of a run parked, so a
/// paused holder is all but certain to be stopped with one of its
/// transactions open (each pause misses with a chance of about one in
/// twenty, all three of a run with about one in ten thousand), and the
/// park goes on after the pause for what it had left.
const STUCK_MID_APPEND: &str = "append.before_commit=0.05:8000";

/// Parks three appends in ten for 2.5 s after their COMMIT, before the node
/// answers: a forwarding node's wait (at most a TTL, 2 s) runs out first,
/// and the holder's answer is lost although the append committed.
const AFTER_COMMIT: &str = "append.after_commit=0.3:2500";

/// The local PostgreSQL, in whose server each run makes a fresh database.
const POSTGRES: &str = "postgres://postgres@127.0.0.1:5432/postgres";

/// A short run: 3 nodes on a fresh database in the local PostgreSQL,
/// `faults` pauses, the given plant and failpoints; returns the report.
fn run(plant: Option<&str>, failpoints: &str, faults: &str, seed: &str) -> (Value, String) {
    run_on(POSTGRES, plant, failpoints, faults, seed)
}

/// A pause and a split of a shard (the bag of two kinds gives one of each
/// in two faults): what the epoch-bump and split-retirement plants are
/// caught in, beside a control run without a plant.
const PAUSE_AND_SPLIT: &str = "pause,split-shard";
const PAUSE_AND_SPLIT_SEED: &str = "81";

/// Every plant, in the order `--list-plants` and the matrix give them.
const PLANTS: [&str; 8] =
    ["fence", "dedup", "idle-bound", "epoch-bump", "split-retirement", "forward-once", "liveness", "affinity-claim"];

/// The seed the suite runs the planted-bug matrix with.
const MATRIX_SEED: &str = "90";

/// The matrix's takeover slack, in seconds: 1.5, not the default 1. Two CI
/// runs' controls crossed the 1 s slack by 69-75 ms (a kill taken over at
/// TTL speed, 2.07 s against 2 s), alone on the machine; the plants it must
/// catch by `slow_takeover` stay far past 1.5 (on this seed the idle-bound
/// plant's takeovers wait for the 4.4 s pause to end, the liveness plant's
/// take 5.8 s and more).
const MATRIX_SLACK: &str = "1.5";

/// Eight clients: enough appends in flight that every pause catches some.
const CLIENTS: &str = "8";

fn run_on(server: &str, plant: Option<&str>, failpoints: &str, faults: &str, seed: &str) -> (Value, String) {
    run_kinds(server, plant, failpoints, "pause", faults, seed)
}

fn run_kinds(server: &str, plant: Option<&str>, failpoints: &str, kinds: &str, faults: &str, seed: &str) -> (Value, String) {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new().prefix("chitin-plant-").tempdir().unwrap();
    let report = dir.path().join("report.json");
    let mut args = vec![
        "chaos",
        "--faults",
        faults,
        "--seed",
        seed,
        "--kinds",
        kinds,
        "--clients",
        CLIENTS,
        "--failpoints",
        failpoints,
        "--database-url",
        server,
    ];
    if let Some(p) = plant {
        args.extend(["--plant", p]);
    }
    let run_dir = dir.path().join("run");
    let report_path = report.to_str().unwrap().to_owned();
    args.extend(["--dir", run_dir.to_str().unwrap(), "--report", &report_path]);
    let out =
        Command::new(env!("CARGO_BIN_EXE_chitin")).args(&args).env("RUST_LOG", "info,sqlx=warn").output().expect("run chitin");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no report ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let r: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(out.status.success(), r["passed"] == true, "exit status and verdict disagree:\n{stdout}");
    (r, stdout)
}

fn count(r: &Value, key: &str) -> u64 {
    r[key].as_u64().unwrap_or_else(|| panic!("no `{key}` in the report"))
}

#[test]
fn without_a_plant_the_same_runs_pass() {
    let (r, stdout) = run(None, &format!("{BEFORE_FENCE},{BEFORE_COMMIT}"), "3", "71");
    assert_eq!(r["passed"], true, "the control run failed, so a plant's failure would prove nothing:\n{stdout}");
    assert!(count(&r, "resent") > 0, "{stdout}");
}

/// A holder paused with an append's transaction open (the lease row held
/// shared), as a holder cut off mid-append leaves it, does not hold up the
/// takeover: its session's bounds (half a TTL) end the transaction. Without
/// them (the idle-bound plant) the taker waits for the holder to resume and
/// finish its park, past the takeover bound. The same run with and without
/// the plant.
fn a_holder_stuck_mid_append_does_not_stall_the_taker(url: &str, seed: &str) {
    let (r, stdout) = run_on(url, None, STUCK_MID_APPEND, "3", seed);
    assert_eq!(r["passed"], true, "{stdout}");
    assert!(count(&r, "takeovers") > 0, "no takeover measured:\n{stdout}");
    assert_eq!(count(&r, "slow_takeovers"), 0, "{stdout}");
    let (r, stdout) = run_on(url, Some("idle-bound"), STUCK_MID_APPEND, "3", seed);
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "slow_takeovers") > 0, "without the bounds no takeover waited: the test proves nothing:\n{stdout}");
}

#[test]
fn on_postgres_a_holder_stuck_mid_append_does_not_stall_the_taker() {
    a_holder_stuck_mid_append_does_not_stall_the_taker(POSTGRES, "73");
}

#[test]
fn on_mariadb_a_holder_stuck_mid_append_does_not_stall_the_taker() {
    let url = std::env::var("CHITIN_TEST_MYSQL_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    a_holder_stuck_mid_append_does_not_stall_the_taker(&url, "74");
}

#[test]
fn the_fence_plant_is_caught_as_stale_epoch_commits() {
    let (r, stdout) = run(Some("fence"), BEFORE_FENCE, "3", "71");
    assert_eq!(r["passed"], false, "{stdout}");
    assert_eq!(r["plant"], "fence");
    assert!(count(&r, "stale_epoch") > 0, "no stale-epoch commit caught:\n{stdout}");
    assert!(stdout.contains("PLANTED BUG: fence"), "{stdout}");
}

/// A lease on liveness taken as live while its holder's row has an expiry,
/// passed or not: a paused holder keeps every shard it held, no takeover
/// ends its liveness, and each of its shards is a takeover that never came
/// while it was stopped. The same run as the control run (seed 71), whose
/// pauses are all taken over within the bound.
#[test]
fn the_liveness_plant_is_caught_as_takeovers_that_never_come() {
    let (r, stdout) = run(Some("liveness"), &format!("{BEFORE_FENCE},{BEFORE_COMMIT}"), "3", "71");
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "slow_takeovers") > 0, "no takeover held back:\n{stdout}");
    // Not a late takeover but none while the holder was stopped: every
    // held-back shard was granted again only after the pause ended, if at all.
    // Once resumed, the holder gives up the leases it let lapse, and a taker
    // may be granted one within milliseconds of SIGCONT; the pause's end is
    // known to the runner's clock (SIGCONT sent, then read) and `died_us`
    // is an estimate of the database's clock (up to half a round trip
    // off). The tolerance covers both and stays short of what a taker that
    // ignored the plant would show: the soonest takeover (a TTL and a
    // renewal) is at least 500 ms before the shortest pause ends.
    const TOLERANCE_US: i64 = 250_000;
    let faults = r["faults"].as_array().unwrap();
    let paused_us = |fault: &Value| {
        let f = faults.iter().find(|f| f["index"] == *fault).expect("the violation's fault");
        (f["ended_ms"].as_i64().unwrap() - f["started_ms"].as_i64().unwrap()) * 1000
    };
    let slow: Vec<&Value> = r["violations"].as_array().unwrap().iter().filter(|v| v["kind"] == "slow_takeover").collect();
    let held_back = slow.iter().filter(|v| match v["granted_us"].as_i64() {
        None => true,
        Some(granted) => granted - v["died_us"].as_i64().unwrap() >= paused_us(&v["fault"]) - TOLERANCE_US,
    });
    assert_eq!(
        held_back.count(),
        slow.len(),
        "a held-back shard was taken over during the pause:\n{stdout}\nfaults: {:#}",
        r["faults"]
    );
    eprintln!("{} takeovers held back", slow.len());
}

#[test]
fn the_dedup_plant_is_caught_as_acknowledgements_that_disagree_with_the_store() {
    // No failpoint: every client's sixteenth append is re-sent.
    let (r, stdout) = run(Some("dedup"), "", "1", "72");
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "mismatched") > 0, "no re-sent request got a wrong sequence:\n{stdout}");
}

#[test]
fn without_a_plant_a_pause_and_a_split_pass() {
    let (r, stdout) = run_kinds(POSTGRES, None, "", PAUSE_AND_SPLIT, "2", PAUSE_AND_SPLIT_SEED);
    assert_eq!(r["passed"], true, "the control run failed, so a plant's failure would prove nothing:\n{stdout}");
    assert_eq!(r["faults_by_kind"]["split-shard"], 1, "{stdout}");
    assert_eq!(r["faults_by_kind"]["pause"], 1, "{stdout}");
    assert!(count(&r, "takeovers") > 0, "{stdout}");
}

/// Topology changes among the other faults, judged like a split (the
/// checker reads every config the run pushed): a node added with a
/// rebalance, a replica moved to a node without one, then a kill. Seed 80
/// draws them in that order; the move needs the added node, since each of
/// three nodes holds every shard. No plant: the run must pass.
#[test]
fn an_added_node_and_a_moved_replica_among_kills_pass() {
    let (r, stdout) = run_kinds(POSTGRES, None, "", "kill,move-shard,add-node", "3", "80");
    assert_eq!(r["passed"], true, "a false positive, or a topology change that failed:\n{stdout}");
    let faults = r["faults"].as_array().unwrap();
    let kinds: Vec<&str> = faults.iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["add-node", "move-shard", "kill"], "{stdout}");
    for f in faults {
        assert!(f["ineffective"].is_null(), "a fault did not take effect: {f}\n{stdout}");
    }
    assert!(faults[0]["detail"].as_str().unwrap().starts_with("added node-04"), "{stdout}");
    assert!(faults[1]["detail"].as_str().unwrap().starts_with("moved "), "{stdout}");
    assert!(count(&r, "takeovers") > 0, "{stdout}");
    assert!(count(&r, "acknowledged") >= count(&r, "ack_floor"), "{stdout}");
}

/// A grant that keeps its predecessor's epoch: the paused holder's shards
/// are taken over under the epochs it held, so two holders acknowledge
/// commits under one (shard, epoch).
#[test]
fn the_epoch_bump_plant_is_caught_as_an_epoch_held_by_two_holders() {
    let (r, stdout) = run_kinds(POSTGRES, Some("epoch-bump"), "", PAUSE_AND_SPLIT, "2", PAUSE_AND_SPLIT_SEED);
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "epoch_reused") > 0, "no epoch held by two holders caught:\n{stdout}");
}

/// A split that leaves its parent's lease row as it was: the parent's
/// token stays valid beside its children's, which only judging ownership
/// per key range sees (the parent and its children are different shards).
#[test]
fn the_split_retirement_plant_is_caught_as_overlapping_owners() {
    let (r, stdout) = run_kinds(POSTGRES, Some("split-retirement"), "", PAUSE_AND_SPLIT, "2", PAUSE_AND_SPLIT_SEED);
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "overlapping_owners") > 0, "no overlapping owners caught:\n{stdout}");
}

/// A forward whose answer was lost taken as never sent: the holder
/// commits a forwarded append and parks before answering, the forward's
/// wait runs out, the forwarding node waits out its takeover budget and
/// answers "not applied", and the client gives up an id that is stored.
/// Without the plant the same run passes: the lost answer is "outcome
/// unknown", and the client's retry of the same id gets the stored answer.
#[test]
fn the_forward_once_plant_is_caught_as_a_given_up_request_stored() {
    let (r, stdout) = run(None, AFTER_COMMIT, "2", "76");
    assert_eq!(r["passed"], true, "the control run failed, so the plant's failure would prove nothing:\n{stdout}");
    assert!(count(&r, "abandoned") < count(&r, "acknowledged"), "{stdout}");
    let (r, stdout) = run(Some("forward-once"), AFTER_COMMIT, "2", "76");
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "not_applied_stored") > 0, "no given-up request stored:\n{stdout}");
}

/// A claim that overwrites another instance's instead of being declined:
/// the dispatch clients, contending for the same targets through every
/// node, are granted one target on two nodes at once. One Redis fault
/// keeps the run short; the control is `chaos_short`'s run, whose Redis
/// faults and dispatches pass.
#[test]
fn the_affinity_claim_plant_is_caught_as_double_owners() {
    let (r, stdout) = run_kinds(POSTGRES, Some("affinity-claim"), "", "redis", "1", "77");
    assert_eq!(r["passed"], false, "{stdout}");
    assert!(count(&r, "double_owners") > 0, "no target with two owners caught:\n{stdout}");
    assert_eq!(count(&r, "unlogged_fail_opens"), 0, "{stdout}");
    let double =
        r["violations"].as_array().unwrap().iter().find(|v| v["kind"] == "double_owner").expect("a double_owner violation");
    assert_ne!(double["first"]["instance"], double["second"]["instance"], "{double}");
}

#[test]
fn plants_are_listed_and_unknown_ones_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["chaos", "--list-plants"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for name in PLANTS.into_iter().chain(["append.after_commit", "compiled in: yes"]) {
        assert!(text.contains(name), "{name} missing from --list-plants:\n{text}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["chaos", "--plant", "meteor"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plant `meteor`"), "{}", String::from_utf8_lossy(&out.stderr));
    let out =
        Command::new(env!("CARGO_BIN_EXE_chitin")).args(["chaos", "--failpoints", "append.before_commit=3:1"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("outside 0 … 1"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["chaos", "--plant-matrix", "--plant", "fence"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_chitin")).args(["chaos", "--matrix-plants", "fence"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--plant-matrix"), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(["chaos", "--plant-matrix", "--matrix-plants", "fence,meteor"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no plant `meteor`"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// The plants the suite's matrix runs after its control: two whose catch the
/// general configuration makes certain (3 to 14 stale-epoch commits and 70
/// to 96 mismatched acknowledgements per run on every recorded seed). Each
/// plant's catch is asserted on purpose by its own test above; the whole
/// matrix, ten minutes on two cores, is the recorded run of
/// docs/reliability.md, not a test.
const MATRIX_PLANTS: &str = "fence,dedup";

/// `chitin chaos --plant-matrix --matrix-plants …`: the control and the
/// given plants on one seed in the proof's general configuration (every
/// fault kind, the three append failpoints, 8 clients, a private
/// PostgreSQL): the control passes, each plant is caught by a violation of
/// its own, and the exit status and summary say so.
#[test]
fn the_plant_matrix_passes_its_control_and_catches_each_plant_it_runs_by_its_own_violation() {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new().prefix("chitin-matrix-").tempdir().unwrap();
    let report = dir.path().join("matrix.json");
    let out = Command::new(env!("CARGO_BIN_EXE_chitin"))
        .args(["chaos", "--plant-matrix", "--matrix-plants", MATRIX_PLANTS])
        .args(["--seed", MATRIX_SEED, "--takeover-slack", MATRIX_SLACK, "--dir"])
        .arg(dir.path().join("runs"))
        .arg("--report")
        .arg(&report)
        .env("RUST_LOG", "info,sqlx=warn")
        .output()
        .expect("run chitin");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|e| panic!("no matrix ({e}):\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let m: Value = serde_json::from_str(&text).unwrap();
    let rows = m["rows"].as_array().unwrap();
    let runs: Vec<&str> = rows.iter().map(|r| r["run"].as_str().unwrap()).collect();
    assert_eq!(runs, ["control", "fence", "dedup"], "{stdout}");
    assert_eq!(rows[0]["outcome"]["outcome"], "passed", "{stdout}");
    for r in &rows[1..] {
        assert_eq!(r["outcome"]["outcome"], "caught", "{}:\n{stdout}", r["run"]);
    }
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("PASSED: 2 of 2 plants caught by their own violations"), "{stdout}");
}
