//! The node's own account of when it dispatched without claims: its
//! fail-open window, as evidence beside the rate-limited log line and the
//! `chitin_affinity_fail_open_total` counter.
//!
//! A window opens at the first dispatch that fails open and is extended by
//! every later one: it runs from the first fail-open to the last plus the
//! claim TTL (the liveness timeout), since a command dispatched without a
//! claim acts on its target for as long as a claim would have lived. The
//! first claim that reaches Redis again closes it (no later fail-open
//! extends it; the next one opens a new window), and so does a fail-open
//! that comes after the window's end. Each fail-open answer carries its
//! window (`DispatchResponse.fail_open_window`), so the evidence leaves the
//! node with the answer and survives the node's death.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A stretch in which a node dispatched without claims, in milliseconds
/// since the Unix epoch by the node's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailOpenWindow {
    /// The window's first fail-open.
    pub start_unix_ms: u64,
    /// Its last fail-open so far plus the claim TTL.
    pub end_unix_ms: u64,
}

/// The current window of one node (see the module docs).
#[derive(Debug)]
pub struct FailOpenWindows {
    ttl_ms: u64,
    /// Whether a window is open: a claim that reaches Redis reads only this
    /// while none is, so the common path takes no lock.
    open: AtomicBool,
    current: Mutex<Option<FailOpenWindow>>,
}

impl FailOpenWindows {
    /// Windows of a node whose claims live `ttl`.
    pub fn new(ttl: Duration) -> Self {
        FailOpenWindows { ttl_ms: ttl.as_millis() as u64, open: AtomicBool::new(false), current: Mutex::new(None) }
    }

    /// A dispatch failed open at `now_ms`: returns the window it belongs to.
    pub fn failed_open(&self, now_ms: u64) -> FailOpenWindow {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        let end_unix_ms = now_ms + self.ttl_ms;
        let window = match *current {
            Some(w) if now_ms <= w.end_unix_ms => {
                FailOpenWindow { start_unix_ms: w.start_unix_ms.min(now_ms), end_unix_ms: end_unix_ms.max(w.end_unix_ms) }
            }
            _ => FailOpenWindow { start_unix_ms: now_ms, end_unix_ms },
        };
        *current = Some(window);
        self.open.store(true, Ordering::Release);
        window
    }

    /// A claim reached Redis (whatever its outcome): the open window, if
    /// any, is closed.
    pub fn reached_redis(&self) {
        if self.open.load(Ordering::Acquire) {
            let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
            *current = None;
            self.open.store(false, Ordering::Release);
        }
    }

    /// The open window, if any.
    pub fn current(&self) -> Option<FailOpenWindow> {
        *self.current.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Milliseconds since the Unix epoch by this process's clock.
pub fn unix_now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: u64, end: u64) -> FailOpenWindow {
        FailOpenWindow { start_unix_ms: start, end_unix_ms: end }
    }

    #[test]
    fn a_window_runs_from_the_first_fail_open_to_the_last_plus_the_ttl() {
        let ws = FailOpenWindows::new(Duration::from_secs(3));
        assert_eq!(ws.current(), None);
        assert_eq!(ws.failed_open(1_000), w(1_000, 4_000));
        assert_eq!(ws.failed_open(2_500), w(1_000, 5_500));
        // Within the end: the same window, extended.
        assert_eq!(ws.failed_open(5_500), w(1_000, 8_500));
        // Past the end: a new one.
        assert_eq!(ws.failed_open(9_000), w(9_000, 12_000));
        assert_eq!(ws.current(), Some(w(9_000, 12_000)));
    }

    #[test]
    fn a_claim_that_reaches_redis_closes_the_window() {
        let ws = FailOpenWindows::new(Duration::from_secs(3));
        ws.reached_redis();
        ws.failed_open(1_000);
        ws.failed_open(1_200);
        ws.reached_redis();
        assert_eq!(ws.current(), None);
        // The next outage is a window of its own, though within the old end.
        assert_eq!(ws.failed_open(2_000), w(2_000, 5_000));
    }
}
