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
//! Each shard has a gate: a write holds it shared for its transaction, a
//! handoff takes it exclusively, so a handoff waits for in-flight writes and
//! no new write starts once it is draining.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedRwLockReadGuard, RwLock, broadcast};
use uuid::Uuid;

use crate::lease::{Lease, LeaseError, LeaseToken, Store};

use super::metrics::Metrics;

/// What happened to one of this node's leases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnershipEvent {
    Acquired { shard: String, epoch: i64 },
    Draining { shard: String, epoch: i64 },
    Lost { shard: String, epoch: i64 },
}

struct Held {
    lease: Lease,
    serve_until: Instant,
    gate: Arc<RwLock<()>>,
    draining: bool,
}

/// A write's permission to use a lease: the token to fence with and the
/// gate's shared guard, held until the write commits.
pub struct Permit {
    pub token: LeaseToken,
    _gate: OwnedRwLockReadGuard<()>,
}

/// The leases of this node.
pub struct Leases {
    store: Store,
    me: Uuid,
    ttl: Duration,
    safety: Duration,
    held: Mutex<HashMap<String, Held>>,
    events: broadcast::Sender<OwnershipEvent>,
    metrics: Arc<Metrics>,
}

impl Leases {
    /// `safety` is how long before the TTL runs out the node stops serving.
    pub fn new(store: Store, me: Uuid, ttl: Duration, safety: Duration, metrics: Arc<Metrics>) -> Self {
        Leases {
            store,
            me,
            ttl,
            safety,
            held: Mutex::new(HashMap::new()),
            events: broadcast::channel(1024).0,
            metrics,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, event: OwnershipEvent) {
        tracing::info!(?event, "ownership");
        let _ = self.events.send(event);
    }

    /// Ownership events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<OwnershipEvent> {
        self.events.subscribe()
    }

    fn serve_until(&self, sent: Instant) -> Instant {
        sent + self.ttl.saturating_sub(self.safety)
    }

    /// The shards held and servable now, with their leases.
    pub fn held(&self) -> Vec<Lease> {
        let now = Instant::now();
        let mut leases: Vec<Lease> =
            self.lock().values().filter(|h| !h.draining && h.serve_until > now).map(|h| h.lease.clone()).collect();
        leases.sort_by(|a, b| a.shard.cmp(&b.shard));
        leases
    }

    /// Ids of every shard held, draining ones included.
    pub fn held_ids(&self) -> std::collections::HashSet<String> {
        self.lock().keys().cloned().collect()
    }

    /// Permission to write to `shard`, if this node serves it now. Waits for
    /// nothing but a handoff that is already draining the shard.
    pub async fn permit(&self, shard: &str) -> Option<Permit> {
        let gate = {
            let held = self.lock();
            let h = held.get(shard).filter(|h| !h.draining && h.serve_until > Instant::now())?;
            h.gate.clone()
        };
        let guard = gate.read_owned().await;
        let held = self.lock();
        let h = held.get(shard).filter(|h| !h.draining && h.serve_until > Instant::now())?;
        Some(Permit {
            token: h.lease.token(),
            _gate: guard,
        })
    }

    fn insert(&self, lease: Lease, sent: Instant) {
        let epoch = lease.epoch;
        let shard = lease.shard.clone();
        let serve_until = self.serve_until(sent);
        let fresh = {
            let mut held = self.lock();
            match held.get_mut(&shard) {
                Some(h) if h.lease.epoch == epoch => {
                    h.lease = lease;
                    h.serve_until = serve_until;
                    false
                }
                _ => {
                    held.insert(
                        shard.clone(),
                        Held {
                            lease,
                            serve_until,
                            gate: Arc::new(RwLock::new(())),
                            draining: false,
                        },
                    );
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
            self.emit(OwnershipEvent::Lost {
                shard: shard.to_string(),
                epoch: h.lease.epoch,
            });
        }
    }

    /// Drops every lease whose serving window has passed (renewals failed).
    pub fn expire_overdue(&self) {
        let now = Instant::now();
        let overdue: Vec<(String, i64)> = self
            .lock()
            .iter()
            .filter(|(_, h)| h.serve_until <= now)
            .map(|(s, h)| (s.clone(), h.lease.epoch))
            .collect();
        for (shard, epoch) in overdue {
            tracing::warn!(%shard, epoch, "lease not renewed in time; stopped serving the shard");
            self.forget(&shard, Some(epoch));
        }
    }

    /// Takes a free or expired lease; a split's child (`parent` given) only
    /// once its parent is retired.
    pub async fn acquire(&self, shard: &str, parent: Option<&str>) -> Result<bool, LeaseError> {
        let sent = Instant::now();
        match self.store.try_acquire(shard, self.me, parent).await? {
            Some(lease) => {
                self.insert(lease, sent);
                Ok(true)
            }
            None => Ok(false),
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

    /// Renews every held lease that is not draining.
    pub async fn renew_all(&self) {
        let leases: Vec<Lease> = self.lock().values().filter(|h| !h.draining).map(|h| h.lease.clone()).collect();
        for lease in leases {
            let sent = Instant::now();
            match self.store.renew(&lease).await {
                Ok(renewed) => {
                    let mut held = self.lock();
                    if let Some(h) = held.get_mut(&lease.shard).filter(|h| h.lease.epoch == renewed.epoch) {
                        h.lease = renewed;
                        h.serve_until = self.serve_until(sent);
                    }
                }
                Err(e @ LeaseError::LeaseLost { .. }) => {
                    tracing::warn!(error = %e, "lease lost at renewal");
                    self.forget(&lease.shard, Some(lease.epoch));
                }
                Err(e) => tracing::warn!(shard = %lease.shard, error = %e, "cannot renew lease; will retry"),
            }
        }
        self.expire_overdue();
    }

    /// Drains `shard` and hands its lease to `to` with a new epoch: no new
    /// write starts, in-flight writes finish, then the lease moves.
    pub async fn hand_over(&self, shard: &str, to: Uuid) -> Result<Lease, LeaseError> {
        let (gate, lease) = {
            let mut held = self.lock();
            let h = held
                .get_mut(shard)
                .ok_or_else(|| LeaseError::InvalidArgument(format!("shard `{shard}` is not held by this node")))?;
            // A drain and a round may both pick the shard: one handoff only.
            if h.draining {
                return Err(LeaseError::InvalidArgument(format!("shard `{shard}` is already being handed over")));
            }
            h.draining = true;
            (h.gate.clone(), h.lease.clone())
        };
        self.emit(OwnershipEvent::Draining {
            shard: shard.to_string(),
            epoch: lease.epoch,
        });
        let _exclusive = gate.write_owned().await;
        match self.store.handover(&lease, to).await {
            Ok(theirs) => {
                self.metrics.handoffs.inc();
                self.forget(shard, Some(lease.epoch));
                Ok(theirs)
            }
            Err(e) => {
                if e.is_lease_lost() {
                    self.forget(shard, Some(lease.epoch));
                } else if let Some(h) = self.lock().get_mut(shard) {
                    h.draining = false;
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
