//! Native fixture checks (feature `testing`): run a plugin's fixture files
//! against its Rust logic, without WebAssembly, in a plain `cargo test`.
//!
//! The files are the ones `chitin policy test` runs against the built
//! component (see `docs/plugins.md`), so one set of fixtures proves both the
//! logic and the component:
//!
//! ```
//! # use chitin_policy_sdk::*;
//! # struct MySplit;
//! # impl SplitPolicy for MySplit {
//! #     fn split_points(_: SplitRequest) -> Result<Vec<u32>, PolicyError> { Ok(vec![]) }
//! # }
//! use chitin_policy_sdk::testing::Fixtures;
//!
//! # let dir = std::env::temp_dir().join("chitin-sdk-doctest-empty");
//! # std::fs::create_dir_all(&dir).unwrap();
//! // In tests/fixtures.rs of a plugin crate:
//! // let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
//! let checked = Fixtures::new(&dir).split::<MySplit>().check();
//! # assert_eq!(checked.unwrap(), 0);
//! ```
//!
//! With `CHITIN_BLESS=1` in the environment, [`Fixtures::check`] rewrites the
//! `expect` of every fixture that does not hold with what the logic returned
//! (review the diff before committing it).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{DrainPolicy, InstanceIdPolicy, PlacementPolicy, PolicyError, SplitPolicy};

type Outcome = Result<Result<Value, PolicyError>, String>;
type Call = fn(&str, &Value) -> Outcome;

/// The fixture files of one directory and the implementations to check them against.
#[derive(Clone, Debug)]
pub struct Fixtures {
    dir: PathBuf,
    instance_id: Option<Call>,
    placement: Option<Call>,
    split: Option<Call>,
    drain: Option<Call>,
}

fn input<T: DeserializeOwned>(call: &str, v: &Value) -> Result<T, String> {
    serde_json::from_value(v.clone()).map_err(|e| format!("input is not a valid `{call}` request: {e}"))
}

fn out<T: Serialize>(r: Result<T, PolicyError>) -> Result<Value, PolicyError> {
    r.map(|v| serde_json::to_value(v).expect("policy outputs serialize"))
}

fn no_call(slot: &str, call: &str) -> String {
    format!("slot `{slot}` has no call `{call}`")
}

fn instance_id<T: InstanceIdPolicy>(call: &str, v: &Value) -> Outcome {
    match call {
        "resolve" => Ok(out(T::resolve(input(call, v)?))),
        _ => Err(no_call("instance-id", call)),
    }
}

fn placement<T: PlacementPolicy>(call: &str, v: &Value) -> Outcome {
    match call {
        "place-replicas" => Ok(out(T::place_replicas(input(call, v)?))),
        "rebalance" => Ok(out(T::rebalance(input(call, v)?))),
        "preferred-holders" => Ok(out(T::preferred_holders(input(call, v)?))),
        _ => Err(no_call("placement", call)),
    }
}

fn split<T: SplitPolicy>(call: &str, v: &Value) -> Outcome {
    match call {
        "split-points" => Ok(out(T::split_points(input(call, v)?))),
        _ => Err(no_call("split", call)),
    }
}

fn drain<T: DrainPolicy>(call: &str, v: &Value) -> Outcome {
    match call {
        "plan-drain" => Ok(out(T::plan_drain(input(call, v)?))),
        _ => Err(no_call("drain", call)),
    }
}

impl Fixtures {
    /// The fixtures (`*.json`) directly in `dir`.
    pub fn new(dir: impl AsRef<Path>) -> Self {
        Fixtures { dir: dir.as_ref().to_path_buf(), instance_id: None, placement: None, split: None, drain: None }
    }

    /// Checks `instance-id` fixtures against `T`.
    pub fn instance_id<T: InstanceIdPolicy>(mut self) -> Self {
        self.instance_id = Some(instance_id::<T>);
        self
    }

    /// Checks `placement` fixtures against `T`.
    pub fn placement<T: PlacementPolicy>(mut self) -> Self {
        self.placement = Some(placement::<T>);
        self
    }

    /// Checks `split` fixtures against `T`.
    pub fn split<T: SplitPolicy>(mut self) -> Self {
        self.split = Some(split::<T>);
        self
    }

    /// Checks `drain` fixtures against `T`.
    pub fn drain<T: DrainPolicy>(mut self) -> Self {
        self.drain = Some(drain::<T>);
        self
    }

    /// Runs every fixture; `Ok(n)` when all `n` hold, else one line per failure.
    pub fn check(&self) -> Result<usize, String> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map_err(|e| format!("cannot list {}: {e}", self.dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "json"))
            .collect();
        paths.sort();
        let bless = std::env::var_os("CHITIN_BLESS").is_some_and(|v| v == "1");
        let failures: Vec<String> =
            paths.iter().filter_map(|p| self.check_file(p, bless).err().map(|e| format!("{}: {e}", p.display()))).collect();
        if failures.is_empty() { Ok(paths.len()) } else { Err(failures.join("\n")) }
    }

    /// [`check`](Self::check), panicking with the failures; returns how many
    /// fixtures ran and panics if there were none.
    #[track_caller]
    pub fn assert_all_hold(&self) -> usize {
        match self.check() {
            Ok(0) => panic!("no fixtures (*.json) in {}", self.dir.display()),
            Ok(n) => n,
            Err(failures) => panic!("fixtures that do not hold:\n{failures}"),
        }
    }

    fn check_file(&self, path: &Path, bless: bool) -> Result<(), String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
        let mut f: Value = serde_json::from_str(&text).map_err(|e| format!("not JSON: {e}"))?;
        let field = |k: &str| f.get(k).and_then(Value::as_str).map(str::to_owned).ok_or(format!("`{k}` is missing"));
        let (slot, call) = (field("slot")?, field("call")?);
        let run = match slot.as_str() {
            "instance-id" => self.instance_id,
            "placement" => self.placement,
            "split" => self.split,
            "drain" => self.drain,
            other => return Err(format!("unknown slot `{other}`")),
        }
        .ok_or(format!("no implementation of slot `{slot}` was given to Fixtures"))?;
        let got = run(&call, f.get("input").unwrap_or(&Value::Null))?;
        let verdict = judge(f.get("expect"), &got);
        if verdict.is_err() && bless {
            f["expect"] = match got {
                Ok(v) => serde_json::json!({ "ok": v }),
                Err(e) => serde_json::json!({ "error": e }),
            };
            let text = serde_json::to_string_pretty(&f).expect("JSON serializes") + "\n";
            std::fs::write(path, text).map_err(|e| format!("cannot bless: {e}"))?;
            return Ok(());
        }
        verdict
    }
}

fn judge(expect: Option<&Value>, got: &Result<Value, PolicyError>) -> Result<(), String> {
    let expect = expect
        .and_then(Value::as_object)
        .filter(|e| e.len() == 1)
        .ok_or("`expect` needs exactly one of `ok`, `error`, `refused`")?;
    let (kind, want) = expect.iter().next().expect("one entry");
    match (kind.as_str(), got) {
        ("ok", Ok(got)) if want == got => Ok(()),
        ("error", Err(got)) => {
            let want: PolicyError =
                serde_json::from_value(want.clone()).map_err(|e| format!("`expect.error` is no policy error: {e}"))?;
            if want == *got { Ok(()) } else { Err(format!("expected error {want:?}, got {got:?}")) }
        }
        // The host refuses a node name that is empty or contains `:`.
        ("refused", Ok(Value::String(name))) if name.is_empty() || name.contains(':') => Ok(()),
        (kind, got) => Err(format!("expected {kind} {want}, got {got:?}")),
    }
}
