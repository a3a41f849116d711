//! [`AssignmentMap`]: the cluster's whole assignment map, kept current from a
//! node's `WatchAssignments` stream, so that keys are routed here and not
//! asked of a node per request.
//!
//! The map says, for every shard, its key range, state, lineage and holder
//! (name, address, epoch) as the streaming node last read them. A holder is
//! a route, not a grant: a request sent to a node that no longer holds the
//! shard is forwarded by it or answered with the new holder, and the holder's
//! fence decides. When the stream breaks the copy is kept (marked
//! disconnected), and the map subscribes again at the first node of the list
//! that answers, whose snapshot replaces it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::client::Client;
use crate::proto::{self, ownership_client::OwnershipClient};

/// The application journal streams route through when the map has it, as
/// on the node.
const JOURNAL_APPLICATION: &str = "journal";

/// The map at one version of one node's stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Assignments {
    /// The node whose stream built this copy (empty before the first snapshot).
    pub node: String,
    /// That node's version of the map (0 before the first snapshot).
    pub version: u64,
    /// Whether the stream is open; false: the copy is the last one seen.
    pub connected: bool,
    shards: BTreeMap<String, proto::Assignment>,
    /// Per application, its routable shards' ranges (lower, upper, shard),
    /// sorted by lower bound.
    ranges: BTreeMap<String, Vec<(u32, u32, String)>>,
}

/// An update that does not fit the copy it is applied to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MapError {
    /// A delta with no snapshot of its stream before it (the copy is
    /// empty, or from another node's stream).
    #[error("a delta of version {version} from `{node}` came before any snapshot of that stream")]
    DeltaFirst {
        /// The node whose stream sent the delta.
        node: String,
        /// The delta's version.
        version: u64,
    },
    /// An update at or below the copy's version.
    #[error("version {got} from `{node}` does not follow version {had}")]
    Backwards {
        /// The node whose stream sent the update.
        node: String,
        /// The copy's version.
        had: u64,
        /// The update's version.
        got: u64,
    },
}

impl Assignments {
    /// Applies one update of a stream: a snapshot replaces the copy, a
    /// delta changes it. On an error the copy is unchanged.
    pub fn apply(&mut self, update: proto::AssignmentUpdate) -> Result<(), MapError> {
        if update.snapshot {
            self.shards.clear();
        } else if self.version == 0 || self.node != update.node {
            return Err(MapError::DeltaFirst { node: update.node, version: update.version });
        } else if update.version <= self.version {
            return Err(MapError::Backwards { node: update.node, had: self.version, got: update.version });
        }
        for id in &update.removed {
            self.shards.remove(id);
        }
        self.shards.extend(update.changed.into_iter().map(|a| (a.shard.clone(), a)));
        self.node = update.node;
        self.version = update.version;
        self.index();
        Ok(())
    }

    fn index(&mut self) {
        self.ranges.clear();
        for a in self.shards.values().filter(|a| a.routable) {
            self.ranges.entry(a.application.clone()).or_default().push((a.lower, a.upper, a.shard.clone()));
        }
        for ranges in self.ranges.values_mut() {
            ranges.sort();
        }
    }

    /// The routable shard of `application` covering `key`.
    pub fn route(&self, application: &str, key: u32) -> Option<&proto::Assignment> {
        let ranges = self.ranges.get(application)?;
        let after = ranges.partition_point(|(lower, _, _)| *lower <= key);
        let (_, upper, shard) = ranges.get(after.checked_sub(1)?)?;
        (key <= *upper).then(|| &self.shards[shard])
    }

    /// The shard of journal stream `stream`: its key routed in the `journal`
    /// application, or in the only application there is.
    pub fn route_stream(&self, stream: &str) -> Option<&proto::Assignment> {
        let application = match self.ranges.contains_key(JOURNAL_APPLICATION) {
            true => JOURNAL_APPLICATION,
            false if self.ranges.len() == 1 => self.ranges.keys().next()?,
            false => return None,
        };
        self.route(application, crate::stream_key(stream))
    }

    /// The shard `id`.
    pub fn shard(&self, id: &str) -> Option<&proto::Assignment> {
        self.shards.get(id)
    }

    /// Every shard, by id.
    pub fn shards(&self) -> impl Iterator<Item = &proto::Assignment> {
        self.shards.values()
    }
}

/// Longest pause between subscription attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// A live copy of the assignment map; cheap to clone. The stream is watched
/// by a task that ends when the last clone is dropped.
#[derive(Clone)]
pub struct AssignmentMap {
    latest: watch::Receiver<Arc<Assignments>>,
    _task: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl AssignmentMap {
    /// Starts watching `application`'s shards (every application's when
    /// empty) through `client`'s nodes. Needs a Tokio runtime.
    pub(crate) fn start(client: Client, application: String) -> AssignmentMap {
        let (tx, latest) = watch::channel(Arc::new(Assignments::default()));
        let task = tokio::spawn(follow(client, application, tx));
        AssignmentMap { latest, _task: Arc::new(AbortOnDrop(task)) }
    }

    /// The copy as it is now.
    pub fn current(&self) -> Arc<Assignments> {
        self.latest.borrow().clone()
    }

    /// A receiver of every new copy (for `changed().await`).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Assignments>> {
        self.latest.clone()
    }

    /// Waits for the first snapshot, at most `timeout`; false if none came.
    pub async fn ready(&self, timeout: Duration) -> bool {
        let mut rx = self.latest.clone();
        tokio::time::timeout(timeout, rx.wait_for(|a| a.version > 0)).await.is_ok_and(|r| r.is_ok())
    }
}

/// Subscribes at the first node that answers and applies its updates,
/// again after every break, until `tx` has no receiver.
async fn follow(client: Client, application: String, tx: watch::Sender<Arc<Assignments>>) {
    let mut pause = Duration::from_millis(50);
    while !tx.is_closed() {
        for node in client.nodes().addresses() {
            let Ok(conn) = client.conn(node).await else { continue };
            let request = proto::WatchAssignmentsRequest { application: application.clone() };
            let mut stream = match OwnershipClient::new(conn).watch_assignments(request).await {
                Ok(s) => s.into_inner(),
                Err(_) => {
                    client.forget(node);
                    continue;
                }
            };
            pause = Duration::from_millis(50);
            while let Ok(Some(update)) = stream.message().await {
                let mut next = Assignments::clone(&tx.borrow());
                if next.apply(update).is_err() {
                    // Out of step with this stream: a fresh subscription
                    // starts from a snapshot.
                    break;
                }
                next.connected = true;
                if tx.send(Arc::new(next)).is_err() {
                    return;
                }
            }
            tx.send_modify(|a| Arc::make_mut(a).connected = false);
            break;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(MAX_PAUSE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(id: &str, app: &str, lower: u32, upper: u32, routable: bool, holder: &str) -> proto::Assignment {
        proto::Assignment {
            shard: id.into(),
            application: app.into(),
            lower,
            upper,
            state: if routable { "active" } else { "activating" }.into(),
            routable,
            holder: holder.into(),
            holder_address: format!("{holder}:1"),
            epoch: 1,
            ..Default::default()
        }
    }

    fn update(
        node: &str,
        version: u64,
        snapshot: bool,
        changed: Vec<proto::Assignment>,
        removed: &[&str],
    ) -> proto::AssignmentUpdate {
        proto::AssignmentUpdate {
            node: node.into(),
            version,
            snapshot,
            changed,
            removed: removed.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn holder_of(map: &Assignments, app: &str, key: u32) -> Option<String> {
        map.route(app, key).map(|a| a.holder.clone())
    }

    #[test]
    // case: map-copy
    fn a_snapshot_then_deltas_route_every_key_to_its_shard() {
        let mut map = Assignments::default();
        assert_eq!(map.route("kv", 0), None, "nothing before a snapshot");
        let halves = vec![shard("lo", "kv", 0, 0x7fff_ffff, true, "a"), shard("hi", "kv", 0x8000_0000, u32::MAX, true, "b")];
        map.apply(update("n1", 3, true, halves, &[])).unwrap();
        for (key, expected) in [(0, "a"), (0x7fff_ffff, "a"), (0x8000_0000, "b"), (u32::MAX, "b")] {
            assert_eq!(holder_of(&map, "kv", key).as_deref(), Some(expected), "key {key:08x}");
        }
        assert_eq!(map.route("other", 0), None, "another application");

        // A split of `hi`: children activating do not route yet.
        let children =
            vec![shard("hi.0", "kv", 0x8000_0000, 0xbfff_ffff, false, ""), shard("hi.1", "kv", 0xc000_0000, u32::MAX, false, "")];
        map.apply(update("n1", 4, false, children, &[])).unwrap();
        assert_eq!(holder_of(&map, "kv", 0xc000_0000).as_deref(), Some("b"), "the parent still routes");
        // The split ends: the children route, the parent is gone.
        let routed =
            vec![shard("hi.0", "kv", 0x8000_0000, 0xbfff_ffff, true, "c"), shard("hi.1", "kv", 0xc000_0000, u32::MAX, true, "a")];
        map.apply(update("n1", 6, false, routed, &["hi"])).unwrap();
        assert_eq!(holder_of(&map, "kv", 0x8000_0000).as_deref(), Some("c"));
        assert_eq!(holder_of(&map, "kv", u32::MAX).as_deref(), Some("a"));
        assert!(map.shard("hi").is_none());
        assert_eq!(map.version, 6);

        // Another node's snapshot replaces everything.
        map.apply(update("n2", 1, true, vec![shard("all", "kv", 0, u32::MAX, true, "d")], &[])).unwrap();
        assert_eq!((map.node.as_str(), map.version, map.shards().count()), ("n2", 1, 1));
        assert_eq!(holder_of(&map, "kv", 0x8000_0000).as_deref(), Some("d"));
    }

    #[test]
    fn an_update_out_of_step_is_refused_and_changes_nothing() {
        let mut map = Assignments::default();
        let one = || vec![shard("s", "kv", 0, u32::MAX, true, "a")];
        assert!(matches!(map.apply(update("n1", 2, false, one(), &[])), Err(MapError::DeltaFirst { .. })), "a delta first");
        assert_eq!(map, Assignments::default());
        map.apply(update("n1", 5, true, one(), &[])).unwrap();
        let before = map.clone();
        for (bad, why) in [
            (update("n1", 5, false, vec![], &["s"]), "the same version again"),
            (update("n1", 4, false, vec![], &["s"]), "an older version"),
        ] {
            assert!(matches!(map.apply(bad), Err(MapError::Backwards { .. })), "{why}");
            assert_eq!(map, before, "{why}: unchanged");
        }
        assert!(
            matches!(map.apply(update("n2", 6, false, vec![], &["s"])), Err(MapError::DeltaFirst { .. })),
            "another node's delta"
        );
        assert_eq!(map, before);
    }

    #[test]
    fn journal_streams_route_in_the_journal_application_or_the_only_one() {
        let key_of = |s: &str| crate::stream_key(s);
        let mut only = Assignments::default();
        only.apply(update("n", 1, true, vec![shard("s", "orders", 0, u32::MAX, true, "a")], &[])).unwrap();
        assert_eq!(only.route_stream("x").map(|a| a.shard.as_str()), Some("s"));
        let mut two = Assignments::default();
        let both = vec![shard("j", "journal", 0, u32::MAX, true, "a"), shard("o", "orders", 0, u32::MAX, true, "b")];
        two.apply(update("n", 1, true, both, &[])).unwrap();
        assert_eq!(two.route_stream("x").map(|a| a.shard.as_str()), Some("j"));
        assert_eq!(two.route("orders", key_of("x")).map(|a| a.shard.as_str()), Some("o"));
        let mut neither = Assignments::default();
        let other = vec![shard("p", "a", 0, u32::MAX, true, "a"), shard("q", "b", 0, u32::MAX, true, "b")];
        neither.apply(update("n", 1, true, other, &[])).unwrap();
        assert_eq!(neither.route_stream("x"), None, "no journal application among several");
    }
}
