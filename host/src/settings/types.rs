//! The schema: one serde struct per section. These structs are the only
//! description of the keys; the loader and its error messages derive from
//! them through serde.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};

/// Whether `token` is usable as a bearer token: printable ASCII, no spaces,
/// at least [`MIN_SECRET`](crate::redact::MIN_SECRET) characters (a shorter
/// one could not be masked in the logs).
pub fn well_formed(token: &str) -> bool {
    token.len() >= crate::redact::MIN_SECRET && token.bytes().all(|b| b.is_ascii_graphic())
}

/// A token setting: one token, or several while one is rotated (`"t"` or
/// `["new", "old"]` in TOML; in a token file, one per line). Every one is
/// accepted; the first is the one this node sends (the peer token on its
/// node-to-node calls), so a rotation adds the new token second on every
/// node, then moves it first, then drops the old one.
#[derive(Clone, Debug, PartialEq)]
pub struct Tokens(Vec<String>);

impl Serialize for Tokens {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => serializer.serialize_str(one),
            many => many.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Tokens {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Tokens, D::Error> {
        struct OneOrMany;
        impl<'de> Visitor<'de> for OneOrMany {
            type Value = Tokens;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a token (a string), or a list of tokens while one is rotated")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Tokens, E> {
                Ok(Tokens(vec![v.to_owned()]))
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Tokens, A::Error> {
                let mut tokens = Vec::new();
                while let Some(t) = seq.next_element::<String>()? {
                    tokens.push(t);
                }
                Ok(Tokens(tokens))
            }
        }
        deserializer.deserialize_any(OneOrMany)
    }
}

impl From<&str> for Tokens {
    fn from(t: &str) -> Tokens {
        Tokens(vec![t.to_owned()])
    }
}

impl Tokens {
    /// Several tokens, the first the one sent.
    pub fn new(tokens: Vec<String>) -> Tokens {
        Tokens(tokens)
    }

    /// The token this node sends: the first.
    pub fn current(&self) -> Option<&str> {
        self.0.first().map(String::as_str)
    }

    /// Every accepted token.
    pub fn all(&self) -> &[String] {
        &self.0
    }
}

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
    /// `[tls]`
    pub tls: TlsSettings,
    /// `[limits]`
    pub limits: LimitSettings,
    /// `[tracing]`
    pub tracing: TracingSettings,
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
        NodeSettings { data_dir: PathBuf::from("./chitin-data") }
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
    pub peer_token: Option<Tokens>,
    /// A file holding `peer_token`, one token per line (see [`Tokens`]);
    /// read at start and again on SIGHUP.
    pub peer_token_file: Option<PathBuf>,
    /// CA certificates (PEM) that verify the Redis server's certificate
    /// for a `rediss://` `redis_url`; unset, the system's roots do.
    pub redis_ca_file: Option<PathBuf>,
    /// Target affinity claims one instance may hold at once; a claim past
    /// it is refused (RESOURCE_EXHAUSTED) until the instance releases some.
    pub max_claims_per_instance: u64,
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
            redis_ca_file: None,
            max_claims_per_instance: DEFAULT_MAX_CLAIMS_PER_INSTANCE,
        }
    }
}

/// `[database]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseSettings {
    /// `postgres://…`, `mysql://…`/`mariadb://…`, or `sqlite:…`. Required in
    /// cluster mode; standalone default: `chitin.db` in the data dir.
    pub url: Option<String>,
    /// CA certificates (PEM) for TLS to PostgreSQL or MySQL/MariaDB: the
    /// node connects over TLS and verifies the server's certificate and
    /// host name against them (`sslmode=verify-full`, MySQL
    /// `ssl-mode=VERIFY_IDENTITY`, added to the URL unless it names a
    /// verifying mode itself).
    pub ca_file: Option<PathBuf>,
    /// The node's connections: on PostgreSQL and MySQL a quarter (one to
    /// four) for leases and registrations, the rest for the journal's
    /// appends and reads, so that stalled appends never starve the lease
    /// round; the heartbeat has one of its own besides.
    pub max_connections: u32,
    /// How long a request waits for a connection of the pool before it
    /// fails (as not applied).
    #[serde(deserialize_with = "secs")]
    pub acquire_timeout_secs: f64,
}

impl Default for DatabaseSettings {
    fn default() -> Self {
        DatabaseSettings { url: None, ca_file: None, max_connections: 10, acquire_timeout_secs: 10.0 }
    }
}

/// `[leases]`
///
/// The lease timing (`ttl_secs`, `renew_interval_secs`) is the cluster's:
/// the first node records it in the database and every later node must
/// match. Leave both unset and a node takes the timing its cluster was
/// created with (a new cluster: [`DEFAULT_TTL_SECS`],
/// [`DEFAULT_RENEW_INTERVAL_SECS`]), so that a change of the defaults never
/// stops a rolling upgrade.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseSettings {
    /// Lifetime of a lease, in seconds: a paused or cut-off holder's shards
    /// are writable elsewhere about this long after its last heartbeat.
    /// Unset: see the section.
    #[serde(deserialize_with = "some_secs", skip_serializing_if = "Option::is_none")]
    pub ttl_secs: Option<f64>,
    /// Seconds between rounds (heartbeat, renewals, takeovers); less than
    /// `ttl_secs / 2`. Unset: see the section.
    #[serde(deserialize_with = "some_secs", skip_serializing_if = "Option::is_none")]
    pub renew_interval_secs: Option<f64>,
    /// Handoffs per rebalance round per database.
    pub max_handoffs_per_round: u32,
    /// How long a handoff waits for the application's RELEASED after
    /// DRAINING, while a watch that acknowledges is open; then it goes on.
    /// Less than `renew_interval_secs` (a lease round waits for it); unset,
    /// half of it.
    pub release_timeout_ms: Option<u64>,
    /// How long writes to a shard this node just took wait, after ACQUIRED,
    /// for the application's READY (it claimed its fence and warmed up),
    /// while a watch that acknowledges is open; then they are served
    /// without it. Less than half of `ttl_secs`; unset, one renew interval.
    pub ready_timeout_ms: Option<u64>,
}

/// A new cluster's lease TTL: a paused or cut-off node's shards are writable
/// elsewhere within about TTL + one round (2.5 s), while a 1 s database
/// stall or a 500 ms pause of the node still leaves a heartbeat in every TTL
/// (`docs/operations.md`, "Lease timing").
pub const DEFAULT_TTL_SECS: f64 = 2.0;

/// A new cluster's renew interval: four heartbeats per TTL.
pub const DEFAULT_RENEW_INTERVAL_SECS: f64 = 0.5;

/// Affinity claims one instance may hold unless `cluster.max_claims_per_instance`
/// says otherwise: far above what a node acts on at once, and low enough that
/// the claim refresh of one instance stays about a hundred Redis calls.
pub const DEFAULT_MAX_CLAIMS_PER_INSTANCE: u64 = 100_000;

impl Default for LeaseSettings {
    fn default() -> Self {
        LeaseSettings {
            ttl_secs: None,
            renew_interval_secs: None,
            max_handoffs_per_round: 4,
            release_timeout_ms: None,
            ready_timeout_ms: None,
        }
    }
}

impl LeaseSettings {
    /// `ttl_secs`, or the new cluster's default.
    pub fn ttl(&self) -> f64 {
        self.ttl_secs.unwrap_or(DEFAULT_TTL_SECS)
    }

    /// `renew_interval_secs`, or the new cluster's default.
    pub fn renew_interval(&self) -> f64 {
        self.renew_interval_secs.unwrap_or(DEFAULT_RENEW_INTERVAL_SECS)
    }

    /// Whether the timing is left to the cluster (neither key set).
    pub fn timing_unset(&self) -> bool {
        self.ttl_secs.is_none() && self.renew_interval_secs.is_none()
    }

    /// These settings at the cluster's recorded timing (TTL, round), when
    /// they leave the timing to the cluster and it recorded another; `None`
    /// when they run as they are.
    pub fn at_cluster_timing(&self, recorded: Option<(Duration, Duration)>) -> Option<LeaseSettings> {
        let (ttl, round) = recorded.filter(|_| self.timing_unset())?;
        let (ttl, round) = (ttl.as_secs_f64(), round.as_secs_f64());
        (ttl != self.ttl() || round != self.renew_interval()).then(|| LeaseSettings {
            ttl_secs: Some(ttl),
            renew_interval_secs: Some(round),
            ..self.clone()
        })
    }

    /// `release_timeout_ms`, or half the renew interval (after the rules).
    pub fn release_timeout(&self) -> Duration {
        self.release_timeout_ms.map_or_else(|| Duration::from_secs_f64(self.renew_interval() / 2.0), Duration::from_millis)
    }

    /// `ready_timeout_ms`, or one renew interval (after the rules).
    pub fn ready_timeout(&self) -> Duration {
        self.ready_timeout_ms.map_or_else(|| Duration::from_secs_f64(self.renew_interval()), Duration::from_millis)
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
    pub admin_token: Option<Tokens>,
    /// A file holding `admin_token`, one token per line; read at start and
    /// again on SIGHUP.
    pub admin_token_file: Option<PathBuf>,
    /// When set, every call of the Journal, Ownership and Coordination
    /// services needs `authorization: Bearer <token>` (or the peer token;
    /// the CLI sends `CHITIN_CLIENT_TOKEN`).
    pub client_token: Option<Tokens>,
    /// A file holding `client_token`, one token per line; read at start
    /// and again on SIGHUP.
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
    pub auth_token: Option<Tokens>,
    /// A file holding `auth_token`, one token per line; read at start and
    /// again on SIGHUP.
    pub auth_token_file: Option<PathBuf>,
}

impl Default for MetricsSettings {
    fn default() -> Self {
        MetricsSettings { listen: "127.0.0.1:9090".to_owned(), auth_token: None, auth_token_file: None }
    }
}

/// `[tracing]`: OpenTelemetry traces of appends, forwards, lease rounds,
/// handoffs, takeovers and policy calls, sent to an OTLP collector over
/// gRPC. Off unless `otlp_endpoint` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracingSettings {
    /// The collector's OTLP/gRPC address (`http://collector:4317`).
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of every span.
    pub service_name: String,
    /// The share of new traces recorded, 0 to 1; a call that arrives with a
    /// sampled `traceparent` is always recorded.
    pub sample_ratio: f64,
}

impl Default for TracingSettings {
    fn default() -> Self {
        TracingSettings { otlp_endpoint: None, service_name: "chitin".to_owned(), sample_ratio: 1.0 }
    }
}

/// `[limits]`: what callers can hold of the two listeners (`api.listen` and
/// `metrics.listen`, each bounded on its own), so that a flood of idle or
/// slow connections costs bounded descriptors and memory and never keeps
/// the node from opening its own database and Redis connections.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSettings {
    /// Connections open at once on `api.listen`; one more is closed as soon
    /// as it is accepted (and counted in `chitin_connections_refused_total`).
    pub api_max_connections: usize,
    /// Connections open at once on `metrics.listen`.
    pub metrics_max_connections: usize,
    /// A new connection must complete its TLS handshake, send the HTTP/2
    /// preface or an HTTP/1 request's headers within this time, or is closed.
    pub handshake_timeout_secs: f64,
    /// A connection from which nothing was read for this long is closed. The
    /// gRPC listener pings every quiet connection at a third of it, so a
    /// live client (a watch that only receives) answers and stays.
    pub idle_timeout_secs: f64,
    /// HTTP/2 streams (calls) open at once on one gRPC connection.
    pub max_streams_per_connection: u32,
    /// The longest a unary call or an HTTP request may run before it fails
    /// (DEADLINE_EXCEEDED, or 408); a stream's messages are not bounded by it.
    pub request_timeout_secs: f64,
}

impl Default for LimitSettings {
    fn default() -> Self {
        LimitSettings {
            api_max_connections: 512,
            metrics_max_connections: 64,
            handshake_timeout_secs: 10.0,
            idle_timeout_secs: 300.0,
            max_streams_per_connection: 256,
            request_timeout_secs: 3_600.0,
        }
    }
}

impl LimitSettings {
    /// `handshake_timeout_secs` as a duration (after the settings rules).
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.handshake_timeout_secs)
    }

    /// `idle_timeout_secs` as a duration (after the settings rules).
    pub fn idle_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.idle_timeout_secs)
    }

    /// `request_timeout_secs` as a duration (after the settings rules).
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs_f64(self.request_timeout_secs)
    }
}

/// `[tls]`: TLS (rustls) on `api.listen` and `metrics.listen`, and on the
/// node's calls to its peers. Off while `cert_file` is unset. Every file is
/// PEM and read at start (rotating one is a restart, docs/security.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct TlsSettings {
    /// The node's certificate chain, leaf first. With `key_file`, both
    /// listeners speak TLS only. In cluster mode the node presents it on its
    /// calls to peers too: it needs the server and client auth usages and
    /// the node's advertised host among its names.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificates of the callers. When set, both listeners require a
    /// client certificate signed by one of them or by `peer_ca_file`
    /// (mutual TLS), and a non-loopback listen needs no token.
    pub client_ca_file: Option<PathBuf>,
    /// CA certificates that signed the cluster's node certificates; required
    /// in cluster mode with TLS. The node verifies its peers against them
    /// when it calls them, and a caller whose certificate they verify is a
    /// peer, as one with `cluster.peer_token` is.
    pub peer_ca_file: Option<PathBuf>,
}

impl TlsSettings {
    /// Whether the listeners speak TLS.
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// Whether every caller must present a certificate (mutual TLS).
    pub fn requires_client_certificates(&self) -> bool {
        self.enabled() && self.client_ca_file.is_some()
    }

    /// Whether a node certificate of the cluster makes a caller a peer.
    pub fn knows_peers(&self) -> bool {
        self.enabled() && self.peer_ca_file.is_some()
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

    /// `leases.ttl_secs` (or its default).
    pub fn lease_ttl(&self) -> Duration {
        Duration::from_secs_f64(self.leases.ttl())
    }

    /// `leases.renew_interval_secs` (or its default).
    pub fn renew_interval(&self) -> Duration {
        Duration::from_secs_f64(self.leases.renew_interval())
    }

    /// `database.url`, or in its absence the standalone SQLite file
    /// `<data_dir>/chitin.db` (the data dir must exist before connecting).
    ///
    /// With `database.ca_file`, the URL carries the CA and a verifying TLS
    /// mode as parameters (see [`with_database_ca`]).
    pub fn database_url(&self) -> String {
        let url = match &self.database.url {
            Some(u) => u.clone(),
            None => format!("sqlite://{}", self.node.data_dir.join("chitin.db").display()),
        };
        match &self.database.ca_file {
            Some(ca) => with_database_ca(&url, ca),
            None => url,
        }
    }
}

/// The URL parameters of the TLS mode, for PostgreSQL and MySQL.
const SSL_MODE_PARAMS: &[&str] = &["sslmode", "ssl-mode"];

/// The value of the URL's TLS mode parameter, if it has one.
pub fn database_ssl_mode(url: &str) -> Option<&str> {
    url_params(url).find(|(k, _)| SSL_MODE_PARAMS.iter().any(|p| k.eq_ignore_ascii_case(p))).map(|(_, v)| v)
}

/// Whether the URL already names a CA file (`sslrootcert`, `ssl-ca`).
pub fn database_url_has_ca(url: &str) -> bool {
    url_params(url).any(|(k, _)| ["sslrootcert", "ssl-root-cert", "ssl-ca", "sslca"].iter().any(|p| k.eq_ignore_ascii_case(p)))
}

fn url_params(url: &str) -> impl Iterator<Item = (&str, &str)> {
    url.split_once('?').map(|(_, q)| q).unwrap_or("").split('&').filter_map(|kv| kv.split_once('='))
}

/// `url` with the CA file `ca` and, unless the URL names a TLS mode, the
/// mode that verifies the server's certificate and host name: PostgreSQL
/// `sslrootcert` and `sslmode=verify-full`, MySQL/MariaDB `ssl-ca` and
/// `ssl-mode=VERIFY_IDENTITY` (sqlx reads both from the URL). The settings
/// rules refuse the combinations this cannot honour (SQLite, a CA in the
/// URL too, a mode that does not verify).
pub fn with_database_ca(url: &str, ca: &std::path::Path) -> String {
    let postgres = url.to_ascii_lowercase().starts_with("postgres");
    let (ca_param, mode) = if postgres { ("sslrootcert", "sslmode=verify-full") } else { ("ssl-ca", "ssl-mode=VERIFY_IDENTITY") };
    let mut out = url.to_owned();
    let mut add = |param: &str| {
        out.push(if out.contains('?') { '&' } else { '?' });
        out.push_str(param);
    };
    add(&format!("{ca_param}={}", percent_encode(&ca.display().to_string())));
    if database_ssl_mode(url).is_none() {
        add(mode);
    }
    out
}

/// Text as a URL query value: unreserved characters and `/` as they are
/// (a `/` is allowed in a query), everything else percent-encoded.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

/// [`secs`] for an optional key: present means set.
fn some_secs<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    secs(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_timing_is_taken_only_when_both_keys_are_unset() {
        let secs = Duration::from_secs_f64;
        let old = Some((secs(15.0), secs(5.0)));
        let new = Some((secs(DEFAULT_TTL_SECS), secs(DEFAULT_RENEW_INTERVAL_SECS)));
        type Timing = Option<(Duration, Duration)>;
        // (ttl_secs, renew_interval_secs, recorded) → the timing taken, if any
        let cases: &[(Option<f64>, Option<f64>, Timing, Option<(f64, f64)>)] = &[
            (None, None, old, Some((15.0, 5.0))),
            // A new cluster, or one at the defaults: nothing to take.
            (None, None, None, None),
            (None, None, new, None),
            // Either key set: the settings are the node's, checked against the
            // cluster's record as before.
            (Some(15.0), None, old, None),
            (None, Some(5.0), old, None),
            (Some(3.0), Some(1.0), old, None),
        ];
        for &(ttl_secs, renew_interval_secs, recorded, want) in cases {
            let given = LeaseSettings { ttl_secs, renew_interval_secs, ..LeaseSettings::default() };
            let got = given.at_cluster_timing(recorded).map(|l| (l.ttl(), l.renew_interval()));
            assert_eq!(got, want, "{given:?} with {recorded:?}");
        }
    }
}

/// A policy call's deadline unless `policies.deadline_ms` says otherwise.
pub const DEFAULT_POLICY_DEADLINE_MS: u32 = 100;

/// A policy instance's memory limit unless `policies.memory_limit_mib` says otherwise.
pub const DEFAULT_POLICY_MEMORY_MIB: u32 = 64;

/// `[policies]` of `chitin.toml`: each slot maps to `"default"` (the
/// component embedded in the binary) or to the path of a component file,
/// plus the limits of every call. Plain data: the policy host reads its sources and limits from it
/// (`policy::PolicySettings::source`, `limits`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PolicySettings {
    /// The `instance-id` slot (the WIT spelling is accepted too).
    #[serde(alias = "instance-id")]
    pub instance_id: String,
    /// The `placement` slot.
    pub placement: String,
    /// The `split` slot.
    pub split: String,
    /// The `drain` slot.
    pub drain: String,
    /// Take leases even when a component differs from the one the cluster
    /// records for its slot (during a deliberate, watched rollout of a new
    /// component); off, such a node serves and takes nothing.
    pub allow_mismatch: bool,
    /// Deadline of one call of a component file, in milliseconds (1 …
    /// 60000); the embedded default runs under the widest limits
    /// (`policy::Limits::WIDEST`).
    pub deadline_ms: u32,
    /// Memory limit of one instance of a component file, in MiB (1 …
    /// 4096): all its linear memories and tables together. `u32`, so that the conversion to bytes
    /// cannot overflow.
    pub memory_limit_mib: u32,
    /// Where precompiled components are cached; default `<data dir>/policy-cache`.
    pub cache_dir: Option<PathBuf>,
    /// Environment variables the instance-id policy sees besides
    /// `policy::env::INSTANCE_ENV` (`CHITIN__CLUSTER__INSTANCE_ID`, `HOSTNAME`,
    /// `POD_NAME`); no other variable reaches it.
    pub instance_id_env: Vec<String>,
}

impl Default for PolicySettings {
    fn default() -> Self {
        PolicySettings {
            instance_id: "default".into(),
            placement: "default".into(),
            split: "default".into(),
            drain: "default".into(),
            allow_mismatch: false,
            deadline_ms: DEFAULT_POLICY_DEADLINE_MS,
            memory_limit_mib: DEFAULT_POLICY_MEMORY_MIB,
            cache_dir: None,
            instance_id_env: Vec::new(),
        }
    }
}

/// Why `name` cannot be an entry of `policies.instance_id_env`, if it cannot.
pub fn invalid_var_reason(name: &str) -> Option<&'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => Some("is empty"),
        Some(c) if !(c.is_ascii_alphabetic() || c == '_') => Some("must start with a letter or `_`"),
        _ if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') => Some("may hold only letters, digits and `_`"),
        _ => None,
    }
}
