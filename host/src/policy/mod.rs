//! The WebAssembly policy host.
//!
//! Every policy decision of chitin — the node's name, replica placement,
//! split points, drain order — is made by a WebAssembly component exporting
//! an interface of the `chitin:policy` WIT package. This module loads such
//! components and calls them in a sandbox.
//!
//! Layout:
//! - [`engine`]: the one wasmtime engine, its epoch ticker and the per-call limits;
//! - [`cache`]: precompiled components on disk, keyed by content and engine,
//!   loaded only with this node's authentication tag;
//! - [`sandbox`]: the WASI interfaces a guest gets (none waits) and the
//!   store data of an instance; [`budget`]: one memory limit across all of
//!   an instance's memories and tables; [`env`]: the variables the
//!   instance-id policy sees;
//! - [`plugin`]: loading a component (file or embedded default), checking its exports;
//! - [`wit`]: the supported interface versions, an enum arm each, and the
//!   `latest` alias, with one private module per supported version nested
//!   inside it (`wit::since_v0_1_0`: the bindings of version 0.1.0 and its
//!   calls in the SDK's plain types; the record conversions come from the
//!   SDK's `__policy_conversions!`), frozen once released;
//! - [`slot`]: a loaded slot: a warm instance, deadlines and error mapping;
//! - [`fixture`]: the fixture runner behind `chitin policy test`;
//! - `metrics`: the policy calls' latency family, which the node registers.
//!
//! Two components compared over one cluster snapshot (`chitin policy diff`)
//! is `rollout::shadow`: it builds its calls as the node and the control
//! sequences do, so it sits above both.
//!
//! Calls are synchronous and take microseconds; from async code call them
//! through `tokio::task::spawn_blocking` (WASI host calls, such as a guest's
//! panic message, block on a runtime of their own).

pub mod budget;
pub mod cache;
pub mod engine;
pub mod env;
pub mod fixture;
pub(crate) mod metrics;
pub mod plugin;
pub mod sandbox;
pub(crate) mod slot;
pub(crate) mod wit;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use chitin_policy_sdk as sdk;
use chitin_policy_sdk::{
    DrainRequest, Handoff, HolderRanking, InstanceContext, PlacementRequest, RankingRequest, RebalanceRequest, ReplicaMove,
    ShardPlacement, SplitRequest,
};
pub use engine::Limits;
pub use env::instance_env;
pub use plugin::{Plugin, PluginSource};
pub use slot::SlotRunner;

/// The four policy slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Slot {
    InstanceId,
    Placement,
    Split,
    Drain,
}

impl Slot {
    /// Every slot, in a fixed order.
    pub const ALL: [Slot; 4] = [Slot::InstanceId, Slot::Placement, Slot::Split, Slot::Drain];

    /// The WIT interface name of the slot (`instance-id`, `placement`, …).
    pub fn interface(self) -> &'static str {
        match self {
            Slot::InstanceId => "instance-id",
            Slot::Placement => "placement",
            Slot::Split => "split",
            Slot::Drain => "drain",
        }
    }

    /// The slot whose interface is `name`.
    pub fn from_interface(name: &str) -> Option<Slot> {
        Slot::ALL.into_iter().find(|s| s.interface() == name)
    }
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.interface())
    }
}

pub use crate::settings::PolicySettings;

impl PolicySettings {
    /// The configured source of `slot`.
    pub fn source(&self, slot: Slot) -> PluginSource {
        let value = match slot {
            Slot::InstanceId => &self.instance_id,
            Slot::Placement => &self.placement,
            Slot::Split => &self.split,
            Slot::Drain => &self.drain,
        };
        PluginSource::parse(value)
    }

    /// The per-call limits these settings ask for.
    pub fn limits(&self) -> Result<Limits, PolicyLoadError> {
        Limits::new(std::time::Duration::from_millis(u64::from(self.deadline_ms)), u64::from(self.memory_limit_mib) << 20)
    }
}

/// A plugin could not be loaded for a slot.
#[derive(Debug, thiserror::Error)]
pub enum PolicyLoadError {
    #[error("cannot read plugin {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error(
        "plugin {plugin} is not a WebAssembly component ({reason}); build it for wasm32-wasip2 \
         (`cargo build --target wasm32-wasip2`) or wrap a core module with `wasm-tools component new`"
    )]
    NotAComponent { plugin: String, reason: String },
    #[error(
        "plugin {plugin} cannot serve slot `{slot}`: it exports {found}, but this chitin supports \
         {supported}; rebuild the plugin against a supported `chitin:policy` version \
         (the WIT under wit/since_v<version>/)"
    )]
    UnsupportedVersion { plugin: String, slot: Slot, found: String, supported: String },
    #[error(
        "plugin {plugin} does not export the `{slot}` interface (expected {expected}; it exports: {exports}); \
         point this slot at a component that implements it, or at \"default\""
    )]
    MissingSlot { plugin: String, slot: Slot, expected: String, exports: String },
    #[error("plugin {plugin} cannot be instantiated for slot `{slot}`: {reason}")]
    Instantiate { plugin: String, slot: Slot, reason: String },
    #[error("invalid policy limits: {0}")]
    Limits(String),
}

/// A call into a policy failed. The slot keeps working: the next call gets
/// a fresh instance.
#[derive(Debug, thiserror::Error)]
pub enum PolicyCallError {
    #[error("policy `{slot}` ({plugin}) refused the request: {error}")]
    Refused { plugin: String, slot: Slot, error: sdk::PolicyError },
    #[error("policy `{slot}` ({plugin}) ran past its deadline of {deadline_ms} ms and was stopped")]
    Timeout { plugin: String, slot: Slot, deadline_ms: u64 },
    #[error(
        "policy `{slot}` ({plugin}) tried to wait in `{call}` (a sleep, or a wait on a clock or stream); \
         policies may not block, so the call was stopped"
    )]
    Blocked { plugin: String, slot: Slot, call: &'static str },
    #[error(
        "policy `{slot}` ({plugin}) exceeded its memory limit of {limit_mib} MiB (all its memories and \
         tables together) and was stopped"
    )]
    OutOfMemory { plugin: String, slot: Slot, limit_mib: u64 },
    #[error("policy `{slot}` ({plugin}) trapped: {reason}")]
    Trap { plugin: String, slot: Slot, reason: String },
    #[error(
        "policy `instance-id` ({plugin}) returned the name {name:?}, which {why}; \
         set `[cluster] instance_id` or CHITIN__CLUSTER__INSTANCE_ID to a name without `:`"
    )]
    InvalidName { plugin: String, name: String, why: &'static str },
    #[error(transparent)]
    Load(#[from] PolicyLoadError),
}

impl PolicyCallError {
    /// The outcome label of this failure in `chitin_policy_call_duration_seconds`.
    pub fn outcome(&self) -> &'static str {
        match self {
            PolicyCallError::Refused { .. } => "refused",
            PolicyCallError::Timeout { .. } => "timeout",
            PolicyCallError::Blocked { .. } => "blocked",
            PolicyCallError::OutOfMemory { .. } => "out_of_memory",
            PolicyCallError::Trap { .. } => "trap",
            PolicyCallError::InvalidName { .. } => "invalid",
            PolicyCallError::Load(_) => "load",
        }
    }
}

/// The four loaded slots of a node.
pub struct Policies {
    instance_id: SlotRunner,
    placement: SlotRunner,
    split: SlotRunner,
    drain: SlotRunner,
}

impl Policies {
    /// Loads the slots as `settings` map them; components are precompiled
    /// once into `settings.cache_dir` (or `default_cache_dir`, the node's
    /// `<data dir>/policy-cache`). The cache's key is kept beside the
    /// default dir in the data dir (`<data dir>/policy-cache.key`); without
    /// a default dir the key lives only in this process.
    pub fn load(settings: &PolicySettings, default_cache_dir: Option<PathBuf>) -> Result<Self, PolicyLoadError> {
        let limits = settings.limits()?;
        let key_file = default_cache_dir.as_ref().map(|d| d.with_extension("key"));
        let cache = settings.cache_dir.clone().or(default_cache_dir).map(|dir| match &key_file {
            Some(key) => cache::Cache::with_key_file(dir, key),
            None => cache::Cache::new(dir),
        });
        let mut loaded: Vec<(PluginSource, std::sync::Arc<Plugin>)> = Vec::new();
        let mut runner = |slot: Slot| -> Result<SlotRunner, PolicyLoadError> {
            let source = settings.source(slot);
            let limits = if source == PluginSource::Default { Limits::WIDEST } else { limits };
            // One component serving several slots is compiled once.
            let plugin = match loaded.iter().find(|(s, _)| *s == source) {
                Some((_, p)) => p.clone(),
                None => {
                    let p = std::sync::Arc::new(Plugin::load(&source, cache.as_ref())?);
                    loaded.push((source, p.clone()));
                    p
                }
            };
            SlotRunner::new(plugin, slot, limits)
        };
        Ok(Policies {
            instance_id: runner(Slot::InstanceId)?,
            placement: runner(Slot::Placement)?,
            split: runner(Slot::Split)?,
            drain: runner(Slot::Drain)?,
        })
    }

    /// The embedded default policies in every slot, without a disk cache.
    pub fn embedded_defaults() -> Result<Self, PolicyLoadError> {
        Self::load(&PolicySettings::default(), None)
    }

    /// The SHA-256 (hex) of the component in each slot, by the slot's
    /// interface name.
    pub fn hashes(&self) -> std::collections::BTreeMap<String, String> {
        Slot::ALL.iter().map(|s| (s.interface().to_string(), self.slot(*s).plugin().sha256().to_string())).collect()
    }

    /// The runner of `slot`.
    pub fn slot(&self, slot: Slot) -> &SlotRunner {
        match slot {
            Slot::InstanceId => &self.instance_id,
            Slot::Placement => &self.placement,
            Slot::Split => &self.split,
            Slot::Drain => &self.drain,
        }
    }

    /// The node's name, validated: never empty, never containing `:`.
    pub fn instance_id(&self, ctx: InstanceContext) -> Result<String, PolicyCallError> {
        self.instance_id.resolve(ctx)
    }

    /// Nodes for the replicas of new shards.
    pub fn place_replicas(&self, req: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyCallError> {
        self.placement.place_replicas(req)
    }

    /// Replica moves that even out replicas across nodes.
    pub fn rebalance(&self, req: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyCallError> {
        self.placement.rebalance(req)
    }

    /// Each shard's eligible replica nodes, best first.
    pub fn preferred_holders(&self, req: RankingRequest) -> Result<Vec<HolderRanking>, PolicyCallError> {
        self.placement.preferred_holders(req)
    }

    /// Split points of a shard.
    pub fn split_points(&self, req: SplitRequest) -> Result<Vec<u32>, PolicyCallError> {
        self.split.split_points(req)
    }

    /// The handoff rounds of a draining node.
    pub fn plan_drain(&self, req: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyCallError> {
        self.drain.plan_drain(req)
    }
}
