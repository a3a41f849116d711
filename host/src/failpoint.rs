//! Failpoints: pauses at the risky moments of a transaction, so that the
//! fault suite (`chitin chaos`) reaches the worst interleavings instead of
//! waiting for luck. Compiled in only with the `failpoints` feature; without
//! it [`hit`] does nothing and costs nothing.
//!
//! `CHITIN_FAILPOINTS=name=probability:millis[,name=…]` arms them: for
//! example `append.before_commit=0.01:3000` pauses one append in a hundred
//! for three seconds of the node's running time (a SIGSTOP does not count)
//! between its fence and its COMMIT, holding the lease row shared.
//! [`POINTS`] lists every name.

use std::collections::BTreeMap;
use std::time::Duration;

/// Every failpoint and the moment it sits at.
pub const POINTS: &[(&str, &str)] = &[
    ("append.before_fence", "an append after the node's own lease check, before the database fence"),
    ("append.before_commit", "an append after its fence and insert, before COMMIT (the lease row held shared)"),
    ("append.after_commit", "an append after its COMMIT, before the node answers (a forward's answer lost past its timeout)"),
    ("handover.before_commit", "a handover after the grant, before COMMIT (the lease row held exclusively)"),
    ("split.before_commit", "a split after the parent's retirement and the children's grants, before COMMIT"),
];

/// The environment variable that arms failpoints.
pub const ENV: &str = "CHITIN_FAILPOINTS";

/// One armed failpoint.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Armed {
    /// Chance that one pass pauses, 0 … 1.
    pub probability: f64,
    pub pause: Duration,
}

/// Parses a `CHITIN_FAILPOINTS` value; the error says which entry is wrong and why.
pub fn parse(spec: &str) -> Result<BTreeMap<String, Armed>, String> {
    let mut armed = BTreeMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, action) = entry.split_once('=').ok_or_else(|| format!("`{entry}`: expected name=probability:millis"))?;
        if !POINTS.iter().any(|(p, _)| *p == name) {
            let known: Vec<&str> = POINTS.iter().map(|(p, _)| *p).collect();
            return Err(format!("`{name}` is not a failpoint; known: {}", known.join(", ")));
        }
        let (p, ms) = action.split_once(':').ok_or_else(|| format!("`{entry}`: expected name=probability:millis"))?;
        let probability: f64 = p.parse().map_err(|_| format!("`{entry}`: probability `{p}` is not a number"))?;
        if !(0.0..=1.0).contains(&probability) {
            return Err(format!("`{entry}`: probability {probability} is outside 0 … 1"));
        }
        let ms: u64 = ms.parse().map_err(|_| format!("`{entry}`: `{ms}` is not a whole number of milliseconds"))?;
        armed.insert(name.to_owned(), Armed { probability, pause: Duration::from_millis(ms) });
    }
    Ok(armed)
}

/// The pause one append can expect from the `append.*` failpoints of
/// `spec` (probability × pause, summed); zero for a malformed spec.
pub fn expected_append_pause(spec: &str) -> Duration {
    parse(spec)
        .unwrap_or_default()
        .iter()
        .filter(|(name, _)| name.starts_with("append."))
        .map(|(_, a)| a.pause.mul_f64(a.probability))
        .sum()
}

/// Checks `CHITIN_FAILPOINTS` at start: a malformed value, or one set for a
/// build without failpoints, is refused rather than silently ignored.
pub fn check_env() -> Result<(), String> {
    let Ok(spec) = std::env::var(ENV) else { return Ok(()) };
    parse(&spec).map_err(|e| format!("{ENV}: {e}"))?;
    if cfg!(feature = "failpoints") {
        tracing::warn!(%spec, "failpoints armed: this node pauses on purpose (fault testing only)");
        Ok(())
    } else {
        Err(format!("{ENV} is set, but this build has no failpoints (build with `--features failpoints`); unset it"))
    }
}

#[cfg(feature = "failpoints")]
fn armed() -> &'static BTreeMap<String, Armed> {
    use std::sync::OnceLock;
    static ARMED: OnceLock<BTreeMap<String, Armed>> = OnceLock::new();
    ARMED.get_or_init(|| std::env::var(ENV).ok().and_then(|s| parse(&s).ok()).unwrap_or_default())
}

/// Whether the failpoint `name` is armed in this process (a code path that
/// has no moment for it takes one that does).
#[cfg(feature = "failpoints")]
pub fn is_armed(name: &str) -> bool {
    armed().contains_key(name)
}

/// Without the `failpoints` feature: never.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub fn is_armed(_name: &str) -> bool {
    false
}

/// Pauses here when the failpoint `name` is armed and its dice say so.
#[cfg(feature = "failpoints")]
pub async fn hit(name: &'static str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static DICE: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);
    let Some(point) = armed().get(name) else { return };
    // SplitMix64 over a shared counter: cheap, and good enough for dice.
    let mut z = DICE.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    if ((z ^ (z >> 31)) as f64 / u64::MAX as f64) < point.probability {
        tracing::warn!(failpoint = name, pause = ?point.pause, "failpoint: pausing");
        park(point.pause).await;
    }
}

/// The step a park's running time is counted in.
#[cfg(feature = "failpoints")]
const PARK_STEP: Duration = Duration::from_millis(100);

/// Parks for `pause` of this process's running time: a SIGSTOP that falls
/// within it ends at most the step under way, so the park goes on after
/// SIGCONT for what it had left, as the slow work of a stopped process
/// would. A sleep of `pause` by the wall clock would end during a long
/// enough stop, and a holder paused mid-append would resume with nothing
/// left holding its transaction open: whether a stopped holder keeps its
/// lock past the takeover bound would be left to where the stop fell.
#[cfg(feature = "failpoints")]
async fn park(pause: Duration) {
    let mut left = pause;
    while !left.is_zero() {
        let step = left.min(PARK_STEP);
        tokio::time::sleep(step).await;
        left -= step;
    }
}

/// Without the `failpoints` feature: nothing.
#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub async fn hit(_name: &'static str) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_with_the_reason() {
        let ok = parse("append.before_commit=0.5:3000, split.before_commit=1:10").unwrap();
        assert_eq!(ok["append.before_commit"], Armed { probability: 0.5, pause: Duration::from_secs(3) });
        assert_eq!(ok.len(), 2);
        assert!(parse("").unwrap().is_empty());
        let expected =
            expected_append_pause("append.before_fence=0.05:2000,append.before_commit=0.5:10,split.before_commit=1:9000");
        assert_eq!(expected, Duration::from_millis(105));
        for (spec, says) in [
            ("nope=1:1", "not a failpoint"),
            ("append.before_commit", "expected name=probability:millis"),
            ("append.before_commit=2:1", "outside 0 … 1"),
            ("append.before_commit=x:1", "not a number"),
            ("append.before_commit=1:-5", "whole number"),
        ] {
            let e = parse(spec).unwrap_err();
            assert!(e.contains(says), "{spec}: {e}");
        }
    }

    /// A stop of the whole process (here: its runtime's only thread
    /// blocked, as SIGSTOP blocks it) ends at most the step under way.
    #[cfg(feature = "failpoints")]
    #[tokio::test(flavor = "current_thread")]
    async fn a_stop_of_the_process_does_not_count_toward_a_park() {
        let start = std::time::Instant::now();
        let parked = tokio::spawn(park(Duration::from_millis(500)));
        tokio::time::sleep(Duration::from_millis(150)).await;
        std::thread::sleep(Duration::from_millis(1000));
        parked.await.unwrap();
        // By the wall clock the park would have ended with the stop, at
        // 1.15 s; it had 300 ms of its own time left then.
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(1350), "the park ended {took:?} after it began");
    }
}
