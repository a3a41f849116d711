//! TLS with rustls (the `ring` provider) for the node's listeners, its
//! node-to-node calls and the CLI.
//!
//! `[tls] cert` and `key` turn TLS on for `api.listen` (gRPC) and
//! `metrics.listen` (HTTP). `[tls] client_ca` makes gRPC mutual: only a
//! caller with a certificate signed by it completes the handshake, and the
//! node shows its own certificate on its calls to peers, whose certificates
//! it verifies against the same CA. The metrics listener asks for a client
//! certificate but does not insist (load balancers probe `/readyz`).
//!
//! PostgreSQL and MySQL take their CA in `database.url` (`sslmode=verify-full
//! &sslrootcert=…`, `ssl-mode=VERIFY_IDENTITY&ssl-ca=…`); Redis takes
//! `rediss://` and `cluster.redis_ca_file` (see `coord::conn`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, ServerTlsConfig};

use crate::settings::TlsSettings;

/// How long a TLS handshake on the metrics listener may take.
const HANDSHAKE: Duration = Duration::from_secs(5);

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read `{key}` = {path}: {source}", path = .path.display())]
    Read { key: &'static str, path: PathBuf, source: std::io::Error },
    #[error("`{key}` = {path} holds no usable PEM {what}: {reason}", path = .path.display())]
    Pem { key: &'static str, path: PathBuf, what: &'static str, reason: String },
    #[error("TLS setup: {0}")]
    Config(String),
}

/// Installs the process's rustls provider (ring) once; later calls do nothing.
pub fn install_provider() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { key, path: path.to_owned(), source })
}

fn certificates(key: &'static str, path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bad = |reason: String| TlsError::Pem { key, path: path.to_owned(), what: "certificate", reason };
    let certs = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>().map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no `BEGIN CERTIFICATE` block".into()));
    }
    Ok(certs)
}

/// The node's TLS material, read once at start.
#[derive(Clone)]
pub struct NodeTls {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
    certs: Vec<CertificateDer<'static>>,
    private_key: Arc<PrivateKeyDer<'static>>,
    ca_certs: Vec<CertificateDer<'static>>,
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key.
        f.debug_struct("NodeTls").field("certs", &self.certs.len()).field("mutual", &self.client_ca.is_some()).finish()
    }
}

impl NodeTls {
    /// The files of `[tls]`, checked as PEM; `None` without a certificate.
    pub fn load(s: &TlsSettings) -> Result<Option<NodeTls>, TlsError> {
        let (Some(cert_path), Some(key_path)) = (&s.cert, &s.key) else { return Ok(None) };
        install_provider();
        let cert = read("tls.cert", cert_path)?;
        let key = read("tls.key", key_path)?;
        let certs = certificates("tls.cert", cert_path, &cert)?;
        let private_key = PrivateKeyDer::from_pem_slice(&key).map_err(|e| TlsError::Pem {
            key: "tls.key",
            path: key_path.clone(),
            what: "private key",
            reason: e.to_string(),
        })?;
        let (client_ca, ca_certs) = match &s.client_ca {
            Some(p) => {
                let pem = read("tls.client_ca", p)?;
                let certs = certificates("tls.client_ca", p, &pem)?;
                (Some(pem), certs)
            }
            None => (None, Vec::new()),
        };
        Ok(Some(NodeTls { cert, key, client_ca, certs, private_key: Arc::new(private_key), ca_certs }))
    }

    /// Whether callers must show a certificate of the client CA.
    pub fn mutual(&self) -> bool {
        self.client_ca.is_some()
    }

    /// The gRPC listener's TLS: mutual when there is a client CA.
    pub fn grpc_server(&self) -> ServerTlsConfig {
        let config = ServerTlsConfig::new().identity(Identity::from_pem(&self.cert, &self.key));
        match &self.client_ca {
            Some(ca) => config.client_ca_root(Certificate::from_pem(ca)),
            None => config,
        }
    }

    /// The metrics listener's TLS: a client certificate is verified when
    /// shown, never required.
    pub fn http_acceptor(&self) -> Result<TlsAcceptor, TlsError> {
        let builder = rustls::ServerConfig::builder();
        let builder = if self.ca_certs.is_empty() {
            builder.with_no_client_auth()
        } else {
            let mut roots = rustls::RootCertStore::empty();
            for c in &self.ca_certs {
                roots.add(c.clone()).map_err(|e| TlsError::Config(format!("tls.client_ca: {e}")))?;
            }
            let verifier = rustls::server::WebPkiClientVerifier::builder(Arc::new(roots))
                .allow_unauthenticated()
                .build()
                .map_err(|e| TlsError::Config(format!("tls.client_ca: {e}")))?;
            builder.with_client_cert_verifier(verifier)
        };
        let mut config = builder
            .with_single_cert(self.certs.clone(), self.private_key.clone_key())
            .map_err(|e| TlsError::Config(format!("tls.cert and tls.key do not go together: {e}")))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(TlsAcceptor::from(Arc::new(config)))
    }

    /// How this node calls a peer: its certificate shown, the peer's
    /// verified against the client CA.
    pub fn peer_client(&self) -> ClientTls {
        ClientTls {
            ca: self.client_ca.clone(),
            identity: Some((self.cert.clone(), self.key.clone())),
        }
    }
}

/// A client's TLS: the CA to verify the node with (the system's roots
/// when none) and the certificate and key to show.
#[derive(Clone, Default)]
pub struct ClientTls {
    pub ca: Option<Vec<u8>>,
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls").field("ca", &self.ca.is_some()).field("identity", &self.identity.is_some()).finish()
    }
}

impl ClientTls {
    /// From PEM files: the CA, and a certificate with its key.
    pub fn from_files(ca: Option<&Path>, cert: Option<&Path>, key: Option<&Path>) -> Result<Option<ClientTls>, TlsError> {
        let ca = ca.map(|p| read("--tls-ca", p)).transpose()?;
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((read("--tls-cert", c)?, read("--tls-key", k)?)),
            (None, None) => None,
            _ => return Err(TlsError::Config("--tls-cert and --tls-key go together (CHITIN_TLS_CERT, CHITIN_TLS_KEY)".into())),
        };
        if ca.is_none() && identity.is_none() {
            return Ok(None);
        }
        install_provider();
        Ok(Some(ClientTls { ca, identity }))
    }

    /// tonic's client config for a node at `host`.
    pub fn tonic(&self, host: &str) -> ClientTlsConfig {
        let mut config = ClientTlsConfig::new().domain_name(host.trim_start_matches('[').trim_end_matches(']'));
        config = match &self.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(ca)),
            None => config.with_native_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            config = config.identity(Identity::from_pem(cert, key));
        }
        config
    }
}

/// The process-wide client TLS of the CLI (`--tls-ca`, `--tls-cert`, `--tls-key`).
static CLI_CLIENT: OnceLock<Option<ClientTls>> = OnceLock::new();

/// Sets the CLI's client TLS; the first call wins.
pub fn set_cli_client(tls: Option<ClientTls>) {
    let _ = CLI_CLIENT.set(tls);
}

/// The CLI's client TLS, if any was set.
pub fn cli_client() -> Option<&'static ClientTls> {
    CLI_CLIENT.get().and_then(Option::as_ref)
}

/// An endpoint for a node at `address` (`host:port` or a URL): `https://`
/// with `tls`, else `http://`.
pub fn endpoint(address: &str, tls: Option<&ClientTls>) -> Result<Endpoint, String> {
    let host_port = address.split_once("://").map_or(address, |(_, rest)| rest);
    let uri = format!("{}://{host_port}", if tls.is_some() { "https" } else { "http" });
    let endpoint = Endpoint::from_shared(uri).map_err(|e| e.to_string())?;
    match tls {
        Some(tls) => {
            let host = host_port.rsplit_once(':').map_or(host_port, |(h, _)| h);
            endpoint.tls_config(tls.tonic(host)).map_err(|e| format!("TLS for {address}: {e}"))
        }
        None => Ok(endpoint),
    }
}

/// The metrics listener with TLS: handshakes run on their own tasks (a slow
/// one holds up no other), bounded by [`HANDSHAKE`]; failed ones are dropped.
pub struct TlsListener {
    accepted: tokio::sync::mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
    local: SocketAddr,
}

impl TlsListener {
    pub fn new(tcp: TcpListener, acceptor: TlsAcceptor) -> std::io::Result<TlsListener> {
        let local = tcp.local_addr()?;
        let (tx, accepted) = tokio::sync::mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, peer) = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                    // The server is gone: stop accepting.
                    _ = tx.closed() => return,
                };
                let _ = stream.set_nodelay(true);
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(TlsListener { accepted, local })
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.accepted.recv().await {
            Some(a) => a,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.local)
    }
}
