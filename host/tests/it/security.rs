//! Secure by default, against real `chitin node` processes:
//!
//! - a node on loopback is not reachable on the machine's other address;
//! - a node told to listen on every address without a token on each plane
//!   refuses to start and says what to set; with `api.insecure_listen` it
//!   starts, warns, and says so in `/health` and `Admin.Status`;
//! - a two-node cluster with every token set and a database password in its
//!   URL forwards appends between its nodes (the peer token travels), and no
//!   password or token appears in any log line, `/health` or Status;
//! - the client, peer and metrics tokens of a two-node cluster rotate under
//!   load through their token files and SIGHUP, with no failed append, and
//!   the old ones are refused afterwards; a token file gone wrong keeps the
//!   tokens in use.
//!
//! Every-method token checks are in `api_bad_input.rs`.

use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Context, Result, bail};
use chitin::api::proto::{self, admin_client::AdminClient, journal_client::JournalClient};
use chitin::upgrade::wire::BearerAuth;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

const ADMIN: &str = "sec-admin-token-41";
const CLIENT: &str = "sec-client-token-42";
const PEER: &str = "sec-peer-token-43";
const METRICS: &str = "sec-metrics-token-44";
/// PostgreSQL on 127.0.0.1 trusts local users, so any password connects.
const DB_PASSWORD: &str = "s3cret-pw-45";

/// A non-loopback IPv4 address of this machine, if it has one.
fn other_address() -> Option<String> {
    let out = std::process::Command::new("hostname").arg("-I").output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|a| a.parse::<std::net::Ipv4Addr>().ok())
        .find(|a| !a.is_loopback())
        .map(|a| a.to_string())
}

fn chitin(args: &[&str], within: Duration) -> (bool, String) {
    let mut child = std::process::Command::new(CHITIN)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + within;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chitin {args:?} still running after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_loopback_node_is_not_reachable_from_other_addresses() {
    let Some(other) = other_address() else {
        panic!("this machine has no non-loopback IPv4 address to try; the test cannot show anything here");
    };
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "alone", |_| {}).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let port = |addr: &str| addr.rsplit_once(':').unwrap().1.to_string();
    for addr in [&node.api, &node.metrics] {
        // Reachable on loopback…
        tokio::net::TcpStream::connect(addr.as_str()).await.unwrap();
        // …and refused on the machine's other address.
        let elsewhere = format!("{other}:{}", port(addr));
        let got = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(&elsewhere)).await;
        assert!(matches!(got, Ok(Err(_))), "{elsewhere} accepted a connection: {got:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn listening_everywhere_needs_tokens_or_insecure_listen() {
    let dir = tempfile::tempdir().unwrap();
    let ports = free_ports(2).unwrap();
    let settings = dir.path().join("chitin.toml");
    let base = format!(
        "[node]\ndata_dir = {:?}\n[api]\nlisten = \"0.0.0.0:{}\"\n[metrics]\nlisten = \"0.0.0.0:{}\"\n",
        dir.path().join("d"),
        ports[0],
        ports[1]
    );
    std::fs::write(&settings, &base).unwrap();
    let (ok, out) = chitin(&["node", "--settings", settings.to_str().unwrap()], Duration::from_secs(30));
    assert!(!ok, "{out}");
    assert!(out.contains(&format!("`api.listen` = \"0.0.0.0:{}\"", ports[0])), "{out}");
    assert!(out.contains("set api.admin_token and api.client_token"), "{out}");
    assert!(out.contains("`metrics.listen`") && out.contains("set metrics.auth_token"), "{out}");
    assert!(out.contains("api.insecure_listen = true"), "{out}");

    // Told so in so many words, it starts, warns, and shows it.
    std::fs::write(&settings, base.replace("[api]\n", "[api]\ninsecure_listen = true\n")).unwrap();
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let mut node = spawn_node("open", settings, api.clone(), metrics.clone(), dir.path().join("node.log")).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let (code, health) = http_get(&metrics, "/health", None).await.unwrap();
    assert_eq!(code, 200);
    assert!(health.contains("\"insecure_listen\":true"), "{health}");
    let mut admin = AdminClient::connect(format!("http://{api}")).await.unwrap();
    assert!(admin.status(proto::StatusRequest {}).await.unwrap().into_inner().insecure_listen);
    let log = node.log_text();
    assert!(log.contains("INSECURE: api.insecure_listen = true"), "{log}");
}

/// A client of `addr` whose calls carry `token`.
fn signed(addr: &str, token: &str) -> InterceptedService<Channel, BearerAuth> {
    let channel = Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_lazy();
    InterceptedService::new(channel, BearerAuth::new(Some(token)))
}

/// Waits until `admin` reports every shard held.
async fn all_owned(addr: &str, within: Duration) -> Result<proto::StatusResponse> {
    let deadline = Instant::now() + within;
    loop {
        let mut admin = AdminClient::new(signed(addr, ADMIN));
        if let Ok(s) = admin.status(proto::StatusRequest {}).await {
            let s = s.into_inner();
            if s.unowned.is_empty() && !s.leases.is_empty() && s.nodes.len() == 2 {
                return Ok(s);
            }
        }
        if Instant::now() > deadline {
            bail!("shards still unowned after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_appears_in_logs_health_or_status() {
    let mut cluster = Cluster::new(Dialect::Postgres, 2, 4, 0, |_, s| {
        let url = s.database.url.clone().unwrap();
        s.database.url = Some(url.replacen("postgres@", &format!("postgres:{DB_PASSWORD}@"), 1));
        s.api.admin_token = Some(ADMIN.into());
        s.api.client_token = Some(CLIENT.into());
        s.cluster.peer_token = Some(PEER.into());
        s.metrics.auth_token = Some(METRICS.into());
    })
    .await
    .unwrap();
    for node in &mut cluster.nodes {
        node.start().unwrap();
    }
    for k in 0..cluster.nodes.len() {
        let ready = cluster.nodes[k].wait_ready(Duration::from_secs(60)).await;
        ready.with_context(|| cluster_logs(&cluster)).unwrap();
    }
    let settings_text = std::fs::read_to_string(&cluster.nodes[0].settings).unwrap();
    assert!(settings_text.contains(DB_PASSWORD), "the nodes were given the password");
    let api: Vec<String> = cluster.nodes.iter().map(|n| n.api.clone()).collect();
    let status = all_owned(&api[0], Duration::from_secs(60)).await.with_context(|| cluster_logs(&cluster)).unwrap();

    // Appends through both nodes: each holds some shards, so some appends
    // are forwarded with the peer token.
    let mut forwarded = 0;
    for i in 0..40 {
        let via = i % 2;
        let mut journal = JournalClient::new(signed(&api[via], CLIENT));
        let request = proto::AppendRequest {
            stream: format!("s-{i}"),
            request_id: format!("r-{i}"),
            payload: b"p".to_vec(),
            forwarded: false,
        };
        let ack = journal.append(request).await.with_context(|| cluster_logs(&cluster)).unwrap().into_inner();
        forwarded += usize::from(ack.holder != cluster.nodes[via].name);
    }
    assert!(forwarded > 0, "no append was forwarded; the peer token was never used");

    let mut shown = vec![format!("{status:?}")];
    for node in &cluster.nodes {
        let (code, health) = http_get(&node.metrics, "/health", Some(METRICS)).await.unwrap();
        assert_eq!(code, 200, "{health}");
        shown.push(health);
    }
    for node in &mut cluster.nodes {
        node.terminate(Duration::from_secs(60)).unwrap();
    }
    let logs = cluster_logs(&cluster);
    // The store line is logged with the URL as given: the writer masked it.
    assert!(logs.contains("postgres:***@127.0.0.1"), "{logs}");
    shown.push(logs);
    for text in &shown {
        for secret in [DB_PASSWORD, ADMIN, CLIENT, PEER, METRICS] {
            assert!(!text.contains(secret), "`{secret}` shown in:\n{text}");
        }
    }
    cluster.teardown().await.unwrap();
}

fn cluster_logs(cluster: &Cluster) -> String {
    cluster.logs()
}

/// Sends SIGHUP to every node of `c` and waits until each has logged its
/// `reloads`-th reload of its token files (or its failure, `line`).
async fn reload_all(c: &Cluster, line: &str, reloads: usize) -> Result<()> {
    for n in &c.nodes {
        n.hangup()?;
    }
    for n in &c.nodes {
        n.wait_logged(line, reloads, Duration::from_secs(30)).await?;
    }
    Ok(())
}

/// Appends through both nodes until `stop`, carrying whatever client token
/// `auth` holds; returns (acknowledged, forwarded, failures).
async fn append_load(
    apis: Vec<String>,
    names: Vec<String>,
    auth: BearerAuth,
    stop: tokio::sync::watch::Receiver<bool>,
) -> (usize, usize, Vec<String>) {
    let (mut acked, mut forwarded, mut failures) = (0, 0, Vec::new());
    let mut clients: Vec<_> = apis
        .iter()
        .map(|a| {
            let channel = Endpoint::from_shared(format!("http://{a}")).unwrap().connect_lazy();
            JournalClient::new(InterceptedService::new(channel, auth.clone()))
        })
        .collect();
    let mut i = 0usize;
    while !*stop.borrow() {
        let via = i % clients.len();
        let request = proto::AppendRequest {
            stream: format!("rot-{}", i % 16),
            request_id: format!("rot-{i}"),
            payload: b"p".to_vec(),
            forwarded: false,
        };
        match clients[via].append(request).await {
            Ok(ack) => {
                acked += 1;
                forwarded += usize::from(ack.into_inner().holder != names[via]);
            }
            Err(e) => failures.push(format!("append {i} via {}: {e}", names[via])),
        }
        i += 1;
    }
    (acked, forwarded, failures)
}

/// The rotation procedure of docs/security.md, under load: each token file
/// gets the new token second (SIGHUP: both accepted, the old peer token
/// still sent), then first (SIGHUP: the new peer token sent) and the client
/// moves to it, then the old ones are dropped (SIGHUP). No append fails, forwarded ones included; then the old
/// tokens are refused and the new ones accepted. A file gone wrong on a
/// reload is refused with its reason and the tokens in use stay.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_rotate_under_load_without_a_failed_append() {
    let files = tempfile::tempdir().unwrap();
    let (client_file, peer_file, metrics_file) =
        (files.path().join("client.token"), files.path().join("peer.token"), files.path().join("metrics.token"));
    let write = |path: &std::path::Path, text: &str| std::fs::write(path, text).unwrap();
    write(&client_file, "client-old-1\n");
    write(&peer_file, "peer-old-1\n");
    write(&metrics_file, "metrics-old-1\n");
    let (cf, pf, mf) = (client_file.clone(), peer_file.clone(), metrics_file.clone());
    let c = Cluster::new(Dialect::Postgres, 2, 4, 2, move |_, s| {
        s.api.client_token_file = Some(cf.clone());
        s.cluster.peer_token_file = Some(pf.clone());
        s.metrics.auth_token_file = Some(mf.clone());
    })
    .await
    .unwrap();
    all_owned(&c.nodes[0].api, Duration::from_secs(60)).await.with_context(|| c.logs()).unwrap();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();
    let names: Vec<String> = c.nodes.iter().map(|n| n.name.clone()).collect();

    let auth = BearerAuth::new(Some("client-old-1"));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let load = tokio::spawn(append_load(apis.clone(), names, auth.clone(), stopped));
    tokio::time::sleep(Duration::from_millis(500)).await;

    const RELOADED: &str = "token files read again";
    let step = |client: &str, peer: &str, metrics: &str| {
        write(&client_file, client);
        write(&peer_file, peer);
        write(&metrics_file, metrics);
    };
    step("client-old-1\nclient-new-2\n", "peer-old-1\npeer-new-2\n", "metrics-old-1\nmetrics-new-2\n");
    reload_all(&c, RELOADED, 1).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    step("client-new-2\nclient-old-1\n", "peer-new-2\npeer-old-1\n", "metrics-new-2\nmetrics-old-1\n");
    reload_all(&c, RELOADED, 2).await.unwrap();
    auth.set(Some("client-new-2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    step("client-new-2\n", "peer-new-2\n", "metrics-new-2\n");
    reload_all(&c, RELOADED, 3).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.send(true).unwrap();
    let (acked, forwarded, failures) = load.await.unwrap();
    assert!(
        failures.is_empty(),
        "{} of {} appends failed during the rotation: {failures:?}\n{}",
        failures.len(),
        acked + failures.len(),
        c.logs()
    );
    assert!(acked > 50 && forwarded > 10, "too little load to judge: {acked} acknowledged, {forwarded} forwarded");

    // The old tokens are refused now; the new ones work.
    let append = |token: &str, forwarded: bool| {
        let mut journal = JournalClient::new(signed(&apis[0], token));
        let request = proto::AppendRequest {
            stream: "after".into(),
            request_id: uuid::Uuid::new_v4().to_string(),
            payload: b"p".to_vec(),
            forwarded,
        };
        async move { journal.append(request).await }
    };
    assert_eq!(append("client-old-1", false).await.unwrap_err().code(), tonic::Code::Unauthenticated);
    assert_eq!(append("peer-old-1", false).await.unwrap_err().code(), tonic::Code::Unauthenticated);
    append("client-new-2", false).await.unwrap();
    for (token, code) in [("metrics-old-1", 401), ("metrics-new-2", 200)] {
        let (got, body) = http_get(&c.nodes[0].metrics, "/health", Some(token)).await.unwrap();
        assert_eq!(got, code, "/health with {token}: {body}");
    }

    // A file gone wrong: refused with its reason, the tokens in use stay.
    write(&client_file, "two words\n");
    reload_all(&c, "token reload failed", 1).await.unwrap();
    assert!(c.nodes[0].log_text().contains("api.client_token_file"), "{}", c.nodes[0].log_text());
    append("client-new-2", false).await.unwrap();
    let logs = c.logs();
    for secret in ["client-old-1", "client-new-2", "peer-old-1", "peer-new-2", "metrics-new-2"] {
        assert!(!logs.contains(secret), "`{secret}` in the logs:\n{logs}");
    }
    c.teardown().await.unwrap();
}
