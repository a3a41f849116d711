//! Channels to the other nodes: one per peer address, connected once and
//! reused by every forward and notice, dropped after a transport failure so
//! the next call connects afresh. A peer whose connects fail is dialled
//! again only after a backoff that doubles with each failure in a row
//! ([`Backoff`]): until then a call fails at once, as not sent, so that the
//! requests of a dead or unreachable peer do not each open a connect of
//! their own (each costing up to [`CONNECT_TIMEOUT`] when the peer's packets
//! are dropped). Every call on them carries the cluster's peer token
//! (`[cluster] peer_token`), when set, and goes over TLS when `[tls]` is on:
//! the node presents its certificate and verifies the peer's against the
//! cluster CA (`[tls] peer_ca_file`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::security::tls::{self, ClientTls, TlsError};
use crate::upgrade::wire::BearerAuth;

/// A channel to a peer that signs every call with the peer token.
pub(crate) type PeerChannel = InterceptedService<Channel, BearerAuth>;

/// How long a connect to a peer may take before the call gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The wait after a first failed connect, and the most any later one waits.
/// Short, because a node that restarts on the same address is dialled again
/// within a quarter second; long enough that a dead peer costs a few
/// connects a second, not one per request.
const RECONNECT_BACKOFF: (Duration, Duration) = (Duration::from_millis(25), Duration::from_millis(250));

/// When a peer whose last connect failed may be dialled again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Backoff {
    /// The wait that began at the last failure.
    delay: Duration,
    /// No connect before this.
    until: Instant,
}

impl Backoff {
    /// The backoff after a connect that failed at `now`, `previous` being
    /// the one in force before it (none after a success): the first wait,
    /// then twice the last one, never more than the cap.
    fn after_failure(previous: Option<Backoff>, now: Instant, (first, cap): (Duration, Duration)) -> Backoff {
        let delay = previous.map_or(first, |b| (b.delay * 2).min(cap));
        Backoff { delay, until: now + delay }
    }

    /// How long before the peer may be dialled again, at `now`; `None`
    /// once the wait has passed.
    fn wait_left(&self, now: Instant) -> Option<Duration> {
        (now < self.until).then(|| self.until - now)
    }
}

/// What this node has of one peer address.
enum Slot {
    Connected(Channel),
    /// The backoff in force, and why the last connect failed.
    Failing(Backoff, String),
}

/// The pooled channels of this node.
pub struct Peers {
    slots: Mutex<HashMap<String, Slot>>,
    auth: BearerAuth,
    /// What new connections trust and present; replaced by [`Peers::set_tls`].
    tls: Mutex<Option<ClientTls>>,
    /// The first and the longest wait between failed connects.
    backoff: (Duration, Duration),
}

impl Default for Peers {
    fn default() -> Peers {
        Peers { slots: Mutex::default(), auth: BearerAuth::default(), tls: Mutex::new(None), backoff: RECONNECT_BACKOFF }
    }
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
            auth: BearerAuth::new(settings.cluster.peer_token.as_ref().and_then(crate::settings::Tokens::current)),
            tls: Mutex::new(ClientTls::for_peers(&settings.tls)?),
            ..Peers::default()
        })
    }

    /// Sends `token` on every call from now on, over the channels open
    /// already too (a rotated peer token).
    pub fn set_token(&self, token: Option<&str>) {
        self.auth.set(token);
    }

    /// Connects with `tls` from now on (the node's certificate or the
    /// cluster CA read again): the pooled channels are let go, so the next
    /// call to each peer connects with it; calls in flight finish on theirs.
    pub fn set_tls(&self, tls: Option<ClientTls>) {
        *self.tls.lock().unwrap_or_else(|p| p.into_inner()) = tls;
        self.slots().retain(|_, slot| matches!(slot, Slot::Failing(..)));
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The channel to `address`, connecting when there is none and the
    /// backoff of its last failed connect has passed. A failed connect, or
    /// one not tried, sent nothing.
    pub async fn channel(&self, address: &str) -> Result<PeerChannel, Unreachable> {
        let signed = |c: Channel| InterceptedService::new(c, self.auth.clone());
        let unreachable = |reason: String| Unreachable { address: address.to_string(), reason };
        match self.slots().get(address) {
            Some(Slot::Connected(c)) => return Ok(signed(c.clone())),
            Some(Slot::Failing(b, why)) => {
                if let Some(left) = b.wait_left(Instant::now()) {
                    return Err(unreachable(format!(
                        "its last connect failed ({why}); the next is tried in {} ms",
                        left.as_millis().max(1)
                    )));
                }
            }
            None => {}
        }
        let endpoint = tls::endpoint(address, self.tls.lock().unwrap_or_else(|p| p.into_inner()).as_ref());
        let connected = match endpoint {
            Ok(endpoint) => {
                endpoint.connect_timeout(CONNECT_TIMEOUT).tcp_nodelay(true).connect().await.map_err(|e| e.to_string())
            }
            Err(e) => Err(e),
        };
        let mut slots = self.slots();
        match connected {
            Ok(channel) => {
                slots.insert(address.to_string(), Slot::Connected(channel.clone()));
                Ok(signed(channel))
            }
            Err(reason) => {
                let previous = match slots.get(address) {
                    Some(Slot::Failing(b, _)) => Some(*b),
                    _ => None,
                };
                let backoff = Backoff::after_failure(previous, Instant::now(), self.backoff);
                slots.insert(address.to_string(), Slot::Failing(backoff, reason.clone()));
                Err(unreachable(reason))
            }
        }
    }

    /// Forgets the channel to `address` (after a transport failure), so that
    /// the next call connects afresh; a backoff in force stays.
    pub fn forget(&self, address: &str) {
        let mut slots = self.slots();
        if let Some(Slot::Connected(_)) = slots.get(address) {
            slots.remove(address);
        }
    }
}

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
        self.broadcast("node-down notice", Some(dead.id), notice, |mut c, r| {
            Box::pin(async move { c.node_down(r).await.map(drop) })
        });
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
        self.assignments.poke();
        self.kick.notify_one();
    }

    /// A peer's notice: a lease handed to this node is taken up now (renewing
    /// it first proves it); any other change wakes waiting requests.
    pub async fn on_notice(&self, shard: &str, epoch: i64, holder: uuid::Uuid) {
        if holder == self.uuid && self.is_ready() && self.takes_new_leases() && !self.leases.held_ids().contains(shard) {
            match self.leases.adopt(self.own_lease(shard, epoch)).await {
                Ok(()) => tracing::info!(%shard, epoch, "took up a handed-over lease on notice"),
                Err(e) => tracing::debug!(%shard, error = %e, "cannot take up a lease on notice"),
            }
        }
        self.routes.forget(shard);
        self.assignments.poke();
        self.leases.notify_change();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn each_failure_in_a_row_doubles_the_wait_up_to_the_cap() {
        let now = Instant::now();
        let policy = (25 * MS, 250 * MS);
        let mut previous = None;
        let mut delays = Vec::new();
        for _ in 0..6 {
            let b = Backoff::after_failure(previous, now, policy);
            assert_eq!(b.until, now + b.delay);
            assert_eq!(b.wait_left(now), Some(b.delay));
            assert_eq!(b.wait_left(now + b.delay), None, "the wait has passed at its end");
            delays.push(b.delay.as_millis());
            previous = Some(b);
        }
        assert_eq!(delays, [25, 50, 100, 200, 250, 250]);
        // After a success there is no previous backoff: the first wait again.
        assert_eq!(Backoff::after_failure(None, now, policy).delay, 25 * MS);
    }

    #[tokio::test]
    async fn a_peer_whose_connect_failed_is_not_dialled_again_before_its_backoff() {
        let port = crate::testkit::free_port().unwrap();
        let address = format!("127.0.0.1:{port}");
        let peers = Peers { backoff: (Duration::from_secs(600), Duration::from_secs(600)), ..Peers::default() };

        let refused = peers.channel(&address).await.expect_err("nothing listens there yet");
        assert!(!refused.reason.contains("next is tried"), "the first call dials: {refused}");

        // Something listens now, but the backoff is in force: no dial.
        let _listener = std::net::TcpListener::bind(&address).unwrap();
        let held_back = peers.channel(&address).await.expect_err("no connect during the backoff");
        assert!(held_back.reason.contains("the next is tried in"), "{held_back}");

        // A transport failure's forget leaves the backoff in force.
        peers.forget(&address);
        assert!(peers.channel(&address).await.is_err());
    }
}
