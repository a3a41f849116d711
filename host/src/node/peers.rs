//! Channels to the other nodes: one per peer address, connected once and
//! reused by every forward and notice, dropped after a transport failure so
//! the next call connects afresh. Every call on them carries the cluster's
//! peer token (`[cluster] peer_token`), when set, and goes over TLS when
//! `[tls]` is on: the node presents its certificate and verifies the peer's
//! against the cluster CA (`[tls] peer_ca_file`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::security::BearerAuth;
use crate::security::tls::{self, ClientTls, TlsError};

/// A channel to a peer that signs every call with the peer token.
pub type PeerChannel = InterceptedService<Channel, BearerAuth>;

/// How long a connect to a peer may take before the call gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The pooled channels of this node.
#[derive(Default)]
pub struct Peers {
    channels: Mutex<HashMap<String, Channel>>,
    auth: BearerAuth,
    tls: Option<ClientTls>,
}

/// A peer that could not be reached: nothing was sent to it.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to {address}: {reason}")]
pub struct Unreachable {
    pub address: String,
    pub reason: String,
}

impl Peers {
    /// No channels yet; calls will carry `settings`' peer token and use its
    /// TLS (whose files are read now).
    pub fn new(settings: &crate::settings::Settings) -> Result<Peers, TlsError> {
        Ok(Peers {
            channels: Mutex::default(),
            auth: BearerAuth::new(settings.cluster.peer_token.as_deref()),
            tls: ClientTls::for_peers(&settings.tls)?,
        })
    }

    /// The channel to `address`, connecting when there is none. A failed
    /// connect sent nothing.
    pub async fn channel(&self, address: &str) -> Result<PeerChannel, Unreachable> {
        let signed = |c: Channel| InterceptedService::new(c, self.auth.clone());
        if let Some(c) = self.channels.lock().unwrap_or_else(|p| p.into_inner()).get(address) {
            return Ok(signed(c.clone()));
        }
        let unreachable = |reason: String| Unreachable { address: address.to_string(), reason };
        let channel = tls::endpoint(address, self.tls.as_ref())
            .map_err(unreachable)?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .connect()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).insert(address.to_string(), channel.clone());
        Ok(signed(channel))
    }

    /// Forgets the channel to `address` (after a transport failure).
    pub fn forget(&self, address: &str) {
        self.channels.lock().unwrap_or_else(|p| p.into_inner()).remove(address);
    }
}

/// Whether a failed call's status says the request never left this node: the
/// connection was refused or could not be made, so the peer saw nothing.
/// (One rule for the node's forwards and the clients' retries.)
pub use chitin_client::never_sent;

/// One Peer call of [`super::Node::broadcast`].
type PeerCall<M> = fn(
    crate::proto::peer_client::PeerClient<PeerChannel>,
    tonic::Request<M>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), tonic::Status>> + Send>>;

impl super::Node {
    /// Tells every other live node that `holder` now holds `shard` at
    /// `epoch`, without waiting for the answers: the recipient of a handoff
    /// serves at once, nodes with requests waiting for a holder look again.
    /// A notice that does not arrive costs only time: rounds find the same.
    pub fn announce(&self, shard: &str, epoch: i64, holder: uuid::Uuid, holder_name: &str) {
        let notice = crate::proto::OwnershipNotice {
            shard: shard.to_string(),
            epoch: epoch as u64,
            holder_uuid: holder.to_string(),
            holder: holder_name.to_string(),
        };
        self.broadcast("ownership notice", None, notice, |mut c, r| Box::pin(async move { c.notice(r).await.map(drop) }));
    }

    /// Tells every other live node that `dead`'s liveness session ended and
    /// its leases are free, so that each runs a round now instead of at its
    /// next interval (a peer of a release without `Peer.NodeDown` answers
    /// UNIMPLEMENTED and finds the same at its next round).
    pub fn announce_down(&self, dead: &crate::lease::NodeRecord) {
        let notice = crate::proto::NodeDownNotice { node_uuid: dead.id.to_string(), node: dead.name.clone() };
        self.broadcast("node-down notice", Some(dead.id), notice, |mut c, r| Box::pin(async move { c.node_down(r).await.map(drop) }));
    }

    /// Sends `notice` to every other live node but `skip`, without waiting
    /// for the answers; a peer that does not take it is dialled afresh next
    /// time. A notice that does not arrive costs only time.
    fn broadcast<M: Clone + Send + 'static>(&self, what: &'static str, skip: Option<uuid::Uuid>, notice: M, send: PeerCall<M>) {
        for peer in self.registry().into_iter().filter(|r| r.live && r.id != self.uuid && Some(r.id) != skip) {
            let (peers, notice) = (self.peers.clone(), notice.clone());
            tokio::spawn(async move {
                let Ok(channel) = peers.channel(&peer.address).await else { return };
                let mut request = tonic::Request::new(notice);
                request.set_timeout(CONNECT_TIMEOUT);
                if let Err(status) = send(crate::proto::peer_client::PeerClient::new(channel), request).await {
                    tracing::debug!(peer = %peer.name, error = %status, "{what} not delivered");
                    peers.forget(&peer.address);
                }
            });
        }
    }

    /// A peer found a node dead: run a round now, which reads the freed
    /// leases and takes those this node is preferred for.
    pub fn on_node_down(&self, node: &str) {
        tracing::info!(%node, "a peer found a node dead; running a round now");
        self.routes.clear();
        self.kick.notify_one();
    }

    /// A peer's notice: a lease handed to this node is taken up now (renewing
    /// it first proves it); any other change wakes waiting requests.
    pub async fn on_notice(&self, shard: &str, epoch: i64, holder: uuid::Uuid) {
        if holder == self.uuid && self.is_ready() && self.session_up() && self.takes_leases() && !self.leases.held_ids().contains(shard) {
            match self.leases.adopt(self.own_lease(shard, epoch)).await {
                Ok(()) => tracing::info!(%shard, epoch, "took up a handed-over lease on notice"),
                Err(e) => tracing::debug!(%shard, error = %e, "cannot take up a lease on notice"),
            }
        }
        self.routes.forget(shard);
        self.leases.notify_change();
    }
}
