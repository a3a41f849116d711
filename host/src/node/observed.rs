//! The cluster as the database has it at one moment, and the cache that
//! lets the status page and every `/metrics` scrape share one read of it.
//!
//! A page refresh every two seconds per open browser tab and a scrape per
//! Prometheus replica would otherwise each read the whole lease table: at
//! 100,000 shards that is the database's work, not the page's. [`Cache`]
//! reads at most once per [`MAX_AGE`], and callers that arrive while a read
//! runs wait for that read instead of starting their own.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::lease::{self, LeaseError, NodeRecord, Store};
use crate::upgrade::{Release, store as versions, store::NodeVersion};

/// How long one read serves the page and the scrapes: half the page's
/// refresh, so that every refresh shows a newer read.
pub const MAX_AGE: Duration = Duration::from_secs(1);

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
}

/// Reads what the page and `/metrics` show: registrations, lease rows, the
/// database clock, the nodes' versions and the cluster's.
pub async fn read(store: &Store) -> Result<Observed, LeaseError> {
    let (registry, rows, now) = (store.nodes().await?, store.holders().await?, store.now().await?);
    Ok(Observed {
        cluster: ClusterView { registry, rows, now },
        versions: versions::node_versions(store).await?,
        cluster_version: versions::cluster_version(store).await?,
    })
}

/// One read shared by every caller within [`MAX_AGE`] of it; a failed
/// read too, so that a database that is down is not asked again by every
/// refresh.
pub(crate) struct Cache {
    max_age: Duration,
    last: tokio::sync::Mutex<Option<(Instant, Result<Arc<Observed>, String>)>>,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache::new(MAX_AGE)
    }
}

impl Cache {
    fn new(max_age: Duration) -> Cache {
        Cache { max_age, last: tokio::sync::Mutex::new(None) }
    }

    /// The last read if it is younger than the cache's age, else the result
    /// of `read` (run by one caller while the others wait on the lock).
    pub(crate) async fn get<F, E>(&self, read: F) -> Result<Arc<Observed>, String>
    where
        F: Future<Output = Result<Observed, E>>,
        E: std::fmt::Display,
    {
        let mut last = self.last.lock().await;
        if let Some((at, result)) = last.as_ref()
            && at.elapsed() < self.max_age
        {
            return result.clone();
        }
        let result = read.await.map(Arc::new).map_err(|e| e.to_string());
        *last = Some((Instant::now(), result.clone()));
        result
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn observed() -> Observed {
        Observed {
            cluster: ClusterView { registry: Vec::new(), rows: Vec::new(), now: chrono::Utc::now() },
            versions: HashMap::new(),
            cluster_version: Release::first(),
        }
    }

    async fn counted(reads: Arc<AtomicUsize>, fail: bool) -> Result<Observed, String> {
        reads.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(20)).await;
        if fail { Err("database down".into()) } else { Ok(observed()) }
    }

    #[tokio::test]
    async fn concurrent_callers_share_one_read_until_it_ages() {
        let (cache, reads) = (Arc::new(Cache::new(Duration::from_millis(300))), Arc::new(AtomicUsize::new(0)));
        let mut callers = tokio::task::JoinSet::new();
        for _ in 0..20 {
            let (cache, reads) = (cache.clone(), reads.clone());
            callers.spawn(async move { cache.get(counted(reads, false)).await.is_ok() });
        }
        assert!(callers.join_all().await.into_iter().all(|ok| ok));
        assert_eq!(reads.load(Ordering::SeqCst), 1, "twenty callers at once, one read");
        cache.get(counted(reads.clone(), false)).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 1, "within the age: no read");
        tokio::time::sleep(Duration::from_millis(350)).await;
        cache.get(counted(reads.clone(), false)).await.unwrap();
        assert_eq!(reads.load(Ordering::SeqCst), 2, "past the age: read again");
    }

    #[tokio::test]
    async fn a_failed_read_is_shared_too_and_retried_after_the_age() {
        let (cache, reads) = (Cache::new(Duration::from_millis(200)), Arc::new(AtomicUsize::new(0)));
        assert_eq!(cache.get(counted(reads.clone(), true)).await.unwrap_err(), "database down");
        assert_eq!(cache.get(counted(reads.clone(), false)).await.unwrap_err(), "database down");
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(cache.get(counted(reads.clone(), false)).await.is_ok());
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }
}
