//! Wall-clock seconds, as the reference's JSON documents carry them.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch.
pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// A TTL in whole seconds for `EX`: rounded up, so that a key never expires
/// before the configured liveness timeout (2.5 s rounded down would drop a
/// live instance's keys half a second early), and never zero (Redis
/// refuses `EX 0`).
pub(crate) fn ttl_secs(d: std::time::Duration) -> u64 {
    (d.as_secs() + u64::from(d.subsec_nanos() > 0)).max(1)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn a_ttl_is_never_shorter_than_asked_nor_zero() {
        for (asked, secs) in [
            (Duration::from_secs(30), 30),
            (Duration::from_millis(2_500), 3),
            (Duration::from_millis(2_001), 3),
            (Duration::from_millis(999), 1),
            (Duration::ZERO, 1),
        ] {
            assert_eq!(super::ttl_secs(asked), secs, "{asked:?}");
        }
    }
}
