//! Runs every fixture of `tests/fixtures/policies/` against the native
//! [`Defaults`], so the expectations the host's `chitin policy test` checks
//! against the component are proven against the same logic here. The files are
//! written by `gen_fixtures.py` next to this file.

use std::path::{Path, PathBuf};

use chitin_default_policies::Defaults;
use chitin_policy_sdk::{DrainPolicy, InstanceIdPolicy, PlacementPolicy, PolicyError, SplitPolicy};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/policies")
}

fn input<T: DeserializeOwned>(path: &Path, v: &Value) -> T {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{}: input does not fit the request record: {e}", path.display()))
}

fn out<T: Serialize>(r: Result<T, PolicyError>) -> Result<Value, PolicyError> {
    r.map(|v| serde_json::to_value(v).expect("outputs serialize"))
}

fn run(path: &Path, slot: &str, call: &str, v: &Value) -> Result<Value, PolicyError> {
    match (slot, call) {
        ("instance-id", "resolve") => out(Defaults::resolve(input(path, v))),
        ("placement", "place-replicas") => out(Defaults::place_replicas(input(path, v))),
        ("placement", "rebalance") => out(Defaults::rebalance(input(path, v))),
        ("placement", "preferred-holders") => out(Defaults::preferred_holders(input(path, v))),
        ("split", "split-points") => out(Defaults::split_points(input(path, v))),
        ("drain", "plan-drain") => out(Defaults::plan_drain(input(path, v))),
        _ => panic!("{}: slot `{slot}` has no call `{call}`", path.display()),
    }
}

/// Checks one fixture; `Err` says what differed.
fn check(path: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    let f: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
    let obj = f.as_object().ok_or("not an object")?;
    let mut keys: Vec<&str> = obj.keys().map(String::as_str).collect();
    keys.sort_unstable();
    if keys != ["call", "description", "expect", "input", "slot"] {
        return Err(format!("fields are {keys:?}"));
    }
    let field = |k: &str| obj[k].as_str().ok_or(format!("`{k}` is not a string"));
    let (slot, call, description) = (field("slot")?, field("call")?, field("description")?);
    if description.trim().is_empty() {
        return Err("empty description".into());
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    if !stem.starts_with(&format!("{slot}-")) {
        return Err(format!("the file name does not start with the slot `{slot}-`"));
    }
    let expect = obj["expect"].as_object().filter(|e| e.len() == 1).ok_or("`expect` needs exactly one key")?;
    let got = run(path, slot, call, &obj["input"]);
    let (kind, want) = expect.iter().next().unwrap();
    match ((kind.as_str(), want), got) {
        (("ok", want), Ok(got)) if *want == got => Ok(()),
        (("error", want), Err(got)) => {
            let want: PolicyError =
                serde_json::from_value(want.clone()).map_err(|e| format!("`expect.error` is no PolicyError: {e}"))?;
            if want == got { Ok(()) } else { Err(format!("expected error {want:?}, got {got:?}")) }
        }
        (("refused", text), Ok(Value::String(name))) if slot == "instance-id" => {
            let text = text.as_str().ok_or("`expect.refused` is not a string")?;
            // The host refuses an empty name ("… which is empty") or one with
            // ':' ("… which contains `:` …"); the text must match the reason.
            let reason = if name.is_empty() {
                "is empty"
            } else if name.contains(':') {
                "contains `:`"
            } else {
                return Err(format!("the name {name:?} is valid; the host would not refuse it"));
            };
            if reason.contains(text) || text.contains(reason) {
                Ok(())
            } else {
                Err(format!("the host refuses {name:?} because it {reason}, not {text:?}"))
            }
        }
        ((kind, want), got) => Err(format!("expected {kind} {want}, got {got:?}")),
    }
}

#[test]
fn every_fixture_holds_for_the_native_defaults() {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("tests/fixtures/policies exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    paths.sort();
    assert!(paths.len() >= 48, "only {} fixtures", paths.len());
    let failures: Vec<String> = paths
        .iter()
        .filter_map(|p| check(p).err().map(|e| format!("{}: {e}", p.file_name().unwrap().to_string_lossy())))
        .collect();
    assert!(failures.is_empty(), "{} of {} fixtures fail:\n{}", failures.len(), paths.len(), failures.join("\n"));
}

#[test]
fn every_slot_and_call_has_fixtures() {
    let names: Vec<String> =
        std::fs::read_dir(dir()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    for prefix in
        ["instance-id-", "placement-place-replicas-", "placement-rebalance-", "placement-preferred-holders-", "split-", "drain-"]
    {
        assert!(names.iter().filter(|n| n.starts_with(prefix)).count() >= 3, "few fixtures for {prefix}");
    }
}
