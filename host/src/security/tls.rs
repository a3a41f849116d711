//! TLS with rustls and ring: the node's listeners, its calls to its peers,
//! the CLI's calls to a node, and what a TLS failure to a store means.
//!
//! - [`NodeTls`]: `[tls]` loaded at start: the server configs of the
//!   gRPC (`h2`) and HTTP (`http/1.1`) listeners, with client certificates
//!   required when `tls.client_ca_file` is set (mutual TLS), requested when
//!   only `tls.peer_ca_file` is (so that peers can present theirs);
//! - [`PeerCa`]: whether a caller's certificate was signed by the cluster
//!   CA, which makes it a peer (see `auth::Guard`);
//! - [`ClientTls`]: what a client (a node calling a peer, the CLI) trusts
//!   and presents; [`NodeChannel`]: the CLI's channel, whose failures say
//!   what TLS refused;
//! - [`tls_cause`]: the TLS error inside a store's connection error, so that
//!   a wrong CA is reported as such instead of as an outage.
//!
//! Every file is read again on SIGHUP ([`NodeTls::reload`], and the
//! peers' [`ClientTls`] through `Peers::set_tls`): each handshake takes
//! the current certificate and CA bundles, and connections already
//! established keep theirs (docs/security.md).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rustls::RootCertStore;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::ClientCertVerifier;
use rustls::server::{ClientHello, ResolvesServerCert, ServerConfig, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;

use crate::settings::TlsSettings;

/// Installs ring as the process's rustls crypto provider. sqlx and redis
/// build their client configs from the process default; called once, first
/// thing in `main`. A second call (a provider already installed) is a no-op.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The provider of every config built here (independent of the process
/// default, so that library users and tests need not install one).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why TLS material could not be used. Each names the setting.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read `{key}` = {path}: {source}; point it at a readable PEM file, or unset it", path = .path.display())]
    Read { key: &'static str, path: PathBuf, source: std::io::Error },
    #[error("`{key}` = {path} holds no PEM {what} (a `-----BEGIN {label}-----` block){detail}", path = .path.display())]
    NoPem { key: &'static str, path: PathBuf, what: &'static str, label: &'static str, detail: String },
    #[error("`{key}` = {path}: {reason}", path = .path.display())]
    Unusable { key: &'static str, path: PathBuf, reason: String },
    #[error("`tls.cert_file` and `tls.key_file` cannot be used together: {0}; the key must be the certificate's own")]
    Pair(String),
}

fn read(key: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { key, path: path.to_owned(), source })
}

/// Every certificate of a PEM file (at least one).
pub fn certificates(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(key, path)?;
    let no_pem =
        |detail: String| TlsError::NoPem { key, path: path.to_owned(), what: "certificate", label: "CERTIFICATE", detail };
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<Result<Vec<_>, _>>().map_err(|e| no_pem(format!(": {e}")))?;
    if certs.is_empty() {
        return Err(no_pem(String::new()));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn private_key(key: &'static str, path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(key, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoPem {
        key,
        path: path.to_owned(),
        what: "private key",
        label: "PRIVATE KEY",
        detail: format!(": {e}"),
    })
}

/// The trust anchors of the PEM files `files` (each a `(key, path)`).
fn roots(files: &[(&'static str, &Path)]) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for &(key, path) in files {
        for cert in certificates(key, path)? {
            store.add(cert).map_err(|e| TlsError::Unusable {
                key,
                path: path.to_owned(),
                reason: format!("not a usable CA certificate: {e}"),
            })?;
        }
    }
    Ok(store)
}

/// `[tls]` loaded: what the listeners serve and whom the node calls a peer.
/// Every file is read again by [`NodeTls::reload`], all or nothing.
#[derive(Clone)]
pub struct NodeTls {
    /// The files, read again on reload.
    settings: TlsSettings,
    /// The listeners' configs, swapped whole by a reload: each handshake
    /// takes the ones current when it starts.
    configs: Arc<arc_swap::ArcSwap<ServerConfigs>>,
    peer_ca: Option<PeerCa>,
}

/// The gRPC (`h2`) and HTTP (`http/1.1`) listeners' configs of one reading
/// of the files.
struct ServerConfigs {
    grpc: Arc<ServerConfig>,
    http: Arc<ServerConfig>,
}

/// A server certificate that never changes within one [`ServerConfigs`].
#[derive(Debug)]
struct Fixed(Arc<CertifiedKey>);

impl ResolvesServerCert for Fixed {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The certificate chain and key of these files, checked to belong together.
fn certified(cert_file: &Path, key_file: &Path) -> Result<CertifiedKey, TlsError> {
    let chain = certificates("tls.cert_file", cert_file)?;
    let key = private_key("tls.key_file", key_file)?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| TlsError::Pair(e.to_string()))
}

impl std::fmt::Debug for NodeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeTls").field("peer_ca", &self.peer_ca.is_some()).finish_non_exhaustive()
    }
}

/// One listener's config as it is now (see [`NodeTls::grpc`]).
pub type LiveConfig = Arc<dyn Fn() -> Arc<ServerConfig> + Send + Sync>;

impl NodeTls {
    /// Reads the files of `[tls]`; `None` while TLS is off (no `cert_file`).
    /// The settings rules have checked which keys go together.
    pub fn load(s: &TlsSettings) -> Result<Option<NodeTls>, TlsError> {
        let Some((configs, peer_verifier)) = read_files(s)? else {
            return Ok(None);
        };
        Ok(Some(NodeTls {
            settings: s.clone(),
            configs: Arc::new(arc_swap::ArcSwap::from_pointee(configs)),
            peer_ca: peer_verifier.map(PeerCa::new),
        }))
    }

    /// Reads every file of `[tls]` again (the certificate and key, the
    /// client and cluster CA bundles) and serves them from the next
    /// handshake on; whom the node calls a peer follows the new cluster
    /// CA at once. A file that cannot be used (unreadable, not PEM, a key
    /// of another certificate) is refused and everything current stays.
    /// Connections established keep theirs.
    pub fn reload(&self) -> Result<(), TlsError> {
        let (configs, peer_verifier) = read_files(&self.settings)?.expect("TLS stays on: the files' names do not change");
        if let (Some(ca), Some(verifier)) = (&self.peer_ca, peer_verifier) {
            ca.replace(verifier);
        }
        self.configs.store(Arc::new(configs));
        Ok(())
    }

    /// The gRPC listener's config (ALPN `h2`), current at each call.
    pub fn grpc(&self) -> LiveConfig {
        let configs = self.configs.clone();
        Arc::new(move || configs.load().grpc.clone())
    }

    /// The HTTP listener's config (ALPN `http/1.1`), current at each call.
    pub fn http(&self) -> LiveConfig {
        let configs = self.configs.clone();
        Arc::new(move || configs.load().http.clone())
    }

    /// The cluster CA, when `tls.peer_ca_file` is set.
    pub fn peer_ca(&self) -> Option<PeerCa> {
        self.peer_ca.clone()
    }
}

/// The listeners' configs and the cluster CA's verifier from the files of
/// `s`; `None` while TLS is off.
#[allow(clippy::type_complexity)]
fn read_files(s: &TlsSettings) -> Result<Option<(ServerConfigs, Option<Arc<dyn ClientCertVerifier>>)>, TlsError> {
    let (Some(cert_file), Some(key_file)) = (&s.cert_file, &s.key_file) else {
        return Ok(None);
    };
    let certificate = Arc::new(Fixed(Arc::new(certified(cert_file, key_file)?)));
    let peer_verifier = s.peer_ca_file.as_deref().map(peer_verifier).transpose()?;
    let mut callers: Vec<(&'static str, &Path)> = Vec::new();
    if let Some(f) = &s.client_ca_file {
        callers.push(("tls.client_ca_file", f));
    }
    if let Some(f) = &s.peer_ca_file {
        callers.push(("tls.peer_ca_file", f));
    }
    let required = s.client_ca_file.is_some();
    let verifier = |optional_for_peers: bool| -> Result<Option<Arc<dyn ClientCertVerifier>>, TlsError> {
        if !(required || optional_for_peers && peer_verifier.is_some()) {
            return Ok(None);
        }
        let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots(&callers)?), provider());
        let builder = if required { builder } else { builder.allow_unauthenticated() };
        let (key, path) = callers[0];
        builder.build().map(Some).map_err(|e| TlsError::Unusable { key, path: path.to_owned(), reason: e.to_string() })
    };
    // Peers call the gRPC listener only, so only it asks for a
    // certificate when client certificates are not required.
    let config = |verifier: Option<Arc<dyn ClientCertVerifier>>, alpn: &[u8]| -> Result<Arc<ServerConfig>, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Pair(e.to_string()))?;
        let builder = match verifier {
            Some(v) => builder.with_client_cert_verifier(v),
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_cert_resolver(certificate.clone());
        config.alpn_protocols = vec![alpn.to_vec()];
        Ok(Arc::new(config))
    };
    let configs = ServerConfigs { grpc: config(verifier(true)?, b"h2")?, http: config(verifier(false)?, b"http/1.1")? };
    Ok(Some((configs, peer_verifier)))
}

/// The verifier of certificates signed by the CAs of `tls.peer_ca_file`.
fn peer_verifier(path: &Path) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let roots = roots(&[("tls.peer_ca_file", path)])?;
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider()).build().map_err(|e| TlsError::Unusable {
        key: "tls.peer_ca_file",
        path: path.to_owned(),
        reason: e.to_string(),
    })
}

/// The cluster CA: a caller whose certificate chains to it is a node of the
/// cluster. Verified once per certificate (a peer's calls come on few,
/// long-lived connections, each carrying the same certificate).
#[derive(Clone)]
pub struct PeerCa {
    /// The verifier and the leaf certificates it already verified (the
    /// handshake checks validity dates on every connection; this only
    /// remembers which CA signed), swapped together when the CA is read
    /// again: every clone sees the new CA.
    current: Arc<Mutex<Verified>>,
}

struct Verified {
    verifier: Arc<dyn ClientCertVerifier>,
    leaves: HashSet<Vec<u8>>,
}

impl std::fmt::Debug for PeerCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PeerCa")
    }
}

/// More distinct peer certificates than this in one process is churn; the
/// memory is cleared rather than grown.
const MAX_REMEMBERED: usize = 1024;

impl PeerCa {
    /// Reads `tls.peer_ca_file`.
    pub fn load(path: &Path) -> Result<PeerCa, TlsError> {
        Ok(PeerCa::new(peer_verifier(path)?))
    }

    fn new(verifier: Arc<dyn ClientCertVerifier>) -> PeerCa {
        PeerCa { current: Arc::new(Mutex::new(Verified { verifier, leaves: HashSet::new() })) }
    }

    /// The CA read again: certificates are judged by `verifier` from now on.
    fn replace(&self, verifier: Arc<dyn ClientCertVerifier>) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Verified { verifier, leaves: HashSet::new() };
    }

    /// Whether `chain` (leaf first, as the handshake received it) chains
    /// to the cluster CA.
    pub fn verifies(&self, chain: &[CertificateDer<'_>]) -> bool {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return false;
        };
        let mut known = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if known.leaves.contains(leaf.as_ref()) {
            return true;
        }
        let ok = known.verifier.verify_client_cert(leaf, intermediates, UnixTime::now()).is_ok();
        if ok {
            if known.leaves.len() >= MAX_REMEMBERED {
                known.leaves.clear();
            }
            known.leaves.insert(leaf.to_vec());
        }
        ok
    }
}

/// What a client trusts (the CA of the nodes' certificates) and presents
/// (a certificate and key, for mutual TLS), when it dials a node.
#[derive(Clone, Debug)]
pub struct ClientTls {
    config: tonic::transport::ClientTlsConfig,
    /// Whether a client certificate is presented.
    presents_certificate: bool,
}

/// Where a client's TLS material comes from, for the error messages: the
/// settings keys of a node, the flags of the CLI.
#[derive(Clone, Copy, Debug)]
pub struct ClientTlsKeys {
    pub ca: &'static str,
    pub cert: &'static str,
    pub key: &'static str,
}

impl ClientTls {
    /// Reads the CA and, when given, the certificate and key (both or none).
    pub fn load(keys: ClientTlsKeys, ca: &Path, identity: Option<(&Path, &Path)>) -> Result<ClientTls, TlsError> {
        use tonic::transport::{Certificate, ClientTlsConfig, Identity};
        // Parsed here first so that a bad file is reported with its key;
        // tonic would only say "error parsing TLS certificate".
        roots(&[(keys.ca, ca)])?;
        let mut config = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(keys.ca, ca)?));
        if let Some((cert, key)) = identity {
            certificates(keys.cert, cert)?;
            private_key(keys.key, key)?;
            config = config.identity(Identity::from_pem(read(keys.cert, cert)?, read(keys.key, key)?));
        }
        Ok(ClientTls { config, presents_certificate: identity.is_some() })
    }

    /// A node's client side from `[tls]` (`peer_ca_file`, `cert_file`,
    /// `key_file`), when the node calls its peers over TLS.
    pub fn for_peers(s: &TlsSettings) -> Result<Option<ClientTls>, TlsError> {
        let (Some(ca), Some(cert), Some(key)) = (&s.peer_ca_file, &s.cert_file, &s.key_file) else {
            return Ok(None);
        };
        let keys = ClientTlsKeys { ca: "tls.peer_ca_file", cert: "tls.cert_file", key: "tls.key_file" };
        ClientTls::load(keys, ca, Some((cert, key))).map(Some)
    }
}

/// The endpoint of the node at `address`: a URL as given, else `host:port`
/// over `https` when `tls` is given and `http` when not.
pub fn endpoint(address: &str, tls: Option<&ClientTls>) -> Result<tonic::transport::Endpoint, String> {
    let uri = if address.contains("://") {
        address.to_owned()
    } else if tls.is_some() {
        format!("https://{address}")
    } else {
        format!("http://{address}")
    };
    let endpoint = tonic::transport::Endpoint::from_shared(uri).map_err(|e| format!("`{address}` is not a node address: {e}"))?;
    match tls {
        Some(t) if address.starts_with("https://") || !address.contains("://") => {
            endpoint.tls_config(t.config.clone()).map_err(|e| format!("TLS to {address}: {e}"))
        }
        None if address.starts_with("https://") => {
            Err(format!("{address} is an https:// address, but no CA to verify the node was given: pass --ca (or set CHITIN_CA)"))
        }
        _ => Ok(endpoint),
    }
}

/// What to check when TLS to a node failed.
const CLIENT_TLS_HINT: &str = "--ca (CHITIN_CA) must hold the CA of the node's certificate, whose names must include the \
     address's host, and a node with [tls] client_ca_file needs --cert and --key (CHITIN_CERT, CHITIN_KEY) of a \
     certificate its client CA signed";

/// A channel to a node whose failures say what TLS refused, with what to
/// check: tonic reports every transport failure as "transport error",
/// hiding the cause.
#[derive(Clone, Debug)]
pub struct NodeChannel {
    channel: tonic::transport::Channel,
    /// Over TLS without a client certificate.
    without_certificate: bool,
}

impl NodeChannel {
    /// `channel`, made with `tls` (or without TLS).
    pub fn new(channel: tonic::transport::Channel, tls: Option<&ClientTls>) -> NodeChannel {
        NodeChannel { channel, without_certificate: tls.is_some_and(|t| !t.presents_certificate) }
    }

    /// The status tonic would make of `e`, its message naming the TLS
    /// failure when there is one (the code stays tonic's).
    fn explain(&self, e: tonic::transport::Error) -> tonic::Status {
        let cause = tls_cause(&e);
        let chain = error_chain(&e);
        let status = tonic::Status::from_error(Box::new(e));
        match cause {
            Some(cause) => tonic::Status::new(status.code(), format!("TLS failed: {cause}; {CLIENT_TLS_HINT}")),
            // A node that requires client certificates refuses a client
            // without one after the handshake (TLS 1.3): the client sees
            // its connection closed or reset under the first call, the
            // node's alert read or not.
            None if self.without_certificate && matches!(status.code(), tonic::Code::Cancelled | tonic::Code::Unknown) => {
                tonic::Status::new(
                    status.code(),
                    format!(
                        "{chain}: the node closed the connection; a node with [tls] client_ca_file (mutual TLS) does \
                         so to a client without a certificate: pass --cert and --key (CHITIN_CERT, CHITIN_KEY)"
                    ),
                )
            }
            None => status,
        }
    }
}

impl tonic::codegen::Service<tonic::codegen::http::Request<tonic::body::Body>> for NodeChannel {
    type Response = tonic::codegen::http::Response<tonic::body::Body>;
    type Error = tonic::Status;
    type Future = tonic::codegen::BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<(), Self::Error>> {
        self.channel.poll_ready(cx).map_err(|e| self.explain(e))
    }

    fn call(&mut self, request: tonic::codegen::http::Request<tonic::body::Body>) -> Self::Future {
        let call = self.channel.call(request);
        let this = self.clone();
        Box::pin(async move { call.await.map_err(|e| this.explain(e)) })
    }
}

/// What a connect error says, TLS failures explained (see [`NodeChannel`]).
pub fn connect_failure(e: &tonic::transport::Error) -> String {
    match tls_cause(e) {
        Some(_) => format!("{} (TLS failed: {CLIENT_TLS_HINT})", error_chain(e)),
        None => error_chain(e),
    }
}

/// An error and its causes, as `a: b: c` (tonic's own message is only
/// "transport error").
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(cause) = next {
        parts.push(cause.to_string());
        next = cause.source();
    }
    parts.join(": ")
}

/// The TLS error inside `error`, if the failure was TLS's (a certificate
/// that does not verify, a handshake the server refused) rather than the
/// network's: its message.
pub fn tls_cause(error: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(t.to_string());
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(t) = io.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(t.to_string());
        }
        next = e.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    #[test]
    fn a_tls_error_is_found_inside_io_errors() {
        let rustls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let io = std::io::Error::new(std::io::ErrorKind::InvalidData, rustls);
        assert_eq!(tls_cause(&io).as_deref(), Some("invalid peer certificate: UnknownIssuer"));
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        assert_eq!(tls_cause(&refused), None);
    }

    #[test]
    fn bad_files_are_named_with_their_key() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let e = certificates("tls.cert_file", &junk).unwrap_err().to_string();
        assert!(e.contains("`tls.cert_file`") && e.contains("holds no PEM certificate"), "{e}");
        let e = certificates("tls.peer_ca_file", &dir.path().join("absent.pem")).unwrap_err().to_string();
        assert!(e.starts_with("cannot read `tls.peer_ca_file`"), "{e}");
        let e = private_key("tls.key_file", &junk).unwrap_err().to_string();
        assert!(e.contains("`tls.key_file`") && e.contains("private key"), "{e}");
    }

    /// A self-signed certificate for 127.0.0.1 and its key, in `dir`.
    fn self_signed(dir: &Path) -> (PathBuf, PathBuf, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()]).unwrap().self_signed(&key).unwrap();
        let (cert_file, key_file) = (dir.join("node.crt"), dir.join("node.key"));
        std::fs::write(&cert_file, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (cert_file, key_file, cert.pem())
    }

    #[tokio::test]
    async fn a_silent_client_holds_up_no_handshake_and_sockets_have_nodelay() {
        let dir = tempfile::tempdir().unwrap();
        let (cert_file, key_file, pem) = self_signed(dir.path());
        let settings = TlsSettings { cert_file: Some(cert_file), key_file: Some(key_file), ..TlsSettings::default() };
        let tls = NodeTls::load(&settings).unwrap().unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let bounds = crate::security::listen::Bounds::metrics(&crate::settings::LimitSettings::default(), Default::default());
        let mut listener = crate::security::listen::Incoming::tls(tcp, bounds, tls.http());

        // Connected first, and never says a word.
        let _silent = TcpStream::connect(addr).await.unwrap();
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(pem.as_bytes()).unwrap()).unwrap();
        let client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let dial = tokio::spawn(async move { connector.connect(name, TcpStream::connect(addr).await.unwrap()).await.unwrap() });
        let accepted = tokio::time::timeout(Duration::from_secs(5), listener.next())
            .await
            .expect("the second client waited for the first")
            .expect("the listener runs");
        assert!(accepted.get_ref().0.tcp().nodelay().unwrap(), "an accepted socket must not run Nagle's algorithm");
        dial.await.unwrap();
    }

    #[test]
    fn endpoints_pick_the_scheme() {
        assert_eq!(endpoint("127.0.0.1:1", None).unwrap().uri().scheme_str(), Some("http"));
        let e = endpoint("https://127.0.0.1:1", None).unwrap_err();
        assert!(e.contains("--ca") && e.contains("CHITIN_CA"), "{e}");
    }
}
