//! The schema: one serde struct per section. These structs are the only
//! description of the keys; the loader and its error messages derive from
//! them through serde.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

use crate::policy::PolicySettings;

/// All settings of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    /// `[node]`
    pub node: NodeSettings,
    /// `[cluster]`
    pub cluster: ClusterSettings,
    /// `[database]`
    pub database: DatabaseSettings,
    /// `[leases]`
    pub leases: LeaseSettings,
    /// `[api]`
    pub api: ApiSettings,
    /// `[metrics]`
    pub metrics: MetricsSettings,
    /// `[policies]`: the policy host's own type, so the node hands it over as is.
    pub policies: PolicySettings,
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
    /// Seconds between registry heartbeats.
    #[serde(deserialize_with = "secs")]
    pub heartbeat_interval_secs: f64,
    /// Must exceed 2 × `heartbeat_interval_secs`.
    #[serde(deserialize_with = "secs")]
    pub liveness_timeout_secs: f64,
    /// Session-bound liveness: the node holds a session lock in the shared
    /// database for its lifetime and watches the next node's, so that a
    /// crashed node's shards are taken over in milliseconds rather than
    /// after their TTL. Turn off only behind a pooler in transaction mode
    /// (PgBouncer), which breaks session locks; takeovers then wait for the
    /// TTL.
    pub session_liveness: bool,
    /// The node's name; else the `instance-id` policy decides.
    pub instance_id: Option<String>,
    /// Reserved for node-to-node traffic (today peers call each other on
    /// `api.listen`). Loopback by default, like every listener.
    pub listen: String,
    /// The address other nodes use to reach this one (`host:port`).
    pub advertise: Option<String>,
    /// `cluster_config.json`, until bootstrap over the admin plane exists.
    pub config_file: Option<PathBuf>,
    /// The peer plane's shared secret: every node of the cluster sends it on
    /// its node-to-node calls (forwards, ownership notices), and when set a
    /// node serves the `Peer` service and `forwarded = true` appends only
    /// with it.
    pub peer_token: Option<String>,
    /// A file holding `peer_token` (trailing whitespace ignored), read at start.
    pub peer_token_file: Option<PathBuf>,
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            enabled: false,
            redis_url: None,
            namespace: "chitin".to_owned(),
            heartbeat_interval_secs: 10.0,
            liveness_timeout_secs: 30.0,
            session_liveness: true,
            instance_id: None,
            listen: "127.0.0.1:7946".to_owned(),
            advertise: None,
            config_file: None,
            peer_token: None,
            peer_token_file: None,
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
    /// Lifetime of a lease, in seconds.
    #[serde(deserialize_with = "secs")]
    pub ttl_secs: f64,
    /// Must be less than `ttl_secs / 2`.
    #[serde(deserialize_with = "secs")]
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
    /// A file holding `admin_token`, read at start.
    pub admin_token_file: Option<PathBuf>,
    /// When set, every call of the Journal, Ownership and Coordination
    /// services needs `authorization: Bearer <token>` (or the peer token;
    /// the CLI sends `CHITIN_CLIENT_TOKEN`).
    pub client_token: Option<String>,
    /// A file holding `client_token`, read at start.
    pub client_token_file: Option<PathBuf>,
    /// Lets `api.listen` and `metrics.listen` take a non-loopback address
    /// without a token for every plane: logged as a warning at start and
    /// shown in `/health` and `Admin.Status`.
    pub insecure_listen: bool,
}

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            listen: "127.0.0.1:50051".to_owned(),
            admin_token: None,
            admin_token_file: None,
            client_token: None,
            client_token_file: None,
            insecure_listen: false,
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
    /// A file holding `auth_token`, read at start.
    pub auth_token_file: Option<PathBuf>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings {
            listen: "127.0.0.1:9090".to_owned(),
            auth_token: None,
            auth_token_file: None,
        }
    }
}

impl Settings {
    /// `cluster.heartbeat_interval_secs` (valid settings: see [`Settings::validate`]).
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_secs_f64(self.cluster.heartbeat_interval_secs)
    }

    /// `cluster.liveness_timeout_secs`.
    pub fn liveness_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.cluster.liveness_timeout_secs)
    }

    /// `leases.ttl_secs`.
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs_f64(self.leases.ttl_secs)
    }

    /// `leases.renew_interval_secs`.
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

/// Reads seconds from an integer or a float. Its own visitor only so that a
/// wrong type is reported as "expected a number of seconds" rather than
/// "expected f64"; the range is a rule (see `rules`), checked on every value.
fn secs<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    struct Secs;

    impl Visitor<'_> for Secs {
        type Value = f64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a number of seconds (fractions allowed, e.g. 0.5)")
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<f64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<f64, E> {
            Ok(v as f64)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<f64, E> {
            Ok(v as f64)
        }
    }

    d.deserialize_f64(Secs)
}
