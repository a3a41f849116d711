//! The wasmtime engine shared by every plugin, and the limits of one call.
//!
//! Deadlines use epoch interruption: a ticker thread advances the engine's
//! epoch every [`TICK`], and each call may run for `deadline / TICK` epochs
//! (rounded up, plus one for the tick in progress). Epochs cost far less
//! than fuel on the hot path.

use std::sync::OnceLock;
use std::time::Duration;

use wasmtime::{Config, Engine};

use super::PolicyLoadError;

/// How often the epoch advances.
pub const TICK: Duration = Duration::from_millis(2);

/// Limits applied to every policy call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Longest a single call may run.
    pub deadline: Duration,
    /// Most bytes an instance may hold in all its linear memories and tables together.
    pub memory_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            deadline: Duration::from_millis(u64::from(crate::settings::DEFAULT_POLICY_DEADLINE_MS)),
            memory_bytes: u64::from(crate::settings::DEFAULT_POLICY_MEMORY_MIB) << 20,
        }
    }
}

impl Limits {
    /// The widest limits the settings allow (60 s, 4 GiB), under which the
    /// embedded default policies run: they are chitin's own code, tested
    /// with it, whose cost grows with the cluster (a placement ranking of
    /// 100,000 shards on 100 nodes takes about 0.6 s, `--bench policies`).
    /// Under the 100 ms meant for a plugin they answered nothing at that
    /// size, nor could they then answer for a failed plugin.
    pub const WIDEST: Limits = Limits { deadline: Duration::from_secs(60), memory_bytes: 4 << 30 };

    /// Limits with a deadline of 1 ms … 60 s and a memory limit of 1 MiB … 4 GiB.
    pub fn new(deadline: Duration, memory_bytes: u64) -> Result<Self, PolicyLoadError> {
        if deadline < Duration::from_millis(1) || deadline > Duration::from_secs(60) {
            return Err(PolicyLoadError::Limits(format!("deadline_ms = {} must be between 1 and 60000", deadline.as_millis())));
        }
        if !(1 << 20..=4 << 30).contains(&memory_bytes) {
            return Err(PolicyLoadError::Limits(format!("memory_limit_mib = {} must be between 1 and 4096", memory_bytes >> 20)));
        }
        Ok(Limits { deadline, memory_bytes })
    }

    /// The epoch deadline of one call.
    pub fn deadline_ticks(&self) -> u64 {
        self.deadline.as_nanos().div_ceil(TICK.as_nanos()) as u64 + 1
    }
}

/// The process-wide engine; its epoch ticker starts with it.
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = Config::new();
        config.wasm_component_model(true);
        config.epoch_interruption(true);
        let engine = Engine::new(&config).expect("the policy engine configuration is valid");
        let ticker = engine.clone();
        std::thread::Builder::new()
            .name("chitin-policy-epoch".into())
            .spawn(move || {
                loop {
                    std::thread::sleep(TICK);
                    ticker.increment_epoch();
                }
            })
            .expect("spawn the policy epoch ticker");
        engine
    })
}
