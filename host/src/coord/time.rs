//! Wall-clock seconds, as the reference's JSON documents carry them.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A TTL in whole seconds, never zero (Redis refuses `EX 0`).
pub(crate) fn ttl_secs(d: std::time::Duration) -> u64 {
    d.as_secs().max(1)
}
