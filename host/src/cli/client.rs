//! Dialling a node's gRPC API from the CLI.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use chitin::security::auth::token_from_env;
use chitin::security::tls::{self, ClientTls, ClientTlsKeys, NodeChannel};
use chitin::security::{BearerAuth, Plane};
use tonic::service::interceptor::InterceptedService;

/// Where the CLI finds a node unless told otherwise.
pub const DEFAULT_NODE: &str = "127.0.0.1:50051";

/// `--node`: the gRPC address of the node to talk to.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeAddr {
    /// The node's gRPC address (host:port, or an http:// or https:// URL).
    #[arg(long = "node", env = "CHITIN_NODE", default_value = DEFAULT_NODE)]
    pub node: String,
}

/// TLS to the nodes, for every command that calls one. Given before the
/// command (`chitin --ca ca.pem journal read …`), or in the environment:
/// not global flags, as `config route` has a `--key` of its own.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct TlsArgs {
    /// The CA certificates (PEM) that verify the node's certificate. With
    /// it, a node address without a scheme is dialled over https.
    #[arg(long = "ca", env = "CHITIN_CA")]
    pub ca: Option<PathBuf>,
    /// This client's certificate (PEM), for nodes that require client
    /// certificates ([tls] client_ca_file). Needs --key.
    #[arg(long = "cert", env = "CHITIN_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// The private key (PEM) of --cert.
    #[arg(long = "key", env = "CHITIN_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
}

/// The TLS of this invocation: set once, from the flags, before any call
/// (one process, one set of flags; every command group dials through here).
static TLS: OnceLock<Option<ClientTls>> = OnceLock::new();

/// Reads the files `args` name; call once, before any command runs.
pub fn configure_tls(args: &TlsArgs) -> anyhow::Result<()> {
    let keys = ClientTlsKeys { ca: "--ca", cert: "--cert", key: "--key" };
    let tls = match (&args.ca, &args.cert, &args.key) {
        (None, None, None) => None,
        (None, _, _) => anyhow::bail!("--cert and --key need --ca (CHITIN_CA): the CA that verifies the node"),
        (Some(ca), cert, key) => Some(ClientTls::load(keys, ca, cert.as_deref().zip(key.as_deref()))?),
    };
    let _ = TLS.set(tls);
    Ok(())
}

/// The TLS to dial nodes with, when `--ca` was given.
pub fn tls() -> Option<ClientTls> {
    TLS.get().cloned().flatten()
}

pub async fn connect(address: &str) -> anyhow::Result<NodeChannel> {
    let tls = tls();
    let channel = tls::endpoint(address, tls.as_ref())
        .map_err(|e| anyhow::anyhow!(e))?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(60))
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the node at {address}: {}; is `chitin node` running there?", tls::connect_failure(&e)))?;
    Ok(NodeChannel::new(channel, tls.as_ref()))
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A channel to the node whose calls carry the plane's token from the
/// environment (`CHITIN_ADMIN_TOKEN`, `CHITIN_CLIENT_TOKEN`), when set.
pub async fn signed(address: &str, plane: Plane) -> anyhow::Result<Signed> {
    let auth = BearerAuth::new(token_from_env(plane).as_deref());
    Ok(InterceptedService::new(connect(address).await?, auth))
}

/// A channel signed with a plane's token.
pub type Signed = InterceptedService<NodeChannel, BearerAuth>;

/// The Admin service of a node, sending `CHITIN_ADMIN_TOKEN` when it is set.
pub async fn admin(address: &str) -> anyhow::Result<chitin::rollout::exec::Admin> {
    Ok(chitin::proto::admin_client::AdminClient::new(signed(address, Plane::Admin).await?))
}
