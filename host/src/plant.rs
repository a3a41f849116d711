//! Planted bugs, for people who change chitin (never for operators): each
//! disables one safety mechanism, so that a test can prove the fault suite
//! catches its loss with the violation it should (`chitin chaos --plant
//! NAME`; `--list-plants`). Compiled in only with the `planted-bugs`
//! feature; without it [`active`] is `false` and every plant compiles away.
//! A node reads its plant from `CHITIN_PLANT` and logs it at start.

/// A safety mechanism a plant turns off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Plant {
    /// The database fence of an append: the lease row is neither locked nor checked.
    Fence,
    /// Request-id dedup: a repeated request id is answered as a new append
    /// (with a sequence number that was never stored).
    Dedup,
    /// The bounds on idle transactions and lock waits of every database session.
    IdleBound,
    /// The epoch bump of a grant: a new holder gets the epoch its
    /// predecessor held (and the history, keyed by epoch, keeps only the
    /// first holder of it).
    EpochBump,
    /// The retirement of a split parent's lease: the split records the
    /// parent retired but leaves its lease row (holder and epoch) as it was,
    /// so the parent's token stays valid beside its children's.
    SplitRetirement,
    /// The forward's at-most-once rule: a forward whose answer was lost
    /// (a timeout, a reset after sending) is taken as never sent, so the
    /// forwarding node may answer "not applied" for a request that commits.
    ForwardOnce,
    /// The lapse of a lease on its holder's liveness: such a lease is
    /// taken as live while its holder's row is at its liveness epoch and not
    /// down (it has an expiry), whether or not that expiry has passed, so a
    /// stalled holder keeps its shards and no takeover ends its liveness.
    Liveness,
    /// The ownership check of an affinity claim: a claim of a target that
    /// another instance owns overwrites that owner's claim instead of being
    /// declined, so two nodes act on one target at once.
    AffinityClaim,
}

impl Plant {
    pub const ALL: [Plant; 8] = [
        Plant::Fence,
        Plant::Dedup,
        Plant::IdleBound,
        Plant::EpochBump,
        Plant::SplitRetirement,
        Plant::ForwardOnce,
        Plant::Liveness,
        Plant::AffinityClaim,
    ];

    /// The name `--plant` takes.
    pub fn name(self) -> &'static str {
        match self {
            Plant::Fence => "fence",
            Plant::Dedup => "dedup",
            Plant::IdleBound => "idle-bound",
            Plant::EpochBump => "epoch-bump",
            Plant::SplitRetirement => "split-retirement",
            Plant::ForwardOnce => "forward-once",
            Plant::Liveness => "liveness",
            Plant::AffinityClaim => "affinity-claim",
        }
    }

    /// What it turns off.
    pub fn disables(self) -> &'static str {
        match self {
            Plant::Fence => "the database fence of every append (lease row lock and check)",
            Plant::Dedup => "request-id dedup: a repeated request id is answered as a new append",
            Plant::IdleBound => "the idle-transaction and lock-wait bounds of database sessions",
            Plant::EpochBump => "the epoch bump of a grant: a new holder gets its predecessor's epoch",
            Plant::SplitRetirement => "the retirement of a split parent's lease: its token stays valid beside its children's",
            Plant::ForwardOnce => "the forward's at-most-once rule: a forward whose answer was lost is taken as never sent",
            Plant::Liveness => {
                "the lapse of a lease on liveness: it is taken as live while its holder's row has an expiry, passed or not"
            }
            Plant::AffinityClaim => "the ownership check of an affinity claim: a claim overwrites another instance's",
        }
    }

    pub fn from_name(name: &str) -> Option<Plant> {
        Plant::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// The environment variable a node reads its plant from.
pub const ENV: &str = "CHITIN_PLANT";

/// Whether `plant` is active in this process.
#[cfg(feature = "planted-bugs")]
pub fn active(plant: Plant) -> bool {
    use std::sync::OnceLock;
    static ACTIVE: OnceLock<Option<Plant>> = OnceLock::new();
    *ACTIVE.get_or_init(|| std::env::var(ENV).ok().and_then(|n| Plant::from_name(&n))) == Some(plant)
}

/// Without the `planted-bugs` feature: never.
#[cfg(not(feature = "planted-bugs"))]
#[inline(always)]
pub fn active(_plant: Plant) -> bool {
    false
}

/// Checks `CHITIN_PLANT` at start: an unknown name, or a plant asked of a
/// build without plants, is refused.
pub fn check_env() -> Result<(), String> {
    let Ok(name) = std::env::var(ENV) else { return Ok(()) };
    let Some(plant) = Plant::from_name(&name) else {
        let known: Vec<&str> = Plant::ALL.iter().map(|p| p.name()).collect();
        return Err(format!("{ENV}=`{name}` is not a plant; known: {}", known.join(", ")));
    };
    if cfg!(feature = "planted-bugs") {
        tracing::error!(plant = plant.name(), disables = plant.disables(), "PLANTED BUG ACTIVE: this node is unsafe on purpose");
        Ok(())
    } else {
        Err(format!("{ENV} is set, but this build has no planted bugs (build with `--features planted-bugs`); unset it"))
    }
}
