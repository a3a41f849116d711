//! The leases this node holds: serving under them, renewing them, taking and
//! handing them over, and telling watchers.
//!
//! A held lease is served only until `serve_until`, a local instant safely
//! before the database can consider it expired: the time the last renewal
//! was *sent* plus the TTL minus a safety margin. The database's expiry
//! comes after that instant whatever the clocks say, because the database
//! stamped the renewal after it was sent. So the node stops serving, and
//! reports `lost`, before anyone else can take the shard; the epoch check of
//! every write makes it safe even if the node is paused past that point.
//!
//! A lease on the node's liveness (gate `node-leases`) is renewed by the
//! node's heartbeat, one statement for all of them: its renewal was sent
//! when the last heartbeat under the same liveness epoch was. A heartbeat
//! that finds the epoch ended by a peer drops every lease on the old one.
//!
//! Each shard has a gate: a write holds it shared for its transaction, a
//! handoff takes it exclusively, so a handoff waits for in-flight writes and
//! no new write starts once it is draining.
//!
//! Every change of the table (a lease taken, lost, handed over) bumps a
//! generation that requests waiting for a holder watch ([`Leases::changes`]);
//! the node bumps it too when it learns of a change elsewhere (a new config,
//! a round's fresh read of the database, a peer's notice).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedRwLockReadGuard, RwLock, broadcast, watch};
use tracing::Instrument as _;
use uuid::Uuid;

use crate::lease::{Lease, LeaseError, LeaseToken, SplitSeed, Store};
use crate::telemetry::trace_span;

use super::acks::{Acks, Ready, Release};
use super::metrics::Metrics;

/// What happened to one of this node's leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnershipEvent {
    Acquired { shard: String, epoch: i64 },
    Draining { shard: String, epoch: i64 },
    Lost { shard: String, epoch: i64 },
}

/// The liveness epoch this node's leases ride on, and when the last
/// heartbeat that renewed them was sent.
#[derive(Clone, Copy, Debug)]
struct Liveness {
    epoch: i64,
    renewed: Option<Instant>,
}

/// When the renewal that keeps a lease was sent: its own renewal (`sent`)
/// for a lease with its own expiry; the last heartbeat for a lease on the
/// current liveness epoch; none for a lease on an epoch that ended, or
/// before the first heartbeat.
fn renewal_sent(lease_epoch: Option<i64>, liveness: Liveness, sent: Instant) -> Option<Instant> {
    match (lease_epoch, liveness) {
        (None, _) => Some(sent),
        (Some(epoch), Liveness { epoch: current, renewed }) if epoch == current => renewed,
        (Some(_), _) => None,
    }
}

struct Held {
    lease: Lease,
    serve_until: Instant,
    gate: Arc<RwLock<()>>,
    stage: Stage,
    /// Set while the application readies a shard this node just took (an
    /// acknowledging watch is open): writes wait for its READY or this
    /// instant, whichever comes first.
    ready_by: Option<Instant>,
}

/// Where a held shard is on its way out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Served, no handoff picked it.
    Serving,
    /// A handoff (a drain's, a round's or a split's) has picked the shard;
    /// writes are still served while the application finishes.
    Handing,
    /// No new write starts: the handoff waits for the in-flight ones.
    Draining,
}

impl Held {
    /// Whether a new write may start under it now.
    fn serves(&self, now: Instant) -> bool {
        self.stage != Stage::Draining && self.serve_until > now
    }
}

/// A write's permission to use a lease: the token to fence with and the
/// gate's shared guard, held until the write commits.
pub struct Permit {
    pub token: LeaseToken,
    _gate: OwnedRwLockReadGuard<()>,
}

/// Undoes a handoff's draining mark unless disarmed.
struct Undrain<'a> {
    leases: &'a Leases,
    shard: &'a str,
    epoch: i64,
    /// The application was sent DRAINING (a handoff; a split sends none).
    announced: bool,
    armed: bool,
}

impl Drop for Undrain<'_> {
    fn drop(&mut self) {
        if self.armed {
            tracing::warn!(shard = %self.shard, "handoff cancelled; serving the shard again");
            self.leases.undrain(self.shard, self.epoch, self.announced);
        }
    }
}

/// The leases of this node.
pub struct Leases {
    store: Store,
    me: Uuid,
    ttl: Duration,
    safety: Duration,
    held: Mutex<HashMap<String, Held>>,
    liveness: Mutex<Liveness>,
    events: broadcast::Sender<OwnershipEvent>,
    /// The application's answers to DRAINING.
    pub acks: Arc<Acks>,
    /// Bumped on every change of ownership this node learns of.
    generation: watch::Sender<u64>,
    metrics: Arc<Metrics>,
}

impl Leases {
    /// `safety` is how long before the TTL runs out the node stops serving.
    pub fn new(store: Store, me: Uuid, ttl: Duration, safety: Duration, acks: Arc<Acks>, metrics: Arc<Metrics>) -> Self {
        Leases {
            store,
            me,
            ttl,
            safety,
            held: Mutex::new(HashMap::new()),
            // A new registration starts at liveness epoch 1 (the column's default).
            liveness: Mutex::new(Liveness { epoch: 1, renewed: None }),
            events: broadcast::channel(1024).0,
            acks,
            generation: watch::channel(0).0,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, event: OwnershipEvent) {
        tracing::info!(?event, "ownership");
        let _ = self.events.send(event);
        self.notify_change();
    }

    /// Wakes every request waiting for a change of ownership.
    pub fn notify_change(&self) {
        self.generation.send_modify(|g| *g += 1);
    }

    /// A receiver that sees every later [`Leases::notify_change`].
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Ownership events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<OwnershipEvent> {
        self.events.subscribe()
    }

    fn window(&self, renewed: Instant) -> Instant {
        renewed + self.ttl.saturating_sub(self.safety)
    }

    fn liveness(&self) -> Liveness {
        *self.liveness.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Until when `lease`, renewed by a statement sent at `sent`, may be
    /// served: a lease on liveness by the node's last heartbeat instead (and
    /// not at all on an epoch that ended).
    fn serve_until(&self, lease: &Lease, sent: Instant) -> Instant {
        renewal_sent(lease.liveness_epoch, self.liveness(), sent).map_or_else(Instant::now, |r| self.window(r))
    }

    /// Heartbeats, which renews every lease on this node's liveness at once.
    /// When a peer ended the liveness epoch (this node was cut off or paused
    /// past its TTL), the leases on it are gone: they are dropped here.
    pub async fn heartbeat(&self) -> Result<(), LeaseError> {
        let sent = Instant::now();
        let known = self.liveness().epoch;
        let epoch = self.store.heartbeat(self.me, known).await?;
        let liveness = Liveness { epoch, renewed: Some(sent) };
        *self.liveness.lock().unwrap_or_else(|p| p.into_inner()) = liveness;
        if epoch != known {
            tracing::warn!(known, epoch, "a peer ended this node's liveness epoch: its leases on it are gone");
        }
        let mut ended = Vec::new();
        // Leases with their own expiry are renewed by `renew_all`, not here.
        for h in self.lock().values_mut().filter(|h| h.lease.liveness_epoch.is_some()) {
            match renewal_sent(h.lease.liveness_epoch, liveness, sent) {
                Some(renewed) => h.serve_until = self.window(renewed),
                None => ended.push((h.lease.shard.clone(), h.lease.epoch)),
            }
        }
        for (shard, epoch) in ended {
            self.forget(&shard, Some(epoch));
        }
        Ok(())
    }

    /// The shards held and servable now, with their leases and how long
    /// each stays servable without a renewal (by this node's monotonic
    /// clock, which is what bounds it).
    pub fn held(&self) -> Vec<(Lease, Duration)> {
        let now = Instant::now();
        let mut leases: Vec<(Lease, Duration)> =
            self.lock().values().filter(|h| h.serves(now)).map(|h| (h.lease.clone(), h.serve_until - now)).collect();
        leases.sort_by(|a, b| a.0.shard.cmp(&b.0.shard));
        leases
    }

    /// Ids of every shard held, draining ones included.
    pub fn held_ids(&self) -> HashSet<String> {
        self.lock().keys().cloned().collect()
    }

    /// Whether a handoff of `shard` is under way here (a drain's, a round's
    /// or a split's), waiting for the application's answer or draining.
    pub fn is_draining(&self, shard: &str) -> bool {
        self.lock().get(shard).is_some_and(|h| h.stage != Stage::Serving)
    }

    /// Permission to write to `shard`, if this node serves it now. Waits for
    /// the application's READY of a shard just taken (at most the ready
    /// timeout) and for a handoff that is already draining the shard.
    pub async fn permit(&self, shard: &str) -> Option<Permit> {
        self.wait_ready(shard).await;
        let gate = {
            let held = self.lock();
            let h = held.get(shard).filter(|h| h.serves(Instant::now()))?;
            h.gate.clone()
        };
        let guard = gate.read_owned().await;
        let held = self.lock();
        let h = held.get(shard).filter(|h| h.serves(Instant::now()))?;
        Some(Permit { token: h.lease.token(), _gate: guard })
    }

    /// Waits while `shard` is being readied by the application; at its
    /// deadline the shard is served without the answer.
    async fn wait_ready(&self, shard: &str) {
        let mut changes = self.changes();
        loop {
            let Some(by) = self.lock().get(shard).and_then(|h| h.ready_by) else { return };
            if Instant::now() >= by {
                self.end_readying(shard, None, Ready::TimedOut);
                return;
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep_until(by.into()) => {}
            }
        }
    }

    /// The application's READY for `shard` at `epoch`: its writes are served
    /// from now on. False when this node is not readying that shard at that
    /// epoch (it timed out, moved on, or never took it).
    pub fn ready(&self, shard: &str, epoch: i64) -> bool {
        self.end_readying(shard, Some(epoch), Ready::Answered)
    }

    /// Ends the readying of `shard` (at `epoch`, or any): true if it was.
    fn end_readying(&self, shard: &str, epoch: Option<i64>, how: Ready) -> bool {
        let by = {
            let mut held = self.lock();
            let h = held.get_mut(shard).filter(|h| epoch.is_none_or(|e| e == h.lease.epoch));
            h.and_then(|h| h.ready_by.take())
        };
        let Some(by) = by else { return false };
        if how == Ready::TimedOut {
            tracing::warn!(%shard, "the application did not answer READY in time; serving the shard without it");
        }
        let taken = by.checked_sub(self.acks.ready_timeout()).unwrap_or(by);
        self.metrics.ready_seconds.observe(how.as_str(), taken);
        self.notify_change();
        true
    }

    fn insert(&self, lease: Lease, sent: Instant) {
        let epoch = lease.epoch;
        let shard = lease.shard.clone();
        let serve_until = self.serve_until(&lease, sent);
        let fresh = {
            let mut held = self.lock();
            match held.get_mut(&shard) {
                Some(h) if h.lease.epoch == epoch => {
                    h.lease = lease;
                    h.serve_until = serve_until;
                    false
                }
                _ => {
                    let ready_by = self.acks.participating().then(|| Instant::now() + self.acks.ready_timeout());
                    let gate = Arc::new(RwLock::new(()));
                    held.insert(shard.clone(), Held { lease, serve_until, gate, stage: Stage::Serving, ready_by });
                    true
                }
            }
        };
        if fresh {
            self.metrics.leases_acquired.inc();
            self.emit(OwnershipEvent::Acquired { shard, epoch });
        }
    }

    /// Forgets `shard` (at `epoch`, or any epoch) and reports it lost.
    pub fn forget(&self, shard: &str, epoch: Option<i64>) {
        let removed = {
            let mut held = self.lock();
            match held.get(shard) {
                Some(h) if epoch.is_none_or(|e| e == h.lease.epoch) => held.remove(shard),
                _ => None,
            }
        };
        if let Some(h) = removed {
            self.metrics.leases_lost.inc();
            self.emit(OwnershipEvent::Lost { shard: shard.to_string(), epoch: h.lease.epoch });
        }
    }

    /// Drops every lease whose serving window has passed (renewals failed).
    pub fn expire_overdue(&self) {
        let now = Instant::now();
        let overdue: Vec<(String, i64)> =
            self.lock().iter().filter(|(_, h)| h.serve_until <= now).map(|(s, h)| (s.clone(), h.lease.epoch)).collect();
        for (shard, epoch) in overdue {
            tracing::warn!(%shard, epoch, "lease not renewed in time; stopped serving the shard");
            self.forget(&shard, Some(epoch));
        }
    }

    /// Takes a free or expired lease; a split's child (`parent` given) only
    /// once its parent is retired. `None` when it cannot be granted now.
    pub async fn acquire(&self, shard: &str, parent: Option<&str>) -> Result<Option<Lease>, LeaseError> {
        let sent = Instant::now();
        let result = self.store.try_acquire(shard, self.me, parent).instrument(trace_span!("takeover", shard)).await;
        let outcome = match &result {
            Ok(Some(_)) => "granted",
            Ok(None) => "refused",
            Err(_) => "failed",
        };
        self.metrics.takeover_seconds.observe(outcome, sent);
        let granted = result?;
        if let Some(lease) = &granted {
            self.insert(lease.clone(), sent);
        }
        Ok(granted)
    }

    /// Stops serving every lease at once (the registration is gone).
    pub fn forget_all(&self) {
        let shards: Vec<String> = self.lock().keys().cloned().collect();
        for shard in shards {
            self.forget(&shard, None);
        }
    }

    /// Serves a lease the database says this node holds (a handoff to it
    /// that its rounds have not seen yet). Renews it first, which proves it.
    pub async fn adopt(&self, lease: Lease) -> Result<(), LeaseError> {
        let sent = Instant::now();
        let renewed = self.store.renew(&lease).await?;
        self.insert(renewed, sent);
        Ok(())
    }

    /// Renews every held lease with its own expiry that is not draining
    /// (the heartbeat renews those on liveness: a cluster before release
    /// 0.2 has the others), those of `last` last. Stops at a renewal that
    /// waited out its bound (a row locked by a stuck session, no free
    /// connection) and returns its shard: each further wait would hold back
    /// the round, and the round ends there, as at any such wait.
    pub async fn renew_all(&self, last: &HashSet<String>) -> Option<String> {
        let mut leases: Vec<Lease> = self
            .lock()
            .values()
            .filter(|h| h.stage != Stage::Draining && h.lease.liveness_epoch.is_none())
            .map(|h| h.lease.clone())
            .collect();
        leases.sort_by_key(|l| last.contains(&l.shard));
        for lease in leases {
            let sent = Instant::now();
            match self.store.renew(&lease).await {
                Ok(renewed) => {
                    let mut held = self.lock();
                    if let Some(h) = held.get_mut(&lease.shard).filter(|h| h.lease.epoch == renewed.epoch) {
                        h.serve_until = self.serve_until(&renewed, sent);
                        h.lease = renewed;
                    }
                }
                Err(e @ LeaseError::LeaseLost { .. }) => {
                    tracing::warn!(error = %e, "lease lost at renewal");
                    self.forget(&lease.shard, Some(lease.epoch));
                }
                Err(e) if e.waited_out() => {
                    tracing::warn!(shard = %lease.shard, error = %e, "renewal waited out its bound; the round ends here");
                    self.expire_overdue();
                    return Some(lease.shard);
                }
                Err(e) => tracing::warn!(shard = %lease.shard, error = %e, "cannot renew lease; will retry"),
            }
        }
        self.expire_overdue();
        None
    }

    /// Drains `shard` and hands its lease to `to` with a new epoch: no new
    /// write starts, in-flight writes finish, then the lease moves. When the
    /// database-wide handoff budget is spent it refuses
    /// ([`LeaseError::HandoffBudget`]) before it stops any write.
    pub async fn hand_over(&self, shard: &str, to: Uuid) -> Result<Lease, LeaseError> {
        let started = Instant::now();
        let result = self.hand_over_untimed(shard, to).instrument(trace_span!("handoff", shard, to = %to)).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err(LeaseError::HandoffBudget { .. }) => "deferred",
            Err(_) => "failed",
        };
        self.metrics.handoff_seconds.observe(outcome, started);
        result
    }

    async fn hand_over_untimed(&self, shard: &str, to: Uuid) -> Result<Lease, LeaseError> {
        self.store.handoff_budget().await?;
        let (gate, lease) = self
            .pick_for_handoff(shard)?
            .ok_or_else(|| LeaseError::InvalidArgument(format!("shard `{shard}` is not held by this node")))?;
        // Dropped before the outcome is known (the caller was cancelled):
        // serve the shard again rather than leave it draining for good.
        let mut undrain = Undrain { leases: self, shard, epoch: lease.epoch, announced: true, armed: true };
        self.emit(OwnershipEvent::Draining { shard: shard.to_string(), epoch: lease.epoch });
        // The application finishes and flushes (its writes still served)
        // while it takes part; then no new write starts.
        let release = self.acks.wait_released(shard, lease.epoch).await;
        if release != Release::NoParticipant {
            tracing::info!(%shard, epoch = lease.epoch, outcome = release.as_str(), ?release, "the application's release");
        }
        self.start_draining(shard, lease.epoch);
        let _exclusive = gate.write_owned().await;
        let result = self.store.handover(&lease, to).await;
        undrain.armed = false;
        match result {
            Ok(theirs) => {
                self.metrics.handoffs.inc();
                self.forget(shard, Some(lease.epoch));
                Ok(theirs)
            }
            Err(e) => {
                if e.is_lease_lost() {
                    self.forget(shard, Some(lease.epoch));
                } else {
                    self.undrain(shard, lease.epoch, true);
                }
                Err(e)
            }
        }
    }

    /// Picks a held shard for a handoff and returns its gate and lease;
    /// `None` when it is not held. A drain, a round and a split may all pick
    /// one shard: only the first gets it. Writes are still served until
    /// [`Leases::start_draining`].
    fn pick_for_handoff(&self, shard: &str) -> Result<Option<(Arc<RwLock<()>>, Lease)>, LeaseError> {
        let mut held = self.lock();
        let Some(h) = held.get_mut(shard) else { return Ok(None) };
        if h.stage != Stage::Serving {
            return Err(LeaseError::InvalidArgument(format!("shard `{shard}` is already being handed over")));
        }
        h.stage = Stage::Handing;
        Ok(Some((h.gate.clone(), h.lease.clone())))
    }

    /// No new write of a picked shard starts from now on.
    fn start_draining(&self, shard: &str, epoch: i64) {
        if let Some(h) = self.lock().get_mut(shard).filter(|h| h.lease.epoch == epoch) {
            h.stage = Stage::Draining;
        }
    }

    /// Whether a handoff of `shard` at `epoch` is under way here (the
    /// application's answer to it is awaited, or it is draining).
    pub fn is_handing_over(&self, shard: &str, epoch: i64) -> bool {
        self.lock().get(shard).is_some_and(|h| h.stage != Stage::Serving && h.lease.epoch == epoch)
    }

    /// Serves a shard whose handoff did not happen (the handover failed or
    /// was refused, the handoff budget spent by another node in the
    /// meantime). An application that was sent DRAINING (`announced`) and
    /// gave the shard up is told it stays: ACQUIRED again at the same epoch,
    /// to serve it again (its fence claim at that epoch still holds);
    /// otherwise it would stop serving a shard its node keeps until the
    /// next handoff.
    fn undrain(&self, shard: &str, epoch: i64, announced: bool) {
        let kept = match self.lock().get_mut(shard).filter(|h| h.lease.epoch == epoch) {
            Some(h) => {
                h.stage = Stage::Serving;
                true
            }
            None => false,
        };
        if kept && announced {
            self.emit(OwnershipEvent::Acquired { shard: shard.to_owned(), epoch });
        }
        self.notify_change();
    }

    /// Retires a finished split's parent and takes its children, in one
    /// transaction. A held parent is drained first (no new write, in-flight
    /// writes finish), like a handoff. Returns the children's leases;
    /// empty when the parent was retired already or is held elsewhere.
    pub async fn seed_split(&self, parent: &str, children: &[String]) -> Result<Vec<Lease>, LeaseError> {
        let held = self.pick_for_handoff(parent)?;
        if let Some((_, l)) = &held {
            self.start_draining(parent, l.epoch);
        }
        let mut undrain =
            held.as_ref().map(|(_, l)| Undrain { leases: self, shard: parent, epoch: l.epoch, announced: false, armed: true });
        let _exclusive = match &held {
            Some((gate, _)) => Some(gate.clone().write_owned().await),
            None => None,
        };
        let sent = Instant::now();
        let token = held.as_ref().map(|(_, l)| l.token());
        let result = self.store.split_seed(parent, children, self.me, token.as_ref()).await;
        if let Some(u) = undrain.as_mut() {
            u.armed = false;
        }
        match result {
            Ok(SplitSeed::Seeded(leases)) => {
                self.forget(parent, None);
                for lease in &leases {
                    self.insert(lease.clone(), sent);
                }
                Ok(leases)
            }
            Ok(SplitSeed::AlreadyRetired) | Ok(SplitSeed::HeldElsewhere { .. }) => {
                self.forget(parent, None);
                Ok(Vec::new())
            }
            Err(e) => {
                if let Some((_, l)) = &held {
                    self.undrain(parent, l.epoch, false);
                }
                Err(e)
            }
        }
    }

    /// Releases every lease (a standalone node stopping; nobody to hand to).
    pub async fn release_all(&self) {
        let leases: Vec<Lease> = self.lock().values().map(|h| h.lease.clone()).collect();
        for lease in leases {
            if let Err(e) = self.store.release(&lease).await {
                tracing::warn!(shard = %lease.shard, error = %e, "cannot release lease");
            }
            self.forget(&lease.shard, Some(lease.epoch));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_kept_by_its_own_renewal_or_by_the_heartbeat_of_its_epoch() {
        let t0 = Instant::now();
        let (hb, sent) = (t0 + Duration::from_secs(1), t0 + Duration::from_secs(2));
        let at = |epoch, renewed| Liveness { epoch, renewed };
        // (lease's liveness epoch, node's liveness, expected)
        let cases = [
            (None, at(1, None), Some(sent)),
            (None, at(3, Some(hb)), Some(sent)),
            (Some(1), at(1, Some(hb)), Some(hb)),
            (Some(1), at(1, None), None),
            (Some(1), at(2, Some(hb)), None),
        ];
        for (lease, liveness, want) in cases {
            assert_eq!(renewal_sent(lease, liveness, sent), want, "{lease:?} {liveness:?}");
        }
    }
}
