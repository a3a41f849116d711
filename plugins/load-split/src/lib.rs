//! Load-aware split: a chitin `split` plugin that cuts a shard where each
//! child gets about the same share of the observed operations per second.
//!
//! The host passes `samples`: load observed on sub-ranges of the shard. The
//! plugin assumes the load of a sample is spread evenly over its keys (keys
//! no sample covers carry none), and puts the `k`-th split point where the
//! cumulative ops/s reaches `k / children` of the total. Without samples, or
//! when they sum to zero ops/s, it splits like the default: at the midpoint
//! (equal parts for more children). An explicit point from the operator
//! (`at`) always wins, and every refusal (a shard that is not active, a
//! one-key range, a bad point) is the default's.

use chitin_default_policies::split as defaults;
use chitin_policy_sdk::{PolicyError, RangeLoad, SplitPolicy, SplitRequest, range};

/// The plugin: implements [`SplitPolicy`].
pub struct LoadSplit;

chitin_policy_sdk::export_policies!(LoadSplit: split);

/// Samples clipped to `[lower, upper]`, sorted, with a positive finite load.
fn clipped(samples: &[RangeLoad], lower: u32, upper: u32) -> Vec<(u32, u32, f64)> {
    let mut out: Vec<(u32, u32, f64)> = samples
        .iter()
        .filter(|s| s.lower <= s.upper && s.upper >= lower && s.lower <= upper)
        .filter(|s| s.ops_per_sec.is_finite() && s.ops_per_sec > 0.0)
        .map(|s| {
            // Only the part inside the shard counts, with its share of the load.
            let (l, u) = (s.lower.max(lower), s.upper.min(upper));
            let share = range::len(l, u) as f64 / range::len(s.lower, s.upper) as f64;
            (l, u, s.ops_per_sec * share)
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    out
}

/// Split points that halve (or cut in `children` equal shares) the load in
/// `samples`; `None` when the samples carry no load or no valid cut exists.
pub fn load_points(lower: u32, upper: u32, children: u32, samples: &[RangeLoad]) -> Option<Vec<u32>> {
    let samples = clipped(samples, lower, upper);
    let total: f64 = samples.iter().map(|s| s.2).sum();
    if total <= 0.0 || children < 2 {
        return None;
    }
    let mut points = Vec::with_capacity(children as usize - 1);
    for k in 1..children {
        let target = total * f64::from(k) / f64::from(children);
        let mut before = 0.0;
        let mut point = u64::from(upper);
        for &(l, u, ops) in &samples {
            if before + ops >= target {
                let keys = ((target - before) / ops * range::len(l, u) as f64).round() as u64;
                point = u64::from(l) + keys;
                break;
            }
            before += ops;
        }
        // Strictly increasing, inside the range, leaving a key for every later child.
        let min = points.last().map_or(u64::from(lower) + 1, |&p: &u32| u64::from(p) + 1);
        let max = u64::from(upper) + 1 - u64::from(children - k);
        if min > max {
            return None;
        }
        points.push(point.clamp(min, max) as u32);
    }
    Some(points)
}

/// `split-points` (see the crate documentation).
pub fn split_points(req: &SplitRequest) -> Result<Vec<u32>, PolicyError> {
    // Refusals, `at` and the even fallback come from the default.
    let even = defaults::split_points(req)?;
    if req.at.is_some() {
        return Ok(even);
    }
    Ok(load_points(req.shard.lower, req.shard.upper, req.children, &req.samples).unwrap_or(even))
}

impl SplitPolicy for LoadSplit {
    fn split_points(request: SplitRequest) -> Result<Vec<u32>, PolicyError> {
        split_points(&request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chitin_policy_sdk::Shard;

    fn sample(lower: u32, upper: u32, ops: f64) -> RangeLoad {
        RangeLoad { lower, upper, ops_per_sec: ops, ..RangeLoad::default() }
    }

    fn request(samples: Vec<RangeLoad>, children: u32) -> SplitRequest {
        SplitRequest {
            shard: Shard { id: "s".into(), lower: 0, upper: u32::MAX, ..Shard::default() },
            children,
            samples,
            ..SplitRequest::default()
        }
    }

    fn load_below(samples: &[RangeLoad], point: u32) -> f64 {
        clipped(samples, 0, point - 1).iter().map(|s| s.2).sum()
    }

    #[test]
    fn no_samples_split_at_the_midpoint() {
        assert_eq!(split_points(&request(vec![], 2)), Ok(vec![0x8000_0000]));
        let idle = vec![sample(0, 0xffff, 0.0)];
        assert_eq!(split_points(&request(idle, 2)), Ok(vec![0x8000_0000]));
    }

    #[test]
    fn a_hot_first_quarter_moves_the_point_into_it() {
        let samples = vec![sample(0, 0x3fff_ffff, 300.0), sample(0x4000_0000, u32::MAX, 100.0)];
        let points = split_points(&request(samples.clone(), 2)).unwrap();
        assert_eq!(points, vec![0x2aaa_aaab]);
        let below = load_below(&samples, points[0]);
        assert!((below - 200.0).abs() < 0.01, "{below}");
    }

    #[test]
    fn each_of_four_children_gets_a_quarter_of_the_load() {
        let samples: Vec<RangeLoad> =
            (0..16u32).map(|i| sample(i << 28, ((i + 1) << 28).wrapping_sub(1), f64::from(i + 1))).collect();
        let points = split_points(&request(samples.clone(), 4)).unwrap();
        let total: f64 = (1..=16).map(f64::from).sum();
        for (k, p) in points.iter().enumerate() {
            let want = total * (k + 1) as f64 / 4.0;
            assert!((load_below(&samples, *p) - want).abs() < 0.01, "{points:x?}");
        }
    }

    #[test]
    fn a_single_hot_key_still_leaves_two_children() {
        let req = SplitRequest {
            shard: Shard { id: "s".into(), lower: 10, upper: 20, ..Shard::default() },
            children: 2,
            samples: vec![sample(10, 10, 1000.0)],
            ..SplitRequest::default()
        };
        assert_eq!(split_points(&req), Ok(vec![11]));
    }

    #[test]
    fn explicit_points_and_refusals_are_the_defaults() {
        let mut req = request(vec![sample(0, 0xff, 5.0)], 2);
        req.at = Some(0x1234);
        assert_eq!(split_points(&req), Ok(vec![0x1234]));
        req.shard.lower = req.shard.upper;
        assert!(matches!(split_points(&req), Err(PolicyError::InvalidSplit(_))));
    }
}
