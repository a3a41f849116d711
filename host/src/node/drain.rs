//! Draining a node: hand every held shard to a recipient the `drain` policy
//! names, in rounds the host caps, and say what was kept and why.
//!
//! Read (registry, held shards, replicas; a live lease the database gives
//! the node and its table lacks is taken up first) → plan ([`plan::drain_candidates`],
//! the policy, [`plan::drain_plan`]) → apply. A drain that fails or is
//! cancelled before it finishes returns the node to `active`, serving every
//! shard it still holds.

use std::collections::HashMap;
use std::time::Duration;

use chitin_policy_sdk as sdk;
use uuid::Uuid;

use super::plan::{self, DrainInput, Kept};
use super::{Lifecycle, Node, NodeError};
use crate::lease::{Lease, LeaseError, NodeState};
use crate::policy::Slot;

/// What a drain did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainReport {
    /// Shards that left this node during the drain: handed over by it, or
    /// by the node's own lease round, which hands over too once the node
    /// is leaving.
    pub handed_over: u32,
    pub rounds: u32,
    /// Shards still held, each with the reason.
    pub kept: Vec<Kept>,
}

/// Puts a node whose drain did not finish back to `active`.
struct Reactivate<'a> {
    node: &'a Node,
    armed: bool,
}

impl Drop for Reactivate<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        tracing::warn!("drain did not finish; the node is active again");
        self.node.set_lifecycle(Lifecycle::Active);
        self.node.leases.notify_change();
        let (store, uuid) = (self.node.store.clone(), self.node.uuid);
        tokio::spawn(async move {
            if let Err(e) = store.set_node_state(uuid, NodeState::Active).await {
                tracing::warn!(error = %e, "cannot record the node active again");
            }
        });
    }
}

/// How often a drain takes up the leases its rows name, while a row stays
/// locked (see [`Node::drain`]).
const TAKE_UP_ATTEMPTS: usize = 3;

impl Node {
    /// Hands every held shard over; the node takes nothing afterwards
    /// (`leaving`, then `drained` unless `stopping`).
    pub async fn drain(&self, stopping: bool) -> Result<DrainReport, NodeError> {
        self.set_lifecycle(Lifecycle::Leaving);
        let mut reactivate = Reactivate { node: self, armed: !stopping };
        self.store.set_node_state(self.uuid, NodeState::Leaving).await?;
        // Peers that take no leases are no recipients, as in the rounds.
        let registry = self.planning_registry(self.refresh_registry().await?).await?;
        let live = plan::live_peers(&registry, &self.name);
        let topology = self.topology();
        let replicas: HashMap<String, Vec<String>> =
            topology.map.shards().iter().map(|s| (s.id.clone(), s.replica_nodes.clone())).collect();
        // What the database says this node holds, not only its own table:
        // right after a database outage longer than the TTL the node has
        // dropped leases its rows still name, and the round that takes them
        // up again may not have run yet.
        // A take-up stops at the first row that stays locked for its whole
        // bound, and the rows after it are not taken up. This node's own
        // round handing a shard over holds its row only for that handover,
        // so the drain reads and takes up again; a row of a session stuck
        // mid-transaction stays locked: the drain then hands over the rest,
        // and the row is freed when this node deregisters.
        for attempt in 1..=TAKE_UP_ATTEMPTS {
            let rows = self.store.round_leases(self.uuid, &[]).await?;
            if self.take_up(&rows, None).await != super::round::Step::LockWait {
                break;
            }
            if attempt == TAKE_UP_ATTEMPTS {
                // (take_up named the shard.)
                tracing::warn!("the drain goes on without the lease whose row stayed locked");
            }
        }
        let held = self.leases.held_ids();
        let cap = self.settings.leases.max_handoffs_per_round;
        let input = DrainInput { held: &held, replicas: &replicas, live: &live, cap: cap as usize };
        let (placeable, mut kept) = plan::drain_candidates(&input);

        let (nodes, shards, replicas_in) = self.policy_input(&registry);
        let request = sdk::DrainRequest {
            leaving: self.name.clone(),
            nodes,
            shards,
            replicas: replicas_in,
            holders: placeable.iter().map(|shard| sdk::Holder { shard: shard.clone(), node: self.name.clone() }).collect(),
            load: self.load.snapshot(None).iter().filter(|l| placeable.contains(&l.shard)).map(|l| l.policy_load()).collect(),
            max_per_round: cap,
        };
        let policy_rounds = if placeable.is_empty() {
            Vec::new()
        } else {
            self.call_policy_or_default(Slot::Drain, move |p| p.plan_drain(request.clone())).await?.0
        };
        let drain_plan = plan::drain_plan(&input, &placeable, &policy_rounds);
        kept.extend(drain_plan.kept);

        let mut report = DrainReport::default();
        for round in drain_plan.rounds {
            report.rounds += 1;
            // Handoffs of one round go one after another: each is one short
            // transaction, and the round cap is what limits churn.
            for h in round {
                match self.hand_over_within_budget(&h.shard, h.to_uuid).await {
                    Ok(lease) => {
                        report.handed_over += 1;
                        self.announce(&h.shard, lease.epoch, h.to_uuid, &h.to);
                    }
                    // The node's own round handed it over meanwhile (the
                    // database no longer gives it to this node).
                    Err(_) if !self.leases.held_ids().contains(&h.shard) => report.handed_over += 1,
                    Err(e) => kept.push(Kept { shard: h.shard, why: format!("handoff to {} failed: {e}", h.to) }),
                }
            }
        }
        kept.sort_by(|a, b| a.shard.cmp(&b.shard));
        report.kept = kept;
        reactivate.armed = false;
        if !stopping {
            self.set_lifecycle(Lifecycle::Drained);
        }
        tracing::info!(?report, "drained");
        Ok(report)
    }

    /// Hands `shard` over as soon as the database-wide handoff budget has
    /// room: a drain waits for its turn, it does not give up its shards.
    async fn hand_over_within_budget(&self, shard: &str, to: Uuid) -> Result<Lease, LeaseError> {
        loop {
            self.take_up_if_still_mine(shard).await?;
            match self.leases.hand_over(shard, to).await {
                Err(LeaseError::HandoffBudget { retry_after, .. }) => {
                    tracing::debug!(%shard, ?retry_after, "handoff budget spent; waiting for the next slot");
                    tokio::time::sleep(retry_after.max(Duration::from_millis(5))).await;
                }
                // The node's own round is handing the shard over: wait for
                // its outcome, then go on (the shard gone) or hand it over.
                Err(_) if self.leases.is_draining(shard) => {
                    while self.leases.is_draining(shard) {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
                done => return done,
            }
        }
    }

    /// Takes `shard` up again when this node's table lacks it but the
    /// database still gives it to this node (dropped here on a late
    /// renewal), so that the drain hands it over rather than leave it with
    /// a node that serves nothing.
    async fn take_up_if_still_mine(&self, shard: &str) -> Result<(), LeaseError> {
        if self.leases.held_ids().contains(shard) {
            return Ok(());
        }
        match self.store.lease(shard).await? {
            Some(row) if row.live && row.holder == Some(self.uuid) => self.leases.adopt(self.own_lease(shard, row.epoch)).await,
            _ => Ok(()),
        }
    }
}
