//! Dialling a node's gRPC API from the CLI.

use std::time::Duration;

use chitin::security::auth::token_from_env;
pub use chitin_client::Nodes;
use chitin::security::{BearerAuth, Plane};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Where the CLI finds a node unless told otherwise.
pub const DEFAULT_NODE: &str = "127.0.0.1:50051";

/// `--node`: the gRPC addresses of the nodes to talk to, tried in order.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeAddr {
    /// Nodes' gRPC addresses (host:port), comma-separated; a call fails over
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

pub async fn connect(address: &str) -> anyhow::Result<Channel> {
    let uri = if address.contains("://") { address.to_string() } else { format!("http://{address}") };
    Endpoint::from_shared(uri)?
        .connect_timeout(Duration::from_secs(3))
        .timeout(Duration::from_secs(60))
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot reach the node at {address}: {e}; is `chitin node` running there?"))
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
    let dial: chitin_client::Dial =
        std::sync::Arc::new(|a: String| Box::pin(async move { connect(&a).await.map(chitin_client::boxed).map_err(|e| e.to_string()) }));
    Ok(chitin_client::Client::builder(nodes.clone()).options(options).token(token_from_env(Plane::Client)).dial(dial).build()?)
}

/// A channel signed with a plane's token.
pub type Signed = InterceptedService<Channel, BearerAuth>;

/// The Admin service of the first of `nodes` that answers, sending
/// `CHITIN_ADMIN_TOKEN` when it is set.
pub async fn admin(nodes: &Nodes) -> anyhow::Result<chitin::rollout::exec::Admin> {
    Ok(chitin::proto::admin_client::AdminClient::new(signed(nodes, Plane::Admin).await?))
}
