//! What a run's judgement found: each broken rule as a [`Violation`]
//! carrying its evidence, the takeovers measured, and their counts (the
//! [`Verdict`]). Plain data, below every module that judges, so that the
//! checker, the dispatch claims and the service's ledger each add to one
//! verdict without reaching into each other.

use serde::{Deserialize, Serialize};

/// One lease as ownership is judged: a grant and its holder.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Owner {
    pub shard: String,
    pub epoch: i64,
    pub holder: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Violation {
    Lost {
        stream: String,
        request_id: String,
        sequence: i64,
        epoch: i64,
    },
    AckMismatch {
        stream: String,
        request_id: String,
        acked: (i64, i64),
        stored: (i64, i64),
    },
    Duplicate {
        request_id: String,
        copies: Vec<(String, i64)>,
    },
    StaleEpoch {
        stream: String,
        seq: i64,
        request_id: String,
        shard: String,
        epoch: i64,
        current: Option<i64>,
        committed_us: i64,
    },
    SlowTakeover {
        fault: usize,
        node: String,
        shard: String,
        died_us: i64,
        granted_us: Option<i64>,
        bound_ms: u64,
    },
    /// A stalled node's shard granted elsewhere before its lease could have
    /// expired: something judged it dead that should not have.
    EarlyTakeover {
        fault: usize,
        node: String,
        shard: String,
        died_us: i64,
        granted_us: i64,
        floor_ms: u64,
    },
    /// A request answered "not applied" (and given up) was stored after all.
    NotAppliedStored {
        stream: String,
        request_id: String,
        seq: i64,
    },
    /// Two leases whose key ranges overlap were live at the same time (from
    /// `from_us` until `until_us`; `None`: the end of the run): two tokens
    /// could pass the fence for the same keys.
    OverlappingOwners {
        first: Owner,
        second: Owner,
        from_us: i64,
        until_us: Option<i64>,
    },
    /// A row of a split parent committed after the parent's retirement did.
    RetiredShardWrite {
        stream: String,
        seq: i64,
        request_id: String,
        shard: String,
        epoch: i64,
        retired_us: i64,
        committed_us: i64,
    },
    /// One (shard, epoch) held by more than one holder, by the history or by
    /// the holders that acknowledged first-attempt commits under it: a grant
    /// kept the epoch it replaced.
    EpochReused {
        shard: String,
        epoch: i64,
        holders: Vec<String>,
    },
    /// Two instances certainly owned one dispatch target at once, from
    /// `from_ms` until `until_ms` (milliseconds since the run's start),
    /// outside any fail-open window (see [`super::claims`]).
    DoubleOwner {
        target: String,
        first: TargetOwner,
        second: TargetOwner,
        from_ms: u64,
        until_ms: u64,
    },
    /// A dispatch answered "failed open" with no fail-open window of its
    /// node covering it: the node acted without a claim and without saying
    /// when it was failing open.
    UnloggedFailOpen {
        target: String,
        node: String,
        instance: String,
        sent_ms: u64,
        answered_ms: u64,
    },
    /// A write the service acknowledged is not in its table.
    ServiceLost {
        key: String,
        request_id: String,
    },
    /// One request stored more than once in the service's table.
    ServiceDuplicate {
        request_id: String,
        seqs: Vec<i64>,
    },
    /// A key written under an older token after a newer token's write: two
    /// owners' writes interleaved ([`super::ledger`]).
    ServiceInterleaved {
        key: String,
        request_id: String,
        written: Written,
        after: Written,
    },
}

impl Violation {
    /// Its `kind`, as the report names it (the serde tag, so the two cannot
    /// drift apart).
    pub fn kind(&self) -> String {
        serde_json::to_value(self).ok().and_then(|v| v["kind"].as_str().map(str::to_owned)).unwrap_or_default()
    }
}

/// A measured takeover.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Takeover {
    pub fault: usize,
    pub node: String,
    pub shard: String,
    pub ms: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    pub takeovers: Vec<Takeover>,
    pub lost: usize,
    pub duplicates: usize,
    pub stale_epoch: usize,
    pub mismatched: usize,
    pub slow_takeovers: usize,
    pub early_takeovers: usize,
    pub not_applied_stored: usize,
    #[serde(default)]
    pub overlapping_owners: usize,
    #[serde(default)]
    pub retired_writes: usize,
    #[serde(default)]
    pub epoch_reused: usize,
    #[serde(default)]
    pub double_owners: usize,
    #[serde(default)]
    pub unlogged_fail_opens: usize,
    /// The service's table ([`super::ledger`]): acknowledged writes missing,
    /// stored more than once, written under an older token after a newer one.
    #[serde(default)]
    pub service_lost: usize,
    #[serde(default)]
    pub service_duplicates: usize,
    #[serde(default)]
    pub service_interleaved: usize,
}

/// One owner's span of certain ownership of a target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetOwner {
    pub node: String,
    pub instance: String,
    pub from_ms: u64,
    pub until_ms: u64,
}

/// A token a row was written under, as a violation names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    /// The row's `seq`.
    pub seq: i64,
    /// The token's shard.
    pub shard: String,
    /// The token's epoch.
    pub epoch: i64,
}
