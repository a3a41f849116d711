//! The cluster config model and its JSON form.
//!
//! The typed model ([`ClusterConfig`]) holds bounds as `u32` keys. The JSON
//! form goes through private wire structs that reject unknown fields and
//! hold bounds as the hex prefixes of [`crate::topology::bounds`]; a
//! malformed bound is a [`LoadError`] naming the shard and field.

use serde::{Deserialize, Serialize};

use super::bounds::{self, BoundError, BoundField};

/// One `{key, value}` metadata entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    pub key: String,
    pub value: String,
}

impl Metadata {
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Metadata { key: key.into(), value: value.into() }
    }
}

/// The value of `key` in a metadata list.
pub fn metadata_value<'a>(metadata: &'a [Metadata], key: &str) -> Option<&'a str> {
    metadata.iter().find(|m| m.key == key).map(|m| m.value.as_str())
}

/// The lifecycle state of a shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShardState {
    /// Serves its key range; has no children.
    Active,
    /// Still serves its range while its activating children are prepared.
    Splitting,
    /// A child of a splitting shard; not serving yet.
    Activating,
    /// Retired after a split; its children serve its range.
    Inactive,
}

impl ShardState {
    pub const ALL: [ShardState; 4] = [ShardState::Active, ShardState::Splitting, ShardState::Activating, ShardState::Inactive];

    pub fn as_str(self) -> &'static str {
        match self {
            ShardState::Active => "active",
            ShardState::Splitting => "splitting",
            ShardState::Activating => "activating",
            ShardState::Inactive => "inactive",
        }
    }

    /// Active and splitting shards route keys; they partition the keyspace.
    pub fn is_routable(self) -> bool {
        matches!(self, ShardState::Active | ShardState::Splitting)
    }
}

impl std::fmt::Display for ShardState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A replica of a shard, assigned to a node for good.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Replica {
    pub id: String,
    pub node_id: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<Metadata>,
}

/// A shard: the inclusive key range `[lower, upper]` of one application.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shard {
    pub id: String,
    pub lower: u32,
    pub upper: u32,
    pub state: ShardState,
    pub parent_id: Option<String>,
    pub replicas: Vec<Replica>,
    pub metadata: Vec<Metadata>,
}

impl Shard {
    /// The bounds as written in JSON (shortened prefixes).
    pub fn bound_strings(&self) -> (String, String) {
        bounds::format_bounds(self.lower, self.upper)
    }

    /// `[lower, upper]` as two full 8-digit keys.
    pub fn range_string(&self) -> String {
        format!("[{:08x}, {:08x}]", self.lower, self.upper)
    }
}

/// An application: a keyspace divided into shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Application {
    pub name: String,
    pub implementation: String,
    pub shards: Vec<Shard>,
    pub replication_factor: u32,
    pub metadata: Vec<Metadata>,
}

/// A node: one chitin process next to one instance of the service.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Node {
    pub id: String,
    pub grpc_address: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub metadata: Vec<Metadata>,
}

/// The whole cluster: applications, shards, replicas and nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterConfig {
    pub applications: Vec<Application>,
    pub nodes: Vec<Node>,
    pub version: u64,
    pub metadata: Vec<Metadata>,
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read `{path}`: {source}")]
    Io { path: String, source: std::io::Error },
    /// Malformed JSON, an unknown or missing field, a value of the wrong type.
    #[error("line {line}, column {column}: {message}")]
    Json { line: usize, column: usize, message: String },
    /// One or more malformed bounds (every one found is listed).
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Bounds(Vec<BoundError>),
}

impl LoadError {
    /// A stable code, like the rule codes of violations.
    pub fn code(&self) -> &'static str {
        match self {
            LoadError::Io { .. } => "unreadable-file",
            LoadError::Json { .. } => "malformed-json",
            LoadError::Bounds(_) => "malformed-bound",
        }
    }
}

impl From<serde_json::Error> for LoadError {
    fn from(e: serde_json::Error) -> Self {
        // serde_json appends " at line L column C"; we report them as fields.
        let full = e.to_string();
        let message = match full.rfind(" at line ") {
            Some(i) if e.line() > 0 => full[..i].to_owned(),
            _ => full,
        };
        LoadError::Json { line: e.line(), column: e.column(), message }
    }
}

impl ClusterConfig {
    /// Parses `cluster_config.json` text.
    pub fn from_json(text: &str) -> Result<ClusterConfig, LoadError> {
        let wire: wire::Config = serde_json::from_str(text)?;
        wire.into_model()
    }

    /// The JSON text: pretty-printed, shortened bounds, a final newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(&wire::Config::from_model(self)).expect("a config always serializes");
        s.push('\n');
        s
    }

    /// The node with this id.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The application with this name.
    pub fn application(&self, name: &str) -> Option<&Application> {
        self.applications.iter().find(|a| a.name == name)
    }

    /// Every shard with its application.
    pub fn shards(&self) -> impl Iterator<Item = (&Application, &Shard)> {
        self.applications.iter().flat_map(|a| a.shards.iter().map(move |s| (a, s)))
    }

    pub fn shard_count(&self) -> usize {
        self.applications.iter().map(|a| a.shards.len()).sum()
    }

    pub fn replica_count(&self) -> usize {
        self.shards().map(|(_, s)| s.replicas.len()).sum()
    }
}

/// The JSON form of `cluster_config.json`, for a config embedded in another
/// document (a snapshot, say): a malformed bound fails the whole document.
impl Serialize for ClusterConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        wire::Config::from_model(self).serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ClusterConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        wire::Config::deserialize(deserializer)?.into_model().map_err(serde::de::Error::custom)
    }
}

/// The JSON layout, field for field.
mod wire {
    use super::*;

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Config {
        #[serde(default)]
        pub applications: Vec<Application>,
        pub nodes: Vec<Node>,
        pub version: u64,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub metadata: Vec<Metadata>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Application {
        pub name: String,
        pub implementation: String,
        pub shards: Vec<Shard>,
        pub replication_factor: u32,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub metadata: Vec<Metadata>,
    }

    #[derive(Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub(super) struct Shard {
        pub id: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub lower_bound: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub upper_bound: Option<String>,
        pub state: ShardState,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub parent_id: Option<String>,
        pub replicas: Vec<Replica>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        pub metadata: Vec<Metadata>,
    }

    impl Config {
        pub(super) fn into_model(self) -> Result<super::ClusterConfig, LoadError> {
            let mut errors = Vec::new();
            let applications = self
                .applications
                .into_iter()
                .map(|a| super::Application {
                    name: a.name,
                    implementation: a.implementation,
                    replication_factor: a.replication_factor,
                    metadata: a.metadata,
                    shards: a
                        .shards
                        .into_iter()
                        .map(|s| {
                            let mut bound = |text: Option<String>, field: BoundField| {
                                bounds::parse_optional(text.as_deref(), field).unwrap_or_else(|syntax| {
                                    errors.push(BoundError {
                                        shard: s.id.clone(),
                                        field,
                                        value: text.clone().unwrap_or_default(),
                                        syntax,
                                    });
                                    0
                                })
                            };
                            let lower = bound(s.lower_bound, BoundField::Lower);
                            let upper = bound(s.upper_bound, BoundField::Upper);
                            super::Shard {
                                id: s.id,
                                lower,
                                upper,
                                state: s.state,
                                parent_id: s.parent_id,
                                replicas: s.replicas,
                                metadata: s.metadata,
                            }
                        })
                        .collect(),
                })
                .collect();
            if !errors.is_empty() {
                return Err(LoadError::Bounds(errors));
            }
            Ok(super::ClusterConfig { applications, nodes: self.nodes, version: self.version, metadata: self.metadata })
        }

        pub(super) fn from_model(c: &super::ClusterConfig) -> Config {
            let non_empty = |s: String| if s.is_empty() { None } else { Some(s) };
            Config {
                applications: c
                    .applications
                    .iter()
                    .map(|a| Application {
                        name: a.name.clone(),
                        implementation: a.implementation.clone(),
                        replication_factor: a.replication_factor,
                        metadata: a.metadata.clone(),
                        shards: a
                            .shards
                            .iter()
                            .map(|s| {
                                let (lo, hi) = s.bound_strings();
                                Shard {
                                    id: s.id.clone(),
                                    lower_bound: non_empty(lo),
                                    upper_bound: non_empty(hi),
                                    state: s.state,
                                    parent_id: s.parent_id.clone(),
                                    replicas: s.replicas.clone(),
                                    metadata: s.metadata.clone(),
                                }
                            })
                            .collect(),
                    })
                    .collect(),
                nodes: c.nodes.clone(),
                version: c.version,
                metadata: c.metadata.clone(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REFERENCE: &str = r#"{
  "applications": [
    {
      "name": "GrackleLocks",
      "implementation": "GrackleLocks",
      "shards": [
        {
          "id": "GrackleLocks_00_07",
          "lower_bound": "00",
          "upper_bound": "07",
          "state": "active",
          "replicas": [
            { "id": "GrackleLocks_00_07_7a4d737e", "node_id": "node-03" },
            { "id": "GrackleLocks_00_07_df01cea", "node_id": "node-01" }
          ]
        }
      ],
      "replication_factor": 3
    }
  ],
  "nodes": [
    { "id": "node-01", "grpc_address": "ip-10-0-10-14.us-west-2.compute.internal:7000",
      "metadata": [ { "key": "zone", "value": "us-west-2a" } ] }
  ],
  "version": 6
}"#;

    #[test]
    fn parses_the_reference_layout() {
        let c = ClusterConfig::from_json(REFERENCE).unwrap();
        assert_eq!(c.version, 6);
        let s = &c.applications[0].shards[0];
        assert_eq!((s.lower, s.upper), (0, 0x07ff_ffff));
        assert_eq!(s.state, ShardState::Active);
        assert_eq!(metadata_value(&c.nodes[0].metadata, "zone"), Some("us-west-2a"));
        // Round trip.
        let again = ClusterConfig::from_json(&c.to_json()).unwrap();
        assert_eq!(again, c);
        assert!(c.to_json().contains(r#""lower_bound": "00""#));
        assert!(!c.to_json().contains("parent_id"));
    }

    #[test]
    fn full_range_bounds_are_omitted() {
        let text = REFERENCE.replace(r#""lower_bound": "00","#, "").replace(r#""upper_bound": "07","#, "");
        let c = ClusterConfig::from_json(&text).unwrap();
        assert_eq!((c.applications[0].shards[0].lower, c.applications[0].shards[0].upper), (0, u32::MAX));
        assert!(!c.to_json().contains("lower_bound"));
    }

    #[test]
    fn load_errors() {
        let cases: &[(String, &str, &str)] = &[
            (REFERENCE.replace(r#""version": 6"#, r#""version": 6, "extra": 1"#), "malformed-json", "unknown field `extra`"),
            (REFERENCE.replace(r#""state": "active""#, r#""state": "Active""#), "malformed-json", "unknown variant `Active`"),
            (
                REFERENCE.replace(r#""upper_bound": "07""#, r#""upper_bound": "0g""#),
                "malformed-bound",
                "shard `GrackleLocks_00_07`: upper_bound `0g`",
            ),
            (
                REFERENCE.replace(r#""lower_bound": "00""#, r#""lower_bound": "000""#),
                "malformed-bound",
                "lower_bound `000`: 3 hex digits",
            ),
            (REFERENCE.replace(r#""lower_bound": "00""#, r#""lower_bound": "0000000000""#), "malformed-bound", "at most 8"),
            (
                REFERENCE.replace(r#""version": 6"#, r#""version": -1"#),
                "malformed-json",
                "line 25, column 15: invalid value: integer `-1`",
            ),
            (REFERENCE.replace(r#""id": "node-01","#, r#""id": "node-01""#), "malformed-json", "line 22, column"),
            (REFERENCE[..200].to_owned(), "malformed-json", "EOF"),
        ];
        for (text, code, needle) in cases {
            let e = ClusterConfig::from_json(text).unwrap_err();
            assert_eq!(e.code(), *code, "{e}");
            assert!(e.to_string().contains(needle), "{e} lacks {needle}");
        }
    }
}
