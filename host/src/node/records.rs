//! What the Admin API reads and writes of the cluster's records beside the
//! leases: each member's release and policy components, and the cluster
//! version. The API asks the node; only the node holds the store.

use std::collections::HashMap;

use uuid::Uuid;

use super::Node;
use super::policy_hashes::{self, Hashes, NodePolicies};
use crate::lease::{LeaseError, NodeRecord};
use crate::upgrade::{self, Release, store};

/// Every member's policy components and the cluster's own record.
pub struct PolicyRecords {
    /// The components each node recorded at its start.
    pub by_node: HashMap<Uuid, NodePolicies>,
    /// The components the cluster was started with, by slot.
    pub cluster: Hashes,
}

impl Node {
    /// The live registrations of `registry` with the release each runs.
    pub async fn members(&self, registry: &[NodeRecord]) -> Result<Vec<upgrade::Member>, LeaseError> {
        let versions = store::node_versions(&self.store).await?;
        Ok(upgrade::members(registry, &versions))
    }

    /// The cluster version, as the database has it now.
    pub async fn cluster_version(&self) -> Result<Release, LeaseError> {
        store::cluster_version(&self.store).await
    }

    /// Records `release` as the cluster version: the gates up to it are on.
    pub async fn set_cluster_version(&self, release: Release) -> Result<(), LeaseError> {
        store::set_cluster_version(&self.store, release).await
    }

    /// The policy components of every node and of the cluster.
    pub async fn policy_records(&self) -> Result<PolicyRecords, LeaseError> {
        Ok(PolicyRecords {
            by_node: policy_hashes::by_node(&self.store).await?,
            cluster: policy_hashes::cluster(&self.store).await?,
        })
    }

    /// Closes the store's connections (the process is stopping).
    pub async fn close_store(&self) {
        self.store.close().await;
    }
}
