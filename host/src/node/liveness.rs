//! The node's side of session-bound liveness (`lease::session`): hold this
//! registration's session for the process's lifetime, and watch the next
//! live registration's, freeing its leases the moment its session ends.
//!
//! Every node watches one peer, the next live registration after its own by
//! name (a ring), so the cluster holds two dedicated connections per node
//! whatever its size, and a dead node is seen by exactly one peer. That peer
//! frees the leases, tells every node to run a round now (`Peer.NodeDown`),
//! and watches the next registration from its next read of the registry on.
//! A node whose watcher died with it is judged by the one after, or by the
//! TTL, as before.
//!
//! A free lock is a suspicion, not a death: the session of a live process
//! ends too when its connection is reset, a proxy or pooler restarts, or an
//! operator ends it. So the watcher confirms with a second signal before it
//! marks anyone down ([`confirm`]): a direct connect to the node's address
//! (a crashed process's port refuses at once, so a crash is still taken over
//! in milliseconds) and the node's heartbeat in the registry. A node whose
//! own session drops keeps serving and takes its lock again at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use uuid::Uuid;

use super::Node;
use crate::lease::NodeRecord;
use crate::lease::session::{LiveSession, SessionLost, Verdict, Watch};

/// How long one wait for a peer's lock lasts before the watcher looks at
/// the registry again (a new ring successor, or a stop).
const WAIT: Duration = Duration::from_secs(1);

/// How long a node waits for its own lock at start or after reconnecting:
/// a peer holds it only for the moment it takes to judge it.
pub(crate) const OWN_LOCK_WAIT: Duration = Duration::from_secs(2);

/// How long the watcher's connect to a suspect's address may take before
/// the suspect counts as silent. A live process's kernel answers a connect
/// on loopback or a LAN in well under a millisecond, even while the process
/// is stopped; a refusal comes as fast.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// What a direct connect to a suspect's address found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// Nothing listens there: the process is gone.
    Refused,
    /// Something accepted the connection: a process holds the port.
    Accepted,
    /// No answer within [`PROBE_TIMEOUT`], or an error that proves nothing
    /// (a route gone, a host unreachable): the node may be cut off.
    Silent,
}

/// What the watcher concludes of a node whose session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// Dead: mark it down and free its leases; the reason for the log.
    Dead(&'static str),
    /// Alive: its session dropped under a live process, which takes its
    /// lock again. Nothing moves.
    Alive,
    /// Cannot tell yet: look again; its leases lapse at their TTL anyway.
    Unsure,
}

/// The second signal's rule. `heartbeat_current`: the node's registration
/// is not down and was seen within the liveness timeout (by the database's
/// clock). A refused connect is a death whatever the heartbeat (a crash);
/// a port still held by a process that keeps its heartbeat is a live node;
/// anything silent or stale waits for the heartbeat to lapse.
pub(crate) fn confirm(probe: Probe, heartbeat_current: bool) -> Confirmation {
    match (probe, heartbeat_current) {
        (Probe::Refused, _) => Confirmation::Dead("its address refuses connections"),
        (Probe::Accepted, true) => Confirmation::Alive,
        (Probe::Accepted, false) => Confirmation::Dead("its heartbeat is older than the liveness timeout"),
        (Probe::Silent, false) => Confirmation::Dead("it is silent and its heartbeat is older than the liveness timeout"),
        (Probe::Silent, true) => Confirmation::Unsure,
    }
}

/// Connects to `address` once, with [`PROBE_TIMEOUT`], and closes.
async fn probe(address: &str) -> Probe {
    match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(address)).await {
        Ok(Ok(_)) => Probe::Accepted,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Probe::Refused,
        Ok(Err(_)) | Err(_) => Probe::Silent,
    }
}

/// The registration `me` watches: the next live one after it by (name, id),
/// wrapping around; `None` when no other is live.
pub(crate) fn watch_target(registry: &[NodeRecord], me: Uuid) -> Option<&NodeRecord> {
    let mut live: Vec<&NodeRecord> = registry.iter().filter(|r| r.live || r.id == me).collect();
    live.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
    let at = live.iter().position(|r| r.id == me)?;
    let next = live[(at + 1) % live.len()];
    (next.id != me).then_some(next)
}

/// Whether a node whose liveness session has been down for `down_for`
/// (`None`: up) takes new leases. Not while a peer may be judging it dead;
/// but judging takes a moment, so a session down longer than a TTL is no
/// judgement under way: its lock is kept from the node (a peer's watch
/// stopped on it, the node's own old session the server has not ended
/// yet), and the shards that rank the node first would wait as long, since
/// their other candidates leave them to it. Safety never rested on the
/// lock (the fence and the heartbeat).
pub(crate) fn may_take_leases(down_for: Option<Duration>, ttl: Duration) -> bool {
    down_for.is_none_or(|down| down > ttl)
}

/// How often the node checks its own session: a dropped session is taken
/// again within one check.
fn check_interval(renew: Duration) -> Duration {
    (renew / 4).clamp(Duration::from_millis(20), Duration::from_millis(250))
}

impl Node {
    /// Whether this node takes new leases (it serves and hands over the
    /// ones it holds either way): not while it runs other components than
    /// the cluster's, nor while its liveness session is down, for a TTL at
    /// most ([`may_take_leases`]); a node without a session is never down.
    pub fn takes_new_leases(&self) -> bool {
        let down_since = *self.session_down_since.lock().expect("session state poisoned");
        self.runs_cluster_components() && may_take_leases(down_since.map(|at| at.elapsed()), self.settings.lease_ttl())
    }

    /// Records the session down (`Some(since)`) or up (`None`).
    fn set_session_down(&self, since: Option<std::time::Instant>) {
        *self.session_down_since.lock().expect("session state poisoned") = since;
    }

    /// Runs the liveness session and the watch of the next registration
    /// until `shutdown`, which comes after the graceful stop deregistered
    /// this node, so that closing the session leaves peers nothing to judge.
    pub async fn run_liveness(self: Arc<Self>, session: LiveSession, shutdown: watch::Receiver<bool>) {
        let watcher = tokio::spawn(self.clone().watch_peers(shutdown.clone()));
        self.keep_session(session, shutdown).await;
        watcher.abort();
    }

    async fn keep_session(&self, mut session: LiveSession, mut shutdown: watch::Receiver<bool>) {
        let tick = check_interval(self.settings.renew_interval());
        loop {
            tokio::select! {
                _ = shutdown.changed() => break,
                _ = tokio::time::sleep(tick) => {}
            }
            match session.check().await {
                Ok(()) => {}
                Err(e @ SessionLost::Pooled { .. }) => {
                    // Safety never rested on it: run on without it, as with
                    // `cluster.session_liveness = false`.
                    tracing::error!(error = %e, "liveness session unusable; takeovers of this node wait for the TTL");
                    return;
                }
                Err(e) => {
                    // Safety rests on the fence and the heartbeat, not on
                    // this connection: serve on, take no new lease until the
                    // lock is back (a TTL at most), and take it back at once. A peer that
                    // finds it free meanwhile probes this node and finds it
                    // alive.
                    tracing::warn!(error = %e, "liveness session dropped; serving on and taking its lock again");
                    self.set_session_down(Some(std::time::Instant::now()));
                    match self.reopen_session(&mut shutdown).await {
                        Some(fresh) => session = fresh,
                        None => break,
                    }
                    self.set_session_down(None);
                    tracing::info!("liveness session back");
                    self.kick.notify_one();
                }
            }
        }
        session.close().await;
    }

    /// Opens the session again at once, then retrying with backoff; `None`
    /// on shutdown. If a peer marked this registration down meanwhile, the
    /// next round's heartbeat finds it and the node stops.
    async fn reopen_session(&self, shutdown: &mut watch::Receiver<bool>) -> Option<LiveSession> {
        let mut backoff = Duration::ZERO;
        loop {
            tokio::select! {
                _ = shutdown.changed() => return None,
                _ = tokio::time::sleep(backoff) => {}
            }
            match self.store.open_session(self.uuid, self.settings.lease_ttl(), OWN_LOCK_WAIT).await {
                Ok(session) => return Some(session),
                Err(e) => tracing::debug!(error = %e, "liveness session not back yet"),
            }
            backoff = (backoff * 2).clamp(Duration::from_millis(50), Duration::from_secs(1));
        }
    }

    async fn watch_peers(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let idle = check_interval(self.settings.renew_interval());
        let mut watch: Option<Watch> = None;
        loop {
            let pause = match self.watch_once(&mut watch).await {
                Ok(true) => Duration::ZERO,
                // Nothing to watch yet, or a peer that has not recorded its
                // session: read the registry again rather than wait a round.
                Ok(false) => match self.refresh_registry().await {
                    Ok(_) => idle,
                    Err(_) => Duration::from_millis(250),
                },
                Err(e) => {
                    tracing::debug!(error = %e, "liveness watch failed; reconnecting");
                    watch = None;
                    Duration::from_millis(250)
                }
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// One wait on the ring successor's lock: true to wait again at once
    /// (the target lives, or it died and the next one is due), false when
    /// there is nothing to watch or the free lock proved nothing yet.
    async fn watch_once(&self, slot: &mut Option<Watch>) -> Result<bool, crate::lease::LeaseError> {
        let Some(target) = watch_target(&self.registry(), self.uuid).cloned() else {
            // An idle watch's session ends at its bound: open one when needed.
            *slot = None;
            return Ok(false);
        };
        let watch = match slot {
            Some(w) => w,
            None => slot.insert(self.store.open_watch().await?),
        };
        if !watch.wait(target.id, WAIT).await? {
            return Ok(true);
        }
        let judged = self.judge(watch, &target).await;
        watch.release().await?;
        judged
    }

    /// Judges `target`, whose lock `watch` holds: marks it down only when its
    /// session ended in this server lifetime and [`confirm`] says it is dead.
    async fn judge(&self, watch: &mut Watch, target: &NodeRecord) -> Result<bool, crate::lease::LeaseError> {
        if let Verdict::NoEvidence { recorded, now } = self.store.session_ended(watch, target.id).await? {
            tracing::debug!(node = %target.name, ?recorded, ?now, "peer's free liveness lock proves nothing yet");
            return Ok(false);
        }
        let probed = probe(&target.address).await;
        let heartbeat_current = self.refresh_registry().await?.iter().any(|r| r.id == target.id && r.live);
        match confirm(probed, heartbeat_current) {
            Confirmation::Dead(why) => {
                let freed = self.store.declare_dead(watch, target.id).await?;
                tracing::warn!(
                    node = %target.name, uuid = %target.id, freed,
                    "peer's liveness session ended and {why}: marked it down and freed its leases"
                );
                self.metrics.session_takeovers.inc();
                self.refresh_registry().await?;
                self.announce_down(target);
                self.kick.notify_one();
                Ok(true)
            }
            Confirmation::Alive => {
                tracing::info!(node = %target.name, "peer's liveness session ended but it answers and its heartbeat is current: left alone");
                Ok(false)
            }
            Confirmation::Unsure => {
                tracing::debug!(node = %target.name, "peer's liveness session ended and it is silent; its heartbeat decides");
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NodeState;

    fn record(name: &str, live: bool) -> NodeRecord {
        NodeRecord {
            id: Uuid::new_v4(),
            name: name.to_string(),
            address: String::new(),
            state: if live { NodeState::Active } else { NodeState::Down },
            started_at: Default::default(),
            last_seen: Default::default(),
            live,
        }
    }

    #[test]
    fn each_node_watches_the_next_live_one_by_name_around_the_ring() {
        let (a, b, c, d) = (record("a", true), record("b", true), record("c", false), record("d", true));
        let registry = vec![d.clone(), c.clone(), b.clone(), a.clone()];
        let target = |me: &NodeRecord| watch_target(&registry, me.id).map(|r| r.name.clone());
        assert_eq!(target(&a).as_deref(), Some("b"));
        assert_eq!(target(&b).as_deref(), Some("d"), "c is down: skipped");
        assert_eq!(target(&d).as_deref(), Some("a"), "wraps around");
    }

    #[test]
    fn a_lone_node_watches_nothing() {
        let me = record("a", true);
        assert_eq!(watch_target(&[me.clone(), record("b", false)], me.id), None);
        assert_eq!(watch_target(&[], me.id), None, "not in the registry yet");
    }

    #[test]
    fn a_free_lock_is_a_death_only_with_a_second_signal() {
        use Confirmation::*;
        for (probe, heartbeat_current, expected) in [
            // A crash: the port refuses at once, whatever the heartbeat says.
            (Probe::Refused, true, Dead("its address refuses connections")),
            (Probe::Refused, false, Dead("its address refuses connections")),
            // A reset connection, a proxy restart, pg_terminate_backend.
            (Probe::Accepted, true, Alive),
            // A process holds the port but stopped beating (a long pause).
            (Probe::Accepted, false, Dead("its heartbeat is older than the liveness timeout")),
            // Cut off: the heartbeat decides.
            (Probe::Silent, true, Unsure),
            (Probe::Silent, false, Dead("it is silent and its heartbeat is older than the liveness timeout")),
        ] {
            assert_eq!(confirm(probe, heartbeat_current), expected, "{probe:?}, heartbeat current: {heartbeat_current}");
        }
    }

    #[tokio::test]
    async fn the_probe_tells_a_refused_port_from_a_listening_one() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().to_string();
        assert_eq!(probe(&open).await, Probe::Accepted);
        drop(listener);
        assert_eq!(probe(&open).await, Probe::Refused);
    }

    #[test]
    fn a_node_without_its_session_takes_no_lease_for_a_ttl_then_takes_them_again() {
        let ttl = Duration::from_secs(2);
        for (down_for, takes) in [
            (None, true),
            (Some(Duration::ZERO), false),
            (Some(Duration::from_millis(1_999)), false),
            (Some(ttl), false),
            (Some(Duration::from_millis(2_001)), true),
            (Some(Duration::from_secs(60)), true),
        ] {
            assert_eq!(may_take_leases(down_for, ttl), takes, "down for {down_for:?}");
        }
    }

    #[test]
    fn the_check_interval_stays_between_20_and_250_ms() {
        assert_eq!(check_interval(Duration::from_secs(5)), Duration::from_millis(250));
        assert_eq!(check_interval(Duration::from_millis(500)), Duration::from_millis(125));
        assert_eq!(check_interval(Duration::from_millis(10)), Duration::from_millis(20));
    }
}
