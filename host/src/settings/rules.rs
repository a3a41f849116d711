//! The rules values must keep beyond their types. Each refusal names the
//! key, the value and the rule; every refusal is reported at once.

use std::net::SocketAddr;

use super::exposure;
use super::load::Origins;
use super::redis_url::{CLUSTER_SCHEME, RedisTarget, hash_tag};
use super::types::well_formed;
use super::{Problem, Settings};

/// The longest duration accepted, in seconds. Longer timings are typos (a
/// lease that takes a day to fail over), and far longer ones would overflow
/// `Duration`.
pub(crate) const MAX_SECS: f64 = 86_400.0;

/// The most handoffs a round may make: more is a typo, and a round that
/// moves thousands of shards at once is a thundering herd.
pub(crate) const MAX_HANDOFFS_PER_ROUND: u32 = 10_000;

/// The database URL schemes a node can use, with whether cluster mode may.
const DATABASE_SCHEMES: &[(&str, bool)] =
    &[("postgres", true), ("postgresql", true), ("mysql", true), ("mariadb", true), ("sqlite", false)];

/// Every rule `settings` breaks, in key order of the file.
pub(super) fn problems(settings: &Settings, origins: &Origins) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut bad = |key: &str, value: String, rule: String| {
        out.push(Problem::Refused { key: key.to_owned(), value, rule, origin: origins.of(key) })
    };
    node_rules(settings, &mut bad);
    cluster_rules(settings, &mut bad);
    store_rules(settings, &mut bad);
    tls_rules(settings, &mut bad);
    lease_rules(settings, &mut bad);
    limit_rules(settings, &mut bad);
    listener_rules(settings, &mut bad);
    token_rules(settings, &mut bad);
    policy_rules(settings, &mut bad);
    out
}

/// A value as a refusal shows it: quoted, escaped.
fn q(s: &str) -> String {
    format!("{s:?}")
}

/// `node` and `tracing`.
fn node_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    if settings.node.data_dir.as_os_str().is_empty() {
        bad("node.data_dir", q(""), "must not be empty".into());
    }

    let t = &settings.tracing;
    if let Some(url) = &t.otlp_endpoint
        && !(url.starts_with("http://") || url.starts_with("https://"))
    {
        bad(
            "tracing.otlp_endpoint",
            q(url),
            "must be the collector's OTLP/gRPC URL, http://host:4317 or https://host:4317".into(),
        );
    }
    if t.service_name.trim().is_empty() {
        bad("tracing.service_name", q(&t.service_name), "must not be empty".into());
    }
    if !(0.0..=1.0).contains(&t.sample_ratio) {
        bad("tracing.sample_ratio", t.sample_ratio.to_string(), "must be from 0 (no new trace) to 1 (every one)".into());
    }
}

/// `cluster`: the namespace, the membership timings, the addresses and Redis.
fn cluster_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let c = &settings.cluster;
    let braces = c.namespace.matches(['{', '}']).count();
    if c.namespace.is_empty()
        || !c.namespace.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '_' | '-' | '.' | '{' | '}'))
        || (braces > 0 && (braces != 2 || hash_tag(&c.namespace).is_none()))
    {
        bad(
            "cluster.namespace",
            q(&c.namespace),
            "must be non-empty and use only letters, digits, `_`, `-`, `.` and one hash tag in braces ({chitin})".into(),
        );
    } else if braces == 0 && c.redis_url.as_deref().is_some_and(|u| u.starts_with(CLUSTER_SCHEME)) {
        bad(
            "cluster.namespace",
            q(&c.namespace),
            format!(
                "needs a hash tag on Redis Cluster: one claim writes the target's key and the instance's set \
                 together, so every key of the namespace must share a hash slot; write it as \"{{{}}}\"",
                c.namespace
            ),
        );
    }
    let hb = c.heartbeat_interval_secs;
    let hb_rule = seconds(hb, 0.1, "must be at least 0.1 seconds");
    let live = c.liveness_timeout_secs;
    let live_rule = seconds(live, f64::MIN_POSITIVE, "must be a positive number of seconds").or_else(|| {
        (hb_rule.is_none() && live <= 2.0 * hb)
            .then(|| format!("must exceed 2 × cluster.heartbeat_interval_secs ({hb}), i.e. be more than {}", 2.0 * hb))
    });
    if let Some(rule) = hb_rule {
        bad("cluster.heartbeat_interval_secs", hb.to_string(), rule);
    }
    if let Some(rule) = live_rule {
        bad("cluster.liveness_timeout_secs", live.to_string(), rule);
    }
    if c.max_claims_per_instance == 0 {
        bad("cluster.max_claims_per_instance", "0".into(), "must be at least 1".into());
    }
    if let Some(id) = &c.instance_id
        && let Some(why) = crate::names::problem(id)
    {
        bad(
            "cluster.instance_id",
            q(id),
            format!(
                "{why}; the node's name must be 1 to {} bytes without `:`, whitespace or control characters",
                crate::names::MAX_NODE_NAME
            ),
        );
    }
    if c.listen.parse::<SocketAddr>().is_err() {
        bad("cluster.listen", q(&c.listen), "must be an IP:port socket address, e.g. 127.0.0.1:7946".into());
    }
    if let Some(a) = &c.advertise
        && !host_port(a)
    {
        bad("cluster.advertise", q(a), "must be host:port, e.g. 10.0.0.11:7946".into());
    }
    match &c.redis_url {
        Some(u) => {
            if let Err(reason) = RedisTarget::parse(u) {
                bad("cluster.redis_url", q(&redact(u)), reason);
            }
        }
        None if c.enabled => bad("cluster.redis_url", "(unset)".into(), "is required when cluster.enabled = true".into()),
        _ => {}
    }
    if let Some(p) = &c.config_file
        && p.as_os_str().is_empty()
    {
        bad("cluster.config_file", q(""), "must not be empty when set".into());
    }
}

/// The database URL and the CA files of the database and Redis.
fn store_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let c = &settings.cluster;
    match &settings.database.url {
        Some(u) => match database_scheme(u) {
            None => bad("database.url", q(&redact(u)), "must be a postgres://, mysql://, mariadb:// or sqlite: URL".into()),
            Some(false) if c.enabled => bad(
                "database.url",
                q(&redact(u)),
                "must be a PostgreSQL or MySQL/MariaDB URL when cluster.enabled = true: every node \
                 shares the database, and SQLite is for standalone mode"
                    .into(),
            ),
            Some(_) => {}
        },
        None if c.enabled => bad(
            "database.url",
            "(unset)".into(),
            "is required when cluster.enabled = true (a PostgreSQL or MySQL database shared by every node)".into(),
        ),
        None => {}
    }

    if let Some(ca) = &c.redis_ca_file {
        if ca.as_os_str().is_empty() {
            bad("cluster.redis_ca_file", q(""), "must not be empty when set".into());
        } else if !c.redis_url.as_deref().is_some_and(|u| u.starts_with("rediss://")) {
            bad(
                "cluster.redis_ca_file",
                q(&ca.display().to_string()),
                "needs a TLS Redis URL: set cluster.redis_url to rediss://host:port, or unset cluster.redis_ca_file".into(),
            );
        }
    }
    if let Some(ca) = &settings.database.ca_file {
        let url = settings.database.url.as_deref().unwrap_or("sqlite:");
        if let Some(rule) = database_ca_rule(ca, url) {
            bad("database.ca_file", q(&ca.display().to_string()), rule);
        }
    }
}

/// `leases`: the TTL and the timings that must fit inside it.
fn lease_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let l = &settings.leases;
    let ttl = l.ttl();
    let ttl_rule = seconds(ttl, 1.0, "must be at least 1 second");
    let r = l.renew_interval();
    let renew_rule = seconds(r, 0.05, "must be at least 0.05 seconds").or_else(|| {
        (ttl_rule.is_none() && r >= ttl / 2.0).then(|| {
            format!(
                "must be less than half of leases.ttl_secs ({ttl}), i.e. below {}, so that two renewals fit \
                 in a lease's lifetime",
                ttl / 2.0
            )
        })
    });
    let ttl_valid = ttl_rule.is_none();
    if let Some(rule) = ttl_rule {
        bad("leases.ttl_secs", ttl.to_string(), rule);
    }
    let renew_valid = renew_rule.is_none();
    if let Some(rule) = renew_rule {
        bad("leases.renew_interval_secs", r.to_string(), rule);
    }
    if let Some(ms) = l.release_timeout_ms.filter(|ms| renew_valid && *ms as f64 >= r * 1000.0) {
        bad(
            "leases.release_timeout_ms",
            ms.to_string(),
            format!("must be less than leases.renew_interval_secs ({r} s): a lease round waits for the application's RELEASED"),
        );
    }
    if let Some(ms) = l.ready_timeout_ms.filter(|ms| ttl_valid && *ms as f64 >= ttl * 500.0) {
        bad(
            "leases.ready_timeout_ms",
            ms.to_string(),
            format!(
                "must be less than half of leases.ttl_secs ({ttl} s), i.e. below {} ms: writes to a shard just taken wait \
                 for the application's READY at most this long, and half the lease must be left to serve them",
                ttl * 500.0
            ),
        );
    }
    let handoffs = l.max_handoffs_per_round;
    if handoffs == 0 {
        bad("leases.max_handoffs_per_round", "0".into(), "must be at least 1".into());
    } else if handoffs > MAX_HANDOFFS_PER_ROUND {
        bad("leases.max_handoffs_per_round", handoffs.to_string(), format!("must be at most {MAX_HANDOFFS_PER_ROUND}"));
    }
}

/// The database pool and the listeners' `limits`.
fn limit_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let db = &settings.database;
    if db.max_connections == 0 || db.max_connections > 1_000 {
        bad("database.max_connections", db.max_connections.to_string(), "must be between 1 and 1000".into());
    }
    if let Some(rule) = seconds(db.acquire_timeout_secs, 0.1, "must be at least 0.1 seconds") {
        bad("database.acquire_timeout_secs", db.acquire_timeout_secs.to_string(), rule);
    }
    let lim = &settings.limits;
    for (key, n) in
        [("limits.api_max_connections", lim.api_max_connections), ("limits.metrics_max_connections", lim.metrics_max_connections)]
    {
        if n == 0 {
            bad(key, "0".into(), "must be at least 1: a listener that takes no connection serves nothing".into());
        }
    }
    if lim.max_streams_per_connection == 0 {
        bad("limits.max_streams_per_connection", "0".into(), "must be at least 1".into());
    }
    for (key, secs, min) in [
        ("limits.handshake_timeout_secs", lim.handshake_timeout_secs, 0.1),
        ("limits.idle_timeout_secs", lim.idle_timeout_secs, 1.0),
        ("limits.request_timeout_secs", lim.request_timeout_secs, 1.0),
    ] {
        let unit = if min == 1.0 { "second" } else { "seconds" };
        if let Some(rule) = seconds(secs, min, &format!("must be at least {min} {unit}")) {
            bad(key, secs.to_string(), rule);
        }
    }
}

/// The listen addresses, and what each exposes without a guard.
fn listener_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    for (key, listen, example) in
        [("api.listen", &settings.api.listen, "127.0.0.1:50051"), ("metrics.listen", &settings.metrics.listen, "127.0.0.1:9090")]
    {
        if listen.parse::<SocketAddr>().is_err() {
            bad(key, q(listen), format!("must be an IP:port socket address, e.g. {example}"));
        }
    }
    for unguarded in exposure::refused(settings) {
        bad(unguarded.key, q(&unguarded.listen), unguarded.rule());
    }
}

/// The tokens of every plane: well-formed, one source each, none shared.
fn token_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let tokens = [
        ("metrics.auth_token", &settings.metrics.auth_token, &settings.metrics.auth_token_file),
        ("api.admin_token", &settings.api.admin_token, &settings.api.admin_token_file),
        ("api.client_token", &settings.api.client_token, &settings.api.client_token_file),
        ("cluster.peer_token", &settings.cluster.peer_token, &settings.cluster.peer_token_file),
    ];
    for (key, token, file) in tokens {
        // A token is a secret: a refusal never shows it.
        if let Some(t) = token
            && (t.all().is_empty() || !t.all().iter().all(|t| well_formed(t)))
        {
            bad(
                key,
                "(hidden)".into(),
                format!(
                    "must be a token, or a list of tokens while one is rotated, each printable ASCII without spaces and \
                     at least {} characters (unset it to disable auth)",
                    crate::redact::MIN_SECRET
                ),
            );
        }
        if let Some(f) = file {
            let file_key = format!("{key}_file");
            if f.as_os_str().is_empty() {
                bad(&file_key, q(""), "must not be empty when set".into());
            } else if token.is_some() {
                bad(&file_key, q(&f.display().to_string()), format!("set either {key} or {file_key}, not both"));
            }
        }
    }
    // Every token of a plane against every token of the planes before it.
    let named: Vec<(&str, &String)> =
        tokens.iter().flat_map(|(k, t, _)| t.iter().flat_map(|t| t.all()).map(|t| (*k, t))).collect();
    for (i, (key, token)) in named.iter().enumerate() {
        if let Some((first, _)) = named[..i].iter().find(|(k, t)| k != key && t == token) {
            bad(key, "(hidden)".into(), format!("must differ from {first}: each plane needs its own token"));
        }
    }
}

/// `policies`.
fn policy_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let p = &settings.policies;
    // The policy host checks these again when it loads; refused here too so
    // that a typo stops the node with its key, like every other setting.
    for (key, v, max) in
        [("policies.deadline_ms", p.deadline_ms, 60_000), ("policies.memory_limit_mib", p.memory_limit_mib, 4096)]
    {
        if !(1..=max).contains(&v) {
            bad(key, v.to_string(), format!("must be between 1 and {max}"));
        }
    }
    for (key, v) in [
        ("policies.instance_id", &p.instance_id),
        ("policies.placement", &p.placement),
        ("policies.split", &p.split),
        ("policies.drain", &p.drain),
    ] {
        if v.trim().is_empty() {
            bad(key, q(v), "must be \"default\" or the path of a policy component".into());
        }
    }
    for name in &p.instance_id_env {
        if let Some(why) = super::invalid_var_reason(name) {
            bad("policies.instance_id_env", q(name), format!("{why}: each entry names an environment variable"));
        }
    }
}

/// The TLS modes of a database URL that verify the server's certificate.
const VERIFYING_SSL_MODES: &[&str] = &["verify-ca", "verify-full", "verify_ca", "verify_identity"];

/// The rule `database.ca_file` = `ca` breaks with `database.url` = `url`.
fn database_ca_rule(ca: &std::path::Path, url: &str) -> Option<String> {
    if ca.as_os_str().is_empty() {
        return Some("must not be empty when set".into());
    }
    if database_scheme(url) == Some(false) {
        return Some("is for a PostgreSQL or MySQL/MariaDB server; SQLite is a local file and has no TLS".into());
    }
    if super::types::database_url_has_ca(url) {
        return Some("the database.url names a CA file (sslrootcert or ssl-ca) too: set one of the two".into());
    }
    match super::types::database_ssl_mode(url) {
        Some(mode) if !VERIFYING_SSL_MODES.iter().any(|m| mode.eq_ignore_ascii_case(m)) => Some(format!(
            "the database.url's TLS mode `{mode}` does not verify the server against this CA: remove the mode from \
             the URL (verify-full / VERIFY_IDENTITY is then used) or name a verifying one"
        )),
        _ => None,
    }
}

/// The rules of `[tls]`: which keys go together. The files themselves are
/// read at start (`security::tls`), where a missing or malformed one is
/// refused naming its key.
fn tls_rules(settings: &Settings, bad: &mut impl FnMut(&str, String, String)) {
    let t = &settings.tls;
    let q = |p: &std::path::Path| format!("{:?}", p.display().to_string());
    let files = [
        ("tls.cert_file", &t.cert_file),
        ("tls.key_file", &t.key_file),
        ("tls.client_ca_file", &t.client_ca_file),
        ("tls.peer_ca_file", &t.peer_ca_file),
    ];
    for (key, file) in files {
        if let Some(f) = file
            && f.as_os_str().is_empty()
        {
            bad(key, q(f), "must not be empty when set".into());
        }
    }
    match (&t.cert_file, &t.key_file) {
        (Some(_), None) => {
            bad("tls.key_file", "(unset)".into(), "is required with tls.cert_file: the certificate's private key".into())
        }
        (None, Some(k)) => bad(
            "tls.cert_file",
            "(unset)".into(),
            format!("is required with tls.key_file = {}: the certificate of that key", q(k)),
        ),
        _ => {}
    }
    if t.cert_file.is_none() {
        for (key, file) in &files[2..] {
            if let Some(f) = file {
                bad(key, q(f), "needs tls.cert_file and tls.key_file: TLS is off without the node's own certificate".into());
            }
        }
    } else if settings.cluster.enabled && t.peer_ca_file.is_none() {
        bad(
            "tls.peer_ca_file",
            "(unset)".into(),
            "is required when cluster.enabled = true and [tls] is on: the nodes call each other over TLS and verify \
             each other's certificates against this CA"
                .into(),
        );
    }
}

/// The rule a duration of `secs` seconds breaks, if any: at least `min`
/// (NaN never is; `too_small` says so), at most [`MAX_SECS`].
// `!(secs >= min)` is meant: it is true for NaN too.
#[allow(clippy::neg_cmp_op_on_partial_ord)]
fn seconds(secs: f64, min: f64, too_small: &str) -> Option<String> {
    if !(secs >= min) {
        Some(too_small.to_owned())
    } else if secs > MAX_SECS {
        Some(format!("must be at most {MAX_SECS} seconds (one day)"))
    } else {
        None
    }
}

/// Whether cluster mode may use the database at `url`; `None` when the
/// scheme is not one chitin speaks.
fn database_scheme(url: &str) -> Option<bool> {
    let (scheme, _) = url.split_once(':')?;
    let scheme = scheme.to_ascii_lowercase();
    DATABASE_SCHEMES.iter().find(|(s, _)| *s == scheme).map(|&(_, cluster)| cluster)
}

/// `host:port` with a non-empty host and a numeric port (`[v6]:port` allowed).
fn host_port(s: &str) -> bool {
    if s.parse::<SocketAddr>().is_ok() {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !host.contains(':') && !host.contains(char::is_whitespace) && port.parse::<u16>().is_ok()
        }
        None => false,
    }
}

/// A value with its secrets masked ([`crate::redact::redact`]).
pub(super) fn redact(text: &str) -> String {
    crate::redact::redact(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instance_id_env_names_variables() {
        let load = |v: &str| crate::settings::Settings::load(None, [("CHITIN__POLICIES__INSTANCE_ID_ENV", v)]);
        let ok = load(r#"["RACK", "ZONE_ID"]"#).unwrap();
        assert_eq!(ok.policies.instance_id_env, ["RACK", "ZONE_ID"]);
        let err = load(r#"["RACK-ID"]"#).unwrap_err().to_string();
        assert!(err.contains("policies.instance_id_env") && err.contains("RACK-ID") && err.contains("letters, digits"), "{err}");
    }

    #[test]
    fn seconds_between_the_minimum_and_a_day() {
        const SMALL: &str = "too small";
        const LONG: &str = "must be at most 86400 seconds (one day)";
        let cases: &[(f64, f64, Option<&str>)] = &[
            (1.0, 1.0, None),
            (0.5, 1.0, Some(SMALL)),
            (0.05, 0.05, None),
            (0.04, 0.05, Some(SMALL)),
            (-3.0, 0.05, Some(SMALL)),
            (f64::NAN, 0.1, Some(SMALL)),
            (0.0, f64::MIN_POSITIVE, Some(SMALL)),
            (MAX_SECS, 1.0, None),
            (MAX_SECS + 1.0, 1.0, Some(LONG)),
            (1e20, 1.0, Some(LONG)),
            (f64::INFINITY, 1.0, Some(LONG)),
        ];
        for &(secs, min, want) in cases {
            assert_eq!(seconds(secs, min, SMALL).as_deref(), want, "{secs} (min {min})");
        }
    }

    #[test]
    fn database_schemes() {
        let cases = [
            ("postgres://u@h/db", Some(true)),
            ("PostgreSQL://u@h/db", Some(true)),
            ("mysql://root@h/db", Some(true)),
            ("mariadb://root@h/db", Some(true)),
            ("sqlite:///tmp/x.db", Some(false)),
            ("sqlite:x.db", Some(false)),
            ("oracle://u@h/db", None),
            ("postgres", None),
            ("", None),
        ];
        for (url, want) in cases {
            assert_eq!(database_scheme(url), want, "{url}");
        }
    }

    #[test]
    fn host_and_port() {
        let cases = [
            ("10.0.0.11:7946", true),
            ("[::1]:7946", true),
            ("node-01.internal:7946", true),
            ("no-port", false),
            (":7946", false),
            ("host:port", false),
            ("a b:1", false),
            ("::1:7946", false),
        ];
        for (s, want) in cases {
            assert_eq!(host_port(s), want, "{s}");
        }
    }

    #[test]
    fn a_database_ca_needs_a_server_and_a_verifying_mode() {
        let ca = std::path::Path::new("/etc/chitin/db-ca.pem");
        let cases = [
            ("postgres://u@h/db", None),
            ("postgres://u@h/db?sslmode=verify-full", None),
            ("mysql://root@h/db?ssl-mode=VERIFY_IDENTITY", None),
            ("mariadb://root@h/db?ssl-mode=verify_ca", None),
            ("postgres://u@h/db?sslmode=require", Some("TLS mode `require` does not verify")),
            ("mysql://root@h/db?ssl-mode=PREFERRED", Some("TLS mode `PREFERRED` does not verify")),
            ("postgres://u@h/db?sslrootcert=/x.pem", Some("names a CA file")),
            ("sqlite:///tmp/x.db", Some("SQLite is a local file")),
        ];
        for (url, want) in cases {
            let got = database_ca_rule(ca, url);
            match want {
                None => assert_eq!(got, None, "{url}"),
                Some(w) => assert!(got.as_deref().is_some_and(|g| g.contains(w)), "{url}: {got:?}"),
            }
        }
    }

    #[test]
    fn a_database_ca_becomes_url_parameters() {
        use crate::settings::types::with_database_ca;
        let ca = std::path::Path::new("/etc/chitin/my ca.pem");
        assert_eq!(
            with_database_ca("postgres://u@h/db", ca),
            "postgres://u@h/db?sslrootcert=/etc/chitin/my%20ca.pem&sslmode=verify-full"
        );
        assert_eq!(
            with_database_ca("mysql://root@h/db?x=1", ca),
            "mysql://root@h/db?x=1&ssl-ca=/etc/chitin/my%20ca.pem&ssl-mode=VERIFY_IDENTITY"
        );
        assert_eq!(
            with_database_ca("postgres://u@h/db?sslmode=verify-ca", ca),
            "postgres://u@h/db?sslmode=verify-ca&sslrootcert=/etc/chitin/my%20ca.pem"
        );
        // The drivers read them back as verifying modes with that CA.
        use std::str::FromStr;
        let pg = sqlx::postgres::PgConnectOptions::from_str(&with_database_ca("postgres://u@h/db", ca)).unwrap();
        assert!(matches!(pg.get_ssl_mode(), sqlx::postgres::PgSslMode::VerifyFull));
        let my = sqlx::mysql::MySqlConnectOptions::from_str(&with_database_ca("mysql://root@h/db", ca)).unwrap();
        assert!(format!("{my:?}").contains("VerifyIdentity") && format!("{my:?}").contains("my ca.pem"), "{my:?}");
    }

    #[test]
    fn passwords_are_masked() {
        let cases = [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("redis://h:6379", "redis://h:6379"),
            ("redis://u@h", "redis://u@h"),
            ("plain text", "plain text"),
        ];
        for (url, want) in cases {
            assert_eq!(redact(url), want, "{url}");
        }
    }
}
