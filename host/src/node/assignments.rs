//! The assignment map: every leased shard's key range, state, lineage and
//! holder as one versioned value, which `Ownership.WatchAssignments` streams
//! to clients as a snapshot and then a delta per change (the "Clerk" of
//! Slicer and Dicer), so that they route keys without asking a node.
//!
//! The ranges come from the served config and the holders from the lease
//! table as this node last read it: a holder is a route, never a judgement
//! of the lease (the holder's fence decides). [`assemble`] and [`delta`] are
//! pure; [`Publisher`] keeps the latest map and its version for every open
//! stream, each of which sends the delta from what it sent last, so a slow
//! reader skips intermediate versions instead of falling behind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, watch};
use uuid::Uuid;

use super::shard_map::ShardMap;
use crate::lease::{LeaseRow, NodeRecord};
use crate::topology::ShardState;

/// A shard's live holder.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// Its registration.
    pub uuid: Uuid,
    /// Its node name (empty when the registration is not known yet).
    pub name: String,
    /// Its gRPC address (empty when the registration is not known yet).
    pub address: String,
}

/// One shard of the map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The shard's id.
    pub shard: String,
    /// The application whose keys it serves.
    pub application: String,
    /// First key of its range.
    pub lower: u32,
    /// Last key of its range (inclusive).
    pub upper: u32,
    /// Its state in the config.
    pub state: ShardState,
    /// The shard it was split from, while the config names it.
    pub parent: Option<String>,
    /// Its live holder; `None` while no live lease holds it.
    pub holder: Option<Holder>,
    /// Its lease's epoch (0 before any lease was taken).
    pub epoch: i64,
}

/// The map by shard id.
pub(crate) type Shards = BTreeMap<String, Assignment>;

/// The map at one version.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// 0 before the first read; then one more with every change.
    pub version: u64,
    /// The map.
    pub shards: Shards,
}

/// What turns one map into the next.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Delta {
    /// Shards new or changed, whole.
    pub changed: Vec<Assignment>,
    /// Shards no longer in the map.
    pub removed: Vec<String>,
}

/// The map of `map`'s shards with the holders of `rows` (the lease table),
/// names and addresses from `registry`. A row that is not live holds
/// nothing; a shard without a row has epoch 0.
pub(crate) fn assemble(map: &ShardMap, rows: &[LeaseRow], registry: &[NodeRecord]) -> Shards {
    let rows: BTreeMap<&str, &LeaseRow> = rows.iter().map(|r| (r.shard.as_str(), r)).collect();
    map.shards()
        .iter()
        .map(|s| {
            let row = rows.get(s.id.as_str());
            let holder = row.and_then(|r| holder(r, registry));
            let assignment = Assignment {
                shard: s.id.clone(),
                application: s.application.clone(),
                lower: s.lower,
                upper: s.upper,
                state: s.state,
                parent: s.parent.clone(),
                holder,
                epoch: row.map_or(0, |r| r.epoch),
            };
            (s.id.clone(), assignment)
        })
        .collect()
}

/// The live holder of `row`, named and addressed by its registration in
/// `registry` (by the row's name, without an address, when the node is not
/// registered there yet); `None` when no live lease holds the shard.
pub(crate) fn holder(row: &LeaseRow, registry: &[NodeRecord]) -> Option<Holder> {
    let uuid = row.holder.filter(|_| row.live)?;
    let registration = registry.iter().find(|n| n.id == uuid);
    Some(Holder {
        uuid,
        name: registration.map(|n| n.name.clone()).or_else(|| row.holder_name.clone()).unwrap_or_default(),
        address: registration.map(|n| n.address.clone()).unwrap_or_default(),
    })
}

/// What one stream sent last, for the application it watches (every one
/// when empty): each new map gives the stream a snapshot first, then the
/// delta of its own shards, or nothing when none of them changed.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    application: String,
    shards: Option<Shards>,
}

impl Sent {
    /// A stream of `application`'s shards (every application's when empty).
    pub(crate) fn of(application: String) -> Sent {
        Sent { application, shards: None }
    }

    /// The stream's next update for the map `latest`: (whether it is the
    /// snapshot, what changed), or `None` when nothing it shows changed.
    pub(crate) fn next(&mut self, latest: &Shards) -> Option<(bool, Delta)> {
        let mine: Shards = latest
            .iter()
            .filter(|(_, a)| self.application.is_empty() || a.application == self.application)
            .map(|(id, a)| (id.clone(), a.clone()))
            .collect();
        let snapshot = self.shards.is_none();
        let d = delta(self.shards.as_ref().unwrap_or(&Shards::new()), &mine);
        if !snapshot && d.changed.is_empty() && d.removed.is_empty() {
            return None;
        }
        self.shards = Some(mine);
        Some((snapshot, d))
    }
}

/// The delta from `old` to `new`, in shard order.
pub(crate) fn delta(old: &Shards, new: &Shards) -> Delta {
    Delta {
        changed: new.iter().filter(|(id, a)| old.get(*id) != Some(a)).map(|(_, a)| a.clone()).collect(),
        removed: old.keys().filter(|id| !new.contains_key(*id)).cloned().collect(),
    }
}

/// How often a watched map is read again when no notice came: the notices
/// of handoffs and takeovers make most changes arrive sooner; this catches
/// a lease that lapsed with nobody taking it.
pub(crate) fn reread_interval(renew: Duration) -> Duration {
    (renew * 2).clamp(Duration::from_millis(250), Duration::from_secs(10))
}

/// The latest map for every open stream.
pub struct Publisher {
    latest: watch::Sender<Arc<Snapshot>>,
    /// Read the map again now: a notice, a new config, a first subscriber.
    poke: Notify,
}

impl Default for Publisher {
    fn default() -> Self {
        Publisher { latest: watch::channel(Arc::default()).0, poke: Notify::new() }
    }
}

impl Publisher {
    /// A receiver of every new version; the map is read again at once, so
    /// its first snapshot is fresh.
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        let receiver = self.latest.subscribe();
        self.poke();
        receiver
    }

    /// Whether any stream is open (the map is read only while one is).
    pub fn watched(&self) -> bool {
        self.latest.receiver_count() > 0
    }

    /// Asks for the map to be read again now.
    pub fn poke(&self) {
        self.poke.notify_one();
    }

    /// Waits for [`Publisher::poke`].
    pub async fn poked(&self) {
        self.poke.notified().await
    }

    /// Publishes `shards` as the next version if they differ from the
    /// latest (or none was published yet); true if they did.
    pub fn publish(&self, shards: Shards) -> bool {
        self.latest.send_if_modified(|latest| {
            if latest.version > 0 && latest.shards == shards {
                return false;
            }
            *latest = Arc::new(Snapshot { version: latest.version + 1, shards });
            true
        })
    }
}

impl super::Node {
    /// Keeps the assignment map current while a stream watches it, until
    /// `shutdown`: read again on a poke (a peer's notice, a node found down,
    /// a new config, a new stream), on any change of this node's own leases,
    /// and at least every [`reread_interval`].
    pub async fn publish_assignments(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let every = reread_interval(self.settings.renew_interval());
        let mut own = self.leases.subscribe();
        loop {
            if self.assignments.watched()
                && let Err(e) = self.read_assignments().await
            {
                tracing::debug!(error = %e, "assignment map not read; trying again");
            }
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = self.assignments.poked() => {}
                _ = own.recv() => {}
                _ = tokio::time::sleep(every) => {}
            }
        }
    }

    /// One read of the lease table into the map (and of the registry, when
    /// a holder is not in this node's copy of it).
    async fn read_assignments(&self) -> Result<(), crate::lease::LeaseError> {
        let rows = self.store.holders().await?;
        let mut registry = self.registry();
        let unknown = |registry: &[NodeRecord]| {
            rows.iter().filter(|r| r.live).filter_map(|r| r.holder).any(|h| !registry.iter().any(|n| n.id == h))
        };
        if unknown(&registry) {
            registry = self.refresh_registry().await?;
        }
        self.assignments.publish(assemble(&self.topology().map, &rows, &registry));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::NodeState;
    use crate::topology::ClusterConfig;

    fn config() -> ClusterConfig {
        super::super::shard_map::standalone_config("n1", "127.0.0.1:7000", 2)
    }

    fn row(shard: &str, holder: Option<Uuid>, epoch: i64, live: bool) -> LeaseRow {
        LeaseRow {
            shard: shard.into(),
            holder,
            holder_name: Some("named-in-row".into()),
            epoch,
            liveness_epoch: None,
            expires_at: None,
            live,
        }
    }

    fn node(id: Uuid, name: &str) -> NodeRecord {
        NodeRecord {
            id,
            name: name.into(),
            address: format!("{name}:7000"),
            state: NodeState::Active,
            started_at: Default::default(),
            last_seen: Default::default(),
            live: true,
        }
    }

    #[test]
    fn the_map_joins_the_configs_ranges_with_the_live_holders() {
        let map = ShardMap::from_config(&config());
        let ids: Vec<String> = map.shards().iter().map(|s| s.id.clone()).collect();
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let registry = [node(a, "n1")];
        for (rows, expected, why) in [
            (vec![], vec![(None, 0), (None, 0)], "no rows: nothing held, epoch 0"),
            (
                vec![row(&ids[0], Some(a), 3, true), row(&ids[1], Some(a), 5, false)],
                vec![(Some(("n1", "n1:7000")), 3), (None, 5)],
                "a lapsed row holds nothing but keeps its epoch",
            ),
            (
                vec![row(&ids[0], Some(b), 4, true)],
                vec![(Some(("named-in-row", "")), 4), (None, 0)],
                "a holder not registered yet: the row's name, no address",
            ),
        ] {
            let shards = assemble(&map, &rows, &registry);
            let got: Vec<_> = ids
                .iter()
                .map(|id| {
                    let s = &shards[id];
                    (s.holder.as_ref().map(|h| (h.name.as_str(), h.address.as_str())), s.epoch)
                })
                .collect();
            assert_eq!(got, expected, "{why}");
        }
        let shards = assemble(&map, &[], &registry);
        let first = &shards[&ids[0]];
        assert_eq!(
            (first.lower, first.state, first.application.as_str()),
            (0, ShardState::Active, map.shards()[0].application.as_str())
        );
        assert_eq!(
            shards.values().map(|s| u64::from(s.upper - s.lower) + 1).sum::<u64>(),
            1 << 32,
            "the ranges cover the keyspace"
        );
    }

    #[test]
    fn a_delta_names_what_changed_and_what_went() {
        let map = ShardMap::from_config(&config());
        let ids: Vec<String> = map.shards().iter().map(|s| s.id.clone()).collect();
        let a = Uuid::from_u128(1);
        let empty = assemble(&map, &[], &[]);
        let one_held = assemble(&map, &[row(&ids[0], Some(a), 1, true)], &[]);
        let mut one_gone = empty.clone();
        one_gone.remove(&ids[1]);
        for (old, new, changed, removed, why) in [
            (&empty, &empty, vec![], vec![], "nothing changed"),
            (&empty, &one_held, vec![ids[0].clone()], vec![], "a holder came"),
            (&one_held, &empty, vec![ids[0].clone()], vec![], "a holder went"),
            (&empty, &one_gone, vec![], vec![ids[1].clone()], "a shard went"),
            (&one_gone, &empty, vec![ids[1].clone()], vec![], "a shard came"),
            (&Shards::new(), &empty, ids.clone(), vec![], "from nothing: everything"),
        ] {
            let d = delta(old, new);
            assert_eq!(d.changed.iter().map(|a| a.shard.clone()).collect::<Vec<_>>(), changed, "{why}");
            assert_eq!(d.removed, removed, "{why}");
            // Applying the delta to the old map gives the new one.
            let mut applied = old.clone();
            for id in &d.removed {
                applied.remove(id);
            }
            applied.extend(d.changed.into_iter().map(|a| (a.shard.clone(), a)));
            assert_eq!(&applied, new, "{why}");
        }
    }

    #[test]
    fn a_stream_sends_a_snapshot_then_only_the_changes_of_its_own_shards() {
        let mut config = config();
        config.applications.push(crate::topology::Application { name: "other".into(), ..config.applications[0].clone() });
        for (i, s) in config.applications[1].shards.iter_mut().enumerate() {
            s.id = format!("other_{i}");
        }
        let map = ShardMap::from_config(&config);
        let first = map.shards()[0].id.clone();
        let empty = assemble(&map, &[], &[]);
        let mine_held = assemble(&map, &[row(&first, Some(Uuid::from_u128(1)), 1, true)], &[]);
        let other_held = assemble(&map, &[row("other_0", Some(Uuid::from_u128(1)), 1, true)], &[]);
        let journal = map.shards()[0].application.clone();
        let shards_of = |d: &Delta| d.changed.iter().map(|a| a.shard.clone()).collect::<Vec<_>>();
        for (application, steps, why) in [
            (
                String::new(),
                vec![(&empty, Some((true, 4))), (&empty, None), (&other_held, Some((false, 1)))],
                "every application",
            ),
            (
                journal.clone(),
                vec![(&empty, Some((true, 2))), (&other_held, None), (&mine_held, Some((false, 1)))],
                "one application",
            ),
        ] {
            let mut sent = Sent::of(application);
            for (k, (latest, expected)) in steps.into_iter().enumerate() {
                let got = sent.next(latest).map(|(snapshot, d)| (snapshot, shards_of(&d).len()));
                assert_eq!(got, expected, "{why}, step {k}");
            }
        }
        // A stream of one application never sees another's shards.
        let mut sent = Sent::of(journal.clone());
        let (_, d) = sent.next(&other_held).unwrap();
        assert!(d.changed.iter().all(|a| a.application == journal), "{:?}", shards_of(&d));
    }

    #[test]
    fn a_version_is_published_only_for_a_change() {
        let map = ShardMap::from_config(&config());
        let publisher = Publisher::default();
        let mut rx = publisher.subscribe();
        assert!(publisher.watched());
        assert_eq!(rx.borrow_and_update().version, 0, "nothing read yet");
        let empty = assemble(&map, &[], &[]);
        assert!(publisher.publish(empty.clone()), "the first read is version 1");
        assert!(!publisher.publish(empty.clone()), "the same map: no version");
        let held = assemble(&map, &[row(&map.shards()[0].id, Some(Uuid::from_u128(1)), 1, true)], &[]);
        assert!(publisher.publish(held.clone()));
        assert!(rx.has_changed().unwrap());
        let latest = rx.borrow_and_update().clone();
        assert_eq!((latest.version, &latest.shards), (2, &held));
        drop(rx);
        assert!(!publisher.watched());
    }

    #[test]
    fn the_reread_interval_is_two_rounds_within_bounds() {
        assert_eq!(reread_interval(Duration::from_millis(500)), Duration::from_secs(1));
        assert_eq!(reread_interval(Duration::from_millis(50)), Duration::from_millis(250));
        assert_eq!(reread_interval(Duration::from_secs(30)), Duration::from_secs(10));
    }
}
