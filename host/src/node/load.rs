//! Append load per shard and per sub-range, the split policy's input: each
//! shard's key range is cut into [`BUCKETS`] equal sub-ranges, and every
//! acknowledged append counts in its key's bucket. Counts decay with a
//! half-life of [`HALF_LIFE`], so a rate follows the load as it moves and an
//! idle shard fades to nothing.
//!
//! A decayed count `S` of events at a steady rate `r` settles at `r / λ`
//! (`λ = ln 2 / half-life`), so `S · λ` is the rate, in ops/s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chitin_policy_sdk::RangeLoad;

/// Sub-ranges per shard.
pub const BUCKETS: usize = 64;

/// How long until a count weighs half.
pub const HALF_LIFE: Duration = Duration::from_secs(60);

/// One shard's decayed counts.
#[derive(Clone, Debug)]
struct Counts {
    lower: u32,
    upper: u32,
    ops: [f64; BUCKETS],
    bytes: [f64; BUCKETS],
    at: Instant,
}

impl Counts {
    fn new(lower: u32, upper: u32, now: Instant) -> Counts {
        Counts { lower, upper, ops: [0.0; BUCKETS], bytes: [0.0; BUCKETS], at: now }
    }

    fn decay_to(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        if elapsed > 0.0 {
            let f = 0.5f64.powf(elapsed / HALF_LIFE.as_secs_f64());
            self.ops.iter_mut().chain(self.bytes.iter_mut()).for_each(|c| *c *= f);
            self.at = now;
        }
    }

    /// Every sub-range with its rate, in key order.
    fn ranges(&self) -> Vec<RangeLoad> {
        let lambda = std::f64::consts::LN_2 / HALF_LIFE.as_secs_f64();
        (0..BUCKETS)
            .filter_map(|i| {
                let (lower, upper) = bucket_range(self.lower, self.upper, i)?;
                Some(RangeLoad {
                    lower,
                    upper,
                    keys: 0,
                    bytes: (self.bytes[i] * lambda).round() as u64,
                    ops_per_sec: self.ops[i] * lambda,
                })
            })
            .collect()
    }
}

/// The bucket of `key` in `[lower, upper]`.
pub fn bucket_of(lower: u32, upper: u32, key: u32) -> usize {
    let span = u64::from(upper - lower) + 1;
    let offset = u64::from(key.clamp(lower, upper) - lower);
    (offset * BUCKETS as u64 / span) as usize
}

/// The keys of bucket `i` of `[lower, upper]`; `None` for a bucket with no
/// key (a shard narrower than [`BUCKETS`] keys).
pub fn bucket_range(lower: u32, upper: u32, i: usize) -> Option<(u32, u32)> {
    let span = u64::from(upper - lower) + 1;
    let first = u64::from(lower) + (i as u64 * span).div_ceil(BUCKETS as u64);
    let last = u64::from(lower) + ((i as u64 + 1) * span).div_ceil(BUCKETS as u64) - 1;
    (first <= last).then_some((first as u32, last as u32))
}

/// The load of one shard, as the Admin API and the split policy see it.
#[derive(Clone, Debug, PartialEq)]
pub struct ShardLoad {
    pub shard: String,
    pub ops_per_sec: f64,
    pub bytes_per_sec: f64,
    /// The shard's sub-ranges in key order.
    pub ranges: Vec<RangeLoad>,
}

impl ShardLoad {
    /// The shard's load as a policy request carries it (the drain's
    /// `load`; the split's, beside its sub-ranges as samples).
    pub fn policy_load(&self) -> chitin_policy_sdk::ShardLoad {
        chitin_policy_sdk::ShardLoad {
            shard: self.shard.clone(),
            keys: 0,
            bytes: self.bytes_per_sec.round() as u64,
            ops_per_sec: self.ops_per_sec,
        }
    }
}

impl From<ShardLoad> for crate::proto::ShardLoad {
    fn from(l: ShardLoad) -> Self {
        let ranges = l
            .ranges
            .into_iter()
            .map(|r| crate::proto::RangeLoad {
                lower: r.lower,
                upper: r.upper,
                ops_per_sec: r.ops_per_sec,
                bytes_per_sec: r.bytes as f64,
            })
            .collect();
        crate::proto::ShardLoad { shard: l.shard, ops_per_sec: l.ops_per_sec, bytes_per_sec: l.bytes_per_sec, ranges }
    }
}

impl From<crate::proto::ShardLoad> for ShardLoad {
    fn from(l: crate::proto::ShardLoad) -> Self {
        let ranges = l
            .ranges
            .into_iter()
            .map(|r| RangeLoad {
                lower: r.lower,
                upper: r.upper,
                keys: 0,
                bytes: r.bytes_per_sec.round() as u64,
                ops_per_sec: r.ops_per_sec,
            })
            .collect();
        ShardLoad { shard: l.shard, ops_per_sec: l.ops_per_sec, bytes_per_sec: l.bytes_per_sec, ranges }
    }
}

/// The counts of every shard this node appended to.
#[derive(Debug, Default)]
pub struct Load {
    shards: Mutex<HashMap<String, Counts>>,
}

impl Load {
    /// Counts one append of `bytes` to `key` of `shard` (`[lower, upper]`).
    pub fn record(&self, shard: &str, lower: u32, upper: u32, key: u32, bytes: usize) {
        self.record_at(shard, lower, upper, key, bytes, Instant::now());
    }

    fn record_at(&self, shard: &str, lower: u32, upper: u32, key: u32, bytes: usize, now: Instant) {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let counts = shards.entry(shard.to_string()).or_insert_with(|| Counts::new(lower, upper, now));
        if (counts.lower, counts.upper) != (lower, upper) {
            *counts = Counts::new(lower, upper, now);
        }
        counts.decay_to(now);
        let i = bucket_of(lower, upper, key);
        counts.ops[i] += 1.0;
        counts.bytes[i] += bytes as f64;
    }

    /// Every shard's load now (or only `shard`'s), by shard id.
    pub fn snapshot(&self, shard: Option<&str>) -> Vec<ShardLoad> {
        self.snapshot_at(shard, Instant::now())
    }

    fn snapshot_at(&self, only: Option<&str>, now: Instant) -> Vec<ShardLoad> {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<ShardLoad> = shards
            .iter_mut()
            .filter(|(id, _)| only.is_none_or(|o| o == id.as_str()))
            .map(|(id, counts)| {
                counts.decay_to(now);
                let ranges = counts.ranges();
                ShardLoad {
                    shard: id.clone(),
                    ops_per_sec: ranges.iter().map(|r| r.ops_per_sec).sum(),
                    bytes_per_sec: ranges.iter().map(|r| r.bytes as f64).sum(),
                    ranges,
                }
            })
            .collect();
        out.sort_by(|a, b| a.shard.cmp(&b.shard));
        out
    }
}

/// Several nodes' reports of one shard summed sub-range by sub-range (a
/// shard handed over mid-window counted on both holders).
pub fn merge(reports: impl IntoIterator<Item = ShardLoad>) -> Vec<ShardLoad> {
    let mut by_shard: std::collections::BTreeMap<String, ShardLoad> = Default::default();
    for report in reports {
        match by_shard.get_mut(&report.shard) {
            None => {
                by_shard.insert(report.shard.clone(), report);
            }
            Some(sum) => {
                sum.ops_per_sec += report.ops_per_sec;
                sum.bytes_per_sec += report.bytes_per_sec;
                for r in report.ranges {
                    match sum.ranges.iter_mut().find(|s| (s.lower, s.upper) == (r.lower, r.upper)) {
                        Some(s) => {
                            s.ops_per_sec += r.ops_per_sec;
                            s.bytes += r.bytes;
                        }
                        None => sum.ranges.push(r),
                    }
                }
                sum.ranges.sort_by_key(|r| r.lower);
            }
        }
    }
    by_shard.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cut_a_range_into_equal_parts_that_cover_it() {
        for (lower, upper) in [(0u32, u32::MAX), (0x1000_0000, 0x1fff_ffff), (5, 200), (7, 7)] {
            let ranges: Vec<(u32, u32)> = (0..BUCKETS).filter_map(|i| bucket_range(lower, upper, i)).collect();
            assert_eq!(ranges.first().unwrap().0, lower);
            assert_eq!(ranges.last().unwrap().1, upper);
            for w in ranges.windows(2) {
                assert_eq!(w[0].1 + 1, w[1].0, "{lower:x}..{upper:x}: gap or overlap at {w:?}");
            }
            for (i, (l, u)) in (0..BUCKETS).filter_map(|i| bucket_range(lower, upper, i).map(|r| (i, r))) {
                assert_eq!(bucket_of(lower, upper, l), i);
                assert_eq!(bucket_of(lower, upper, u), i);
            }
        }
        assert_eq!(bucket_of(0, u32::MAX, 0x0400_0000), 1);
        assert_eq!(bucket_of(0, u32::MAX, u32::MAX), BUCKETS - 1);
    }

    #[test]
    fn a_steady_rate_reads_back_as_that_rate_and_fades_when_it_stops() {
        let load = Load::default();
        let start = Instant::now();
        // 10 appends a second for ten half-lives, all in the first bucket.
        let n = (HALF_LIFE.as_secs() * 10 * 10) as u32;
        for k in 0..n {
            load.record_at("s", 0, u32::MAX, 7, 100, start + Duration::from_millis(u64::from(k) * 100));
        }
        let now = start + Duration::from_millis(u64::from(n) * 100);
        let s = &load.snapshot_at(None, now)[0];
        assert!((s.ops_per_sec - 10.0).abs() < 0.2, "{}", s.ops_per_sec);
        assert!((s.ranges[0].ops_per_sec - 10.0).abs() < 0.2);
        assert!(s.ranges[1..].iter().all(|r| r.ops_per_sec == 0.0));
        let later = &load.snapshot_at(None, now + HALF_LIFE)[0];
        assert!((later.ops_per_sec - 5.0).abs() < 0.2, "{}", later.ops_per_sec);
    }

    #[test]
    fn reports_of_one_shard_from_two_nodes_add_up() {
        let ranges = |ops: f64| vec![RangeLoad { lower: 0, upper: 9, keys: 0, bytes: 1, ops_per_sec: ops }];
        let a = ShardLoad { shard: "s".into(), ops_per_sec: 1.0, bytes_per_sec: 1.0, ranges: ranges(1.0) };
        let b = ShardLoad { shard: "s".into(), ops_per_sec: 2.0, bytes_per_sec: 1.0, ranges: ranges(2.0) };
        let merged = merge([a, b]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].ops_per_sec, 3.0);
        assert_eq!(merged[0].ranges[0].ops_per_sec, 3.0);
    }
}
