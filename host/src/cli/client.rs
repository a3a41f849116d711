//! Dialling a node's gRPC API from the CLI.

use std::time::Duration;

use chitin::upgrade::wire::{Versioned, versioned};
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

/// A channel to the node whose every call carries this binary's protocol
/// metadata.
pub async fn connect(address: &str) -> anyhow::Result<Versioned> {
    Ok(versioned(dial(address).await?))
}

/// A plain channel to the node (for clients that stamp through their own
/// interceptor, as the admin client's `BearerAuth` does).
async fn dial(address: &str) -> anyhow::Result<Channel> {
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

/// The Admin service of a node, sending `CHITIN_ADMIN_TOKEN` when it is set.
pub async fn admin(address: &str) -> anyhow::Result<chitin::rollout::exec::Admin> {
    use chitin::rollout::exec::{BearerAuth, token_from_env};
    let auth = BearerAuth::new(token_from_env().as_deref());
    Ok(chitin::proto::admin_client::AdminClient::with_interceptor(dial(address).await?, auth))
}
