//! Version gates: behaviour that needs every node on a release stays off
//! until the cluster is finalized at that release.
//!
//! A gate is active once the finalized cluster version is at least the
//! release that introduces it; finalize refuses while any live node runs an
//! older release, and a node refuses to start on a cluster finalized past
//! its own release, so an active gate never meets a node that lacks it.
//! A contract migration (one that removes what an older release reads)
//! names the gate it waits for in its header, `-- contract: gated by
//! <gate>`, and ships a release after that gate's.

use super::version::Release;

/// One gated change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Named in `upgrade-status` and in contract migrations.
    pub name: &'static str,
    /// The release that introduces it; active once the cluster is finalized there.
    pub since: Release,
    /// What turns on.
    pub what: &'static str,
}

/// `peer-protocol-2`: node-to-node calls need protocol 2.
pub const PEER_PROTOCOL_2: Gate = Gate {
    name: "peer-protocol-2",
    since: Release::new(0, 2),
    what: "node-to-node calls (the Peer service) must speak protocol 2: a 0.1.0 node's calls are refused",
};

/// `node-leases`: shard leases ride on their holder's liveness record
/// (migration 0007): one heartbeat per node and round renews them all.
/// 0.1.0 judges a lease by its own expiry, so grants stay per-lease until
/// every node reads the liveness record.
pub const NODE_LEASES: Gate = Gate {
    name: "node-leases",
    since: Release::new(0, 2),
    what: "shard leases are granted on the holder's liveness epoch and renewed by its heartbeat, not one row at a time",
};

/// Every gate, oldest first. The contract step of `node-leases` (dropping
/// the per-lease expiry 0.1.0 reads) ships a release after it.
pub const GATES: &[Gate] = &[PEER_PROTOCOL_2, NODE_LEASES];

impl Gate {
    /// Whether the gate is on in a cluster finalized at `cluster`.
    pub fn active(&self, cluster: Release) -> bool {
        cluster >= self.since
    }
}

/// The gate named `name`.
pub fn gate(name: &str) -> Option<&'static Gate> {
    GATES.iter().find(|g| g.name == name)
}

/// The gates that finalizing from `from` to `to` turns on.
pub fn activated(from: Release, to: Release) -> Vec<&'static Gate> {
    GATES.iter().filter(|g| !g.active(from) && g.active(to)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gates_turn_on_at_their_release_and_stay_on() {
        let (r01, r02, r03) = (Release::new(0, 1), Release::new(0, 2), Release::new(0, 3));
        assert!(!PEER_PROTOCOL_2.active(r01));
        assert!(PEER_PROTOCOL_2.active(r02) && PEER_PROTOCOL_2.active(r03));
        assert_eq!(activated(r01, r02), vec![&PEER_PROTOCOL_2, &NODE_LEASES]);
        assert!(!NODE_LEASES.active(r01) && NODE_LEASES.active(r02));
        assert!(activated(r02, r02).is_empty());
    }

    #[test]
    fn gate_names_are_unique_and_no_gate_is_past_this_binary() {
        for (i, g) in GATES.iter().enumerate() {
            assert!(GATES[i + 1..].iter().all(|h| h.name != g.name), "two gates named {}", g.name);
            assert!(g.since <= Release::binary(), "gate {} belongs to a release after this binary", g.name);
            assert_eq!(gate(g.name), Some(g));
        }
        assert_eq!(gate("no-such-gate"), None);
    }
}
