//! Settings: `chitin.toml` text plus an environment map, as pure functions
//! (the real process environment is never read here).

use std::path::{Path, PathBuf};
use std::time::Duration;

use chitin::settings::{Problem, Settings, SettingsError};

const NO_ENV: [(&str, &str); 0] = [];

fn load(text: &str, env: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    Settings::from_toml(text, "chitin.toml", env.iter().copied())
}

fn problems(text: &str, env: &[(&str, &str)]) -> Vec<Problem> {
    match load(text, env) {
        Err(SettingsError::Invalid(p)) => p,
        other => panic!("expected invalid settings, got {other:?}"),
    }
}

fn bad_value(text: &str, env: &[(&str, &str)], key: &str) -> (String, String, String) {
    let p = problems(text, env);
    for problem in &p {
        if let Problem::Refused { key: k, value, rule, origin } = problem
            && k == key
        {
            return (value.clone(), rule.clone(), origin.clone());
        }
    }
    panic!("no problem with {key} in {p:?}");
}

#[test]
fn defaults() {
    let s = Settings::from_toml("", "chitin.toml", NO_ENV).unwrap();
    assert_eq!(s, Settings::default());
    assert_eq!(s.node.data_dir, PathBuf::from("./chitin-data"));
    assert!(!s.cluster.enabled);
    assert_eq!(s.cluster.namespace, "chitin");
    assert_eq!(s.heartbeat_interval(), Duration::from_secs(10));
    assert_eq!(s.liveness_timeout(), Duration::from_secs(30));
    assert_eq!(s.cluster.instance_id, None);
    assert_eq!(s.cluster.config_file, None);
    // A new cluster's timing, left to the cluster (an existing one keeps its own).
    assert!(s.leases.timing_unset());
    assert_eq!(s.lease_ttl(), Duration::from_secs(2));
    assert_eq!(s.renew_interval(), Duration::from_millis(500));
    assert_eq!(s.leases.max_handoffs_per_round, 4);
    // Loopback only: a default node is reachable from this host alone.
    assert_eq!(s.api.listen, "127.0.0.1:50051");
    assert_eq!(s.metrics.listen, "127.0.0.1:9090");
    assert_eq!(s.cluster.listen, "127.0.0.1:7946");
    assert!(!s.api.insecure_listen);
    assert_eq!((s.api.admin_token.as_ref(), s.api.client_token.as_ref(), s.cluster.peer_token.as_ref()), (None, None, None));
    assert_eq!(s.metrics.auth_token, None);
    assert_eq!(s.policies.instance_id, "default");
    assert_eq!(s.policies.placement, "default");
    assert_eq!(s.policies.split, "default");
    assert_eq!(s.policies.drain, "default");
    assert_eq!(s.database_url(), "sqlite://./chitin-data/chitin.db");
    s.validate().unwrap();
    // No file at all is the same.
    assert_eq!(Settings::load(None, NO_ENV).unwrap(), Settings::default());
}

const FULL: &str = r#"
[node]
data_dir = "/var/lib/chitin"

[cluster]
enabled = true
redis_url = "redis://127.0.0.1:6379/0"
namespace = "prod"
heartbeat_interval_secs = 0.5
liveness_timeout_secs = 1.5
instance_id = "node-01"
listen = "0.0.0.0:7946"
advertise = "node-01.internal:7946"
config_file = "/etc/chitin/cluster_config.json"

[database]
url = "postgres://chitin@db/chitin"

[leases]
ttl_secs = 3
renew_interval_secs = 1
max_handoffs_per_round = 2

[api]
listen = "127.0.0.1:50051"

[metrics]
listen = "127.0.0.1:9090"
auth_token = "s3cret"

[policies]
instance-id = "default"
placement = "/etc/chitin/placement.wasm"
split = "default"
drain = "default"
"#;

#[test]
fn full_file() {
    let s = load(FULL, &[]).unwrap();
    assert_eq!(s.node.data_dir, PathBuf::from("/var/lib/chitin"));
    assert!(s.cluster.enabled);
    assert_eq!(s.cluster.redis_url.as_deref(), Some("redis://127.0.0.1:6379/0"));
    assert_eq!(s.heartbeat_interval(), Duration::from_millis(500));
    assert_eq!(s.liveness_timeout(), Duration::from_millis(1500));
    assert_eq!(s.cluster.instance_id.as_deref(), Some("node-01"));
    assert_eq!(s.cluster.advertise.as_deref(), Some("node-01.internal:7946"));
    assert_eq!(s.cluster.config_file, Some(PathBuf::from("/etc/chitin/cluster_config.json")));
    assert_eq!(s.database_url(), "postgres://chitin@db/chitin");
    assert_eq!(s.lease_ttl(), Duration::from_secs(3));
    assert_eq!(s.renew_interval(), Duration::from_secs(1));
    assert_eq!(s.leases.max_handoffs_per_round, 2);
    assert_eq!(s.metrics.auth_token, Some("s3cret".into()));
    assert_eq!(s.policies.placement, "/etc/chitin/placement.wasm");
}

#[test]
fn every_field_round_trips() {
    // Serialising a fully set value and loading it back accepts every key.
    let s = load(FULL, &[]).unwrap();
    let text = toml::to_string(&s).unwrap();
    assert_eq!(load(&text, &[]).unwrap(), s);
}

#[test]
fn environment_overrides() {
    let env = [
        ("CHITIN__LEASES__TTL_SECS", "3"),
        ("CHITIN__LEASES__RENEW_INTERVAL_SECS", "1"),
        ("CHITIN__CLUSTER__INSTANCE_ID", "node-07"),
        ("CHITIN__CLUSTER__ENABLED", "true"),
        ("CHITIN__CLUSTER__REDIS_URL", "redis://r:6379"),
        ("CHITIN__DATABASE__URL", "mysql://root@127.0.0.1/test"),
        ("CHITIN__POLICIES__INSTANCE_ID", "/plugins/name.wasm"),
        ("CHITIN__LEASES__MAX_HANDOFFS_PER_ROUND", "8"),
        ("CHITIN__NODE__DATA_DIR", "/tmp/d"),
        // Not ours: ignored.
        ("PATH", "/usr/bin"),
        ("CHITIN_TEST_POSTGRES_URL", "x"),
    ];
    let text = "[leases]\nttl_secs = 15\n[policies]\ninstance-id = \"default\"\n";
    let s = load(text, &env).unwrap();
    assert_eq!(s.lease_ttl(), Duration::from_secs(3));
    assert_eq!(s.renew_interval(), Duration::from_secs(1));
    assert_eq!(s.cluster.instance_id.as_deref(), Some("node-07"));
    assert!(s.cluster.enabled);
    assert_eq!(s.database_url(), "mysql://root@127.0.0.1/test");
    assert_eq!(s.policies.instance_id, "/plugins/name.wasm");
    assert_eq!(s.leases.max_handoffs_per_round, 8);
    assert_eq!(s.node.data_dir, PathBuf::from("/tmp/d"));
    assert_eq!(Settings::default().database_url(), "sqlite://./chitin-data/chitin.db");
}

#[test]
fn empty_environment_value_resets_a_key_to_its_default() {
    let s = load(
        "[cluster]\ninstance_id = \"a\"\nnamespace = \"prod\"\n[policies]\ninstance-id = \"x.wasm\"\n",
        &[("CHITIN__CLUSTER__INSTANCE_ID", ""), ("CHITIN__CLUSTER__NAMESPACE", ""), ("CHITIN__POLICIES__INSTANCE_ID", "")],
    )
    .unwrap();
    assert_eq!(s.cluster.instance_id, None);
    assert_eq!(s.cluster.namespace, "chitin");
    assert_eq!(s.policies.instance_id, "default");
    // The section is still checked.
    let p = problems("", &[("CHITIN__NOPE__X", "")]);
    assert_eq!(p.iter().map(Problem::key).collect::<Vec<_>>(), ["nope.x"], "{p:?}");
}

#[test]
fn environment_values_fall_back_to_strings() {
    let s = load(
        "",
        &[
            // TOML would read these as a number and a date: the keys take strings.
            ("CHITIN__CLUSTER__INSTANCE_ID", "007"),
            ("CHITIN__CLUSTER__NAMESPACE", "2026-01-01"),
            ("CHITIN__API__ADMIN_TOKEN", "12345"),
            // Quoted is a TOML string too.
            ("CHITIN__METRICS__AUTH_TOKEN", "\"s3cret\""),
        ],
    )
    .unwrap();
    assert_eq!(s.cluster.instance_id.as_deref(), Some("007"));
    assert_eq!(s.cluster.namespace, "2026-01-01");
    assert_eq!(s.api.admin_token, Some("12345".into()));
    assert_eq!(s.metrics.auth_token, Some("s3cret".into()));
}

#[test]
fn unknown_keys_are_refused_by_name() {
    for (text, key, known) in [
        ("[cluster]\nenabeld = true\n", "cluster.enabeld", "`enabled`"),
        ("[clutser]\nenabled = true\n", "clutser", "`cluster`"),
        ("top_level = 1\n", "top_level", "`node`"),
        ("[policies]\nsharding = \"default\"\n", "policies.sharding", "`placement`"),
    ] {
        let p = problems(text, &[]);
        assert!(
            matches!(&p[..], [Problem::Refused { key: k, rule, .. }]
                if k == key && rule.starts_with("unknown field") && rule.contains(known)),
            "{text}: {p:?}"
        );
    }
    let text = load("[leases]\nttl = 3\n", &[]).unwrap_err().to_string();
    assert!(text.contains("`leases.ttl` = 3") && text.contains("unknown field `ttl`") && text.contains("ttl_secs"), "{text}");
}

#[test]
fn unknown_environment_variables_are_refused_by_name() {
    for var in ["CHITIN__LEASES__TTL", "CHITIN__LEASE__TTL_SECS", "CHITIN__LEASES", "CHITIN__A__B__C"] {
        let p = problems("", &[(var, "2")]);
        assert_eq!(p.len(), 1, "{var}: {p:?}");
        let text = SettingsError::Invalid(p).to_string();
        assert!(text.contains(var), "{text}");
    }
}

#[test]
fn bad_values_name_key_value_and_rule() {
    let (value, rule, origin) = bad_value("[leases]\nttl_secs = 0.5\nrenew_interval_secs = 0.1\n", &[], "leases.ttl_secs");
    assert_eq!(value, "0.5");
    assert!(rule.contains("at least 1 second"), "{rule}");
    assert!(origin.contains("chitin.toml"), "{origin}");

    let (value, rule, _) = bad_value("[leases]\nrenew_interval_secs = 8\n", &[], "leases.renew_interval_secs");
    assert_eq!(value, "8");
    assert!(rule.contains("less than half of leases.ttl_secs (2)"), "{rule}");
    // Exactly half is refused too.
    bad_value("[leases]\nttl_secs = 2\nrenew_interval_secs = 1\n", &[], "leases.renew_interval_secs");

    let (value, rule, _) = bad_value("[cluster]\nliveness_timeout_secs = 20\n", &[], "cluster.liveness_timeout_secs");
    assert_eq!(value, "20");
    assert!(rule.contains("exceed 2 × cluster.heartbeat_interval_secs (10)"), "{rule}");
    bad_value("[cluster]\nheartbeat_interval_secs = 5\nliveness_timeout_secs = 10\n", &[], "cluster.liveness_timeout_secs");
    load("[cluster]\nheartbeat_interval_secs = 5\nliveness_timeout_secs = 10.5\n", &[]).unwrap();

    let (value, rule, _) = bad_value("[leases]\nttl_secs = \"fifteen\"\n", &[], "leases.ttl_secs");
    assert_eq!(value, "\"fifteen\"");
    assert!(rule.contains("number of seconds"), "{rule}");

    let (value, rule, origin) = bad_value("", &[("CHITIN__LEASES__TTL_SECS", "abc")], "leases.ttl_secs");
    assert_eq!(value, "\"abc\"");
    assert!(rule.contains("number of seconds"));
    assert!(origin.contains("CHITIN__LEASES__TTL_SECS"), "{origin}");

    let (_, _, origin) = bad_value("", &[("CHITIN__LEASES__TTL_SECS", "0.2")], "leases.ttl_secs");
    assert!(origin.contains("CHITIN__LEASES__TTL_SECS"), "{origin}");

    bad_value("", &[("CHITIN__CLUSTER__ENABLED", "maybe")], "cluster.enabled");
    bad_value("[leases]\nmax_handoffs_per_round = 0\n", &[], "leases.max_handoffs_per_round");
    bad_value("[leases]\nmax_handoffs_per_round = -1\n", &[], "leases.max_handoffs_per_round");
    bad_value("[leases]\nmax_handoffs_per_round = 1.5\n", &[], "leases.max_handoffs_per_round");
    bad_value("[api]\nlisten = \"localhost\"\n", &[], "api.listen");
    bad_value("[metrics]\nlisten = \"0.0.0.0\"\n", &[], "metrics.listen");
    bad_value("[metrics]\nauth_token = \"\"\n", &[], "metrics.auth_token");
    bad_value("[cluster]\nlisten = \"x\"\n", &[], "cluster.listen");
    bad_value("[cluster]\nadvertise = \"no-port\"\n", &[], "cluster.advertise");
    load("[cluster]\nadvertise = \"[::1]:7946\"\n", &[]).unwrap();
    let (value, _, _) = bad_value("[cluster]\ninstance_id = \"a:b\"\n", &[], "cluster.instance_id");
    assert_eq!(value, "\"a:b\"");
    bad_value("[cluster]\ninstance_id = \"\"\n", &[], "cluster.instance_id");
    bad_value("[cluster]\nnamespace = \"a:b\"\n", &[], "cluster.namespace");
    bad_value("[cluster]\nheartbeat_interval_secs = 0\n", &[], "cluster.heartbeat_interval_secs");
    bad_value("[database]\nurl = \"http://db\"\n", &[], "database.url");
    bad_value("[policies]\ndrain = \"\"\n", &[], "policies.drain");
    bad_value("[node]\ndata_dir = \"\"\n", &[], "node.data_dir");
    bad_value("cluster = 5\n", &[], "cluster");
    bad_value("[cluster]\nenabled = \"yes\"\n", &[], "cluster.enabled");
}

#[test]
fn cluster_mode_needs_redis_and_database() {
    let p = problems("[cluster]\nenabled = true\n", &[]);
    let keys: Vec<&str> = p.iter().map(Problem::key).collect();
    assert_eq!(keys, vec!["cluster.redis_url", "database.url"], "{p:?}");
    let (value, rule, _) = bad_value("[cluster]\nredis_url = \"http://u:pw@h\"\n", &[], "cluster.redis_url");
    assert!(!value.contains("pw"), "passwords are not echoed: {value}");
    assert!(rule.contains("redis://"));
    let (value, _, _) = bad_value("[database]\nurl = \"oracle://u:pw@h/db\"\n", &[], "database.url");
    assert!(!value.contains("pw"), "{value}");
}

#[test]
fn every_problem_is_reported_at_once() {
    let p = problems("[leases]\nttl_secs = 0\nbogus = 1\n[api]\nlisten = \"x\"\n", &[("CHITIN__NOPE__X", "1")]);
    let keys: Vec<&str> = p.iter().map(Problem::key).collect();
    assert!(keys.contains(&"leases.bogus") && keys.contains(&"nope.x"), "{keys:?}");
    let text = SettingsError::Invalid(p).to_string();
    assert!(text.contains("environment variable CHITIN__NOPE__X"), "{text}");
    // Unknown keys stop before value rules, so fix those first; value rules all at once:
    let p = problems("[leases]\nttl_secs = 0\n[api]\nlisten = \"x\"\n[metrics]\nlisten = \"y\"\n", &[]);
    let keys: Vec<&str> = p.iter().map(Problem::key).collect();
    assert_eq!(keys, vec!["leases.ttl_secs", "api.listen", "metrics.listen"]);
    let text = SettingsError::Invalid(p).to_string();
    assert!(text.contains("`api.listen` = \"x\""), "{text}");
}

#[test]
fn syntax_errors_and_files() {
    assert!(matches!(load("[leases\n", &[]), Err(SettingsError::Syntax { .. })));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chitin.toml");
    std::fs::write(&path, "[leases]\nttl_secs = 4\nrenew_interval_secs = 1.5\n").unwrap();
    let s = Settings::load(Some(&path), [("CHITIN__LEASES__RENEW_INTERVAL_SECS", "1")]).unwrap();
    assert_eq!(s.lease_ttl(), Duration::from_secs(4));
    assert_eq!(s.renew_interval(), Duration::from_secs(1));
    let missing = dir.path().join("missing.toml");
    let e = Settings::load(Some(&missing), NO_ENV).unwrap_err();
    assert!(matches!(e, SettingsError::Read { .. }) && e.to_string().contains("missing.toml"), "{e}");
    // The file's name appears in messages about its values.
    std::fs::write(&path, "[leases]\nttl_secs = 0\n").unwrap();
    let e = Settings::load(Some(&path), NO_ENV).unwrap_err().to_string();
    assert!(e.contains("chitin.toml"), "{e}");
}

#[test]
fn a_reachable_listener_needs_a_token_on_every_plane_or_insecure_listen() {
    let exposed = "[api]\nlisten = \"0.0.0.0:50051\"\n";
    let (value, rule, _) = bad_value(exposed, &[], "api.listen");
    assert_eq!(value, "\"0.0.0.0:50051\"");
    assert!(rule.contains("set api.admin_token and api.client_token"), "{rule}");
    assert!(rule.contains("api.insecure_listen = true"), "{rule}");
    // Every plane with a token (inline or as a file): accepted.
    let guarded = format!("{exposed}admin_token = \"adm-1\"\nclient_token_file = \"/run/secrets/client\"\n");
    load(&guarded, &[]).unwrap();
    // Cluster mode has a third plane.
    let cluster =
        format!("{guarded}[cluster]\nenabled = true\nredis_url = \"redis://r\"\n[database]\nurl = \"postgres://h/db\"\n");
    let (_, rule, _) = bad_value(&cluster, &[], "api.listen");
    assert!(rule.contains("set cluster.peer_token"), "{rule}");
    load(&cluster, &[("CHITIN__CLUSTER__PEER_TOKEN", "peer-1")]).unwrap();
    // The operator may say so in so many words.
    let s = load(exposed, &[("CHITIN__API__INSECURE_LISTEN", "true")]).unwrap();
    assert!(s.api.insecure_listen);
    assert!(chitin::security::exposure::insecure(&s));
    // Loopback in any spelling needs nothing.
    load("[api]\nlisten = \"[::1]:50051\"\n[metrics]\nlisten = \"127.0.0.2:9090\"\n", &[]).unwrap();
    let (_, rule, _) = bad_value("[metrics]\nlisten = \"0.0.0.0:9090\"\n", &[], "metrics.listen");
    assert!(rule.contains("set metrics.auth_token"), "{rule}");
}

#[test]
fn tokens_are_never_echoed() {
    let text = load(
        "[api]\nclient_token = \"dup-secret\"\n[cluster]\npeer_token = \"dup-secret\"\n[metrics]\nauth_token = \"two words\"\n",
        &[],
    )
    .unwrap_err()
    .to_string();
    assert!(text.contains("`cluster.peer_token` = (hidden)") && text.contains("must differ from api.client_token"), "{text}");
    assert!(text.contains("`metrics.auth_token` = (hidden)"), "{text}");
    assert!(!text.contains("dup-secret") && !text.contains("two words"), "{text}");
}

#[test]
fn policies_accept_both_spellings_of_instance_id() {
    let s = load("[policies]\ninstance_id = \"a.wasm\"\n", &[]).unwrap();
    assert_eq!(s.policies.instance_id, "a.wasm");
    let s = load("[policies]\ninstance-id = \"b.wasm\"\n", &[]).unwrap();
    assert_eq!(s.policies.instance_id, "b.wasm");
    let (_, rule, _) = bad_value("[policies]\ninstance-id = \"a\"\ninstance_id = \"b\"\n", &[], "policies");
    assert!(rule.contains("duplicate field `instance_id`"), "{rule}");
}

/// Every `tests/fixtures/settings/NAME.toml` (with the `VAR=value` lines of
/// `NAME.env`, when there is one) is refused with exactly the text of
/// `NAME.err`. `CHITIN_BLESS=1` writes the `.err` files from the output.
#[test]
fn golden_rejections() {
    let dir = crate::support::repo_root().join("tests/fixtures/settings");
    let bless = std::env::var("CHITIN_BLESS").is_ok_and(|v| v == "1");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut failures = Vec::new();
    let mut cases = 0;
    for path in &files {
        let ext = path.extension().and_then(|e| e.to_str());
        let has = |ext: &str| files.contains(&path.with_extension(ext));
        match ext {
            Some("toml") => {}
            Some("err" | "env") if has("toml") => continue,
            _ => {
                failures.push(format!("{}: not a case (no .toml beside it)", path.display()));
                continue;
            }
        }
        cases += 1;
        let name = path.file_name().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(path).unwrap();
        let env_text = std::fs::read_to_string(path.with_extension("env")).unwrap_or_default();
        let env: Vec<(&str, &str)> = env_text
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| l.split_once('=').expect("NAME.env lines are VAR=value"))
            .collect();
        let got = match Settings::from_toml(&text, name, env) {
            Ok(_) => {
                failures.push(format!("{name}: accepted"));
                continue;
            }
            Err(e) => format!("{e}\n"),
        };
        let err_path = path.with_extension("err");
        if bless {
            std::fs::write(&err_path, &got).unwrap();
            continue;
        }
        match std::fs::read_to_string(&err_path) {
            Ok(want) if want == got => {}
            Ok(want) => failures.push(format!("{name}:\n--- expected\n{want}--- got\n{got}")),
            Err(_) => failures.push(format!("{name}: no .err file; got\n{got}")),
        }
    }
    assert!(cases > 0, "no cases in {}", dir.display());
    assert!(failures.is_empty(), "{}\n(CHITIN_BLESS=1 rewrites the .err files)", failures.join("\n"));
}

#[test]
fn tls_keys_go_together_and_name_what_is_missing() {
    let (_, rule, _) = bad_value("[tls]\ncert_file = \"/etc/chitin/node.pem\"\n", &[], "tls.key_file");
    assert!(rule.contains("required with tls.cert_file"), "{rule}");
    let (_, rule, _) = bad_value("[tls]\nkey_file = \"/etc/chitin/node.key\"\n", &[], "tls.cert_file");
    assert!(rule.contains("required with tls.key_file"), "{rule}");
    let (_, rule, _) = bad_value("[tls]\nclient_ca_file = \"/etc/chitin/clients.pem\"\n", &[], "tls.client_ca_file");
    assert!(rule.contains("needs tls.cert_file and tls.key_file"), "{rule}");
    let cluster = "[cluster]\nenabled = true\nredis_url = \"redis://127.0.0.1:6379\"\n\
                   [database]\nurl = \"postgres://u@h/db\"\n\
                   [tls]\ncert_file = \"/n.pem\"\nkey_file = \"/n.key\"\n";
    let (_, rule, _) = bad_value(cluster, &[], "tls.peer_ca_file");
    assert!(rule.contains("required when cluster.enabled = true"), "{rule}");
    let ok = format!("{cluster}peer_ca_file = \"/ca.pem\"\n");
    let s = load(&ok, &NO_ENV).unwrap();
    assert!(s.tls.enabled() && s.tls.knows_peers() && !s.tls.requires_client_certificates());
    let p = problems("[tls]\ncert = \"/n.pem\"\n", &[]);
    assert_eq!(p[0].key(), "tls.cert", "an unknown key is refused: {p:?}");
    // The environment sets them like any other key.
    let s = load("", &[("CHITIN__TLS__CERT_FILE", "/n.pem"), ("CHITIN__TLS__KEY_FILE", "/n.key")]).unwrap();
    assert_eq!(s.tls.cert_file.as_deref(), Some(Path::new("/n.pem")));
}

#[test]
fn store_cas_need_a_tls_store() {
    let (_, rule, _) = bad_value(
        "[cluster]\nredis_url = \"redis://127.0.0.1:6379\"\nredis_ca_file = \"/ca.pem\"\n",
        &[],
        "cluster.redis_ca_file",
    );
    assert!(rule.contains("rediss://"), "{rule}");
    load("[cluster]\nredis_url = \"rediss://127.0.0.1:6380\"\nredis_ca_file = \"/ca.pem\"\n", &NO_ENV).unwrap();
    let (_, rule, _) = bad_value("[database]\nca_file = \"/ca.pem\"\n", &[], "database.ca_file");
    assert!(rule.contains("SQLite"), "{rule}");
    let s = load("[database]\nurl = \"postgres://u@h/db\"\nca_file = \"/ca.pem\"\n", &NO_ENV).unwrap();
    assert_eq!(s.database_url(), "postgres://u@h/db?sslrootcert=/ca.pem&sslmode=verify-full");
}

/// `chitin settings check` as an operator runs it: every problem a node
/// would refuse at start, without starting one, and exit 1; exit 0 and
/// "ok" for a good file.
#[test]
fn settings_check_reports_every_problem_without_starting_a_node() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let check = |file: &Path| {
        let out = Command::new(crate::support::cluster::CHITIN).args(["settings", "check"]).arg(file).output().unwrap();
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };

    let good = dir.path().join("good.toml");
    std::fs::write(&good, format!("[node]\ndata_dir = \"{}\"\n", dir.path().join("data").display())).unwrap();
    let (code, text) = check(&good);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("ok (standalone node"), "{text}");
    assert!(!dir.path().join("data").exists(), "a check must not create the data dir");

    // Three things no rule of the keys sees: a token file, a certificate, a component, all missing.
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[api]\nadmin_token_file = \"/nonexistent/admin\"\n\n[tls]\ncert_file = \"/nonexistent/node.crt\"\n\
         key_file = \"/nonexistent/node.key\"\n\n[policies]\nplacement = \"/nonexistent/placement.wasm\"\n",
    )
    .unwrap();
    let (code, text) = check(&bad);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("3 problem(s)"), "{text}");
    for says in ["api.admin_token_file", "tls.cert_file", "placement.wasm"] {
        assert!(text.contains(says), "{says} missing from:\n{text}");
    }

    // The keys' own rules: every one at once, as a node prints them.
    let (code, text) = check(Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/settings/listener_limits.toml")));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("limits.api_max_connections") && text.contains("limits.request_timeout_secs"), "{text}");
}
