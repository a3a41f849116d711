//! Which shards this instance serves.
//!
//! The node's ownership watch says what the node acquires, drains and
//! loses; the instance takes part in each handoff (an acknowledging watch):
//! - `ACQUIRED`: claim the shard's fence row (retiring a split parent's),
//!   then serve, then answer `READY`;
//! - `DRAINING`: stop taking writes, wait for those in flight, then answer
//!   `RELEASED`, so the next holder's first write follows our last;
//! - `LOST` or a gap in the stream: stop at once;
//! - `ACQUIRED` at the epoch of a shard given up: its handoff did not
//!   happen (the node keeps it), so serve it again.
//!
//! Events can be missed (a node restarts), and a claim can fail (the
//! database restarts), so the instance also reconciles with the node's
//! `Held` list every [`RECONCILE_EVERY`]. A node that does not answer (it is
//! paused or cut off) changes nothing: the instance keeps its tokens, and
//! the fence refuses them once a newer holder claimed; that is exactly the
//! window the fence exists for.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin_client::fence::LeaseToken;
use chitin_client::proto::{HeldRequest, ShardLease, ownership_client::OwnershipClient};
use chitin_client::{Client, WatchEvent};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

use crate::ledger::Db;

/// How often the instance compares what it serves with its node's leases:
/// after its node restarts, the watch may resubscribe a second later than
/// the node takes its first shards, and a shard is not served until then.
const RECONCILE_EVERY: Duration = Duration::from_millis(100);

/// The longest wait for the node's `Held` answer.
const HELD_TIMEOUT: Duration = Duration::from_secs(1);

/// The shards served, each with its claimed token; cheap to clone.
#[derive(Clone, Default)]
pub struct Owner(Arc<Mutex<Shards>>);

#[derive(Default)]
struct Shards {
    /// Served shards: the token and a gate every write holds shared, which
    /// a drain takes exclusively to wait for the writes in flight.
    serving: HashMap<String, (LeaseToken, Arc<RwLock<()>>)>,
    /// (shard, epoch) handed over or being handed over: not served again
    /// even while the node's `Held` still lists them.
    given_up: HashSet<(String, u64)>,
}

impl Shards {
    /// Aligns what is served with the node's `held` leases: stops serving
    /// a shard at an epoch the node no longer holds, forgets what was given
    /// up once the node let it go, and returns the leases to claim (held,
    /// not served, not given up at that epoch).
    fn align(&mut self, held: &[ShardLease]) -> Vec<ShardLease> {
        let live: HashSet<(String, u64)> = held.iter().map(|l| (l.shard.clone(), l.epoch)).collect();
        self.given_up.retain(|k| live.contains(k));
        self.serving.retain(|shard, (token, _)| live.contains(&(shard.clone(), token.epoch)));
        let new = |l: &&ShardLease| !self.given_up.contains(&(l.shard.clone(), l.epoch)) && !self.serving.contains_key(&l.shard);
        held.iter().filter(new).cloned().collect()
    }

    /// `shard` at `epoch` is no longer given up ([`Owner::kept`]).
    fn kept(&mut self, shard: &str, epoch: u64) {
        self.given_up.remove(&(shard.to_owned(), epoch));
    }
}

/// A write's permission: the token, and the shard's gate held until the
/// write ends.
pub struct Permit {
    /// The token to write under.
    pub token: LeaseToken,
    _gate: OwnedRwLockReadGuard<()>,
}

impl Owner {
    /// The permit to write shard `shard`, if this instance serves it.
    pub fn permit(&self, shard: &str) -> Option<Permit> {
        let (token, gate) = self.0.lock().unwrap().serving.get(shard).cloned()?;
        // A drain holding the gate means the shard is going: not served.
        let gate = gate.try_read_owned().ok()?;
        Some(Permit { token, _gate: gate })
    }

    /// How many shards are served.
    pub fn count(&self) -> usize {
        self.0.lock().unwrap().serving.len()
    }

    /// Stops serving `token` (the fence refused it).
    pub fn lost(&self, token: &LeaseToken) {
        let mut shards = self.0.lock().unwrap();
        if shards.serving.get(&token.shard).is_some_and(|(t, _)| t == token) {
            shards.serving.remove(&token.shard);
            shards.given_up.insert((token.shard.clone(), token.epoch));
        }
    }

    /// `shard` stays at `epoch`: its node sent `ACQUIRED` again after a
    /// handoff that did not happen, so what was given up is served again.
    fn kept(&self, shard: &str, epoch: u64) {
        self.0.lock().unwrap().kept(shard, epoch);
    }

    /// Stops taking writes for `shard` and waits for those in flight.
    async fn drain(&self, shard: &str, epoch: u64) {
        let gate = {
            let mut shards = self.0.lock().unwrap();
            shards.given_up.insert((shard.to_owned(), epoch));
            shards.serving.remove(shard).map(|(_, gate)| gate)
        };
        if let Some(gate) = gate {
            drop(gate.write().await);
        }
    }

    fn stop_all(&self) {
        self.0.lock().unwrap().serving.clear();
    }

    /// Serves what `held` lists and stops serving what it does not: claims
    /// each new lease's fence first. Returns the shards newly served.
    async fn reconcile(&self, db: &Db, held: &[ShardLease]) -> Vec<(String, u64)> {
        let wanted = self.0.lock().unwrap().align(held);
        let mut taken = Vec::new();
        for lease in wanted {
            let token = match LeaseToken::from_lease(&lease) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("chitin-example-kv: {e}");
                    continue;
                }
            };
            let parent = Some(lease.parent.as_str()).filter(|p| !p.is_empty());
            match db.claim(&token, parent).await {
                Ok(()) => {
                    self.0.lock().unwrap().serving.insert(lease.shard.clone(), (token, Arc::default()));
                    taken.push((lease.shard, lease.epoch));
                }
                // Tried again at the next reconcile while the node holds it.
                Err(e) => eprintln!("chitin-example-kv: claiming {} at epoch {}: {e}", lease.shard, lease.epoch),
            }
        }
        taken
    }
}

/// Follows the node's ownership for the life of the process.
pub async fn follow(client: Client, owner: Owner, db: Db) {
    let mut watch = client.watch_ownership_acknowledging();
    let mut tick = tokio::time::interval(RECONCILE_EVERY);
    let mut failing = false;
    loop {
        let event = tokio::select! {
            event = watch.next() => Some(event),
            _ = tick.tick() => None,
        };
        match event {
            Some(WatchEvent::Subscribed { held, .. }) => {
                owner.stop_all();
                owner.reconcile(&db, &held).await;
            }
            Some(WatchEvent::Acquired { shard, epoch }) => {
                owner.kept(&shard, epoch);
                let Some(held) = held(&client, &mut failing).await else { continue };
                owner.reconcile(&db, &held).await;
                if owner.permit(&shard).is_some_and(|p| p.token.epoch == epoch) {
                    let _ = watch.ready(&shard, epoch).await;
                }
            }
            Some(WatchEvent::Draining { shard, epoch }) => {
                owner.drain(&shard, epoch).await;
                let _ = watch.released(&shard, epoch).await;
            }
            Some(WatchEvent::Lost { shard, epoch }) => owner.drain(&shard, epoch).await,
            Some(WatchEvent::Gap { node, reason }) => {
                eprintln!("chitin-example-kv: the ownership stream of {node} ended ({reason}): serving nothing until it is back");
                owner.stop_all();
            }
            None => {
                let Some(held) = held(&client, &mut failing).await else { continue };
                // The node may be waiting for these (it acquired them while
                // the watch was away).
                for (shard, epoch) in owner.reconcile(&db, &held).await {
                    let _ = watch.ready(&shard, epoch).await;
                }
            }
        }
    }
}

/// The node's leases, or `None` when it does not answer in time. The first
/// failure of a streak is logged (a node restarting, paused or cut off),
/// and the first answer after it.
async fn held(client: &Client, failing: &mut bool) -> Option<Vec<ShardLease>> {
    let node = client.nodes().addresses().first()?.clone();
    let ask = async {
        let conn = client.conn(&node).await.map_err(|e| e.to_string())?;
        OwnershipClient::new(conn).held(HeldRequest {}).await.map(|r| r.into_inner().leases).map_err(|e| e.to_string())
    };
    let answer =
        tokio::time::timeout(HELD_TIMEOUT, ask).await.unwrap_or_else(|_| Err(format!("no answer within {HELD_TIMEOUT:?}")));
    match (&answer, *failing) {
        (Err(e), false) => {
            eprintln!("chitin-example-kv: {node} does not answer Held ({e}): serving what was served until it does")
        }
        (Ok(_), true) => eprintln!("chitin-example-kv: {node} answers Held again"),
        _ => {}
    }
    *failing = answer.is_err();
    answer.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLDER: &str = "7f3c2a9e-1d4b-4c8e-9a6f-2b5d8e1c4a70";

    fn lease(shard: &str, epoch: u64) -> ShardLease {
        ShardLease { shard: shard.into(), epoch, holder_uuid: HOLDER.into(), ..ShardLease::default() }
    }

    /// Shards at epochs.
    type At = &'static [(&'static str, u64)];

    struct Case {
        name: &'static str,
        served: At,
        given_up: At,
        held: At,
        claim: &'static [&'static str],
        served_after: &'static [&'static str],
        given_up_after: At,
    }

    #[test]
    fn what_is_served_follows_the_nodes_leases() {
        let case = |name, served, given_up, held, claim, served_after, given_up_after| Case {
            name,
            served,
            given_up,
            held,
            claim,
            served_after,
            given_up_after,
        };
        let cases = [
            case("a new lease is claimed", &[], &[], &[("s1", 1)], &["s1"], &[], &[]),
            case("a served lease stays, unclaimed", &[("s1", 1)], &[], &[("s1", 1)], &[], &["s1"], &[]),
            case("a lease the node lost is not served", &[("s1", 1)], &[], &[], &[], &[], &[]),
            case("a newer epoch replaces the old token", &[("s1", 1)], &[], &[("s1", 2)], &["s1"], &[], &[]),
            case("a shard being handed over is not served again", &[], &[("s1", 1)], &[("s1", 1)], &[], &[], &[("s1", 1)]),
            case("given up, then back at a newer epoch: claimed", &[], &[("s1", 1)], &[("s1", 3)], &["s1"], &[], &[]),
        ];
        let at = |a: At| -> HashSet<(String, u64)> { a.iter().map(|&(s, e)| (s.to_owned(), e)).collect() };
        for c in cases {
            let mut shards = Shards { given_up: at(c.given_up), ..Shards::default() };
            for &(shard, epoch) in c.served {
                let token = LeaseToken::from_lease(&lease(shard, epoch)).unwrap();
                shards.serving.insert(shard.into(), (token, Arc::default()));
            }
            let held: Vec<ShardLease> = c.held.iter().map(|&(s, e)| lease(s, e)).collect();
            let claimed: Vec<String> = shards.align(&held).into_iter().map(|l| l.shard).collect();
            assert_eq!(claimed, c.claim, "{}: to claim", c.name);
            let mut serving: Vec<&str> = shards.serving.keys().map(String::as_str).collect();
            serving.sort();
            assert_eq!(serving, c.served_after, "{}: served", c.name);
            assert_eq!(shards.given_up, at(c.given_up_after), "{}: given up", c.name);
        }
    }

    /// A handoff that did not happen: the node sends `ACQUIRED` again at the
    /// epoch given up, and the shard is claimed and served again (without
    /// `kept` it stays given up while the node keeps it).
    #[test]
    fn a_shard_announced_again_at_its_given_up_epoch_is_served_again() {
        let mut shards = Shards { given_up: [("s1".to_owned(), 4)].into(), ..Shards::default() };
        let held = [lease("s1", 4)];
        assert!(shards.align(&held).is_empty(), "given up: not claimed");
        shards.kept("s1", 3);
        assert!(shards.align(&held).is_empty(), "another epoch's ACQUIRED changes nothing");
        shards.kept("s1", 4);
        let claimed: Vec<String> = shards.align(&held).into_iter().map(|l| l.shard).collect();
        assert_eq!(claimed, ["s1"]);
    }
}
