//! Loading: the file's TOML tree, the `CHITIN__SECTION__KEY` overlay on that
//! tree, then serde with `deny_unknown_fields` and the rules.
//!
//! Serde stops at the first error, yet every problem is to be reported at
//! once: each key is therefore first offered to serde alone (in a document
//! holding only it, every other key at its default), so that each refusal
//! is attributed to exactly one key, in the words of the schema.

use std::collections::BTreeMap;
use std::path::Path;

use toml::{Table, Value};

use super::{Problem, Settings, SettingsError, rules};

/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "CHITIN__";

/// Where each dotted key's value came from, for messages.
pub(super) struct Origins {
    /// The file, as messages name it.
    pub file: String,
    /// Dotted key → the environment variable that set it.
    pub env: BTreeMap<String, String>,
}

impl Origins {
    /// The origin of `key` (`section.key`) as messages name it.
    pub(super) fn of(&self, key: &str) -> String {
        match self.env.get(key) {
            Some(var) => env_origin(var),
            None => self.file.clone(),
        }
    }
}

fn env_origin(var: &str) -> String {
    format!("environment variable {var}")
}

impl Settings {
    /// Loads `path` (if given; none means all defaults) and the real process
    /// environment's `CHITIN__…` variables.
    pub fn load_from_process(path: Option<&Path>) -> Result<Settings, SettingsError> {
        let mut env = BTreeMap::new();
        let mut problems = Vec::new();
        for (k, v) in std::env::vars_os() {
            let Some(k) = k.to_str().filter(|k| k.starts_with(ENV_PREFIX)) else {
                continue;
            };
            match v.into_string() {
                Ok(v) => {
                    env.insert(k.to_owned(), v);
                }
                Err(v) => problems.push(Problem::Refused {
                    key: k.to_owned(),
                    value: format!("{v:?}"),
                    rule: "must be valid UTF-8".into(),
                    origin: env_origin(k),
                }),
            }
        }
        if !problems.is_empty() {
            return Err(SettingsError::Invalid(problems));
        }
        Settings::load(path, &env)
    }

    /// Loads `path` (if given) with the overrides in `env` (only keys that
    /// start with `CHITIN__` are considered).
    pub fn load<I, K, V>(path: Option<&Path>, env: I) -> Result<Settings, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        match path {
            None => Settings::from_toml("", "defaults", env),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|source| SettingsError::Read { path: p.to_owned(), source })?;
                Settings::from_toml(&text, &p.display().to_string(), env)
            }
        }
    }

    /// Parses settings text (`origin` names it in messages) with the
    /// overrides in `env`, and validates the result.
    pub fn from_toml<I, K, V>(text: &str, origin: &str, env: I) -> Result<Settings, SettingsError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut table: Table = text
            .parse()
            .map_err(|e: toml::de::Error| SettingsError::Syntax { origin: origin.to_owned(), message: e.to_string() })?;
        let mut origins = Origins { file: format!("settings file {origin}"), env: BTreeMap::new() };
        let mut problems = check_file(&mut table, &origins.file);
        let mut vars: Vec<(String, String)> =
            env.into_iter().map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned())).collect();
        // A stable order, so that messages and the winner of a repeated key are too.
        vars.sort();
        for (var, value) in vars {
            if let Err(p) = overlay(&mut table, &mut origins, &var, &value) {
                problems.push(p);
            }
        }
        // Unknown keys and types first: value rules on a half-read file would mislead.
        if !problems.is_empty() {
            return Err(SettingsError::Invalid(problems));
        }
        let settings: Settings = Value::Table(table).try_into().map_err(|e: toml::de::Error| {
            // Every key passed on its own, so this is a combination serde refuses.
            SettingsError::Invalid(vec![Problem::Refused {
                key: "(settings)".into(),
                value: String::new(),
                rule: e.message().to_owned(),
                origin: origins.file.clone(),
            }])
        })?;
        settings.checked(&origins)
    }

    /// Checks the rules on an already-built value (for settings made in code).
    pub fn validate(&self) -> Result<(), SettingsError> {
        let origins = Origins { file: "settings".into(), env: BTreeMap::new() };
        self.clone().checked(&origins).map(drop)
    }

    fn checked(self, origins: &Origins) -> Result<Settings, SettingsError> {
        let problems = rules::problems(&self, origins);
        if problems.is_empty() { Ok(self) } else { Err(SettingsError::Invalid(problems)) }
    }
}

/// Offers serde a document holding only `section` (and within it only `key`,
/// when given) set to `value`; `Err` is serde's reason for refusing it.
fn probe(section: &str, key: Option<&str>, value: Value) -> Result<(), String> {
    let value = match key {
        Some(key) => Value::Table(Table::from_iter([(key.to_owned(), value)])),
        None => value,
    };
    Value::Table(Table::from_iter([(section.to_owned(), value)]))
        .try_into::<Settings>()
        .map(drop)
        .map_err(|e| e.message().to_owned())
}

/// Every section and key of the file that serde refuses, each removed from
/// `table` so that the rest can still be checked.
fn check_file(table: &mut Table, origin: &str) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut refuse = |key: String, value: &Value, rule: String| problems.push(refusal(key, value, rule, origin.to_owned()));
    table.retain(|section, value| {
        let Value::Table(keys) = value else {
            return probe(section, None, value.clone()).map_err(|rule| refuse(section.to_owned(), value, rule)).is_ok();
        };
        if let Err(rule) = probe(section, None, Value::Table(Table::new())) {
            refuse(section.to_owned(), value, rule);
            return false;
        }
        keys.retain(|key, v| {
            probe(section, Some(key), v.clone()).map_err(|rule| refuse(format!("{section}.{key}"), v, rule)).is_ok()
        });
        // Keys fine one by one can still clash, e.g. both spellings of an alias.
        probe(section, None, value.clone()).map_err(|rule| refuse(section.to_owned(), value, rule)).is_ok()
    });
    problems
}

/// Applies one environment variable to the tree: `CHITIN__SECTION__KEY=value`
/// sets `section.key`, read as a TOML value when the key takes it and as a
/// string otherwise; an empty value removes the key (back to its default).
fn overlay(table: &mut Table, origins: &mut Origins, var: &str, raw: &str) -> Result<(), Problem> {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
        return Ok(());
    };
    let parts: Vec<String> = rest.split("__").map(str::to_ascii_lowercase).collect();
    let [section, key] = parts.as_slice() else {
        return Err(Problem::MalformedEnvVar {
            var: var.to_owned(),
            reason: "expected CHITIN__SECTION__KEY (two parts after CHITIN__)".into(),
        });
    };
    let dotted = format!("{section}.{key}");
    let refused = |value: &Value, rule: String| refusal(dotted.clone(), value, rule, env_origin(var));
    if raw.is_empty() {
        probe(section, None, Value::Table(Table::new())).map_err(|rule| refused(&Value::String(String::new()), rule))?;
    }
    // Strings are the fallback: `CHITIN__CLUSTER__INSTANCE_ID=007` is a name, not 7.
    let mut candidates: Vec<Value> = raw.parse::<Value>().into_iter().collect();
    candidates.push(Value::String(raw.to_owned()));
    let value = if raw.is_empty() {
        None
    } else {
        let mut first_refusal = None;
        let accepted = candidates.iter().find(|v| match probe(section, Some(key), (*v).clone()) {
            Ok(()) => true,
            Err(rule) => {
                first_refusal.get_or_insert_with(|| refused(v, rule));
                false
            }
        });
        match accepted {
            Some(v) => Some(v.clone()),
            None => return Err(first_refusal.expect("a refused candidate")),
        }
    };
    origins.env.insert(dotted.clone(), var.to_owned());
    let Some(Value::Table(sect)) = table.get_mut(section.as_str()) else {
        if let Some(v) = value {
            table.insert(section.clone(), Value::Table(Table::from_iter([(key.clone(), v)])));
        }
        return Ok(());
    };
    // The variable replaces the file's value however the file spells the key.
    for spelling in [key.replace('_', "-"), key.replace('-', "_")] {
        sect.remove(&spelling);
    }
    if let Some(v) = value {
        sect.insert(key.clone(), v);
    }
    Ok(())
}

/// Whether the setting `key` (dotted or not) holds a secret: a token.
fn secret(key: &str) -> bool {
    key.rsplit('.').next().is_some_and(|k| k.ends_with("_token") || k.ends_with("-token"))
}

/// Refuses `value` of `key` for `rule`. A token's value never shows, not
/// even where serde's rule quotes it (``invalid type: integer `12345` ``),
/// nor within a section shown whole.
fn refusal(key: String, value: &Value, rule: String, origin: String) -> Problem {
    if secret(&key) {
        let rule = texts(value).iter().filter(|t| !t.is_empty()).fold(rule, |rule, t| rule.replace(t.as_str(), "(hidden)"));
        return Problem::Refused { key, value: "(hidden)".into(), rule, origin };
    }
    let value = match value {
        Value::Table(t) => Value::Table(
            t.iter().map(|(k, v)| (k.clone(), if secret(k) { Value::String("(hidden)".into()) } else { v.clone() })).collect(),
        ),
        v => v.clone(),
    };
    Problem::Refused { key, value: show(&value), rule, origin }
}

/// Every scalar of `value` as serde's messages would quote it.
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        Value::Table(t) => t.values().flat_map(texts).collect(),
        other => vec![other.to_string()],
    }
}

/// A value as messages show it: strings quoted, passwords in URLs masked.
pub(super) fn show(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{:?}", rules::redact(s)),
        other => other.to_string(),
    }
}
