//! Rule codes and violations.

use std::fmt;

use serde::Serialize;

macro_rules! rule_codes {
    ($( $(#[$m:meta])* $variant:ident = $code:literal, )*) => {
        /// A rule of the cluster config. The code string is stable: scripts,
        /// fixtures and operators match on it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum RuleCode { $( $(#[$m])* $variant, )* }

        impl RuleCode {
            /// Every rule, single-config rules first.
            pub const ALL: &'static [RuleCode] = &[ $( RuleCode::$variant, )* ];

            /// The stable kebab-case code.
            pub fn as_str(self) -> &'static str {
                match self { $( RuleCode::$variant => $code, )* }
            }
        }
    };
}

rule_codes! {
    // ---- single config ----
    /// `version` is at least 1.
    VersionNotPositive = "version-not-positive",
    /// At least 3 nodes.
    TooFewNodes = "too-few-nodes",
    NodeIdEmpty = "node-id-empty",
    /// A node id is a node's name: the rule of [`crate::names::problem`].
    NodeIdInvalid = "node-id-invalid",
    NodeIdDuplicate = "node-id-duplicate",
    NodeAddressEmpty = "node-address-empty",
    NodeAddressDuplicate = "node-address-duplicate",
    ApplicationNameEmpty = "application-name-empty",
    ApplicationNameDuplicate = "application-name-duplicate",
    ImplementationEmpty = "implementation-empty",
    /// `replication_factor` is at least 3.
    ReplicationFactorTooLow = "replication-factor-too-low",
    ApplicationNoShards = "application-no-shards",
    ShardIdEmpty = "shard-id-empty",
    /// A shard id is a key of the lease table: the rule of [`crate::names::id_problem`].
    ShardIdInvalid = "shard-id-invalid",
    /// Shard ids are unique across the whole config.
    ShardIdDuplicate = "shard-id-duplicate",
    /// Every shard has at least `replication_factor` replicas.
    ShardTooFewReplicas = "shard-too-few-replicas",
    /// `lower < upper`, strictly.
    ShardBoundsOrder = "shard-bounds-order",
    ReplicaIdEmpty = "replica-id-empty",
    /// Replica ids are unique across the whole config.
    ReplicaIdDuplicate = "replica-id-duplicate",
    ReplicaNodeUnknown = "replica-node-unknown",
    /// Two replicas of one shard on the same node.
    ReplicaNodeDuplicate = "replica-node-duplicate",
    /// Keys of an application that no active or splitting shard covers.
    KeyspaceGap = "keyspace-gap",
    /// Keys of an application that two active or splitting shards cover.
    KeyspaceOverlap = "keyspace-overlap",
    ShardParentSelf = "shard-parent-self",
    /// `parent_id` names no shard at all.
    ShardParentUnknown = "shard-parent-unknown",
    /// `parent_id` names a shard of another application.
    ShardParentForeign = "shard-parent-foreign",
    /// Following `parent_id` comes back to the shard.
    ShardParentCycle = "shard-parent-cycle",
    ActiveShardHasChildren = "active-shard-has-children",
    InactiveShardNoChildren = "inactive-shard-no-children",
    /// A splitting shard has fewer than 2 children.
    SplittingTooFewChildren = "splitting-too-few-children",
    /// A child of a splitting shard is not activating.
    SplittingChildNotActivating = "splitting-child-not-activating",
    /// Parts of a splitting shard's range that no child covers.
    SplitChildrenGap = "split-children-gap",
    /// Keys of a splitting shard that two children cover.
    SplitChildrenOverlap = "split-children-overlap",
    /// A child reaches outside its splitting parent's range.
    SplitChildOutOfRange = "split-child-out-of-range",
    /// A child's replica nodes differ from its splitting parent's.
    SplitChildNodesMismatch = "split-child-nodes-mismatch",
    ActivatingShardHasChildren = "activating-shard-has-children",
    ActivatingShardNoParent = "activating-shard-no-parent",
    ActivatingParentNotSplitting = "activating-parent-not-splitting",
    MetadataKeyDuplicate = "metadata-key-duplicate",
    // ---- transition ----
    VersionNotIncreased = "version-not-increased",
    NodeRemovedWithReplicas = "node-removed-with-replicas",
    ApplicationRemoved = "application-removed",
    ShardRemoved = "shard-removed",
    ShardBoundsChanged = "shard-bounds-changed",
    ShardParentChanged = "shard-parent-changed",
    /// Any state change but active→splitting, splitting→inactive, activating→active.
    ShardStateChangeForbidden = "shard-state-change-forbidden",
    /// active→splitting without at least 2 activating children in the new config.
    SplitStartWithoutChildren = "split-start-without-children",
    /// A shard added to an existing application is created active.
    NewShardActive = "new-shard-active",
    ReplicasAddedAndRemoved = "replicas-added-and-removed",
    ReplicaNodeChanged = "replica-node-changed",
}

impl RuleCode {
    /// Whether the rule compares two versions.
    pub fn is_transition_rule(self) -> bool {
        self >= RuleCode::VersionNotIncreased
    }

    /// Looks a code up by its string.
    pub fn parse(code: &str) -> Option<RuleCode> {
        RuleCode::ALL.iter().copied().find(|c| c.as_str() == code)
    }
}

impl fmt::Display for RuleCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RuleCode {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One broken rule: the code, and a message naming the ids involved and the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    pub code: RuleCode,
    pub message: String,
}

impl Violation {
    pub fn new(code: RuleCode, message: impl Into<String>) -> Self {
        Violation { code, message: message.into() }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

/// Every violation of a check, as one error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{} violation(s): {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
pub struct Violations(pub Vec<Violation>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_kebab_case_and_parse_back() {
        let mut seen = std::collections::HashSet::new();
        for c in RuleCode::ALL {
            assert!(seen.insert(c.as_str()), "duplicate {c}");
            assert!(c.as_str().chars().all(|ch| ch.is_ascii_lowercase() || ch == '-'));
            assert_eq!(RuleCode::parse(c.as_str()), Some(*c));
        }
        assert!(!RuleCode::MetadataKeyDuplicate.is_transition_rule());
        assert!(RuleCode::VersionNotIncreased.is_transition_rule());
        assert!(RuleCode::ReplicaNodeChanged.is_transition_rule());
    }
}
