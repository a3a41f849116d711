//! Rolling upgrades: two adjacent releases side by side (docs/upgrades.md).
//!
//! - [`version`]: release lines, this binary's protocol window, which
//!   cluster versions a binary may join;
//! - [`wire`]: the protocol metadata every call carries and how a node
//!   judges a caller;
//! - [`gates`]: behaviour that stays off until the cluster is finalized;
//! - [`store`]: the node-version and cluster-version tables;
//! - [`expand`]: the expand/contract rule migrations are checked against.
//!
//! A node records its version at registration ([`join`]); an operator
//! finalizes once every live node runs the new release ([`plan_finalize`]),
//! which turns the release's gates on and cannot be undone.

pub mod expand;
pub mod gates;
pub mod store;
pub(crate) mod version;
pub mod wire;

use uuid::Uuid;

use crate::lease::{LeaseError, NodeRecord, Store};
pub use version::{BINARY_VERSION, JoinRefused, MIN_PROTOCOL, PROTOCOL, Release};

/// Why a node may not join.
#[derive(Debug, thiserror::Error)]
pub enum JoinError {
    #[error(transparent)]
    Refused(#[from] JoinRefused),
    #[error("recording this node's version: {0}")]
    Store(#[from] LeaseError),
}

/// Records the version of registration `node`, starts a new cluster at this
/// binary's release, and checks that this binary may join the cluster's
/// version; a refused node is deregistered. Returns the cluster version.
pub async fn join(store: &Store, node: Uuid) -> Result<Release, JoinError> {
    let binary = Release::binary();
    store::record_node(store, node, BINARY_VERSION, PROTOCOL).await?;
    if store::init_cluster_version(store, binary).await? {
        tracing::info!(cluster_version = %binary, "a new cluster: it starts finalized at this node's release");
    }
    let cluster = store::cluster_version(store).await?;
    if let Err(refused) = version::may_join(binary, cluster) {
        if let Err(e) = store.deregister(node).await {
            tracing::warn!(error = %e, "cannot deregister the refused registration; it goes down at the liveness timeout");
        }
        return Err(refused.into());
    }
    apply_gates(store, cluster);
    if cluster < binary {
        let pending: Vec<&str> = gates::GATES.iter().filter(|g| !g.active(cluster)).map(|g| g.name).collect();
        tracing::info!(
            cluster_version = %cluster, version = BINARY_VERSION, ?pending,
            "the cluster is not finalized at this release: its gates stay off until `chitin cluster finalize-upgrade`"
        );
    }
    Ok(cluster)
}

/// Turns on in `store` what the gates active at `cluster` allow (they only
/// ever turn on: a cluster version never goes back).
pub fn apply_gates(store: &Store, cluster: Release) {
    if gates::NODE_LEASES.active(cluster) && !store.leases_on_liveness() {
        tracing::info!(gate = gates::NODE_LEASES.name, "gate on: new leases ride on their holder's liveness");
        store.set_leases_on_liveness(true);
    }
}

/// A live registration and the version it recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub name: String,
    pub id: Uuid,
    /// As recorded; [`version::UNRECORDED_VERSION`] for a 0.1.0 node.
    pub version: String,
    pub protocol: u32,
}

/// The live registrations with their versions.
pub fn members(registry: &[NodeRecord], versions: &std::collections::HashMap<Uuid, store::NodeVersion>) -> Vec<Member> {
    registry
        .iter()
        .filter(|r| r.live)
        .map(|r| {
            let recorded = versions.get(&r.id);
            Member {
                name: r.name.clone(),
                id: r.id,
                version: recorded.map_or(version::UNRECORDED_VERSION.to_string(), |v| v.version.clone()),
                protocol: recorded.map_or(1, |v| v.protocol),
            }
        })
        .collect()
}

/// The release a cluster at `cluster` can be finalized to by a node of
/// release `binary`: the binary's, when it is newer.
pub fn finalize_target(cluster: Release, binary: Release) -> Option<Release> {
    (cluster < binary).then_some(binary)
}

/// What a finalize does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finalize {
    pub from: Release,
    pub to: Release,
    /// Gates it turns on (none when `from == to`).
    pub activated: Vec<&'static gates::Gate>,
}

/// Whether the cluster at `cluster`, asked through a node of release
/// `binary`, can be finalized at `target` with these live members; the
/// refusal lists every reason.
pub fn plan_finalize(cluster: Release, target: Release, binary: Release, live: &[Member]) -> Result<Finalize, Vec<String>> {
    let mut why = Vec::new();
    if target > binary {
        why.push(format!(
            "the asked node runs chitin {BINARY_VERSION}: it cannot finalize at {target}, a release it does not know"
        ));
    }
    if target < cluster {
        why.push(format!("the cluster is finalized at {cluster} already; finalize never goes back (to {target})"));
    } else if target != cluster && !target.follows(cluster) {
        why.push(format!("the cluster is at {cluster}: finalize one release at a time, the release after {cluster} first"));
    }
    if live.is_empty() {
        why.push("no live node is registered".to_string());
    }
    for m in live {
        match m.version.parse::<Release>() {
            Ok(r) if r >= target => {}
            Ok(_) => why.push(format!("node `{}` ({}) runs chitin {}: upgrade it to {target} first", m.name, m.id, m.version)),
            Err(e) => why.push(format!("node `{}` ({}) recorded a version that cannot be judged: {e}", m.name, m.id)),
        }
    }
    if why.is_empty() {
        Ok(Finalize { from: cluster, to: target, activated: gates::activated(cluster, target) })
    } else {
        Err(why)
    }
}

/// The lowest protocol node-to-node calls must speak in a cluster at
/// `cluster`.
pub fn peer_floor(cluster: Release) -> u32 {
    if gates::PEER_PROTOCOL_2.active(cluster) { 2 } else { MIN_PROTOCOL }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_finalizes_only_to_a_newer_release_of_its_own() {
        let r = Release::new;
        let cases = [(r(0, 1), r(0, 2), Some(r(0, 2))), (r(0, 2), r(0, 2), None), (r(0, 3), r(0, 2), None)];
        for (cluster, binary, want) in cases {
            assert_eq!(finalize_target(cluster, binary), want, "{cluster} by {binary}");
        }
    }

    fn member(name: &str, version: &str) -> Member {
        Member { name: name.into(), id: Uuid::nil(), version: version.into(), protocol: 2 }
    }

    #[test]
    fn finalize_needs_every_live_node_on_the_release() {
        let (r01, r02) = (Release::new(0, 1), Release::new(0, 2));
        let all_new = [member("a", "0.2.0-dev"), member("b", "0.2.1")];
        let plan = plan_finalize(r01, r02, r02, &all_new).unwrap();
        assert_eq!(plan.activated, vec![&gates::PEER_PROTOCOL_2, &gates::NODE_LEASES]);
        let mixed = [member("a", "0.2.0"), member("b", version::UNRECORDED_VERSION)];
        let why = plan_finalize(r01, r02, r02, &mixed).unwrap_err();
        assert_eq!(why.len(), 1, "{why:?}");
        assert!(why[0].contains("node `b`") && why[0].contains("runs chitin 0.1.0"), "{why:?}");
        let again = plan_finalize(r02, r02, r02, &all_new).unwrap();
        assert!(again.activated.is_empty(), "a second finalize changes nothing");
    }

    #[test]
    fn finalize_refuses_what_it_cannot_do() {
        let (r01, r02, r03) = (Release::new(0, 1), Release::new(0, 2), Release::new(0, 3));
        let live = [member("a", "0.3.0")];
        let unknown = plan_finalize(r02, r03, r02, &live).unwrap_err();
        assert!(unknown[0].contains("a release it does not know"), "{unknown:?}");
        let back = plan_finalize(r03, r02, r03, &live).unwrap_err();
        assert!(back[0].contains("never goes back"), "{back:?}");
        let skip = plan_finalize(r01, r03, r03, &live).unwrap_err();
        assert!(skip[0].contains("one release at a time"), "{skip:?}");
        assert!(plan_finalize(r01, r02, r02, &[]).unwrap_err()[0].contains("no live node"));
        let garbled = plan_finalize(r01, r02, r02, &[member("g", "banana")]).unwrap_err();
        assert!(garbled[0].contains("cannot be judged"), "{garbled:?}");
    }

    #[test]
    fn the_peer_floor_rises_with_the_gate() {
        assert_eq!(peer_floor(Release::new(0, 1)), 1);
        assert_eq!(peer_floor(Release::new(0, 2)), 2);
    }
}
