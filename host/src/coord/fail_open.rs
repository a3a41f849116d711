//! Dispatch with fail-open: a Redis outage never stops work.
//!
//! [`Dispatcher::dispatch`] claims the target. A target owned by another
//! instance is declined. A Redis error is retried a bounded number of times
//! with a short backoff; then the dispatch proceeds anyway
//! ([`Dispatch::FailedOpen`]), logs
//! `Affinity check failed; dispatching anyway rather than dropping the command`
//! (at most once per [`FailOpenPolicy::log_every`], with the number of
//! suppressed repeats), counts `chitin_affinity_fail_open_total` and
//! records the node's fail-open window ([`super::fail_open_window`]), which
//! [`Dispatcher::dispatch_with_window`] hands back with the outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::affinity::{Affinity, AffinityError, Claim};
use super::fail_open_window::{FailOpenWindow, FailOpenWindows, unix_now_ms};
use super::metrics::CoordMetrics;

/// The log line of a fail-open dispatch (the reference's wording).
pub const FAIL_OPEN_MESSAGE: &str = "Affinity check failed; dispatching anyway rather than dropping the command";

/// The outcome of a dispatch that may proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dispatch {
    /// The target was free and is ours now.
    Claimed,
    /// The target was ours already.
    AlreadyOurs,
    /// Redis could not be reached after the retries: proceeding without a claim.
    FailedOpen,
}

impl Dispatch {
    /// The outcome's name on the wire (`DispatchResponse.outcome`).
    pub fn wire_name(self) -> &'static str {
        match self {
            Dispatch::Claimed => "claimed",
            Dispatch::AlreadyOurs => "already_ours",
            Dispatch::FailedOpen => "failed_open",
        }
    }

    /// The outcome a wire name stands for.
    pub fn from_wire(name: &str) -> Option<Dispatch> {
        [Dispatch::Claimed, Dispatch::AlreadyOurs, Dispatch::FailedOpen].into_iter().find(|d| d.wire_name() == name)
    }
}

impl From<Claim> for Dispatch {
    fn from(c: Claim) -> Self {
        match c {
            Claim::Claimed => Dispatch::Claimed,
            Claim::AlreadyOurs => Dispatch::AlreadyOurs,
        }
    }
}

/// A dispatch that must not proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Declined {
    /// Another live instance owns the target: decline, never redirect.
    #[error("target {target} is owned by instance {owner}")]
    TargetOwnedByOther { target: String, owner: String },
    /// The target id cannot be a key (empty, whitespace, `by-instance:`…).
    #[error("invalid target id {target:?}: {reason}")]
    InvalidTarget { target: String, reason: String },
    /// This instance holds its limit of claims (not a Redis failure: no
    /// fail-open).
    #[error(
        "target {target} not claimed: this instance already holds {limit} claims (`cluster.max_claims_per_instance`); \
         release targets it no longer serves, or raise the limit"
    )]
    TooManyClaims { target: String, limit: u64 },
}

/// Retry and logging bounds.
#[derive(Debug, Clone)]
pub struct FailOpenPolicy {
    /// Claim attempts before failing open (default 3).
    pub attempts: u32,
    /// Pause after the first failed attempt; doubles after each (default 50 ms).
    pub backoff: Duration,
    /// At most one fail-open log line per this long (default 10 s).
    pub log_every: Duration,
}

impl Default for FailOpenPolicy {
    fn default() -> Self {
        FailOpenPolicy { attempts: 3, backoff: Duration::from_millis(50), log_every: Duration::from_secs(10) }
    }
}

/// Lets one event through per period; counts the rest.
#[derive(Debug)]
pub struct RateLimiter {
    origin: Instant,
    period_ms: u64,
    /// Milliseconds since `origin` before which events are suppressed (+1, so 0 = never fired).
    next_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl RateLimiter {
    pub fn new(period: Duration) -> Self {
        RateLimiter {
            origin: Instant::now(),
            period_ms: period.as_millis() as u64,
            next_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(suppressed since the last pass)` when this event may be logged.
    pub fn check(&self) -> Option<u64> {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let next = self.next_ms.load(Ordering::Relaxed);
        if now >= next && self.next_ms.compare_exchange(next, now + self.period_ms, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return Some(self.suppressed.swap(0, Ordering::AcqRel));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// Claims at dispatch, failing open on Redis errors.
#[derive(Clone)]
pub struct Dispatcher {
    affinity: Affinity,
    policy: FailOpenPolicy,
    metrics: Arc<CoordMetrics>,
    limiter: Arc<RateLimiter>,
    windows: Arc<FailOpenWindows>,
}

impl Dispatcher {
    pub fn new(affinity: Affinity, policy: FailOpenPolicy, metrics: Arc<CoordMetrics>) -> Self {
        let limiter = Arc::new(RateLimiter::new(policy.log_every));
        let windows = Arc::new(FailOpenWindows::new(affinity.claim_ttl()));
        Dispatcher { affinity, policy, metrics, limiter, windows }
    }

    /// The node's open fail-open window, if any.
    pub fn fail_open_window(&self) -> Option<FailOpenWindow> {
        self.windows.current()
    }

    pub fn affinity(&self) -> &Affinity {
        &self.affinity
    }

    pub fn metrics(&self) -> &Arc<CoordMetrics> {
        &self.metrics
    }

    /// Claim `target` for a dispatch. `Ok` means go ahead (with or without a
    /// claim); `Err` means decline.
    pub async fn dispatch(&self, target: &str) -> Result<Dispatch, Declined> {
        self.dispatch_with_window(target).await.map(|(d, _)| d)
    }

    /// [`Dispatcher::dispatch`], with the fail-open window a
    /// [`Dispatch::FailedOpen`] belongs to (`None` for the other outcomes).
    pub async fn dispatch_with_window(&self, target: &str) -> Result<(Dispatch, Option<FailOpenWindow>), Declined> {
        let attempts = self.policy.attempts.max(1);
        let mut backoff = self.policy.backoff;
        let mut last_err = None;
        for attempt in 1..=attempts {
            match self.affinity.claim(target).await {
                Ok(c) => {
                    self.windows.reached_redis();
                    return Ok((c.into(), None));
                }
                Err(AffinityError::TargetOwnedByOther { target, owner }) => {
                    self.windows.reached_redis();
                    return Err(Declined::TargetOwnedByOther { target, owner });
                }
                Err(AffinityError::InvalidTarget { target, reason }) => {
                    return Err(Declined::InvalidTarget { target, reason });
                }
                Err(AffinityError::TooManyClaims { target, limit }) => {
                    self.windows.reached_redis();
                    return Err(Declined::TooManyClaims { target, limit });
                }
                Err(e) => {
                    tracing::debug!(target_id = target, attempt, error = %e, "Affinity check failed");
                    last_err = Some(e);
                    if attempt < attempts {
                        tokio::time::sleep(backoff).await;
                        backoff = backoff.saturating_mul(2);
                    }
                }
            }
        }
        self.metrics.fail_open_total.fetch_add(1, Ordering::Relaxed);
        let window = self.windows.failed_open(unix_now_ms());
        if let Some(suppressed) = self.limiter.check() {
            let error = last_err.map(|e| e.to_string()).unwrap_or_default();
            let window_start_unix_ms = window.start_unix_ms;
            tracing::warn!(target_id = target, attempts, error, suppressed, window_start_unix_ms, "{FAIL_OPEN_MESSAGE}");
        }
        Ok((Dispatch::FailedOpen, Some(window)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_outcome_reads_back_from_its_wire_name() {
        for d in [Dispatch::Claimed, Dispatch::AlreadyOurs, Dispatch::FailedOpen] {
            assert_eq!(Dispatch::from_wire(d.wire_name()), Some(d));
        }
        assert_eq!(Dispatch::from_wire("declined"), None);
    }

    #[test]
    fn rate_limiter_lets_one_through_per_period() {
        let l = RateLimiter::new(Duration::from_secs(3600));
        assert_eq!(l.check(), Some(0));
        assert_eq!(l.check(), None);
        assert_eq!(l.check(), None);
        let l0 = RateLimiter::new(Duration::ZERO);
        assert_eq!(l0.check(), Some(0));
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(l0.check(), Some(0));
    }

    #[test]
    fn rate_limiter_reports_suppressed() {
        let l = RateLimiter::new(Duration::from_millis(30));
        assert_eq!(l.check(), Some(0));
        assert_eq!(l.check(), None);
        assert_eq!(l.check(), None);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(l.check(), Some(2));
    }
}
