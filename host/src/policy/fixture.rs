//! Fixture files: one policy call with its input and the expected answer.
//!
//! A fixture (JSON, or TOML with the same fields) names a slot, a call, the
//! call's input (the request record in the SDK's serde form) and what must
//! come back:
//!
//! ```json
//! { "description": "three nodes, factor 3",
//!   "slot": "placement", "call": "place-replicas",
//!   "input": { "nodes": [...], "new_shards": ["a"], "replication_factor": 3 },
//!   "expect": { "ok": [{ "shard": "a", "nodes": ["n1", "n2", "n3"] }] } }
//! ```
//!
//! `expect` is `{"ok": output}`, `{"error": policy-error}` for a refusal by
//! the policy, or `{"refused": "text"}` for a refusal by the host (its
//! message must contain the text).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Limits, Plugin, PolicyCallError, Slot, SlotRunner, sdk};

/// One fixture file.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    #[serde(default)]
    pub description: String,
    pub slot: Slot,
    pub call: String,
    pub input: Value,
    pub expect: Expect,
}

/// The answer a fixture expects.
#[derive(Debug, Deserialize, Serialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Expect {
    Ok(Value),
    Error(sdk::PolicyError),
    Refused(String),
}

/// The verdict on one fixture.
#[derive(Debug)]
pub struct Outcome {
    pub path: PathBuf,
    pub description: String,
    /// `None` when the fixture passed; otherwise what went wrong, readable.
    pub failure: Option<String>,
}

/// Every `.json` and `.toml` file under `paths` (files taken as given,
/// directories searched recursively), sorted.
pub fn collect(paths: &[PathBuf]) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?.map(|e| e.map(|e| e.path())).collect::<Result<_, _>>()?;
            entries.sort();
            for entry in entries {
                if entry.is_dir() {
                    found.extend(collect(&[entry])?);
                } else if matches!(entry.extension().and_then(|e| e.to_str()), Some("json" | "toml")) {
                    found.push(entry);
                }
            }
        } else {
            found.push(path.clone());
        }
    }
    Ok(found)
}

/// Runs fixtures against one plugin.
pub struct Runner {
    plugin: Arc<Plugin>,
    limits: Limits,
    slots: HashMap<Slot, Result<SlotRunner, String>>,
}

impl Runner {
    pub fn new(plugin: Arc<Plugin>, limits: Limits) -> Self {
        Runner { plugin, limits, slots: HashMap::new() }
    }

    /// Reads and runs the fixture at `path`.
    pub fn run_file(&mut self, path: &Path) -> Outcome {
        let outcome = |description: String, failure: Option<String>| Outcome { path: path.to_path_buf(), description, failure };
        match read(path) {
            Ok(fixture) => {
                let failure = self.run(&fixture).err();
                outcome(fixture.description, failure)
            }
            Err(why) => outcome(String::new(), Some(why)),
        }
    }

    /// Runs `fixture`; `Err` says how the answer differed.
    pub fn run(&mut self, fixture: &Fixture) -> Result<(), String> {
        let (plugin, limits) = (self.plugin.clone(), self.limits);
        let runner = self
            .slots
            .entry(fixture.slot)
            .or_insert_with(|| SlotRunner::new(plugin, fixture.slot, limits).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(|e| e.clone())?;
        let actual = call(runner, fixture)?;
        compare(&fixture.expect, actual)
    }
}

fn read(path: &Path) -> Result<Fixture, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read: {e}"))?;
    if path.extension().and_then(|e| e.to_str()) == Some("toml") {
        toml::from_str(&text).map_err(|e| format!("not a valid fixture: {e}"))
    } else {
        serde_json::from_str(&text).map_err(|e| format!("not a valid fixture: {e}"))
    }
}

fn input<T: serde::de::DeserializeOwned>(fixture: &Fixture) -> Result<T, String> {
    serde_json::from_value(fixture.input.clone()).map_err(|e| format!("input is not a valid `{}` request: {e}", fixture.call))
}

fn json<T: serde::Serialize>(r: Result<T, PolicyCallError>) -> Result<Value, PolicyCallError> {
    r.map(|v| serde_json::to_value(v).expect("policy outputs serialize"))
}

fn call(runner: &SlotRunner, f: &Fixture) -> Result<Result<Value, PolicyCallError>, String> {
    Ok(match (f.slot, f.call.as_str()) {
        (Slot::InstanceId, "resolve") => json(runner.resolve(input(f)?)),
        (Slot::Placement, "place-replicas") => json(runner.place_replicas(input(f)?)),
        (Slot::Placement, "rebalance") => json(runner.rebalance(input(f)?)),
        (Slot::Placement, "preferred-holders") => json(runner.preferred_holders(input(f)?)),
        (Slot::Split, "split-points") => json(runner.split_points(input(f)?)),
        (Slot::Drain, "plan-drain") => json(runner.plan_drain(input(f)?)),
        (slot, other) => {
            return Err(format!(
                "slot `{slot}` has no call `{other}` (instance-id: resolve; placement: place-replicas, \
                 rebalance, preferred-holders; split: split-points; drain: plan-drain)"
            ));
        }
    })
}

fn compare(expect: &Expect, actual: Result<Value, PolicyCallError>) -> Result<(), String> {
    match (expect, actual) {
        (Expect::Ok(want), Ok(got)) if *want == got => Ok(()),
        (Expect::Ok(want), Ok(got)) => Err(format!("output differs (- expected, + actual):\n{}", diff(want, &got))),
        (Expect::Error(want), Err(PolicyCallError::Refused { error, .. })) if *want == error => Ok(()),
        (Expect::Refused(text), Err(e))
            if !matches!(e, PolicyCallError::Refused { .. }) && e.to_string().contains(text.as_str()) =>
        {
            Ok(())
        }
        (expect, Ok(got)) => Err(format!("expected {}, got output {}", describe(expect), pretty(&got))),
        (expect, Err(e)) => Err(format!("expected {}, got error: {e}", describe(expect))),
    }
}

fn describe(expect: &Expect) -> String {
    match expect {
        Expect::Ok(v) => format!("output {}", pretty(v)),
        Expect::Error(e) => format!("the policy error {}", serde_json::to_string(e).unwrap_or_default()),
        Expect::Refused(text) => format!("a host refusal containing {text:?}"),
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A line diff of two values' pretty JSON forms.
fn diff(want: &Value, got: &Value) -> String {
    let (want, got) = (pretty(want), pretty(got));
    similar::TextDiff::from_lines(&want, &got).unified_diff().context_radius(3).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mismatch_shows_the_differing_lines() {
        let want = serde_json::json!({"shard": "a", "nodes": ["n1", "n2"]});
        let got = serde_json::json!({"shard": "a", "nodes": ["n1", "n3"]});
        let err = compare(&Expect::Ok(want), Ok(got)).unwrap_err();
        assert!(err.contains("-    \"n2\""), "{err}");
        assert!(err.contains("+    \"n3\""), "{err}");
    }

    #[test]
    fn a_policy_error_must_match_exactly() {
        let want = sdk::PolicyError::UnknownShard("a".into());
        let got = PolicyCallError::Refused {
            plugin: "p".into(),
            slot: Slot::Placement,
            error: sdk::PolicyError::UnknownShard("b".into()),
        };
        assert!(compare(&Expect::Error(want), Err(got)).is_err());
    }
}
