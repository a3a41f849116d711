//! The wall clock against the monotonic clock over a run. Takeovers are
//! measured on the database's wall clock (commit times) and fail-open
//! windows on the nodes' (the same machine's), while the lab times its
//! faults and dispatches on the monotonic clock. A virtual machine's wall
//! clock can step (seen here: 1.1 s, then 11.7 s forward, mid-run, when
//! the host corrected it); a takeover measured across such a step, or a
//! window set beside a dispatch timed on the other clock, would be judged
//! by the step. [`watch`] records each step; [`unstep_us`] takes them out.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// A change of the wall clock against the monotonic one larger than this
/// between two samples is a step (a drift is recorded once it adds up to it).
const STEP_US: i64 = 20_000;
const SAMPLE: Duration = Duration::from_millis(10);

/// One step of the wall clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    /// The wall clock just after the step, Unix microseconds.
    pub wall_us: i64,
    /// How far it stepped (forward is positive), microseconds.
    pub step_us: i64,
}

fn wall_minus_monotonic_us(origin: Instant) -> i64 {
    let wall = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64);
    wall - origin.elapsed().as_micros() as i64
}

/// Samples both clocks until `stop` turns true; returns the steps seen.
pub(crate) async fn watch(mut stop: watch::Receiver<bool>) -> Vec<Step> {
    let origin = Instant::now();
    let mut base = wall_minus_monotonic_us(origin);
    let mut steps = Vec::new();
    while !*stop.borrow() {
        tokio::select! {
            _ = tokio::time::sleep(SAMPLE) => {}
            _ = stop.changed() => {}
        }
        let offset_us = wall_minus_monotonic_us(origin);
        if let Some(step) = detect(&mut base, offset_us, offset_us + origin.elapsed().as_micros() as i64) {
            tracing::warn!(
                step_ms = step.step_us / 1000,
                "the wall clock stepped against the monotonic clock; the checker takes the step out"
            );
            steps.push(step);
        }
    }
    steps
}

/// One sample of wall minus monotonic (`offset_us`, taken at `wall_us`)
/// against `base`, the offset after the last step: a step when they differ
/// by more than [`STEP_US`], which becomes the new base.
pub(crate) fn detect(base: &mut i64, offset_us: i64, wall_us: i64) -> Option<Step> {
    let step_us = offset_us - *base;
    if step_us.abs() <= STEP_US {
        return None;
    }
    *base = offset_us;
    Some(Step { wall_us, step_us })
}

/// `wall_us` on a wall clock that never stepped: less every step at or
/// before it. Keeps order, so differences of unstepped times are monotonic
/// durations.
pub(crate) fn unstep_us(steps: &[Step], wall_us: i64) -> i64 {
    wall_us - steps.iter().filter(|s| s.wall_us <= wall_us).map(|s| s.step_us).sum::<i64>()
}

/// A time `wall_ms` after `start_unix_ms` by the wall clock (a node's
/// fail-open window), as milliseconds since the run's start on its
/// monotonic clock: the steps before it taken out.
pub(crate) fn run_ms(steps: &[Step], start_unix_ms: u64, wall_ms: u64) -> u64 {
    let wall_us = (start_unix_ms + wall_ms) as i64 * 1000;
    (unstep_us(steps, wall_us) / 1000 - start_unix_ms as i64).max(0) as u64
}

/// The same steps on a clock `offset_us` ahead of this machine's (the
/// database's).
pub(crate) fn shifted(steps: &[Step], offset_us: i64) -> Vec<Step> {
    steps.iter().map(|s| Step { wall_us: s.wall_us + offset_us, step_us: s.step_us }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_taken_out_of_every_time_after_it_and_of_no_time_before() {
        let steps = [Step { wall_us: 10_000_000, step_us: 11_700_000 }, Step { wall_us: 30_000_000, step_us: -500_000 }];
        let cases = [(9_999_999, 9_999_999), (10_000_000, -1_700_000), (20_000_000, 8_300_000), (30_000_000, 18_800_000)];
        for (wall, want) in cases {
            assert_eq!(unstep_us(&steps, wall), want, "{wall}");
        }
        // A takeover measured across the first step: 13.3 s by the wall, 1.6 s in fact.
        let (died, granted) = (9_000_000, 22_300_000);
        assert_eq!(unstep_us(&steps, granted) - unstep_us(&steps, died), 1_600_000);
        assert_eq!(unstep_us(&[], 5), 5);
        assert_eq!(shifted(&steps, 7)[0], Step { wall_us: 10_000_007, step_us: 11_700_000 });
    }

    #[test]
    fn a_window_on_the_wall_clock_lands_on_the_run_clock_without_the_steps_before_it() {
        let start = 1_000_000; // Unix ms at the run's start
        let steps = [Step { wall_us: (start as i64 + 5_000) * 1000, step_us: 12_800_000 }];
        // (ms after the start by the wall, ms since the start on the run's clock)
        let cases = [(0, 0), (4_999, 4_999), (5_000, 0), (17_800, 5_000), (20_000, 7_200)];
        for (wall, want) in cases {
            assert_eq!(run_ms(&steps, start, wall), want, "{wall}");
        }
        assert_eq!(run_ms(&[], start, 1_234), 1_234);
    }

    #[test]
    fn jumps_and_drifts_past_the_threshold_are_steps_and_jitter_is_not() {
        // (offset sample, wall time, the step it is)
        let samples: [(i64, i64, Option<i64>); 7] = [
            (5_000, 1, None),                          // jitter
            (-20_000, 2, None),                        // at the threshold
            (11_700_000, 3, Some(11_700_000)),         // the host's correction
            (11_710_000, 4, None),                     // drift, not yet a step
            (11_720_001, 5, Some(20_001)),             // drift that added up
            (11_720_001 - 500_000, 6, Some(-500_000)), // a step back
            (11_220_001, 7, None),
        ];
        let mut base = 0;
        for (offset, wall, want) in samples {
            assert_eq!(detect(&mut base, offset, wall), want.map(|step_us| Step { wall_us: wall, step_us }), "{offset}");
        }
    }

    #[tokio::test]
    async fn a_steady_clock_records_no_step() {
        let (tx, rx) = watch::channel(false);
        let watcher = tokio::spawn(watch(rx));
        tokio::time::sleep(Duration::from_millis(100)).await;
        tx.send(true).unwrap();
        assert_eq!(watcher.await.unwrap(), Vec::<Step>::new());
    }
}
