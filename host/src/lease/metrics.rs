//! The store's own metric family: statements run again after contention (a
//! deadlock, a serialization failure), by operation. A rising count says
//! that nodes collide on the same rows; `register` and `acquire` should stay
//! at zero. The node registers the family with its others
//! (`node::metrics`); kept here so that the store depends on nothing above it.

use std::sync::LazyLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

/// One counter per operation.
pub(crate) type ByOp = Family<[(&'static str, &'static str); 1], Counter>;

/// The family's name (the encoder adds `_total`) and help text.
pub(crate) const NAME: &str = "chitin_store_retries";
pub(crate) const HELP: &str =
    "Store transactions run again after a deadlock or serialization failure, by operation (register, acquire, append, …)";

/// The operations whose series exist from the start (at zero), so that an
/// alert on them sees the series before the first retry.
const FROM_THE_START: [&str; 3] = ["register", "acquire", "append"];

/// One node runs per process, so one family serves.
static RETRIES: LazyLock<ByOp> = LazyLock::new(|| {
    let family = ByOp::default();
    for op in FROM_THE_START {
        let _ = family.get_or_create(&[("op", op)]);
    }
    family
});

/// The family, to register (a clone shares the series).
pub(crate) fn retries() -> ByOp {
    RETRIES.clone()
}

/// Counts one retry of `op`.
pub(crate) fn count_retry(op: &'static str) {
    RETRIES.get_or_create(&[("op", op)]).inc();
}

/// How often this process's stores ran `op` again after contention.
pub fn contention_retries(op: &'static str) -> u64 {
    RETRIES.get_or_create(&[("op", op)]).get()
}
