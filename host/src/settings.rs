//! Node settings: `chitin.toml` plus `CHITIN__SECTION__KEY` environment
//! overrides. ("Config" is kept for `cluster_config.json`.)
//!
//! Loading is a pure function of the file's text and an environment map
//! ([`Settings::from_toml`]); [`Settings::load_from_process`] is the thin
//! wrapper that reads the real file and process environment.
//!
//! - Every key of every section has a default, so an empty file (or none)
//!   is a standalone node.
//! - An unknown section or key, in the file or as a `CHITIN__X__Y` variable,
//!   is refused, naming it.
//! - An environment value is read as the key's type (`CHITIN__LEASES__TTL_SECS=2`,
//!   `CHITIN__CLUSTER__ENABLED=true`); an empty value unsets an optional key.
//!   `CHITIN__CLUSTER__INSTANCE_ID` is also what the default `instance-id`
//!   policy reads.
//! - Every bad value is refused with its key, its value and the rule; all
//!   problems are reported at once.
//!
//! Durations are seconds and accept fractions (`0.5`). Lease timing rule:
//! `renew_interval_secs < ttl_secs / 2`, so at least two renewals are tried
//! before a lease can expire and one failed renewal never loses it.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The prefix of environment overrides.
pub const ENV_PREFIX: &str = "CHITIN__";

/// All settings of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub node: NodeSettings,
    pub cluster: ClusterSettings,
    pub database: DatabaseSettings,
    pub leases: LeaseSettings,
    pub api: ApiSettings,
    pub metrics: MetricsSettings,
    pub policies: PolicySlots,
}

/// `[node]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NodeSettings {
    /// Where the node keeps its files (the standalone SQLite database, caches).
    pub data_dir: PathBuf,
}

impl Default for NodeSettings {
    fn default() -> Self {
        NodeSettings {
            data_dir: PathBuf::from("./chitin-data"),
        }
    }
}

/// `[cluster]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSettings {
    /// Cluster mode (Redis + a shared PostgreSQL/MySQL); off: standalone.
    pub enabled: bool,
    /// Required when `enabled`.
    pub redis_url: Option<String>,
    /// Prefix of every Redis key.
    pub namespace: String,
    pub heartbeat_interval_secs: f64,
    /// Must exceed 2 × `heartbeat_interval_secs`.
    pub liveness_timeout_secs: f64,
    /// The node's name; else the `instance-id` policy decides.
    pub instance_id: Option<String>,
    /// Node-to-node traffic.
    pub listen: String,
    /// The address other nodes use to reach this one (`host:port`).
    pub advertise: Option<String>,
    /// `cluster_config.json`, until bootstrap over the admin plane exists.
    pub config_file: Option<PathBuf>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            enabled: false,
            redis_url: None,
            namespace: "chitin".to_owned(),
            heartbeat_interval_secs: 10.0,
            liveness_timeout_secs: 30.0,
            instance_id: None,
            listen: "0.0.0.0:7946".to_owned(),
            advertise: None,
            config_file: None,
        }
    }
}

/// `[database]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://…`, `mysql://…`/`mariadb://…`, or `sqlite:…`. Required in
    /// cluster mode; standalone default: `chitin.db` in the data dir.
    pub url: Option<String>,
}

/// `[leases]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    pub ttl_secs: f64,
    /// Must be less than `ttl_secs / 2`.
    pub renew_interval_secs: f64,
    /// Handoffs per rebalance round per database.
    pub max_handoffs_per_round: u32,
}

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            ttl_secs: 15.0,
            renew_interval_secs: 5.0,
            max_handoffs_per_round: 4,
        }
    }
}

/// `[api]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApiSettings {
    /// gRPC listen address.
    pub listen: String,
    /// When set, every call of the Admin service needs
    /// `authorization: Bearer <token>` (the CLI sends `CHITIN_ADMIN_TOKEN`).
    pub admin_token: Option<String>,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            listen: "0.0.0.0:50051".to_owned(),
            admin_token: None,
        }
    }
}

/// `[metrics]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsSettings {
    /// HTTP listen address (`/health`, `/readyz`, `/metrics`).
    pub listen: String,
    /// When set, `/health` requires `Authorization: Bearer <token>`.
    pub auth_token: Option<String>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            listen: "0.0.0.0:9090".to_owned(),
            auth_token: None,
        }
    }
}

/// `[policies]`: each slot is `"default"` or the path of a component file,
/// plus the limits of every call (see `chitin::policy::PolicySettings`,
/// which the node builds from this).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySlots {
    #[serde(alias = "instance-id")]
    pub instance_id: String,
    pub placement: String,
    pub split: String,
    pub drain: String,
    /// Deadline of one policy call, in milliseconds (1 … 60000).
    pub deadline_ms: u32,
    /// Linear-memory limit of one policy instance, in MiB (1 … 4096).
    pub memory_limit_mib: u32,
    /// Where precompiled components are cached; default `<data_dir>/policy-cache`.
    pub cache_dir: Option<PathBuf>,
}

impl Default for PolicySlots {
    fn default() -> Self {
        let d = || "default".to_owned();
        PolicySlots {
            instance_id: d(),
            placement: d(),
            split: d(),
            drain: d(),
            deadline_ms: 100,
            memory_limit_mib: 64,
            cache_dir: None,
        }
    }
}

/// The type of a key, for type checks and for reading environment values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Str,
    Path,
    Bool,
    /// A non-negative integer that fits `u32`.
    Count,
    /// Seconds, fractions allowed.
    Secs,
}

impl Kind {
    fn rule(self) -> &'static str {
        match self {
            Kind::Str => "must be a string",
            Kind::Path => "must be a path (a string)",
            Kind::Bool => "must be true or false",
            Kind::Count => "must be a whole number from 0 to 4294967295",
            Kind::Secs => "must be a number of seconds (fractions allowed, e.g. 0.5)",
        }
    }
}

/// Every key: section, key, type, optional.
const KEYS: &[(&str, &str, Kind, bool)] = &[
    ("node", "data_dir", Kind::Path, false),
    ("cluster", "enabled", Kind::Bool, false),
    ("cluster", "redis_url", Kind::Str, true),
    ("cluster", "namespace", Kind::Str, false),
    ("cluster", "heartbeat_interval_secs", Kind::Secs, false),
    ("cluster", "liveness_timeout_secs", Kind::Secs, false),
    ("cluster", "instance_id", Kind::Str, true),
    ("cluster", "listen", Kind::Str, false),
    ("cluster", "advertise", Kind::Str, true),
    ("cluster", "config_file", Kind::Path, true),
    ("database", "url", Kind::Str, true),
    ("leases", "ttl_secs", Kind::Secs, false),
    ("leases", "renew_interval_secs", Kind::Secs, false),
    ("leases", "max_handoffs_per_round", Kind::Count, false),
    ("api", "listen", Kind::Str, false),
    ("api", "admin_token", Kind::Str, true),
    ("metrics", "listen", Kind::Str, false),
    ("metrics", "auth_token", Kind::Str, true),
    ("policies", "instance_id", Kind::Str, false),
    ("policies", "placement", Kind::Str, false),
    ("policies", "split", Kind::Str, false),
    ("policies", "drain", Kind::Str, false),
    ("policies", "deadline_ms", Kind::Count, false),
    ("policies", "memory_limit_mib", Kind::Count, false),
    ("policies", "cache_dir", Kind::Path, true),
];

const SECTIONS: &[&str] = &[
    "node", "cluster", "database", "leases", "api", "metrics", "policies",
];

/// The canonical name of a key of a section (`instance-id` → `instance_id` in `[policies]`).
fn canonical(section: &str, key: &str) -> String {
    if section == "policies" {
        key.replace('-', "_")
    } else {
        key.to_owned()
    }
}

fn lookup(section: &str, key: &str) -> Option<(Kind, bool)> {
    KEYS.iter()
        .find(|(s, k, _, _)| *s == section && *k == key)
        .map(|&(_, _, kind, opt)| (kind, opt))
}

fn keys_of(section: &str) -> Vec<&'static str> {
    KEYS.iter()
        .filter(|(s, _, _, _)| *s == section)
        .map(|&(_, k, _, _)| k)
        .collect()
}

/// One thing wrong with the settings.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// A section or key that does not exist.
    UnknownKey {
        key: String,
        origin: String,
        known: Vec<&'static str>,
    },
    /// A `CHITIN__…` variable that names no key.
    UnknownEnvVar { var: String, reason: String },
    /// A value that breaks a rule.
    BadValue {
        key: String,
        value: String,
        rule: String,
        origin: String,
    },
}

impl Problem {
    /// The dotted key (or variable) the problem is about.
    pub fn key(&self) -> &str {
        match self {
            Problem::UnknownKey { key, .. } | Problem::BadValue { key, .. } => key,
            Problem::UnknownEnvVar { var, .. } => var,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::UnknownKey { key, origin, known } => {
                write!(
                    f,
                    "unknown key `{key}` (in {origin}); known: {}",
                    known.join(", ")
                )
            }
            Problem::UnknownEnvVar { var, reason } => {
                write!(f, "unknown environment variable `{var}`: {reason}")
            }
            Problem::BadValue {
                key,
                value,
                rule,
                origin,
            } => {
                write!(f, "`{key}` = {value} (from {origin}): {rule}")
            }
        }
    }
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read settings file `{}`: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("settings file `{origin}` is not valid TOML: {message}")]
    Syntax { origin: String, message: String },
    #[error(
        "invalid settings:\n{}",
        .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    Invalid(Vec<Problem>),
}

impl SettingsError {
    /// The problems, for [`SettingsError::Invalid`].
    pub fn problems(&self) -> &[Problem] {
        match self {
            SettingsError::Invalid(p) => p,
            _ => &[],
        }
    }
}

/// Where each key's value came from, for messages.
struct Origins {
    file: String,
    env: BTreeMap<String, String>,
}

impl Origins {
    fn of(&self, key: &str) -> String {
        match self.env.get(key) {
            Some(var) => format!("environment variable {var}"),
            None => self.file.clone(),
        }
    }
}

fn show(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

impl Settings {
    /// Loads `path` (if given; none means all defaults) and the real process
    /// environment's `CHITIN__…` variables.
    pub fn load_from_process(path: Option<&Path>) -> Result<Settings, SettingsError> {
        let mut env = BTreeMap::new();
        let mut problems = Vec::new();
        for (k, v) in std::env::vars_os() {
            let Some(k) = k.to_str() else { continue };
            if !k.starts_with(ENV_PREFIX) {
                continue;
            }
            match v.into_string() {
                Ok(v) => {
                    env.insert(k.to_owned(), v);
                }
                Err(v) => problems.push(Problem::BadValue {
                    key: k.to_owned(),
                    value: format!("{v:?}"),
                    rule: "must be valid UTF-8".into(),
                    origin: format!("environment variable {k}"),
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
                let text = std::fs::read_to_string(p).map_err(|source| SettingsError::Read {
                    path: p.to_owned(),
                    source,
                })?;
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
        let mut table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| SettingsError::Syntax {
                    origin: origin.to_owned(),
                    message: e.to_string(),
                })?;
        let mut origins = Origins {
            file: format!("settings file {origin}"),
            env: BTreeMap::new(),
        };
        let mut problems = Vec::new();

        // The file: known sections and keys, each of the right type.
        check_table(&mut table, &origins, &mut problems);

        // The environment, in a stable order.
        let mut vars: Vec<(String, String)> = env
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
            .collect();
        vars.sort();
        for (var, value) in vars {
            let Some(rest) = var.strip_prefix(ENV_PREFIX) else {
                continue;
            };
            let parts: Vec<&str> = rest.split("__").collect();
            let [section, key] = parts.as_slice() else {
                problems.push(Problem::UnknownEnvVar {
                    var: var.clone(),
                    reason: "expected CHITIN__SECTION__KEY (two parts after CHITIN__)".into(),
                });
                continue;
            };
            let section = section.to_ascii_lowercase();
            let key = key.to_ascii_lowercase();
            if !SECTIONS.contains(&section.as_str()) {
                problems.push(Problem::UnknownEnvVar {
                    var: var.clone(),
                    reason: format!(
                        "no section `[{section}]`; sections: {}",
                        SECTIONS.join(", ")
                    ),
                });
                continue;
            }
            let Some((kind, optional)) = lookup(&section, &key) else {
                problems.push(Problem::UnknownEnvVar {
                    var: var.clone(),
                    reason: format!(
                        "no key `{key}` in [{section}]; keys: {}",
                        keys_of(&section).join(", ")
                    ),
                });
                continue;
            };
            let dotted = format!("{section}.{key}");
            origins.env.insert(dotted.clone(), var.clone());
            let sect = table
                .entry(section.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            let Some(sect) = sect.as_table_mut() else {
                continue;
            };
            // An override replaces the file's value, spelled either way.
            if section == "policies" {
                sect.remove(&key.replace('_', "-"));
            }
            if value.is_empty() && optional {
                sect.remove(&key);
                continue;
            }
            match env_value(kind, &value) {
                Some(v) => {
                    sect.insert(key, v);
                }
                None => problems.push(Problem::BadValue {
                    key: dotted,
                    value: format!("{value:?}"),
                    rule: kind.rule().into(),
                    origin: origins.of(&format!("{section}.{key}")),
                }),
            }
        }
        if !problems.is_empty() {
            return Err(SettingsError::Invalid(problems));
        }

        let settings: Settings =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    SettingsError::Invalid(vec![Problem::BadValue {
                        key: "(settings)".into(),
                        value: String::new(),
                        rule: e.to_string(),
                        origin: origins.file.clone(),
                    }])
                })?;
        let problems = settings.problems(&origins);
        if problems.is_empty() {
            Ok(settings)
        } else {
            Err(SettingsError::Invalid(problems))
        }
    }

    /// Checks the rules on an already-built value (for settings made in code).
    pub fn validate(&self) -> Result<(), SettingsError> {
        let origins = Origins {
            file: "settings".into(),
            env: BTreeMap::new(),
        };
        let problems = self.problems(&origins);
        if problems.is_empty() {
            Ok(())
        } else {
            Err(SettingsError::Invalid(problems))
        }
    }

    fn problems(&self, origins: &Origins) -> Vec<Problem> {
        let mut out = Vec::new();
        let mut bad = |key: &str, value: String, rule: String| {
            out.push(Problem::BadValue {
                key: key.to_owned(),
                value,
                rule,
                origin: origins.of(key),
            })
        };
        let q = |s: &str| format!("{s:?}");

        if self.node.data_dir.as_os_str().is_empty() {
            bad("node.data_dir", q(""), "must not be empty".into());
        }

        let c = &self.cluster;
        if c.namespace.is_empty()
            || !c
                .namespace
                .chars()
                .all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.'))
        {
            bad(
                "cluster.namespace",
                q(&c.namespace),
                "must be non-empty and use only letters, digits, `_`, `-` and `.`".into(),
            );
        }
        let hb = c.heartbeat_interval_secs;
        let hb_ok = hb.is_finite() && hb >= 0.1;
        if !hb_ok {
            bad(
                "cluster.heartbeat_interval_secs",
                hb.to_string(),
                "must be at least 0.1 seconds".into(),
            );
        }
        let live = c.liveness_timeout_secs;
        if !live.is_finite() || live <= 0.0 {
            bad(
                "cluster.liveness_timeout_secs",
                live.to_string(),
                "must be a positive number of seconds".into(),
            );
        } else if hb_ok && live <= 2.0 * hb {
            bad(
                "cluster.liveness_timeout_secs",
                live.to_string(),
                format!(
                    "must exceed 2 × cluster.heartbeat_interval_secs ({hb}), i.e. be more than {}",
                    2.0 * hb
                ),
            );
        }
        if let Some(id) = &c.instance_id
            && (id.is_empty()
                || id.contains(':')
                || id.chars().any(char::is_whitespace)
                || id.len() > 255)
        {
            bad(
                "cluster.instance_id",
                q(id),
                "must be non-empty, at most 255 bytes, without `:` or whitespace".into(),
            );
        }
        if c.listen.parse::<SocketAddr>().is_err() {
            bad(
                "cluster.listen",
                q(&c.listen),
                "must be an IP:port socket address, e.g. 0.0.0.0:7946".into(),
            );
        }
        if let Some(a) = &c.advertise
            && !host_port(a)
        {
            bad(
                "cluster.advertise",
                q(a),
                "must be host:port, e.g. 10.0.0.11:7946".into(),
            );
        }
        match &c.redis_url {
            Some(u)
                if !["redis://", "rediss://", "unix://", "redis+unix://"]
                    .iter()
                    .any(|p| u.starts_with(p)) =>
            {
                bad(
                    "cluster.redis_url",
                    q(&redact(u)),
                    "must start with redis://, rediss:// or unix://".into(),
                )
            }
            None if c.enabled => bad(
                "cluster.redis_url",
                "(unset)".into(),
                "is required when cluster.enabled = true".into(),
            ),
            _ => {}
        }
        if let Some(p) = &c.config_file
            && p.as_os_str().is_empty()
        {
            bad(
                "cluster.config_file",
                q(""),
                "must not be empty when set".into(),
            );
        }

        match &self.database.url {
            Some(u) => {
                let scheme = u.split(':').next().unwrap_or("").to_ascii_lowercase();
                if !["postgres", "postgresql", "mysql", "mariadb", "sqlite"].contains(&scheme.as_str())
                    || !u.contains(':')
                {
                    bad(
                        "database.url",
                        q(&redact(u)),
                        "must be a postgres://, mysql://, mariadb:// or sqlite: URL".into(),
                    );
                }
            }
            None if c.enabled => bad(
                "database.url",
                "(unset)".into(),
                "is required when cluster.enabled = true (a PostgreSQL or MySQL database shared by every node)"
                    .into(),
            ),
            None => {}
        }

        let l = &self.leases;
        let ttl_ok = l.ttl_secs.is_finite() && l.ttl_secs >= 1.0;
        if !ttl_ok {
            bad(
                "leases.ttl_secs",
                l.ttl_secs.to_string(),
                "must be at least 1 second".into(),
            );
        }
        let r = l.renew_interval_secs;
        if !r.is_finite() || r < 0.05 {
            bad(
                "leases.renew_interval_secs",
                r.to_string(),
                "must be at least 0.05 seconds".into(),
            );
        } else if ttl_ok && r >= l.ttl_secs / 2.0 {
            bad(
                "leases.renew_interval_secs",
                r.to_string(),
                format!(
                    "must be less than half of leases.ttl_secs ({}), i.e. below {}, so that two renewals fit \
                     in a lease's lifetime",
                    l.ttl_secs,
                    l.ttl_secs / 2.0
                ),
            );
        }
        if l.max_handoffs_per_round == 0 {
            bad(
                "leases.max_handoffs_per_round",
                "0".into(),
                "must be at least 1".into(),
            );
        }

        if self.api.listen.parse::<SocketAddr>().is_err() {
            bad(
                "api.listen",
                q(&self.api.listen),
                "must be an IP:port socket address, e.g. 0.0.0.0:50051".into(),
            );
        }
        if self.metrics.listen.parse::<SocketAddr>().is_err() {
            bad(
                "metrics.listen",
                q(&self.metrics.listen),
                "must be an IP:port socket address, e.g. 0.0.0.0:9090".into(),
            );
        }
        for (key, token) in [("metrics.auth_token", &self.metrics.auth_token), ("api.admin_token", &self.api.admin_token)] {
            if let Some(t) = token
                && (t.trim().is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()))
            {
                bad(
                    key,
                    q(t),
                    "must be printable ASCII without spaces when set (unset it to disable auth)".into(),
                );
            }
        }

        let p = &self.policies;
        for (key, v) in [
            ("policies.instance_id", &p.instance_id),
            ("policies.placement", &p.placement),
            ("policies.split", &p.split),
            ("policies.drain", &p.drain),
        ] {
            if v.trim().is_empty() {
                bad(
                    key,
                    q(v),
                    "must be \"default\" or the path of a policy component".into(),
                );
            }
        }
        out
    }

    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs_f64(self.cluster.heartbeat_interval_secs)
    }

    pub fn liveness_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.cluster.liveness_timeout_secs)
    }

    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs_f64(self.leases.ttl_secs)
    }

    pub fn renew_interval(&self) -> Duration {
        Duration::from_secs_f64(self.leases.renew_interval_secs)
    }

    /// `database.url`, or in its absence the standalone SQLite file
    /// `<data_dir>/chitin.db` (the data dir must exist before connecting).
    pub fn database_url(&self) -> String {
        match &self.database.url {
            Some(u) => u.clone(),
            None => format!(
                "sqlite://{}",
                self.node.data_dir.join("chitin.db").display()
            ),
        }
    }
}

/// Type-checks the parsed file: known sections and keys, values of the right type.
fn check_table(table: &mut toml::Table, origins: &Origins, problems: &mut Vec<Problem>) {
    for (section, value) in table.iter_mut() {
        if !SECTIONS.contains(&section.as_str()) {
            problems.push(Problem::UnknownKey {
                key: section.clone(),
                origin: origins.file.clone(),
                known: SECTIONS.to_vec(),
            });
            continue;
        }
        let Some(sect) = value.as_table_mut() else {
            problems.push(Problem::BadValue {
                key: section.clone(),
                value: show(value),
                rule: format!("must be a table ([{section}])"),
                origin: origins.file.clone(),
            });
            continue;
        };
        for (key, v) in sect.iter() {
            let name = canonical(section, key);
            let dotted = format!("{section}.{key}");
            match lookup(section, &name) {
                None => problems.push(Problem::UnknownKey {
                    key: dotted,
                    origin: origins.file.clone(),
                    known: keys_of(section),
                }),
                Some((kind, _)) => {
                    if !type_ok(kind, v) {
                        problems.push(Problem::BadValue {
                            key: dotted,
                            value: show(v),
                            rule: kind.rule().into(),
                            origin: origins.file.clone(),
                        });
                    }
                }
            }
        }
        if section == "policies"
            && sect.contains_key("instance-id")
            && sect.contains_key("instance_id")
        {
            problems.push(Problem::BadValue {
                key: "policies.instance_id".into(),
                value: "(set twice)".into(),
                rule: "set either `instance-id` or `instance_id`, not both".into(),
                origin: origins.file.clone(),
            });
        }
    }
}

fn type_ok(kind: Kind, v: &toml::Value) -> bool {
    match (kind, v) {
        (Kind::Str | Kind::Path, toml::Value::String(_)) => true,
        (Kind::Bool, toml::Value::Boolean(_)) => true,
        (Kind::Count, toml::Value::Integer(i)) => u32::try_from(*i).is_ok(),
        (Kind::Secs, toml::Value::Integer(_)) => true,
        (Kind::Secs, toml::Value::Float(f)) => f.is_finite(),
        _ => false,
    }
}

/// An environment value read as `kind`.
fn env_value(kind: Kind, raw: &str) -> Option<toml::Value> {
    let t = raw.trim();
    match kind {
        Kind::Str | Kind::Path => Some(toml::Value::String(raw.to_owned())),
        Kind::Bool => match t.to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Some(toml::Value::Boolean(true)),
            "false" | "0" | "no" | "off" => Some(toml::Value::Boolean(false)),
            _ => None,
        },
        Kind::Count => t
            .parse::<u32>()
            .ok()
            .map(|n| toml::Value::Integer(i64::from(n))),
        Kind::Secs => t
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(toml::Value::Float),
    }
}

/// `host:port` with a non-empty host and a numeric port (`[v6]:port` allowed).
fn host_port(s: &str) -> bool {
    if s.parse::<SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains(':')
                && !host.contains(char::is_whitespace)
                && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

/// A URL with any password replaced by `***`.
fn redact(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://")
        && let Some((auth, host)) = rest.split_once('@')
        && let Some((user, _)) = auth.split_once(':')
    {
        return format!("{scheme}://{user}:***@{host}");
    }
    url.to_owned()
}
