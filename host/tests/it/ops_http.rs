//! The HTTP listener as operators use it, against real `chitin node`
//! processes: `/health` in the reference's shape in standalone mode, in
//! cluster mode and unprovisioned, always behind the metrics token; and
//! `/metrics` scraped and parsed after real appends, forwards and handoffs.

use std::time::Duration;

use crate::support::cluster::*;
use crate::support::ops::{Exposition, check_histogram};
use anyhow::Result;
use chitin::proto;
use serde_json::Value;
use tonic_health::pb::health_check_response::ServingStatus;

const TOKEN: &str = "m3trics";

/// `path`'s JSON body, answered with `want` (200 for a healthy node's
/// `/health`, 503 for an unhealthy one's).
async fn get_json_as(addr: &str, path: &str, want: u16) -> Value {
    let (code, body) = http_get(addr, path, Some(TOKEN)).await.unwrap();
    assert_eq!(code, want, "{path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path} is not JSON ({e}): {body}"))
}

async fn get_json(addr: &str, path: &str) -> Value {
    get_json_as(addr, path, 200).await
}

async fn scrape(addr: &str) -> Exposition {
    let (code, body) = http_get(addr, "/metrics", Some(TOKEN)).await.unwrap();
    assert_eq!(code, 200, "{body}");
    Exposition::parse(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// The keys of a JSON object, sorted.
fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().expect("an object").keys().map(String::as_str).collect();
    k.sort();
    k
}

/// `/health` once the node is `active` (its first round done).
async fn active_health(addr: &str) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let h = get_json(addr, "/health").await;
        if h["state"] == "active" || std::time::Instant::now() > deadline {
            return h;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The fields every `/health` answer of a running node has.
fn assert_node_health(h: &Value, name: Option<&str>, mode: &str) {
    assert_eq!(h["status"], "healthy", "{h}");
    assert!(uuid::Uuid::parse_str(h["instance_id"].as_str().unwrap()).is_ok(), "{h}");
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"), "{h}");
    if let Some(name) = name {
        assert_eq!(h["name"], name, "{h}");
    }
    assert_eq!(h["mode"], mode, "{h}");
    assert!(matches!(h["state"].as_str(), Some("joining" | "active")), "{h}");
}

#[tokio::test(flavor = "multi_thread")]
async fn standalone_health_has_the_reference_fields_and_no_cluster_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "standalone", |s| s.metrics.auth_token = Some(TOKEN.into())).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();

    assert_eq!(http_get(&node.metrics, "/health", None).await.unwrap().0, 401);
    // A standalone node is named by the instance-id policy (the host name).
    let h = active_health(&node.metrics).await;
    assert_node_health(&h, None, "standalone");
    assert!(h.get("cluster").is_none(), "clustering is off, yet /health has a cluster block: {h}");
    assert_eq!(h["shards_held"], 16, "{h}");
    // The probes' answers need no token.
    assert_eq!(http_get(&node.metrics, "/livez", None).await.unwrap(), (200, "alive\n".to_owned()));
    for service in ["", "chitin.v1.Journal", "chitin.v1.Admin"] {
        assert_eq!(grpc_health(&node.api, service).await, ServingStatus::Serving, "`{service}`");
    }
    let m = scrape(&node.metrics).await;
    let protocol = chitin::upgrade::PROTOCOL.to_string();
    let build = [("version", env!("CARGO_PKG_VERSION")), ("protocol", protocol.as_str())];
    assert_eq!(m.matching("chitin_build_info", &build).map(|s| s.value).collect::<Vec<_>>(), [1.0]);
    let fds = m.value("process_open_fds").expect("process_open_fds");
    assert!(fds > 0.0 && fds < m.value("process_max_fds").unwrap(), "{fds}");

    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_text());
}

/// The standard gRPC health status of `service` on the node at `api`.
async fn grpc_health(api: &str, service: &str) -> ServingStatus {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{api}")).unwrap().connect().await.unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let answer = health.check(tonic_health::pb::HealthCheckRequest { service: service.into() }).await.unwrap();
    ServingStatus::try_from(answer.into_inner().status).unwrap()
}

/// A round asks the placement policy again only when what it ranks on
/// changed: rounds of a steady node call it no more, however many shards.
#[tokio::test(flavor = "multi_thread")]
async fn steady_lease_rounds_ask_the_placement_policy_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "standalone", |s| {
        s.metrics.auth_token = Some(TOKEN.into());
        (s.leases.ttl_secs, s.leases.renew_interval_secs) = (Some(2.0), Some(0.2));
    })
    .unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    assert_eq!(active_health(&node.metrics).await["shards_held"], 16);
    let counts = |m: &Exposition| {
        (
            m.sum("chitin_lease_round_duration_seconds_count", &[("outcome", "ok")]),
            m.sum("chitin_policy_call_duration_seconds_count", &[("slot", "placement")]),
        )
    };
    let after_rounds = async |n: f64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let now = counts(&scrape(&node.metrics).await);
            if now.0 >= n || std::time::Instant::now() > deadline {
                assert!(now.0 >= n, "not {n} rounds in 30 s: {}", now.0);
                return now;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    // The first round ranks the node joining, the second active: both ask.
    let (rounds, calls) = after_rounds(2.0).await;
    let later = after_rounds(rounds + 5.0).await;
    assert_eq!(later.1, calls, "{} steady rounds called the placement policy", later.0 - rounds);
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_text());
}

#[tokio::test(flavor = "multi_thread")]
async fn cluster_health_and_metrics_after_appends_forwards_and_handoffs() -> Result<()> {
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 2, |_, s| s.metrics.auth_token = Some(TOKEN.into())).await?;
    c.wait_settled(Duration::from_secs(60)).await?;

    // /health: the reference's fields, and the cluster block with real counts.
    assert_eq!(http_get(&c.nodes[0].metrics, "/health", None).await?.0, 401);
    assert_eq!(http_get(&c.nodes[0].metrics, "/health", Some("wrong")).await?.0, 401);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let h = loop {
        let h = get_json(&c.nodes[0].metrics, "/health").await;
        if h["cluster"]["active_instances"] == 2 || std::time::Instant::now() > deadline {
            break h;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_node_health(&h, Some("node-01"), "cluster");
    assert_eq!(keys(&h["cluster"]), ["active_deployments", "active_instances", "healthy"], "{h}");
    assert_eq!(h["cluster"]["healthy"], true, "{h}");
    assert_eq!(h["cluster"]["active_instances"], 2, "{h}");
    assert_eq!(h["cluster"]["active_deployments"], 0, "{h}");

    // Appends through node-01 to streams on both nodes' shards.
    let mut journal = c.nodes[0].journal().await?;
    for i in 0..40 {
        let r = proto::AppendRequest {
            stream: format!("metrics-{i}"),
            request_id: format!("req-{i}"),
            payload: b"x".to_vec(),
            forwarded: false,
        };
        journal.append(r).await?;
    }
    let status = c.status().await?;
    let on_02 = status.leases.iter().filter(|l| l.holder == "node-02").count();
    assert!(on_02 > 0, "node-02 holds nothing, so nothing was forwarded: {status:?}");

    let m = scrape(&c.nodes[0].metrics).await;
    for family in [
        "chitin_append_duration_seconds",
        "chitin_forward_duration_seconds",
        "chitin_lease_round_duration_seconds",
        "chitin_handoff_duration_seconds",
        "chitin_takeover_duration_seconds",
        "chitin_policy_call_duration_seconds",
    ] {
        check_histogram(&m, family).map_err(anyhow::Error::msg)?;
    }
    assert_eq!(m.sum("chitin_append_duration_seconds_count", &[("outcome", "applied")]), 40.0);
    let forwarded = m.sum("chitin_forward_duration_seconds_count", &[("outcome", "applied")]);
    assert!(forwarded >= 1.0, "no forward was timed");
    let sent = m.value("chitin_forwards_total").unwrap_or(0.0);
    assert!(sent >= forwarded, "{sent} forwards sent, {forwarded} timed as applied");
    assert_eq!(m.value("chitin_fenced_commits_total"), Some(40.0 - forwarded));
    assert!(m.sum("chitin_lease_round_duration_seconds_count", &[("outcome", "ok")]) >= 1.0);
    assert!(m.sum("chitin_policy_call_duration_seconds_count", &[("slot", "placement"), ("outcome", "ok")]) >= 1.0);
    // Today's counters and gauges keep their names.
    for name in [
        "chitin_leases_acquired_total",
        "chitin_lease_losses_total",
        "chitin_handoffs_total",
        "chitin_fenced_aborts_total",
        "chitin_outcome_unknown_total",
        "chitin_policy_calls_total",
        "chitin_policy_errors_total",
        "chitin_leases_held",
        "chitin_node_ready",
        "chitin_cluster_active_instances",
        "chitin_affinity_owned_targets",
        "chitin_affinity_orphaned_targets",
        "chitin_affinity_fail_open_total",
        "chitin_deployments_active",
        "chitin_deployments_orphaned_total",
    ] {
        assert!(m.value(name).is_some(), "{name} missing");
    }
    // The store's retries by operation, there from the start.
    for op in ["register", "acquire", "append"] {
        assert!(m.matching("chitin_store_retries_total", &[("op", op)]).next().is_some(), "no retry series for {op}");
    }
    assert_eq!(m.value("chitin_shards_unowned"), Some(0.0));
    // The shard counts come from the shared cached read, never older than
    // its stale-while-revalidate limit (node::observed, a minute).
    let age = m.value("chitin_cluster_read_age_seconds").expect("chitin_cluster_read_age_seconds missing");
    assert!((0.0..60.0).contains(&age), "the read the scrape used is {age} s old");
    assert_eq!(m.value("chitin_node_ready"), Some(1.0));
    assert_eq!(m.value("chitin_lease_round_budget_seconds"), Some(RENEW.as_secs_f64()));
    assert_eq!(m.matching("chitin_policy_info", &[]).count(), 4, "one per slot");
    let taken: f64 = {
        let m2 = scrape(&c.nodes[1].metrics).await;
        m.sum("chitin_takeover_duration_seconds_count", &[("outcome", "granted")])
            + m2.sum("chitin_takeover_duration_seconds_count", &[("outcome", "granted")])
    };
    assert!(taken >= 16.0, "every shard was taken once at least; timed {taken}");

    // node-03 joins: the shards it is preferred for are handed to it.
    c.node("node-03").start()?;
    c.node("node-03").wait_ready(Duration::from_secs(60)).await?;
    c.wait_settled(Duration::from_secs(60)).await?;
    let (m1, m2) = (scrape(&c.nodes[0].metrics).await, scrape(&c.nodes[1].metrics).await);
    let handed: f64 = [&m1, &m2].iter().map(|m| m.value("chitin_handoffs_total").unwrap_or(0.0)).sum();
    let timed: f64 = [&m1, &m2].iter().map(|m| m.sum("chitin_handoff_duration_seconds_count", &[("outcome", "ok")])).sum();
    assert!(handed >= 1.0, "node-03 received nothing:\n{}", c.logs());
    assert_eq!(timed, handed, "every handoff is timed once");

    // A drained node takes no work: unhealthy, and says why.
    let mut admin = c.node("node-03").admin().await?;
    admin.drain(proto::DrainRequest {}).await?;
    let h = get_json_as(&c.node("node-03").metrics.clone(), "/health", 503).await;
    assert_eq!((h["status"].as_str(), h["state"].as_str()), (Some("unhealthy"), Some("drained")), "{h}");
    assert_eq!(h["cluster"]["healthy"], true, "{h}");

    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unprovisioned_cluster_node_is_unhealthy_with_an_unknown_cluster_block() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let ports = free_ports(2)?;
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let node = ClusterNode { name: "waiting", api: &api, metrics: &metrics, data_dir: dir.path().join("d"), config_file: None };
    let shared = ClusterShared {
        redis_url: "redis://127.0.0.1:6379",
        namespace: "chitin-test-unprovisioned",
        database_url: "postgres://postgres@127.0.0.1:5432/postgres",
        ttl: TTL,
        renew: RENEW,
    };
    let mut s = node_settings::cluster_node(&node, &shared);
    s.metrics.auth_token = Some(TOKEN.into());
    let settings = dir.path().join("chitin.toml");
    node_settings::write(&settings, &s)?;
    let api_addr = api.clone();
    let _proc = spawn_node("waiting", settings, api, metrics.clone(), dir.path().join("node.log"))?;
    chitin::testkit::ports::wait_for_port(&metrics, Duration::from_secs(30), "")?;

    assert_eq!(http_get(&metrics, "/health", None).await?.0, 401);
    let h = get_json_as(&metrics, "/health", 503).await;
    assert_eq!(h["status"], "unhealthy", "{h}");
    assert_eq!(h["state"], "UNPROVISIONED", "{h}");
    assert_eq!(h["version"], env!("CARGO_PKG_VERSION"), "{h}");
    assert_eq!(keys(&h["cluster"]), ["active_deployments", "active_instances", "healthy"], "{h}");
    assert_eq!(h["cluster"]["healthy"], false, "{h}");
    assert!(h["cluster"]["active_instances"].is_null(), "a count it cannot know is null, not made up: {h}");
    let m = scrape(&metrics).await;
    assert_eq!(m.value("chitin_node_ready"), Some(0.0));
    // Alive, not ready, not serving.
    assert_eq!(http_get(&metrics, "/livez", None).await?.0, 200);
    assert_eq!(http_get(&metrics, "/readyz", None).await?.0, 503);
    assert_eq!(grpc_health(&api_addr, "").await, ServingStatus::NotServing);
    assert_eq!(grpc_health(&api_addr, "chitin.v1.Journal").await, ServingStatus::NotServing);
    Ok(())
}

/// Runs headless Chromium with its own profile; `None`, with the reason
/// printed, when it cannot be had.
fn chromium(args: &[String]) -> Option<String> {
    if !crate::support::tool("chromium") {
        return None;
    }
    let profile = tempfile::tempdir().unwrap();
    let out = std::process::Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars"])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .output()
        .expect("run chromium");
    assert!(out.status.success(), "chromium {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The value of attribute `attr` on the element that has `marker`.
fn attr_after<'a>(dom: &'a str, marker: &str, attr: &str) -> Option<&'a str> {
    let at = dom.find(marker)?;
    let tag_start = dom[..=at].rfind('<')?;
    let tag = &dom[tag_start..tag_start + dom[tag_start..].find('>')?];
    let value = tag.split(&format!("{attr}=\"")).nth(1)?;
    value.split('"').next()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_status_page_renders_nodes_and_holders_in_headless_chromium() -> Result<()> {
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 2, |_, s| s.metrics.auth_token = Some(TOKEN.into())).await?;
    let status = c.wait_settled(Duration::from_secs(60)).await?;
    let addr = c.nodes[0].metrics.clone();
    // The browser logs in with the token as the Basic-auth password.
    let url = format!("http://operator:{TOKEN}@{addr}/");
    let Some(dom) = chromium(&["--virtual-time-budget=6000".into(), "--dump-dom".into(), url.clone()]) else {
        return c.teardown().await;
    };
    for node in ["node-01", "node-02"] {
        let row = format!("data-node=\"{node}\"");
        assert!(dom.contains(&row), "{node} missing from the page:\n{dom}");
        assert_eq!(attr_after(&dom, &row, "data-state"), Some("active"), "{dom}");
    }
    assert!(!dom.contains("data-node=\"node-03\""), "node-03 never started:\n{dom}");
    assert_eq!(status.leases.len(), 8);
    let status = c.status().await?;
    for lease in &status.leases {
        // The strip segment of each shard names its holder and epoch.
        let marker = format!("data-shard=\"{}\" data-holder=\"{}\" data-epoch=\"{}\"", lease.shard, lease.holder, lease.epoch);
        assert!(dom.contains(&marker), "{marker} missing from the page:\n{dom}");
    }
    assert_eq!(attr_after(&dom, "id=\"unowned\"", "data-count"), Some("0"), "{dom}");
    // The query selects the table's rows: one holder's, none unowned; a
    // malformed query is refused with the parameters it takes.
    let holder = &status.leases[0].holder;
    let (code, page) = http_get(&addr, &format!("/?holder={holder}"), Some(TOKEN)).await?;
    assert_eq!(code, 200, "{page}");
    let held = status.leases.iter().filter(|l| &l.holder == holder).count();
    assert_eq!(page.matches("<tr data-shard=").count(), held, "{page}");
    assert_eq!(attr_after(&page, "id=\"shown\"", "data-selected"), Some(held.to_string().as_str()), "{page}");
    let (_, page) = http_get(&addr, "/?state=unowned", Some(TOKEN)).await?;
    assert_eq!(page.matches("<tr data-shard=").count(), 0, "{page}");
    for bad in ["/?page=abc", "/?colour=red"] {
        let (code, why) = http_get(&addr, bad, Some(TOKEN)).await?;
        assert_eq!(code, 400, "{bad}: {why}");
        assert!(why.contains("app, holder, state, q and page"), "{bad}: {why}");
    }
    // It refreshed itself in the browser (the script fetched the page with the login).
    let refreshes: u32 = attr_after(&dom, "<body", "data-refreshes").and_then(|v| v.parse().ok()).unwrap_or(0);
    assert!(refreshes >= 1, "the page did not refresh itself:\n{dom}");
    assert!(dom.contains("id=\"refresh\">live · refreshed "), "the last refresh failed:\n{dom}");

    // A screenshot, kept for a person to look at.
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    chromium(&[
        "--window-size=1280,1000".into(),
        "--virtual-time-budget=3000".into(),
        format!("--screenshot={}", shot.display()),
        url,
    ]);
    let png = std::fs::read(&shot)?;
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "{} is not a real screenshot", shot.display());
    eprintln!("status page screenshot: {}", shot.display());
    c.teardown().await
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_cluster_starts_serves_appends_and_stops_everything_on_sigint() -> Result<()> {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir()?;
    let mut child = tokio::process::Command::new(CHITIN)
        .args(["dev", "cluster", "--nodes", "3", "--shards", "8", "--api-port", "0", "--http-port", "0", "--dir"])
        .arg(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().expect("a pid");
    let stderr = child.stderr.take().unwrap();
    let err_lines = tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        let mut all = Vec::new();
        while let Ok(Some(l)) = lines.next_line().await {
            all.push(l);
        }
        all
    });
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut usage = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(240), async {
        while let Some(line) = out.next_line().await? {
            let done = line.starts_with("Ctrl-C stops every node");
            usage.push(line);
            if done {
                return Ok::<_, std::io::Error>(true);
            }
        }
        Ok(false)
    })
    .await;
    if !matches!(read, Ok(Ok(true))) {
        let _ = child.kill().await;
        panic!("no usage printed ({read:?}):\n{}\n{}", usage.join("\n"), err_lines.await?.join("\n"));
    }
    let text = usage.join("\n");
    assert!(
        text.contains("3 node(s) up") && text.contains("private redis-server") && text.contains("private PostgreSQL"),
        "{text}"
    );
    // "  node-01  gRPC 127.0.0.1:P  status page http://127.0.0.1:Q/"
    let nodes: Vec<(String, String)> = usage
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?.strip_prefix("node-")?;
            let api = w.nth(1)?;
            let http = w.nth(2)?.strip_prefix("http://")?.trim_end_matches('/');
            Some((format!("{name}|{api}"), http.to_string()))
        })
        .collect();
    assert_eq!(nodes.len(), 3, "{text}");
    let apis: Vec<String> = nodes.iter().map(|(n, _)| n.split('|').nth(1).unwrap().to_string()).collect();
    assert!(text.contains(&format!("export CHITIN_NODES={}", apis.join(","))), "{text}");

    // Appends through every node, read back through another.
    for (k, api) in apis.iter().enumerate() {
        let out = tokio::process::Command::new(CHITIN)
            .args(["journal", "append", "--node", api, "--stream", &format!("dev-{k}"), "--payload", "hello"])
            .output()
            .await?;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for k in 0..apis.len() {
        let out = tokio::process::Command::new(CHITIN)
            .args(["journal", "read", "--node", &apis[(k + 1) % apis.len()], "--stream", &format!("dev-{k}")])
            .output()
            .await?;
        assert!(String::from_utf8_lossy(&out.stdout).contains("hello"), "{}", String::from_utf8_lossy(&out.stderr));
    }
    for (_, http) in &nodes {
        assert_eq!(chitin::testkit::http_status(http, "/readyz").await, 200);
    }

    // Ctrl-C: everything stops, cleanly.
    assert!(std::process::Command::new("kill").args(["-INT", &pid.to_string()]).status()?.success());
    let status = tokio::time::timeout(Duration::from_secs(180), child.wait()).await??;
    let err = err_lines.await?.join("\n");
    assert!(status.success(), "exit {status}:\n{err}");
    assert!(err.contains("every node stopped"), "{err}");
    for (api, (_, http)) in apis.iter().zip(&nodes) {
        for addr in [api, http] {
            assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "{addr} still answers after the stop");
        }
    }
    let logs: String =
        (1..=3).map(|k| std::fs::read_to_string(dir.path().join(format!("node-0{k}.log"))).unwrap_or_default()).collect();
    assert!(logs.contains("drained") || logs.contains("handed over"), "no node drained on its way out:\n{logs}");
    Ok(())
}
