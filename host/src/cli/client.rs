//! Dialling a node's gRPC API from the CLI.

use std::time::Duration;

use chitin::security::auth::token_from_env;
use chitin::security::{BearerAuth, Plane};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Where the CLI finds a node unless told otherwise.
pub const DEFAULT_NODE: &str = "127.0.0.1:50051";

/// `--node`: the gRPC address of the node to talk to.
#[derive(clap::Args, Debug, Clone)]
pub struct NodeAddr {
    /// The node's gRPC address (host:port).
    #[arg(long = "node", env = "CHITIN_NODE", default_value = DEFAULT_NODE)]
    pub node: String,
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

/// A channel to the node whose calls carry the plane's token from the
/// environment (`CHITIN_ADMIN_TOKEN`, `CHITIN_CLIENT_TOKEN`), when set.
pub async fn signed(address: &str, plane: Plane) -> anyhow::Result<Signed> {
    let auth = BearerAuth::new(token_from_env(plane).as_deref());
    Ok(InterceptedService::new(connect(address).await?, auth))
}

/// A channel signed with a plane's token.
pub type Signed = InterceptedService<Channel, BearerAuth>;

/// The Admin service of a node, sending `CHITIN_ADMIN_TOKEN` when it is set.
pub async fn admin(address: &str) -> anyhow::Result<chitin::rollout::exec::Admin> {
    Ok(chitin::proto::admin_client::AdminClient::new(signed(address, Plane::Admin).await?))
}
