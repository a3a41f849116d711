//! Dialling a node's gRPC API from the CLI.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use chitin::security::Plane;
use chitin::security::auth::token_from_env;
use chitin::security::tls::{self, ClientTls, ClientTlsKeys, NodeChannel};
use chitin::upgrade::wire::BearerAuth;
pub use chitin_client::Nodes;
use tonic::service::interceptor::InterceptedService;

/// Where the CLI finds a node unless told otherwise.
pub const DEFAULT_NODE: &str = "127.0.0.1:50051";

/// `--node`: the gRPC addresses of the nodes to talk to, tried in order.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeAddr {
    /// Nodes' gRPC addresses (host:port, or http:// or https:// URLs), comma-separated; a call fails over
    /// to the next when one cannot be reached. Default: `CHITIN_NODE`, else
    /// 127.0.0.1:50051.
    #[arg(long = "node", env = "CHITIN_NODES", value_name = "ADDR[,ADDR...]", default_value = default_nodes())]
    pub node: Nodes,
}

/// `CHITIN_NODE` (one address, as before `CHITIN_NODES`) or [`DEFAULT_NODE`].
pub fn default_nodes() -> &'static str {
    static DEFAULT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DEFAULT.get_or_init(|| std::env::var("CHITIN_NODE").ok().filter(|v| !v.is_empty()).unwrap_or(DEFAULT_NODE.into()))
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
        .map_err(|e| {
            anyhow::anyhow!("cannot reach the node at {address}: {}; is `chitin node` running there?", tls::connect_failure(&e))
        })?;
    Ok(NodeChannel::new(channel, tls.as_ref()))
}

pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().enable_all().build()?)
}

/// A channel to the first of `nodes` that answers, whose calls carry the
/// plane's token from the environment (`CHITIN_ADMIN_TOKEN`,
/// `CHITIN_CLIENT_TOKEN`), when set.
pub async fn signed(nodes: &Nodes, plane: Plane) -> anyhow::Result<Signed> {
    let auth = BearerAuth::new(token_from_env(plane).as_deref());
    let (_, channel) = nodes.first_reachable(|a| async move { connect(&a).await }).await?;
    Ok(InterceptedService::new(channel, auth))
}

/// A journal client of `nodes` (routing, failover with the same request id),
/// dialling as [`connect`] does and sending `CHITIN_CLIENT_TOKEN`.
pub fn journal(nodes: &Nodes, options: chitin_client::Options) -> anyhow::Result<chitin_client::Client> {
    let dial: chitin_client::Dial = std::sync::Arc::new(|a: String| {
        Box::pin(async move { connect(&a).await.map(chitin_client::boxed).map_err(|e| e.to_string()) })
    });
    Ok(chitin_client::Client::builder(nodes.clone()).options(options).token(token_from_env(Plane::Client)).dial(dial).build()?)
}

/// A channel signed with a plane's token.
pub type Signed = InterceptedService<NodeChannel, BearerAuth>;

/// The Admin service of the first of `nodes` that answers, sending
/// `CHITIN_ADMIN_TOKEN` when it is set.
pub async fn admin(nodes: &Nodes) -> anyhow::Result<chitin::rollout::exec::Admin> {
    Ok(chitin::proto::admin_client::AdminClient::new(signed(nodes, Plane::Admin).await?))
}
