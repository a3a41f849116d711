//! The lease round: read the registry, ask the placement policy for
//! preferred holders (only when what they rank on changed), read the lease
//! rows the plan can act on, plan ([`super::plan::plan_round`]), apply.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chitin_policy_sdk as sdk;
use tokio::sync::watch;
use tracing::Instrument as _;

use super::plan::{self, Action, LeaseView, RoundInput};
use super::rankings::{RankingKey, Rankings};
use super::{Lifecycle, Node, NodeError};
use crate::lease::{self, LeaseError, NodeRecord, NodeState};
use crate::policy::Slot;
use crate::telemetry::trace_span;
use crate::topology::policy_view;

/// How applying one of a round's actions ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Done, or failed in a way the next round tries again at once.
    Done,
    /// A statement waited out its bound: a row's lock
    /// ([`LeaseError::LockWait`]), or a connection from the pool
    /// (`database.acquire_timeout_secs`, every connection busy).
    LockWait,
    /// The round is past its renew interval: the rest is the next round's
    /// ([`plan::in_time`]).
    Late,
}

impl Step {
    fn of(error: &LeaseError) -> Step {
        if error.waited_out() { Step::LockWait } else { Step::Done }
    }
}

impl Node {
    /// One lease round: heartbeat (renewing every lease on liveness), renew
    /// the leases with their own expiry, read the cluster, rank, act.
    pub async fn round(&self) -> Result<(), NodeError> {
        let next_renewal = std::time::Instant::now() + self.settings.renew_interval();
        if let Err(e) = self.leases.heartbeat().await {
            if matches!(e, LeaseError::NodeNotRegistered(_)) {
                self.registration_lost();
            }
            return Err(e.into());
        }
        // Before release 0.2 only; the shards that waited go last.
        let waited = self.lock_waited.lock().expect("lock-waited shards poisoned").clone();
        if let Some(shard) = self.leases.renew_all(&waited).await {
            self.lock_waited.lock().expect("lock-waited shards poisoned").insert(shard);
            self.leases.notify_change();
            return Ok(());
        }
        if !self.store.leases_on_liveness() {
            // Until the cluster is finalized at 0.2: the gate turns on within a round of it.
            crate::upgrade::apply_gates(&self.store, crate::upgrade::store::cluster_version(&self.store).await?);
        }
        let registry = self.refresh_registry().await?;
        let registry = self.planning_registry(registry).await?;
        // Without its liveness session a peer may be judging this node dead
        // this very moment; with other components than the cluster's it
        // would rank holders differently: either way it hands over, takes none.
        let takes = self.takes_new_leases();
        let rankings = self.rankings(&registry).await?;
        let topology = self.topology();

        let live = plan::live_peers(&registry, &self.name);
        let lifecycle = self.lifecycle();
        let parents: HashMap<String, String> =
            topology.map.shards().iter().filter_map(|s| Some((s.id.clone(), s.parent.clone()?))).collect();
        let splits = plan::finished_splits(&topology.config);
        // Only a config with splits needs to know what is retired.
        let retired: HashSet<String> = if parents.is_empty() && splits.is_empty() {
            HashSet::new()
        } else {
            self.store.retirements().await?.into_iter().map(|r| r.shard).collect()
        };
        let held: HashSet<String> = self.leases.held_ids();
        let unread = HashMap::new();
        let input = RoundInput {
            me: &self.name,
            my_uuid: self.uuid,
            leaving: matches!(lifecycle, Lifecycle::Leaving | Lifecycle::Drained),
            rankings: &rankings,
            live: &live,
            leases: &unread,
            held: &held,
            parents: &parents,
            retired: &retired,
            splits: &splits,
            max_handoffs: self.settings.leases.max_handoffs_per_round as usize,
        };
        // This node's own rows and those it could act on: never the whole table.
        let rows = self.store.round_leases(self.uuid, &plan::leases_to_read(&input)).await?;
        // A wait that ran out its bound ends the round's actions, and so
        // does lateness: see `act`.
        let stuck = takes && self.take_up(&rows, Some(next_renewal)).await != Step::Done;
        let leases: HashMap<String, LeaseView> =
            rows.into_iter().map(|r| (r.shard, LeaseView { live_holder: r.holder.filter(|_| r.live) })).collect();
        let held = self.leases.held_ids();
        let input = RoundInput { leases: &leases, held: &held, ..input };
        if !stuck {
            self.act(plan::plan_round(&input), takes, next_renewal).await;
        }
        if lifecycle == Lifecycle::Joining {
            self.store.set_node_state(self.uuid, NodeState::Active).await?;
            self.set_lifecycle(Lifecycle::Active);
            tracing::info!(name = %self.name, "active");
        }
        // Requests waiting for a holder look again after every fresh read.
        self.leases.notify_change();
        Ok(())
    }

    /// The placement policy's preferred holders for the served config,
    /// asked for only when the config, the components or a node's state
    /// changed since the last round.
    async fn rankings(&self, registry: &[NodeRecord]) -> Result<Rankings, NodeError> {
        let topology = self.topology();
        let key = RankingKey { topology: topology.clone(), policies: self.policies(), nodes: self.policy_nodes(registry) };
        if let Some(rankings) = self.rankings.get(&key) {
            return Ok(rankings);
        }
        let request = sdk::RankingRequest {
            nodes: key.nodes.clone(),
            shards: policy_view::shards(&topology.config),
            replicas: policy_view::replicas(&topology.config),
        };
        let (answer, by_default) =
            self.call_policy_or_default(Slot::Placement, move |p| p.preferred_holders(request.clone())).await?;
        let (rankings, dropped) = super::rankings::validated(answer, &topology.map);
        if !dropped.is_empty() {
            // Once per answer: answers are asked for again only on a change.
            tracing::warn!(
                dropped = dropped.len(),
                first = %dropped[0],
                "the placement policy ranked nodes outside a shard's replicas (or unknown shards); those are ignored"
            );
        }
        let rankings: Rankings = Arc::new(rankings);
        // The component is asked again next round while the default answers.
        if !by_default {
            self.rankings.put(key, rankings.clone());
        }
        Ok(rankings)
    }

    /// Applies a round's plan: only handovers when the node `takes` no
    /// leases, nothing more but its first action once the round is past
    /// `next_renewal` ([`plan::in_time`]), and nothing more after a
    /// statement that waited out its bound: the row is locked by a session
    /// that is stuck, not racing (the wait ran its whole bound), and every
    /// further wait would hold back the next heartbeat, which renews every
    /// lease on liveness. The rest is the next round's, with the rows that
    /// waited last ([`plan::defer_waited`]).
    async fn act(&self, actions: Vec<Action>, takes: bool, next_renewal: std::time::Instant) {
        // Only the round task uses the set: taken for the round, put back after.
        let mut waited = std::mem::take(&mut *self.lock_waited.lock().expect("lock-waited shards poisoned"));
        self.act_on(actions, takes, next_renewal, &mut waited).await;
        *self.lock_waited.lock().expect("lock-waited shards poisoned") = waited;
    }

    /// [`Node::act`], with the shards whose rows waited out their bound.
    async fn act_on(&self, actions: Vec<Action>, takes: bool, next_renewal: std::time::Instant, waited: &mut HashSet<String>) {
        let mut applied = 0;
        for action in plan::defer_waited(actions, waited) {
            let handover = matches!(action, Action::Handover { .. });
            if !(takes || handover) {
                continue;
            }
            if !plan::in_time(applied, std::time::Instant::now() >= next_renewal) {
                tracing::debug!(?action, "round past its renew interval; its other actions wait for the next round");
                return;
            }
            applied += 1;
            let shard = action.shard().to_owned();
            if self.apply(action).await == Step::LockWait {
                // (`apply` logged the error: a row locked by a stuck session, or no free connection.)
                tracing::warn!(%shard, "a statement waited out its whole bound; the round's other actions wait for the next round");
                waited.insert(shard);
                return;
            }
            waited.remove(&shard);
        }
    }

    /// Applies one action; an error is logged and the action planned again
    /// by a later round.
    async fn apply(&self, action: Action) -> Step {
        match action {
            Action::Acquire { shard } => match self.leases.acquire(&shard, self.parent_of(&shard).as_deref()).await {
                Ok(Some(lease)) => self.announce(&shard, lease.epoch, self.uuid, &self.name),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%shard, error = %e, "cannot acquire lease");
                    return Step::of(&e);
                }
            },
            Action::Handover { shard, to, to_uuid } => match self.leases.hand_over(&shard, to_uuid).await {
                Ok(lease) => {
                    tracing::info!(%shard, %to, epoch = lease.epoch, "handed over");
                    self.announce(&shard, lease.epoch, to_uuid, &to);
                }
                // Planned again next round, when the budget has room.
                Err(e @ LeaseError::HandoffBudget { .. }) => tracing::debug!(%shard, %to, error = %e, "handoff deferred"),
                Err(e) => {
                    tracing::warn!(%shard, %to, error = %e, "handoff failed; keeping the shard");
                    return Step::of(&e);
                }
            },
            Action::Seed { parent, children } => match self.leases.seed_split(&parent, &children).await {
                Ok(leases) => {
                    for lease in leases {
                        tracing::info!(%parent, child = %lease.shard, epoch = lease.epoch, "split seeded");
                        self.announce(&lease.shard, lease.epoch, self.uuid, &self.name);
                    }
                }
                Err(e) => {
                    tracing::warn!(%parent, error = %e, "cannot seed the split");
                    return Step::of(&e);
                }
            },
        }
        Step::Done
    }

    /// The parent of a leased shard, in the served config.
    fn parent_of(&self, shard: &str) -> Option<String> {
        self.topology().map.shard(shard).and_then(|s| s.parent.clone())
    }

    /// The cluster marked this registration down (a long pause or cut): stop
    /// serving at once and stop the process, which a supervisor restarts.
    fn registration_lost(&self) {
        tracing::error!(uuid = %self.uuid, "registration marked down; stopping");
        self.set_lifecycle(Lifecycle::Leaving);
        self.leases.forget_all();
        self.fatal.send_replace(true);
        // Appends parked here for a holder answer now, so that the process
        // is not held up by them on its way out.
        self.leases.notify_change();
    }

    /// Takes up the live leases among `rows` that the database gives this
    /// node and its lease table lacks ([`plan::handed_to_me`]): handed over
    /// by a peer whose notice did not arrive, or outlived a late renewal
    /// here (a database outage longer than the TTL). Served from this round
    /// on, not from the first append that happens to arrive, and handed on
    /// by a drain of this node. Renewal is the check: it succeeds only for
    /// the current epoch, unexpired.
    /// Stops at a wait that ran out its bound, and after its first take-up
    /// once past `next_renewal` (a round's; a drain has none), as
    /// [`Node::act`] does.
    pub(super) async fn take_up(&self, rows: &[lease::LeaseRow], next_renewal: Option<std::time::Instant>) -> Step {
        for (k, row) in plan::handed_to_me(rows, self.uuid, &self.leases.held_ids()).into_iter().enumerate() {
            if !plan::in_time(k, next_renewal.is_some_and(|at| std::time::Instant::now() >= at)) {
                return Step::Late;
            }
            match self.leases.adopt(self.own_lease(&row.shard, row.epoch)).await {
                Ok(()) => tracing::info!(shard = %row.shard, epoch = row.epoch, "took up a lease handed to this node"),
                Err(e) => {
                    if Step::of(&e) == Step::LockWait {
                        tracing::warn!(shard = %row.shard, error = %e, "taking up a lease waited out its whole bound (its row locked by a stuck session, or no free connection); left for later");
                        return Step::LockWait;
                    }
                    tracing::debug!(shard = %row.shard, error = %e, "cannot take up lease");
                }
            }
        }
        Step::Done
    }

    /// Runs rounds every renew interval, and at once when kicked, until
    /// `shutdown` fires; a watchdog stops serving leases whose renewals did
    /// not get through in time.
    pub async fn run_rounds(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let interval = self.settings.renew_interval();
        let watchdog = {
            let node = self.clone();
            let mut shutdown = shutdown.clone();
            tokio::spawn(async move {
                let tick = (interval / 4).clamp(Duration::from_millis(20), Duration::from_millis(250));
                loop {
                    tokio::select! {
                        _ = shutdown.changed() => break,
                        _ = tokio::time::sleep(tick) => node.leases.expire_overdue(),
                    }
                }
            })
        };
        loop {
            let started = std::time::Instant::now();
            let result = self.round().instrument(trace_span!("lease_round")).await;
            self.metrics.round_seconds.observe(if result.is_ok() { "ok" } else { "failed" }, started);
            if let Err(e) = result {
                tracing::warn!(error = %e, "lease round failed; retrying next round");
            }
            if *self.fatal.borrow() {
                break;
            }
            tokio::select! {
                _ = shutdown.changed() => break,
                // From the round's start: a slow round is followed by the
                // next heartbeat at once, not a whole interval later.
                _ = tokio::time::sleep_until((started + interval).into()) => {}
                _ = self.kick.notified() => {}
            }
        }
        watchdog.abort();
    }
}
