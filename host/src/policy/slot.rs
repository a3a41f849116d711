//! One policy slot served by one plugin: the sandbox, the warm instance, the
//! deadline and memory limit of each call, and the mapping of failures.
//!
//! The sandbox grants nothing: WASI p2 is linked (a `wasm32-wasip2` guest
//! imports it even when it does no I/O) with no arguments, environment,
//! files or network, frozen clocks, and stdout/stderr captured into a small
//! buffer whose text is added to a trap's message. A warm instance serves
//! calls until one fails; a failed call drops it, so the next call starts
//! from a fresh instance.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chitin_policy_sdk as sdk;
use wasmtime::component::{InstancePre, Linker, ResourceTable};
use wasmtime::{ResourceLimiter, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::engine::{Limits, engine};
use super::wit::{Answer, Exports, Indices};
use super::{Plugin, PolicyCallError, PolicyLoadError, Slot, invalid_name_reason};

/// Bytes of guest stdout/stderr kept for error messages.
const OUTPUT_CAPACITY: usize = 4096;

/// The store data of one instance.
pub struct State {
    wasi: WasiCtx,
    table: ResourceTable,
    output: MemoryOutputPipe,
    memory_limit: u64,
    memory_exceeded: bool,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl ResourceLimiter for State {
    fn memory_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_limit {
            // Trap rather than fail the grow: a guest that cannot allocate
            // aborts anyway, and this way the error names the limit.
            self.memory_exceeded = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.memory_limit);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _max: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A clock that always reads zero: policies get time only through their input.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }
    fn now(&self) -> u64 {
        0
    }
}

fn linker() -> &'static Linker<State> {
    static LINKER: OnceLock<Linker<State>> = OnceLock::new();
    LINKER.get_or_init(|| {
        let mut linker = Linker::new(engine());
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).expect("link WASI p2");
        linker
    })
}

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
        let pre = linker().instantiate_pre(plugin.component()).map_err(instantiate_error)?;
        let indices = Indices::new(version, slot, &pre).map_err(instantiate_error)?;
        Ok(SlotRunner {
            plugin,
            slot,
            limits,
            pre,
            indices,
            warm: Mutex::new(None),
        })
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

    fn instantiate(&self) -> Result<Warm, wasmtime::Error> {
        let output = MemoryOutputPipe::new(OUTPUT_CAPACITY);
        let wasi = WasiCtxBuilder::new()
            .stdout(output.clone())
            .stderr(output.clone())
            .wall_clock(Frozen)
            .monotonic_clock(Frozen)
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let mut store = Store::new(
            engine(),
            State {
                wasi,
                table: ResourceTable::new(),
                output,
                memory_limit: self.limits.memory_bytes,
                memory_exceeded: false,
            },
        );
        store.limiter(|s| s);
        store.set_epoch_deadline(self.limits.deadline_ticks());
        let instance = self.pre.instantiate(&mut store)?;
        let exports = self.indices.load(&mut store, &instance)?;
        Ok(Warm { store, exports })
    }

    /// Runs `f` on the warm instance (made when missing) under the limits.
    /// Timed into `chitin_policy_call_duration_seconds` by slot and outcome.
    fn call<T>(&self, f: impl FnOnce(&mut Store<State>, &Exports) -> Answer<T>) -> Result<T, PolicyCallError> {
        let started = std::time::Instant::now();
        let result = self.call_untimed(f);
        let outcome = match &result {
            Ok(_) => "ok",
            Err(e) => e.outcome(),
        };
        crate::node::metrics::observe_policy_call(self.slot, outcome, started);
        result
    }

    fn call_untimed<T>(&self, f: impl FnOnce(&mut Store<State>, &Exports) -> Answer<T>) -> Result<T, PolicyCallError> {
        let mut slot = self.warm.lock().unwrap_or_else(|p| p.into_inner());
        let mut warm = match slot.take() {
            Some(warm) => warm,
            None => self.instantiate().map_err(|e| self.failure(e, None))?,
        };
        warm.store.set_epoch_deadline(self.limits.deadline_ticks());
        match f(&mut warm.store, &warm.exports) {
            Ok(answer) => {
                *slot = Some(warm);
                answer.map_err(|error| PolicyCallError::Refused {
                    plugin: self.plugin.name().to_string(),
                    slot: self.slot,
                    error,
                })
            }
            // The instance may be in any state after a trap: drop it.
            Err(e) => Err(self.failure(e, Some(warm.store.data()))),
        }
    }

    fn failure(&self, error: wasmtime::Error, state: Option<&State>) -> PolicyCallError {
        let plugin = self.plugin.name().to_string();
        let slot = self.slot;
        if error.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
            return PolicyCallError::Timeout {
                plugin,
                slot,
                deadline_ms: self.limits.deadline.as_millis() as u64,
            };
        }
        if state.is_some_and(|s| s.memory_exceeded) {
            return PolicyCallError::OutOfMemory {
                plugin,
                slot,
                limit_mib: self.limits.memory_bytes >> 20,
            };
        }
        let mut reason = format!("{error:#}");
        if let Some(output) = state.map(|s| s.output.contents()).filter(|o| !o.is_empty()) {
            reason.push_str("; guest output: ");
            reason.push_str(String::from_utf8_lossy(&output).trim());
        }
        PolicyCallError::Trap { plugin, slot, reason }
    }

    /// `instance-id.resolve`, with the host's name check.
    pub fn resolve(&self, ctx: sdk::InstanceContext) -> Result<String, PolicyCallError> {
        let name = self.call(|store, exports| exports.resolve(store, ctx))?;
        match invalid_name_reason(&name) {
            None => Ok(name),
            Some(why) => Err(PolicyCallError::InvalidName {
                plugin: self.plugin.name().to_string(),
                name,
                why,
            }),
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
