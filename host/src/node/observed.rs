//! The cluster as the database has it at one moment, and the cache that
//! lets the status page and every `/metrics` scrape share one read of it.
//!
//! A page refresh every two seconds per open browser tab and a scrape per
//! Prometheus replica would otherwise each read the whole lease table: at
//! 100,000 shards that read is the database's work and most of a scrape's
//! time. [`Cache`] reads at most once per [`FRESH`]; callers that arrive
//! while a read runs wait for it instead of starting their own. A read older
//! than that but younger than [`STALE`] is answered at once while the next
//! read runs in the background, so a scrape every 15 s never waits for the
//! database and shows values one scrape interval old at most (the age is
//! `chitin_cluster_read_age_seconds`, the page prints the read's time).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::lease::{self, LeaseError, NodeRecord, Store};
use crate::upgrade::{Release, store as versions, store::NodeVersion};

/// How long one read serves the page and the scrapes as it is: half the
/// page's refresh, so that every refresh shows a newer read.
pub const FRESH: Duration = Duration::from_secs(1);
/// How long an older read is still answered while the next one runs.
pub const STALE: Duration = Duration::from_secs(60);

/// What a status answer reads: registrations, lease rows, the database clock.
#[derive(Clone, Debug)]
pub struct ClusterView {
    /// Every registration, live or not.
    pub registry: Vec<NodeRecord>,
    /// Every lease row.
    pub rows: Vec<lease::LeaseRow>,
    /// The database's clock when it was read.
    pub now: chrono::DateTime<chrono::Utc>,
}

impl ClusterView {
    /// The live lease row of each shard, by shard id: one pass over the
    /// rows, so that matching every shard of a config to its row costs
    /// O(shards + rows), not their product.
    pub fn live_rows(&self) -> HashMap<&str, &lease::LeaseRow> {
        self.rows.iter().filter(|r| r.live).map(|r| (r.shard.as_str(), r)).collect()
    }

    /// The registrations leaving now (draining their shards).
    pub fn leaving(&self) -> HashSet<Uuid> {
        self.registry.iter().filter(|r| r.live && r.state == lease::NodeState::Leaving).map(|r| r.id).collect()
    }

    /// Live leases held per registration: one pass over the rows.
    pub fn held_by(&self) -> HashMap<Uuid, usize> {
        let mut held = HashMap::new();
        for holder in self.rows.iter().filter(|r| r.live).filter_map(|r| r.holder) {
            *held.entry(holder).or_insert(0) += 1;
        }
        held
    }
}

/// What the status page and `/metrics` show of the database: the cluster
/// and the versions the nodes run.
#[derive(Clone, Debug)]
pub struct Observed {
    /// Registrations and lease rows.
    pub cluster: ClusterView,
    /// The binary version and protocol each registration recorded.
    pub versions: HashMap<Uuid, NodeVersion>,
    /// The version the cluster is finalized at.
    pub cluster_version: Release,
    /// When the read finished, by this node's clock.
    pub read_at: Instant,
}

/// Reads what the page and `/metrics` show: registrations, lease rows, the
/// database clock, the nodes' versions and the cluster's.
pub async fn read(store: &Store) -> Result<Observed, LeaseError> {
    let (registry, rows, now) = (store.nodes().await?, store.holders().await?, store.now().await?);
    Ok(Observed {
        cluster: ClusterView { registry, rows, now },
        versions: versions::node_versions(store).await?,
        cluster_version: versions::cluster_version(store).await?,
        read_at: Instant::now(),
    })
}

/// One read shared by every caller within [`FRESH`] of it (a failed read
/// too, so that a database that is down is not asked again by every
/// refresh), and answered, while the next read runs, within [`STALE`].
pub(crate) struct Cache {
    fresh: Duration,
    stale: Duration,
    last: Arc<tokio::sync::Mutex<Option<Read>>>,
    /// A background read is under way.
    refreshing: Arc<AtomicBool>,
}

/// A read and when it ended.
type Read = (Instant, Result<Arc<Observed>, String>);

impl Default for Cache {
    fn default() -> Cache {
        Cache::new(FRESH, STALE)
    }
}

impl Cache {
    fn new(fresh: Duration, stale: Duration) -> Cache {
        Cache { fresh, stale, last: Arc::default(), refreshing: Arc::default() }
    }

    /// The last read while it is fresh; a stale successful one at once,
    /// with the next read started in the background; else the result of a
    /// read now (run by one caller while the others wait on the lock).
    pub(crate) async fn get<F, Fut, E>(&self, read: F) -> Result<Arc<Observed>, String>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Observed, E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let mut last = self.last.lock().await;
        match last.as_ref() {
            Some((at, result)) if at.elapsed() < self.fresh => return result.clone(),
            Some((at, Ok(observed))) if at.elapsed() < self.stale => {
                if !self.refreshing.swap(true, Ordering::AcqRel) {
                    let (slot, refreshing, next) = (self.last.clone(), self.refreshing.clone(), read());
                    tokio::spawn(async move {
                        let result = finish(next.await);
                        *slot.lock().await = Some((Instant::now(), result));
                        refreshing.store(false, Ordering::Release);
                    });
                }
                return Ok(observed.clone());
            }
            _ => {}
        }
        let result = finish(read().await);
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

fn finish<E: std::fmt::Display>(read: Result<Observed, E>) -> Result<Arc<Observed>, String> {
    read.map(Arc::new).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::sync::atomic::AtomicUsize;

    use tokio::sync::Semaphore;

    use super::*;

    /// Reads that count themselves and say which they were; each waits for
    /// a permit of `gate` (so a test decides when a read may end).
    struct Reads {
        count: Arc<AtomicUsize>,
        gate: Arc<Semaphore>,
    }

    type ReadFuture = Pin<Box<dyn Future<Output = Result<Observed, String>> + Send>>;

    impl Reads {
        fn new(permits: usize) -> Reads {
            Reads { count: Arc::default(), gate: Arc::new(Semaphore::new(permits)) }
        }

        fn done(&self) -> usize {
            self.count.load(Ordering::SeqCst)
        }

        /// The next read; it fails when `fail`.
        fn read(&self, fail: bool) -> impl FnOnce() -> ReadFuture + use<> {
            let (count, gate) = (self.count.clone(), self.gate.clone());
            move || {
                Box::pin(async move {
                    gate.acquire().await.expect("the gate stays open").forget();
                    let n = count.fetch_add(1, Ordering::SeqCst) + 1;
                    let versions = HashMap::from([(Uuid::nil(), NodeVersion { version: String::new(), protocol: n as u32 })]);
                    let cluster = ClusterView { registry: Vec::new(), rows: Vec::new(), now: chrono::Utc::now() };
                    let observed = Observed { cluster, versions, cluster_version: Release::first(), read_at: Instant::now() };
                    if fail { Err("database down".to_string()) } else { Ok(observed) }
                })
            }
        }
    }

    /// Which read an answer came from.
    fn which(answer: Result<Arc<Observed>, String>) -> u32 {
        answer.expect("a read").versions[&Uuid::nil()].protocol
    }

    /// Long enough that no stall of a noisy machine ends it within a test.
    const LONG: Duration = Duration::from_secs(600);

    #[tokio::test]
    async fn concurrent_callers_share_one_read_while_it_is_fresh() {
        let (cache, reads) = (Arc::new(Cache::new(LONG, Duration::ZERO)), Arc::new(Reads::new(100)));
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (cache, reads) = (cache.clone(), reads.clone());
            callers.spawn(async move { cache.get(reads.read(false)).await.is_ok() });
        }
        assert!(callers.join_all().await.into_iter().all(|ok| ok));
        assert_eq!(reads.done(), 1, "twenty callers at once, one read");
        assert_eq!(which(cache.get(reads.read(false)).await), 1, "while fresh: no read");
        // Fresh for no time and no stale window: every call reads.
        let never_fresh = Cache::new(Duration::ZERO, Duration::ZERO);
        assert_eq!(which(never_fresh.get(reads.read(false)).await), 2);
        assert_eq!(which(never_fresh.get(reads.read(false)).await), 3, "past fresh, no stale window: read now");
    }

    #[tokio::test]
    async fn a_stale_read_is_answered_at_once_while_the_next_runs() {
        let (cache, reads) = (Cache::new(Duration::ZERO, LONG), Reads::new(1));
        assert_eq!(which(cache.get(reads.read(false)).await), 1);
        // The gate holds the next read: an answer now cannot have waited for it.
        let at_once = tokio::time::timeout(Duration::from_secs(10), cache.get(reads.read(false))).await;
        assert_eq!(which(at_once.expect("the stale read answered without waiting")), 1);
        assert_eq!(which(cache.get(reads.read(false)).await), 1, "one background read at a time");
        reads.gate.add_permits(1);
        let next = async {
            while which(cache.get(reads.read(false)).await) != 2 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), next).await.expect("the background read's result is answered");
        assert_eq!(reads.done(), 2, "no read but the background one");
    }

    #[tokio::test]
    async fn a_failed_read_is_shared_while_fresh_and_never_answered_stale() {
        let (cache, reads) = (Cache::new(LONG, LONG), Reads::new(100));
        assert_eq!(cache.get(reads.read(true)).await.unwrap_err(), "database down");
        assert_eq!(cache.get(reads.read(false)).await.unwrap_err(), "database down");
        assert_eq!(reads.done(), 1);
        // Past fresh but within the stale window: a failure is read again now.
        let stale_window = Cache::new(Duration::ZERO, LONG);
        assert!(stale_window.get(reads.read(true)).await.is_err());
        assert_eq!(which(stale_window.get(reads.read(false)).await), 3, "read again now, not in the background");
    }
}
