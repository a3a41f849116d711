//! One policy slot served by one plugin: the sandbox, the warm instance, the
//! deadline and memory limit of each call, and the mapping of failures.
//!
//! The sandbox ([`super::sandbox`]) grants nothing: the WASI interfaces a
//! `wasm32-wasip2` guest imports and the files and sockets other languages'
//! runtimes import, with no arguments, environment, files or network, frozen
//! clocks, deterministic randomness, calls that never wait,
//! and stdout/stderr captured into a small buffer whose text is added to a
//! trap's message. A warm instance serves calls until one fails; a failed
//! call drops it, so the next call starts from a fresh instance.

use std::sync::{Arc, Mutex};

use chitin_policy_sdk as sdk;
use wasmtime::component::InstancePre;

use crate::telemetry::trace_span;
use wasmtime::{Store, Trap};

use super::engine::{Limits, engine};
use super::sandbox::{Blocked, State, check_imports, linker};
use super::wit::{Answer, Exports, Indices};
use super::{Plugin, PolicyCallError, PolicyLoadError, Slot};

struct Warm {
    store: Store<State>,
    exports: Exports,
}

/// A slot served by a plugin. Calls are serialised per slot.
pub struct SlotRunner {
    plugin: Arc<Plugin>,
    slot: Slot,
    limits: Limits,
    pre: InstancePre<State>,
    indices: Indices,
    warm: Mutex<Option<Warm>>,
}

impl SlotRunner {
    /// Checks that `plugin` exports `slot` at a supported version and
    /// prepares its instantiation.
    pub fn new(plugin: Arc<Plugin>, slot: Slot, limits: Limits) -> Result<Self, PolicyLoadError> {
        let version = plugin.slot_version(slot)?;
        let instantiate_error = |e: wasmtime::Error| PolicyLoadError::Instantiate {
            plugin: plugin.name().to_string(),
            slot,
            reason: format!("{e:#}"),
        };
        check_imports(plugin.component()).map_err(|reason| PolicyLoadError::Instantiate {
            plugin: plugin.name().to_string(),
            slot,
            reason,
        })?;
        let pre = linker().instantiate_pre(plugin.component()).map_err(instantiate_error)?;
        let indices = Indices::new(version, slot, &pre).map_err(instantiate_error)?;
        Ok(SlotRunner { plugin, slot, limits, pre, indices, warm: Mutex::new(None) })
    }

    /// The plugin serving this slot.
    pub fn plugin(&self) -> &Plugin {
        &self.plugin
    }

    /// The slot served.
    pub fn slot(&self) -> Slot {
        self.slot
    }

    /// Drops the warm instance; the next call instantiates afresh.
    pub fn reset(&self) {
        self.warm.lock().unwrap_or_else(|p| p.into_inner()).take();
    }

    fn instantiate(&self) -> Result<Warm, PolicyCallError> {
        let mut store = Store::new(engine(), State::new(self.limits.memory_bytes));
        store.limiter(|s| &mut s.budget);
        store.set_epoch_deadline(self.limits.deadline_ticks());
        let loaded = self.pre.instantiate(&mut store).and_then(|instance| self.indices.load(&mut store, &instance));
        match loaded {
            Ok(exports) => Ok(Warm { store, exports }),
            Err(e) => Err(self.failure(e, Some((store.data(), 0)))),
        }
    }

    /// Runs `f` on the warm instance (made when missing) under the limits.
    /// Timed into `chitin_policy_call_duration_seconds` by slot and outcome.
    fn call<T>(&self, f: impl FnOnce(&mut Store<State>, &Exports) -> Answer<T>) -> Result<T, PolicyCallError> {
        let started = std::time::Instant::now();
        let _span = trace_span!("policy_call", slot = self.slot.interface(), plugin = self.plugin.name()).entered();
        let result = self.call_untimed(f);
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        super::metrics::observe_call(self.slot, outcome, started);
        result
    }

    fn call_untimed<T>(&self, f: impl FnOnce(&mut Store<State>, &Exports) -> Answer<T>) -> Result<T, PolicyCallError> {
        let mut slot = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        let mut warm = match slot.take() {
            Some(warm) => warm,
            None => self.instantiate()?,
        };
        warm.store.set_epoch_deadline(self.limits.deadline_ticks());
        let printed_before = warm.store.data().output_len();
        match f(&mut warm.store, &warm.exports) {
            Ok(answer) => {
                // A guest that prints gets a fresh instance (and buffer)
                // before its output could fill the buffer.
                if !warm.store.data().output_half_full() {
                    *slot = Some(warm);
                }
                answer.map_err(|error| PolicyCallError::Refused {
                    plugin: self.plugin.name().to_string(),
                    slot: self.slot,
                    error,
                })
            }
            // The instance may be in any state after a trap: drop it.
            Err(e) => Err(self.failure(e, Some((warm.store.data(), printed_before)))),
        }
    }

    /// The error of a failed call; `state` with the output length before
    /// the call, so that only the call's own output is shown.
    fn failure(&self, error: wasmtime::Error, state: Option<(&State, usize)>) -> PolicyCallError {
        let plugin = self.plugin.name().to_string();
        let slot = self.slot;
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return PolicyCallError::Timeout { plugin, slot, deadline_ms: self.limits.deadline.as_millis() as u64 };
        }
        if let Some(blocked) = error.downcast_ref::<Blocked>() {
            return PolicyCallError::Blocked { plugin, slot, call: blocked.call };
        }
        if state.is_some_and(|(s, _)| s.budget.exceeded()) {
            return PolicyCallError::OutOfMemory { plugin, slot, limit_mib: self.limits.memory_bytes >> 20 };
        }
        let mut reason = format!("{error:#}");
        if let Some(output) = state.map(|(s, from)| s.output_since(from)).filter(|o| !o.is_empty()) {
            reason.push_str("; guest output: ");
            reason.push_str(String::from_utf8_lossy(&output).trim());
        }
        PolicyCallError::Trap { plugin, slot, reason }
    }

    /// `instance-id.resolve`, with the host's name check.
    pub fn resolve(&self, ctx: sdk::InstanceContext) -> Result<String, PolicyCallError> {
        let name = self.call(|store, exports| exports.resolve(store, ctx))?;
        match crate::names::problem(&name) {
            None => Ok(name),
            Some(why) => Err(PolicyCallError::InvalidName { plugin: self.plugin.name().to_string(), name, why }),
        }
    }

    /// `placement.place-replicas`.
    pub fn place_replicas(&self, req: sdk::PlacementRequest) -> Result<Vec<sdk::ShardPlacement>, PolicyCallError> {
        self.call(|store, exports| exports.place_replicas(store, req))
    }

    /// `placement.rebalance`.
    pub fn rebalance(&self, req: sdk::RebalanceRequest) -> Result<Vec<sdk::ReplicaMove>, PolicyCallError> {
        self.call(|store, exports| exports.rebalance(store, req))
    }

    /// `placement.preferred-holders`.
    pub fn preferred_holders(&self, req: sdk::RankingRequest) -> Result<Vec<sdk::HolderRanking>, PolicyCallError> {
        self.call(|store, exports| exports.preferred_holders(store, req))
    }

    /// `split.split-points`.
    pub fn split_points(&self, req: sdk::SplitRequest) -> Result<Vec<u32>, PolicyCallError> {
        self.call(|store, exports| exports.split_points(store, req))
    }

    /// `drain.plan-drain`.
    pub fn plan_drain(&self, req: sdk::DrainRequest) -> Result<Vec<Vec<sdk::Handoff>>, PolicyCallError> {
        self.call(|store, exports| exports.plan_drain(store, req))
    }
}
