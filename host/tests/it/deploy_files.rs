//! The files under `deploy/` are checked with the tools operators use:
//! `systemd-analyze`, `kubernetes-validate`, `docker-compose config`,
//! `promtool`; their settings and cluster configs load through chitin's own
//! loaders; the dashboard and the alert rules name only metrics a real node
//! exposes. `scripts/ops-tools` installs a missing tool; a check whose tool
//! cannot be had prints `SKIPPED: …` with the reason.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::cluster::*;
use crate::support::ops::Exposition;
use crate::support::tool;
use chitin::settings::Settings;
use chitin::topology::{self, ClusterConfig};
use serde_json::Value;

fn deploy(rel: &str) -> PathBuf {
    crate::support::repo_root().join("deploy").join(rel)
}

fn run(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

/// Every YAML document of `path` as JSON, through Python's yaml module (no
/// YAML parser in the build); `None`, with the reason printed, without it.
fn yaml_documents(path: &Path) -> Option<Vec<Value>> {
    let script = "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))";
    match Command::new("python3").args(["-c", script]).arg(path).output() {
        Ok(out) if out.status.success() => Some(serde_json::from_slice(&out.stdout).expect("JSON from python")),
        Ok(out) => {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("No module named"), "{} does not parse as YAML: {err}", path.display());
            eprintln!("SKIPPED: no Python yaml module to read {}: {err}", path.display());
            None
        }
        Err(e) => {
            eprintln!("SKIPPED: no python3 to read {}: {e}", path.display());
            None
        }
    }
}

/// Loads a settings file as `chitin node --settings` does, with `env`.
fn load_settings(path: &Path, env: &[(&str, &str)]) -> Settings {
    Settings::load(Some(path), env.iter().copied()).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Loads and validates a cluster config as a node does.
fn load_config(path: &Path) -> ClusterConfig {
    let config = topology::file::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let violations = topology::validate(&config);
    assert!(violations.is_empty(), "{}: {violations:?}", path.display());
    config
}

fn node_ids(config: &ClusterConfig) -> Vec<String> {
    config.nodes.iter().map(|n| n.id.clone()).collect()
}

#[test]
fn every_settings_file_and_cluster_config_in_deploy_loads() {
    for dir in ["systemd", "kubernetes", "compose"] {
        let settings = load_settings(&deploy(&format!("{dir}/chitin.toml")), &[("CHITIN__CLUSTER__INSTANCE_ID", "x")]);
        assert!(settings.cluster.enabled, "{dir}: the deploy files run cluster nodes");
        let seed = settings.cluster.config_file.as_ref().expect("a seed config");
        assert_eq!(seed.file_name().unwrap(), "cluster_config.json", "{dir}");
        assert!(settings.renew_interval() * 2 < settings.lease_ttl(), "{dir}");
        load_config(&deploy(&format!("{dir}/cluster_config.json")));
    }
    // The systemd example names itself in the file.
    let s = load_settings(&deploy("systemd/chitin.toml"), &[]);
    let config = load_config(&deploy("systemd/cluster_config.json"));
    assert!(node_ids(&config).contains(s.cluster.instance_id.as_ref().unwrap()));
}

#[test]
fn the_configmap_holds_the_files_beside_it() {
    let Some(docs) = yaml_documents(&deploy("kubernetes/configmap.yaml")) else { return };
    let data = &docs[0]["data"];
    for file in ["chitin.toml", "cluster_config.json"] {
        let beside = std::fs::read_to_string(deploy(&format!("kubernetes/{file}"))).unwrap();
        assert_eq!(data[file].as_str(), Some(beside.as_str()), "configmap.yaml's {file} differs from kubernetes/{file}");
    }
}

#[test]
fn kubernetes_manifests_validate_and_wire_identity_readiness_and_drain() {
    let files: Vec<PathBuf> = ["configmap.yaml", "service.yaml", "statefulset.yaml", "pdb.yaml"]
        .iter()
        .map(|f| deploy(&format!("kubernetes/{f}")))
        .collect();
    if tool("kubernetes-validate") {
        let (ok, out) = run(Command::new("kubernetes-validate").args(["--strict", "-k", "1.30.0"]).args(&files));
        assert!(ok, "{out}");
        assert_eq!(out.matches(" passed for resource ").count(), 5, "{out}");
    }
    let mut docs = Vec::new();
    for file in &files {
        let Some(d) = yaml_documents(file) else { return };
        docs.extend(d);
    }
    check_cluster(&docs, &load_config(&deploy("kubernetes/cluster_config.json")), "deploy/kubernetes");
}

/// The base and every overlay under deploy/overlays render with kustomize
/// (`kubectl kustomize`), validate, and keep what the base promises: the
/// pods are the seed config's nodes, each advertising its address.
#[test]
fn every_kustomize_overlay_renders_validates_and_names_the_configs_nodes() {
    if !tool("kubectl") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let overlays: Vec<PathBuf> = std::fs::read_dir(deploy("overlays")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(overlays.len() >= 2, "{overlays:?}");
    for root in std::iter::once(deploy("kubernetes")).chain(overlays) {
        let (ok, rendered) = run(Command::new("kubectl").arg("kustomize").arg(&root));
        assert!(ok, "kubectl kustomize {}: {rendered}", root.display());
        let file = dir.path().join("rendered.yaml");
        std::fs::write(&file, &rendered).unwrap();
        if tool("kubernetes-validate") {
            let (ok, out) = run(Command::new("kubernetes-validate").args(["--strict", "-k", "1.30.0"]).arg(&file));
            assert!(ok && out.matches(" passed for resource ").count() == 5, "{}: {out}", root.display());
        }
        let Some(docs) = yaml_documents(&file) else { return };
        let configmap = docs.iter().find(|d| d["kind"] == "ConfigMap").expect("the ConfigMap");
        let seed = dir.path().join("cluster_config.json");
        std::fs::write(&seed, configmap["data"]["cluster_config.json"].as_str().expect("the seed config")).unwrap();
        let settings = dir.path().join("chitin.toml");
        std::fs::write(&settings, configmap["data"]["chitin.toml"].as_str().expect("the settings")).unwrap();
        load_settings(&settings, &[("CHITIN__CLUSTER__INSTANCE_ID", "x")]);
        check_cluster(&docs, &load_config(&seed), &root.display().to_string());
    }
}

/// What the Kubernetes manifests `docs` (a StatefulSet, its headless Service,
/// a PodDisruptionBudget) must wire, for the seed `config`.
fn check_cluster(docs: &[Value], config: &ClusterConfig, what: &str) {
    let kind = |k: &str| docs.iter().find(|d| d["kind"] == k).unwrap_or_else(|| panic!("{what}: no {k}"));
    let sts = kind("StatefulSet");
    let spec = &sts["spec"]["template"]["spec"];
    let container = &spec["containers"][0];
    let env =
        |name: &str| container["env"].as_array().unwrap().iter().find(|e| e["name"] == name).cloned().unwrap_or(Value::Null);
    assert_eq!(env("POD_NAME")["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name", "{what}");
    assert_eq!(env("CHITIN__CLUSTER__INSTANCE_ID")["value"], "$(POD_NAME)", "{what}");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz", "{what}");
    let pre_stop: Vec<&str> =
        container["lifecycle"]["preStop"]["exec"]["command"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    // Kubernetes does not expand $(VAR) in a hook's command: the hook
    // drains the node at its --via address, itself, with no name at all.
    assert_eq!(pre_stop, ["chitin", "cluster", "drain", "--via", "127.0.0.1:50051"], "{what}: {pre_stop:?}");
    assert!(pre_stop.iter().all(|a| !a.contains("$(")), "{what}: a variable the hook would pass unexpanded: {pre_stop:?}");
    assert!(spec["terminationGracePeriodSeconds"].as_u64().unwrap() >= 60, "{what}");

    // The pods' names are the config's nodes, and each advertises the address the config gives it.
    let replicas = sts["spec"]["replicas"].as_u64().unwrap();
    let pods: Vec<String> = (0..replicas).map(|i| format!("{}-{i}", sts["metadata"]["name"].as_str().unwrap())).collect();
    assert_eq!(pods, node_ids(config), "{what}: the pods are not the seed config's nodes");
    let service = sts["spec"]["serviceName"].as_str().unwrap();
    for node in &config.nodes {
        let advertised = env("CHITIN__CLUSTER__ADVERTISE")["value"].as_str().unwrap().replace("$(POD_NAME)", &node.id);
        assert_eq!(advertised, node.grpc_address, "{what}");
        assert!(node.grpc_address.starts_with(&format!("{}.{service}:", node.id)), "{what}");
    }
    let headless =
        docs.iter().find(|s| s["kind"] == "Service" && s["metadata"]["name"] == service).expect("the StatefulSet's Service");
    assert_eq!(headless["spec"]["clusterIP"], "None", "{what}");
    let pdb = kind("PodDisruptionBudget");
    assert_eq!(pdb["spec"]["selector"], sts["spec"]["selector"], "{what}");
    // Every object in one namespace (an overlay's, or none).
    let namespaces: BTreeSet<String> = docs.iter().map(|d| d["metadata"]["namespace"].to_string()).collect();
    assert_eq!(namespaces.len(), 1, "{what}: {namespaces:?}");
}

#[test]
fn the_compose_file_parses_and_its_nodes_are_the_configs() {
    let file = deploy("compose/compose.yaml");
    if tool("docker-compose") {
        let (ok, out) = run(Command::new("docker-compose").arg("-f").arg(&file).args(["config", "-q"]));
        assert!(ok, "{out}");
    }
    let Some(docs) = yaml_documents(&file) else { return };
    let services = docs[0]["services"].as_object().unwrap();
    let config = load_config(&deploy("compose/cluster_config.json"));
    for node in &config.nodes {
        let s = &services[&node.id];
        assert_eq!(s["environment"]["CHITIN__CLUSTER__INSTANCE_ID"], node.id.as_str());
        assert_eq!(s["environment"]["CHITIN__CLUSTER__ADVERTISE"], node.grpc_address.as_str());
        assert_eq!(s["stop_signal"], "SIGTERM");
    }
    assert!(services.contains_key("postgres") && services.contains_key("redis"));
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = std::fs::read_to_string(deploy("systemd/chitin.service")).unwrap();
    for line in ["KillSignal=SIGTERM", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict", "Type=notify"] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    // A dynamic user reads nothing under /etc/chitin: every file the settings
    // name is a credential the unit loads, at the service's credentials path.
    let credentials: Vec<&str> = unit
        .lines()
        .filter_map(|l| l.strip_prefix("LoadCredential="))
        .filter_map(|c| c.split_once(':'))
        .map(|(name, _)| name)
        .collect();
    let s = load_settings(&deploy("systemd/chitin.toml"), &[]);
    let files = [
        Some(std::path::PathBuf::from("/run/credentials/chitin.service/chitin.toml")),
        s.cluster.config_file.clone(),
        s.api.admin_token_file.clone(),
        s.api.client_token_file.clone(),
        s.cluster.peer_token_file.clone(),
        s.metrics.auth_token_file.clone(),
    ];
    for file in files {
        let file = file.expect("the systemd settings name every token file and the seed config");
        let name =
            file.strip_prefix("/run/credentials/chitin.service/").unwrap_or_else(|_| panic!("{file:?} is not a credential"));
        assert!(credentials.contains(&name.to_str().unwrap()), "{name:?} is not loaded by the unit: {credentials:?}");
    }
    assert!(unit.contains("--settings ${CREDENTIALS_DIRECTORY}/chitin.toml"), "the node reads its settings from the credentials");
    if !tool("systemd-analyze") {
        return;
    }
    // verify wants the ExecStart binary to exist: point it at the one built.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("chitin.service");
    std::fs::write(&path, unit.replace("/usr/local/bin/chitin", CHITIN)).unwrap();
    let (ok, out) = run(Command::new("systemd-analyze").arg("verify").arg(&path));
    assert!(ok, "{out}");
    // It warns (and exits 0) on unknown keys and bad values: none may be ours.
    let ours: Vec<&str> = out.lines().filter(|l| l.contains("chitin.service")).collect();
    assert!(ours.is_empty(), "systemd-analyze verify: {ours:#?}");
    let (_, out) = run(Command::new("systemd-analyze").args(["security", "--offline=yes"]).arg(&path));
    let exposure: f64 = out
        .lines()
        .find_map(|l| l.split("Overall exposure level for chitin.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in:\n{out}"));
    assert!(exposure <= 2.5, "exposure {exposure} (0 = locked down, 10 = none):\n{out}");
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    if !tool("promtool") {
        return;
    }
    let (ok, out) = run(Command::new("promtool").args(["check", "rules"]).arg(deploy("monitoring/alerts.yml")));
    assert!(ok && out.contains("SUCCESS"), "{out}");
    let (ok, out) = run(Command::new("promtool").args(["test", "rules"]).arg(deploy("monitoring/alerts_test.yml")));
    assert!(ok && out.contains("SUCCESS"), "{out}");
    for alert in ["ChitinUnownedShards", "ChitinLeaseRoundOverBudget", "ChitinPolicyMismatch", "ChitinFailOpenDispatches"] {
        let rules = std::fs::read_to_string(deploy("monitoring/alerts.yml")).unwrap();
        assert!(rules.contains(&format!("alert: {alert}")), "{alert} missing");
    }
}

/// Every `chitin_…` name in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("chitin_") {
        let tail = &rest[i..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// Every `expr` of the dashboard's panels.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    let mut exprs = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            exprs.push(target["expr"].as_str().expect("expr").to_string());
        }
    }
    exprs
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_and_the_alerts_name_only_metrics_a_node_exposes() -> anyhow::Result<()> {
    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(deploy("monitoring/dashboard.json"))?)?;
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 10, "{queries:?}");
    let rules = std::fs::read_to_string(deploy("monitoring/alerts.yml"))?;

    // A cluster node, so that the Redis figures are there too.
    let c = Cluster::new(Dialect::Postgres, 1, 8, 1, |_, _| {}).await?;
    let (code, body) = http_get(&c.nodes[0].metrics, "/metrics", None).await?;
    assert_eq!(code, 200);
    let exposed = Exposition::parse(&body).map_err(anyhow::Error::msg)?.queryable_names();
    for (what, text) in [("dashboard.json", queries.join("\n")), ("alerts.yml", rules)] {
        let unknown: Vec<String> = metric_names(&text).into_iter().filter(|n| !exposed.contains(n)).collect();
        assert!(unknown.is_empty(), "{what} names metrics /metrics does not expose: {unknown:?}\nexposed: {exposed:?}");
    }
    let used = metric_names(&queries.join("\n"));
    for family in ["chitin_append_duration_seconds_bucket", "chitin_lease_round_duration_seconds_bucket", "chitin_shards_unowned"]
    {
        assert!(used.contains(family), "the dashboard does not chart {family}");
    }
    c.teardown().await
}
