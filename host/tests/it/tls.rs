//! TLS, against real `chitin node` processes and real servers, with
//! certificates made here (rcgen) in each test's directory:
//!
//! - a node with `[tls]` serves gRPC and HTTP over TLS to a client trusting
//!   its CA (the CLI too, with `--ca` or `CHITIN_CA`), and refuses
//!   plaintext clients and clients trusting another CA;
//! - with `tls.client_ca_file` a client without a certificate is refused,
//!   one with a certificate of that CA served, and such a node may listen
//!   beyond loopback without tokens (TLS without client certificates may
//!   not);
//! - two nodes call each other over mutual TLS (forwards succeed), and a
//!   caller with neither a node certificate nor the peer token cannot set
//!   `forwarded` or call the Peer service; with client certificates
//!   required too, the nodes still reach each other and a client's
//!   certificate is no peer's;
//! - a node reaches a private PostgreSQL (`ssl = on`) and a private Redis
//!   (`--tls-port`) over verified TLS, and refuses to start, naming the
//!   setting, when the CA does not match;
//! - a node's certificate rotates on SIGHUP under load: new connections get
//!   the new one, the connection open before keeps serving, no append
//!   fails, and a key of another certificate is refused with the current
//!   pair kept;
//! - the cluster CA rotates on SIGHUP under load (bundle, certificates,
//!   bundle again) without a failed append, forwards included.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Context, Result, bail};
use chitin::api::proto::{self, admin_client::AdminClient, journal_client::JournalClient, peer_client::PeerClient};
use chitin::settings::Settings;
use chitin::testkit::{PrivatePostgres, PrivateRedis, https_get};
use chitin::upgrade::wire::BearerAuth;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// A certificate authority made for one test.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    /// Its certificate, PEM.
    pem: String,
    /// The file holding `pem`.
    file: PathBuf,
}

/// A certificate and key issued by a [`Ca`], in files.
struct Leaf {
    cert: PathBuf,
    key: PathBuf,
    cert_pem: String,
    key_pem: String,
}

impl Ca {
    fn new(dir: &Path, name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.distinguished_name.push(DnType::CommonName, format!("chitin test {name}"));
        let pem = params.self_signed(&key).unwrap().pem();
        let file = dir.join(format!("{name}.pem"));
        std::fs::write(&file, &pem).unwrap();
        Ca { params, key, pem, file }
    }

    /// A certificate for `names` (IP addresses or DNS names), usable by a
    /// server and a client alike, as the nodes' certificates must be.
    fn issue(&self, dir: &Path, name: &str, names: &[&str]) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert_pem = params.signed_by(&key, &issuer).unwrap().pem();
        let key_pem = key.serialize_pem();
        let (cert, key) = (dir.join(format!("{name}.crt")), dir.join(format!("{name}.key")));
        std::fs::write(&cert, &cert_pem).unwrap();
        std::fs::write(&key, &key_pem).unwrap();
        Leaf { cert, key, cert_pem, key_pem }
    }
}

impl Ca {
    /// This CA, trusted together with `other` (its `pem` and `file` hold
    /// both certificates; it still issues as itself): a client's view of
    /// a CA rotation.
    fn also_trusting(&self, dir: &Path, other: &Ca) -> Ca {
        let pem = format!("{}{}", self.pem, other.pem);
        let file = dir.join("both-cas.pem");
        std::fs::write(&file, &pem).unwrap();
        Ca { params: self.params.clone(), key: KeyPair::from_pem(&self.key.serialize_pem()).unwrap(), pem, file }
    }
}

const LOCAL: &[&str] = &["127.0.0.1", "localhost"];

/// tonic's client TLS: trusting `ca`, presenting `identity`.
fn grpc_tls(ca: &Ca, identity: Option<&Leaf>) -> ClientTlsConfig {
    let config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(&ca.pem));
    match identity {
        Some(l) => config.identity(Identity::from_pem(&l.cert_pem, &l.key_pem)),
        None => config,
    }
}

/// A channel to `addr`: https with `tls`, else plain http.
async fn channel(addr: &str, tls: Option<ClientTlsConfig>) -> Result<Channel> {
    let endpoint = match tls {
        Some(t) => Endpoint::from_shared(format!("https://{addr}"))?.tls_config(t)?,
        None => Endpoint::from_shared(format!("http://{addr}"))?,
    };
    Ok(endpoint.connect_timeout(Duration::from_secs(3)).timeout(Duration::from_secs(10)).connect().await?)
}

/// rustls' client config for the HTTP listener: trusting `ca`, presenting
/// `identity`.
fn https_tls(ca: &Ca, identity: Option<&Leaf>) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        Some(l) => {
            let chain = vec![CertificateDer::from_pem_slice(l.cert_pem.as_bytes()).unwrap()];
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(l.key_pem.as_bytes()).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    Arc::new(config)
}

fn set_tls(s: &mut Settings, leaf: &Leaf) {
    s.tls.cert_file = Some(leaf.cert.clone());
    s.tls.key_file = Some(leaf.key.clone());
}

/// A standalone node in `dir` with `edit` applied, its readiness probed
/// over TLS with `probe`; not started.
fn standalone(dir: &Path, api_host: &str, probe: Arc<rustls::ClientConfig>, edit: impl FnOnce(&mut Settings)) -> NodeProc {
    let ports = free_ports(2).unwrap();
    let (api, metrics) = (format!("{api_host}:{}", ports[0]), format!("{api_host}:{}", ports[1]));
    let mut s = node_settings::standalone(dir.join("data"), &api, &metrics);
    edit(&mut s);
    let settings = dir.join("chitin.toml");
    node_settings::write(&settings, &s).unwrap();
    // Probed and called on loopback whatever it listens on.
    let local = |a: &str| a.replacen(api_host, "127.0.0.1", 1);
    NodeProc::new(CHITIN, "alone", local(&api), local(&metrics), settings, dir.join("node.log")).with_https_probe(probe)
}

fn append(stream: &str, id: &str, forwarded: bool) -> proto::AppendRequest {
    proto::AppendRequest { stream: stream.into(), request_id: id.into(), payload: b"p".to_vec(), forwarded }
}

/// `chitin args…` with `env`: success and the output. A command still
/// running after a minute (a node that should have refused to start) fails
/// the test.
fn chitin(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let dir = tempfile::tempdir().unwrap();
    let (out_file, err_file) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = std::process::Command::new(CHITIN)
        .args(args)
        .env_remove("CHITIN_CA")
        .env_remove("CHITIN_CERT")
        .env_remove("CHITIN_KEY")
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out_file).unwrap())
        .stderr(std::fs::File::create(&err_file).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chitin {args:?} still running after a minute:\n{}", std::fs::read_to_string(&err_file).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    (status.success(), format!("{}{}", read(&out_file), read(&err_file)))
}

/// The certificate a TLS handshake with `addr` is given (leaf, DER).
async fn served_certificate(addr: &str, ca: &Ca) -> Vec<u8> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let connector = tokio_rustls::TlsConnector::from(https_tls(ca, None));
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let tls = connector.connect(name, tcp).await.unwrap();
    tls.get_ref().1.peer_certificates().unwrap()[0].to_vec()
}

fn der(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::from_pem_slice(pem.as_bytes()).unwrap().to_vec()
}

/// docs/security.md's certificate rotation (same CA), under load: the new
/// certificate and key are written over the files and the node gets SIGHUP.
/// Appends go on over the connection opened before, and over a new
/// connection every tenth append; none fails. Then new connections are
/// given the new certificate on both listeners, and the old connection
/// still serves. A key that is not the certificate's is refused on the next
/// reload and the node keeps serving the pair it has.
#[tokio::test(flavor = "multi_thread")]
async fn a_certificate_rotates_on_sighup_under_load_without_a_failed_append() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new(dir.path(), "ca");
    let first = ca.issue(dir.path(), "node", LOCAL);
    let mut node = standalone(dir.path(), "127.0.0.1", https_tls(&ca, None), |s| set_tls(s, &first));
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    assert_eq!(served_certificate(&node.api, &ca).await, der(&first.cert_pem));

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let api = node.api.clone();
    let tls = grpc_tls(&ca, None);
    let mut held = JournalClient::new(channel(&api, Some(tls.clone())).await.unwrap());
    let load = tokio::spawn(async move {
        let (mut acked, mut failures) = (0usize, Vec::new());
        let mut i = 0;
        while !*stopped.borrow() {
            let outcome = if i % 10 == 0 {
                match channel(&api, Some(tls.clone())).await {
                    Ok(c) => {
                        JournalClient::new(c).append(append("rot", &format!("n-{i}"), false)).await.map_err(|e| e.to_string())
                    }
                    Err(e) => Err(format!("connect: {e}")),
                }
            } else {
                held.append(append("rot", &format!("h-{i}"), false)).await.map_err(|e| e.to_string())
            };
            match outcome {
                Ok(_) => acked += 1,
                Err(e) => failures.push(format!("append {i}: {e}")),
            }
            i += 1;
        }
        (acked, failures, held)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The rotated pair over the same files.
    let second = ca.issue(dir.path(), "node-rotated", LOCAL);
    std::fs::write(&first.cert, &second.cert_pem).unwrap();
    std::fs::write(&first.key, &second.key_pem).unwrap();
    node.hangup().unwrap();
    const RELOADED: &str = "certificate and key read again";
    node.wait_logged(RELOADED, 1, Duration::from_secs(30)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.send(true).unwrap();
    let (acked, failures, mut held) = load.await.unwrap();
    assert!(failures.is_empty(), "{} appends failed across the rotation: {failures:?}\n{}", failures.len(), node.log_tail(30));
    assert!(acked > 20, "too little load to judge: {acked} appends");
    assert_eq!(served_certificate(&node.api, &ca).await, der(&second.cert_pem), "the gRPC listener serves the old certificate");
    assert_eq!(served_certificate(&node.metrics, &ca).await, der(&second.cert_pem), "the HTTP listener serves the old one");
    held.append(append("rot", "held-after", false)).await.expect("the connection opened before the rotation");

    // A key of another certificate: refused, and the pair in use stays.
    let stranger = ca.issue(dir.path(), "stranger", LOCAL);
    std::fs::write(&first.key, &stranger.key_pem).unwrap();
    node.hangup().unwrap();
    node.wait_logged("certificate reload failed", 1, Duration::from_secs(30)).await.unwrap();
    assert!(node.log_text().contains("tls.key_file"), "{}", node.log_tail(10));
    assert_eq!(served_certificate(&node.api, &ca).await, der(&second.cert_pem));
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(20));
}

/// docs/security.md's rotation of the cluster CA, under load, on two nodes
/// calling each other over mutual TLS: the new CA added to
/// `tls.peer_ca_file`, each node's certificate replaced by one of the new
/// CA, the old CA removed, each step followed by SIGHUP. No append fails,
/// forwards included. Afterwards the old CA's certificates are no peers'
/// (the bundle was read again), and node-01 connects afresh to a restarted
/// node-02 with what it read (its own client side was read again too).
#[tokio::test(flavor = "multi_thread")]
async fn the_cluster_ca_rotates_on_sighup_under_load_without_a_failed_append() {
    let certs = tempfile::tempdir().unwrap();
    let (old, new) = (Ca::new(certs.path(), "old-ca"), Ca::new(certs.path(), "new-ca"));
    let leaf = old.issue(certs.path(), "node", LOCAL);
    let bundle = certs.path().join("cluster-ca.pem");
    std::fs::write(&bundle, &old.pem).unwrap();
    // Clients and probes trust both CAs throughout.
    let both = new.also_trusting(certs.path(), &old);
    let mut cluster = tls_cluster(&both, None, |s| {
        set_tls(s, &leaf);
        s.tls.peer_ca_file = Some(bundle.clone());
    })
    .await;
    let names: Vec<String> = cluster.nodes.iter().map(|n| n.name.clone()).collect();

    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut held = Vec::new();
    for n in &cluster.nodes {
        held.push(JournalClient::new(channel(&n.api, Some(grpc_tls(&both, None))).await.unwrap()));
    }
    let load_names = names.clone();
    let load = tokio::spawn(async move {
        let (mut acked, mut forwarded, mut failures) = (0usize, 0usize, Vec::new());
        let mut i = 0;
        while !*stopped.borrow() {
            match held[i % 2].append(append(&format!("ca-{}", i % 8), &format!("r-{i}"), false)).await {
                Ok(a) => {
                    acked += 1;
                    forwarded += usize::from(a.into_inner().holder != load_names[i % 2]);
                }
                Err(e) => failures.push(format!("append {i}: {e}")),
            }
            i += 1;
        }
        (acked, forwarded, failures)
    });

    const RELOADED: &str = "certificate and key read again";
    let new_leaf = new.issue(certs.path(), "node-new", LOCAL);
    let steps: [&dyn Fn(); 3] = [
        &|| std::fs::write(&bundle, format!("{}{}", old.pem, new.pem)).unwrap(),
        &|| {
            std::fs::write(&leaf.cert, &new_leaf.cert_pem).unwrap();
            std::fs::write(&leaf.key, &new_leaf.key_pem).unwrap();
        },
        &|| std::fs::write(&bundle, &new.pem).unwrap(),
    ];
    for (k, step) in steps.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        step();
        for n in &cluster.nodes {
            n.hangup().unwrap();
        }
        for n in &cluster.nodes {
            n.wait_logged(RELOADED, k + 1, Duration::from_secs(30)).await.unwrap();
        }
    }
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.send(true).unwrap();
    let (acked, forwarded, failures) = load.await.unwrap();
    assert!(failures.is_empty(), "{} appends failed across the rotation: {failures:?}\n{}", failures.len(), cluster.logs());
    assert!(acked > 20 && forwarded > 0, "too little load to judge: {acked} appends, {forwarded} forwarded");

    // The old CA's certificate is refused at node-01's handshake now.
    let stale = match channel(&cluster.nodes[0].api, Some(grpc_tls(&both, Some(&leaf)))).await {
        Ok(c) => JournalClient::new(c).append(append("ca-x", "r-x", true)).await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(stale.is_err(), "a certificate of the removed CA was still taken");

    // node-01 must connect to node-02 again: it presents its new
    // certificate and trusts only the new CA, as it read them last.
    let restarted = &mut cluster.nodes[1];
    assert!(restarted.terminate(Duration::from_secs(60)).unwrap().success(), "{}", restarted.log_tail(20));
    restarted.start().unwrap();
    restarted.wait_ready(Duration::from_secs(60)).await.unwrap();
    let mut via_first = JournalClient::new(channel(&cluster.nodes[0].api, Some(grpc_tls(&new, None))).await.unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = String::new();
    let mut i = 0;
    loop {
        i += 1;
        match via_first.append(append(&format!("ca-{}", i % 8), &format!("after-{i}"), false)).await {
            Ok(a) if a.get_ref().holder == names[1] => break,
            Ok(_) => {}
            Err(e) => last = e.to_string(),
        }
        assert!(
            Instant::now() < deadline,
            "node-01 forwarded nothing to the restarted node-02; last error: {last}\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for node in &mut cluster.nodes {
        let status = node.terminate(Duration::from_secs(60)).unwrap();
        assert!(status.success(), "{}: {status}\n{}", node.name, node.log_tail(20));
    }
    cluster.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tls_node_serves_grpc_and_http_over_tls_only() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, other_ca) = (Ca::new(dir.path(), "ca"), Ca::new(dir.path(), "other-ca"));
    let leaf = ca.issue(dir.path(), "node", LOCAL);
    let mut node = standalone(dir.path(), "127.0.0.1", https_tls(&ca, None), |s| set_tls(s, &leaf));
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();

    let mut journal = JournalClient::new(channel(&node.api, Some(grpc_tls(&ca, None))).await.unwrap());
    let ack = journal.append(append("tls-s", "r-1", false)).await.unwrap().into_inner();
    assert_eq!(ack.sequence, 1);
    let (code, health) = https_get(&node.metrics, "/health", None, &https_tls(&ca, None)).await.unwrap();
    assert_eq!(code, 200, "{health}");

    // A plaintext client gets no answer from either listener.
    let plain = match channel(&node.api, None).await {
        Ok(c) => JournalClient::new(c).append(append("tls-s", "r-2", false)).await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(plain.is_err(), "a plaintext gRPC call was served");
    let plain_http = http_get(&node.metrics, "/readyz", None).await;
    assert!(!matches!(plain_http, Ok((200, _))), "plaintext HTTP was served: {plain_http:?}");
    // A client trusting another CA does not accept the node's certificate.
    assert!(channel(&node.api, Some(grpc_tls(&other_ca, None))).await.is_err(), "a certificate of another CA was trusted");
    assert!(https_get(&node.metrics, "/readyz", None, &https_tls(&other_ca, None)).await.is_err());

    // The CLI, with --ca, and with CHITIN_CA.
    let ca_file = ca.file.to_str().unwrap();
    let (ok, out) =
        chitin(&["--ca", ca_file, "journal", "append", "--node", &node.api, "--stream", "tls-s", "--payload", "x"], &[]);
    assert!(ok, "{out}");
    let (ok, out) = chitin(&["journal", "read", "--node", &node.api, "--stream", "tls-s"], &[("CHITIN_CA", ca_file)]);
    assert!(ok && out.contains('x'), "{out}");
    let (ok, out) = chitin(&["journal", "read", "--node", &format!("https://{}", node.api), "--stream", "tls-s"], &[]);
    assert!(!ok && out.contains("--ca") && out.contains("CHITIN_CA"), "{out}");
    let other = other_ca.file.to_str().unwrap();
    let (ok, out) = chitin(&["--ca", other, "journal", "read", "--node", &node.api, "--stream", "tls-s"], &[]);
    assert!(!ok && out.contains("TLS failed"), "{out}");
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(20));
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_client_ca_only_clients_with_a_certificate_are_served() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, clients) = (Ca::new(dir.path(), "ca"), Ca::new(dir.path(), "clients"));
    let leaf = ca.issue(dir.path(), "node", LOCAL);
    let client = clients.issue(dir.path(), "client", &["client.example"]);
    let stranger = Ca::new(dir.path(), "stranger").issue(dir.path(), "stranger", &["stranger.example"]);

    // TLS alone does not open a reachable listener without tokens…
    let (ok, out) = {
        let mut s = node_settings::standalone(dir.path().join("refused"), "0.0.0.0:0", "0.0.0.0:0");
        set_tls(&mut s, &leaf);
        let path = dir.path().join("refused.toml");
        node_settings::write(&path, &s).unwrap();
        chitin(&["node", "--settings", path.to_str().unwrap()], &[])
    };
    assert!(!ok && out.contains("tls.client_ca_file"), "{out}");
    // …mutual TLS does.
    let mut node = standalone(dir.path(), "0.0.0.0", https_tls(&ca, Some(&client)), |s| {
        set_tls(s, &leaf);
        s.tls.client_ca_file = Some(clients.file.clone());
    });
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();

    let served = JournalClient::new(channel(&node.api, Some(grpc_tls(&ca, Some(&client)))).await.unwrap())
        .append(append("mtls", "r-1", false))
        .await;
    assert!(served.is_ok(), "{served:?}");
    for (who, identity) in [("no certificate", None), ("a certificate of another CA", Some(&stranger))] {
        let refused = match channel(&node.api, Some(grpc_tls(&ca, identity))).await {
            Ok(c) => JournalClient::new(c).append(append("mtls", "r-2", false)).await.map(|_| ()).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        assert!(refused.is_err(), "a client with {who} was served");
        let http = https_get(&node.metrics, "/readyz", None, &https_tls(&ca, identity)).await;
        assert!(!matches!(http, Ok((200, _))), "HTTP served a client with {who}: {http:?}");
    }
    let (code, _) = https_get(&node.metrics, "/health", None, &https_tls(&ca, Some(&client))).await.unwrap();
    assert_eq!(code, 200);

    // The CLI presents --cert and --key, or CHITIN_CERT and CHITIN_KEY.
    let (ca_file, cert, key) = (ca.file.to_str().unwrap(), client.cert.to_str().unwrap(), client.key.to_str().unwrap());
    let args = ["journal", "read", "--node", &node.api, "--stream", "mtls"];
    let (ok, out) = chitin(&[&["--ca", ca_file, "--cert", cert, "--key", key][..], &args].concat(), &[]);
    assert!(ok, "{out}");
    let (ok, out) = chitin(&args, &[("CHITIN_CA", ca_file), ("CHITIN_CERT", cert), ("CHITIN_KEY", key)]);
    assert!(ok, "{out}");
    let (ok, out) = chitin(&args, &[("CHITIN_CA", ca_file)]);
    assert!(!ok && out.contains("client_ca_file") && out.contains("--cert"), "{out}");
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(20));
}

#[tokio::test(flavor = "multi_thread")]
async fn peers_call_each_other_over_mutual_tls_and_strangers_cannot_forward() {
    let certs = tempfile::tempdir().unwrap();
    let ca = Ca::new(certs.path(), "cluster-ca");
    let leaf = ca.issue(certs.path(), "node", LOCAL);
    // Another CA's node certificate, for a caller that is no peer.
    let outsider = Ca::new(certs.path(), "outsider-ca").issue(certs.path(), "outsider", LOCAL);
    let mut cluster = tls_cluster(&ca, None, |s| {
        set_tls(s, &leaf);
        s.tls.peer_ca_file = Some(ca.file.clone());
    })
    .await;
    let api: Vec<String> = cluster.nodes.iter().map(|n| n.api.clone()).collect();
    assert_forwards(&cluster, &ca, None).await;

    // No certificate, no peer token: neither `forwarded` nor the Peer service.
    let mut journal = JournalClient::new(channel(&api[0], Some(grpc_tls(&ca, None))).await.unwrap());
    let e = journal.append(append("s-x", "r-x", true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("[tls] peer_ca_file"), "{}", e.message());
    let notice =
        proto::OwnershipNotice { shard: "x".into(), epoch: 1, holder_uuid: uuid::Uuid::nil().to_string(), holder: "x".into() };
    // Stamped with this release's protocol, as nodes' calls are, so that
    // the refusal is the guard's and not the protocol check's.
    let stamped = InterceptedService::new(channel(&api[0], Some(grpc_tls(&ca, None))).await.unwrap(), BearerAuth::new(None));
    let e = PeerClient::new(stamped).notice(notice).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    // A certificate of another CA does not get through the handshake.
    let outsider = match channel(&api[0], Some(grpc_tls(&ca, Some(&outsider)))).await {
        Ok(c) => JournalClient::new(c).append(append("s-y", "r-y", true)).await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    assert!(outsider.is_err(), "a node certificate of another CA was taken for a peer's");
    // A node certificate of the cluster is a peer's credential.
    let mut peer = JournalClient::new(channel(&api[0], Some(grpc_tls(&ca, Some(&leaf)))).await.unwrap());
    match peer.append(append("s-1", "r-z", true)).await {
        Ok(_) => {}
        // Not the holder: refused as a redirect, never as unauthenticated.
        Err(e) => assert!(!matches!(e.code(), tonic::Code::Unauthenticated | tonic::Code::PermissionDenied), "{e:?}"),
    }
    for node in &mut cluster.nodes {
        let status = node.terminate(Duration::from_secs(60)).unwrap();
        assert!(status.success(), "{}: {status}\n{}", node.name, node.log_tail(20));
    }
    cluster.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn under_mutual_tls_peers_still_call_each_other_and_clients_are_no_peers() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, clients) = (Ca::new(certs.path(), "cluster-ca"), Ca::new(certs.path(), "clients-ca"));
    let leaf = ca.issue(certs.path(), "node", LOCAL);
    let client = clients.issue(certs.path(), "client", &["client.example"]);
    let mut cluster = tls_cluster(&ca, Some(&client), |s| {
        set_tls(s, &leaf);
        s.tls.peer_ca_file = Some(ca.file.clone());
        s.tls.client_ca_file = Some(clients.file.clone());
    })
    .await;
    // Each node requires a certificate of the client CA or of the cluster
    // CA: the peers' node certificates get through.
    assert_forwards(&cluster, &ca, Some(&client)).await;
    // A client certificate is no peer's.
    let mut journal = JournalClient::new(channel(&cluster.nodes[0].api, Some(grpc_tls(&ca, Some(&client)))).await.unwrap());
    let e = journal.append(append("s-x", "r-x", true)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    for node in &mut cluster.nodes {
        let status = node.terminate(Duration::from_secs(60)).unwrap();
        assert!(status.success(), "{}: {status}\n{}", node.name, node.log_tail(20));
    }
    cluster.teardown().await.unwrap();
}

/// Two TLS cluster nodes on a fresh PostgreSQL database with `edit`
/// applied, started, probed and called as a client presenting `identity`;
/// every shard held.
async fn tls_cluster(ca: &Ca, identity: Option<&Leaf>, edit: impl Fn(&mut Settings)) -> Cluster {
    let mut cluster = Cluster::new(Dialect::Postgres, 2, 4, 0, |_, s| edit(s)).await.unwrap();
    let probe = https_tls(ca, identity);
    let nodes = std::mem::take(&mut cluster.nodes);
    cluster.nodes = nodes.into_iter().map(|n| n.with_https_probe(probe.clone())).collect();
    for node in &mut cluster.nodes {
        node.start().unwrap();
    }
    for k in 0..cluster.nodes.len() {
        let ready = cluster.nodes[k].wait_ready(Duration::from_secs(60)).await;
        ready.with_context(|| cluster.logs()).unwrap();
    }
    all_held(&cluster.nodes[0].api, ca, identity, Duration::from_secs(60)).await.with_context(|| cluster.logs()).unwrap();
    cluster
}

/// Appends through both nodes: some are forwarded, which only works when
/// the nodes' calls to each other get through.
async fn assert_forwards(cluster: &Cluster, ca: &Ca, identity: Option<&Leaf>) {
    let mut forwarded = 0;
    for i in 0..40 {
        let via = i % 2;
        let mut journal = JournalClient::new(channel(&cluster.nodes[via].api, Some(grpc_tls(ca, identity))).await.unwrap());
        let ack =
            journal.append(append(&format!("s-{i}"), &format!("r-{i}"), false)).await.with_context(|| cluster.logs()).unwrap();
        forwarded += usize::from(ack.into_inner().holder != cluster.nodes[via].name);
    }
    assert!(forwarded > 0, "no append was forwarded; the peers never called each other");
}

/// Waits until every shard is held, asking the node at `addr` over TLS.
async fn all_held(addr: &str, ca: &Ca, identity: Option<&Leaf>, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(c) = channel(addr, Some(grpc_tls(ca, identity))).await
            && let Ok(s) = AdminClient::new(c).status(proto::StatusRequest {}).await
        {
            let s = s.into_inner();
            if s.unowned.is_empty() && !s.leases.is_empty() && s.nodes.len() == 2 {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("shards still unowned after {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_uses_postgres_and_redis_over_verified_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, wrong) = (Ca::new(dir.path(), "store-ca"), Ca::new(dir.path(), "wrong-ca"));
    let server = ca.issue(dir.path(), "server", LOCAL);
    let pg = PrivatePostgres::start_tls(dir.path(), &server.cert, &server.key).unwrap();
    let redis = PrivateRedis::start_tls(dir.path(), &server.cert, &server.key).unwrap();
    assert!(redis.url("127.0.0.1").starts_with("rediss://"));

    let ports = free_ports(2).unwrap();
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let config = dir.path().join("cluster_config.json");
    // Three nodes in the config, as every config must have; one runs.
    let others: Vec<(String, String)> =
        (2..=3).map(|i| (format!("tls-0{i}"), format!("127.0.0.1:{}", free_port().unwrap()))).collect();
    let nodes = [vec![("tls-01".to_string(), api.clone())], others].concat();
    std::fs::write(&config, cluster_config(&nodes, 2)).unwrap();
    let namespace = format!("chitin-tls-{}", uuid::Uuid::new_v4().simple());
    let redis_url = redis.url("127.0.0.1");
    let pg_url = pg.url("127.0.0.1");
    let shared = ClusterShared { redis_url: &redis_url, namespace: &namespace, database_url: &pg_url, ttl: TTL, renew: RENEW };
    let me = ClusterNode {
        name: "tls-01",
        api: &api,
        metrics: &metrics,
        data_dir: dir.path().join("data"),
        config_file: Some(&config),
    };
    let settings = dir.path().join("tls-01.toml");
    let write = |db_ca: &Path, redis_ca: &Path| {
        let mut s = node_settings::cluster_node(&me, &shared);
        s.database.ca_file = Some(db_ca.to_owned());
        s.cluster.redis_ca_file = Some(redis_ca.to_owned());
        node_settings::write(&settings, &s).unwrap();
    };

    write(&ca.file, &ca.file);
    let mut node = NodeProc::new(CHITIN, "tls-01", api.clone(), metrics.clone(), settings.clone(), dir.path().join("tls-01.log"));
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.with_context(|| node.log_text()).unwrap();
    let mut journal = JournalClient::new(channel(&api, None).await.unwrap());
    journal.append(append("over-tls", "r-1", false)).await.with_context(|| node.log_text()).unwrap();
    // The registry lives in Redis: an instance seen there went over TLS.
    wait_for_instances(&metrics, Duration::from_secs(30)).await.with_context(|| node.log_text()).unwrap();
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success(), "{}", node.log_tail(20));

    for (db_ca, redis_ca, store, key) in [
        (&wrong.file, &ca.file, "TLS to the database failed", "database.ca_file"),
        (&ca.file, &wrong.file, "TLS to Redis failed", "cluster.redis_ca_file"),
    ] {
        write(db_ca, redis_ca);
        let (ok, out) = chitin(&["node", "--settings", settings.to_str().unwrap()], &[]);
        assert!(!ok, "the node started with the wrong {key}:\n{out}");
        assert!(out.contains(store) && out.contains(key) && out.contains("UnknownIssuer"), "{out}");
    }
}

/// Waits until `/health` counts a live instance in the cluster (Redis).
async fn wait_for_instances(metrics: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let (_, body) = http_get(metrics, "/health", None).await?;
        let health: serde_json::Value = serde_json::from_str(&body)?;
        if health["cluster"]["active_instances"].as_u64().is_some_and(|n| n >= 1) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("no instance in Redis after {within:?}: {health}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
