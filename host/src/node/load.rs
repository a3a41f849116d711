//! Load per shard and per sub-range, the policies' input: each shard's key
//! range is cut into [`BUCKETS`] equal sub-ranges; every acknowledged append
//! counts in its key's bucket, and so does the load an application reports
//! (`Ownership.ReportLoad`, checked by [`check_samples`]) on a key, or spread
//! over the buckets when it names the whole shard. Counts decay with a
//! half-life of [`HALF_LIFE`], so a rate follows the load as it moves and an
//! idle shard fades to nothing.
//!
//! A decayed count `S` of events at a steady rate `r` settles at `r / λ`
//! (`λ = ln 2 / half-life`), so `S · λ` is the rate, in ops/s.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use chitin_policy_sdk::RangeLoad;

use super::shard_map::ShardMap;

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

/// Samples one `ReportLoad` may carry.
pub const MAX_SAMPLES: usize = 10_000;
/// Largest `ops` of one sample.
pub const MAX_OPS: f64 = 1e12;
/// Largest `bytes` of one sample.
pub const MAX_BYTES: f64 = 1e15;

/// Where a reported sample's load falls in its shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spot {
    /// On one key: its sub-range counts it.
    Key(u32),
    /// On the whole shard: spread evenly over its sub-ranges.
    Whole,
}

/// An application's load sample, checked and routed to its shard.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The shard the load fell on.
    pub shard: String,
    /// The shard's range.
    pub lower: u32,
    /// (inclusive)
    pub upper: u32,
    /// Where in it.
    pub spot: Spot,
    /// Operations (or cost units) since the previous report.
    pub ops: f64,
    /// Bytes since the previous report.
    pub bytes: f64,
}

/// The application's `samples` checked against `map` and routed: every one
/// of them, or the first that is wrong with its index and what to fix.
pub fn check_samples(map: &ShardMap, samples: &[crate::proto::LoadSample]) -> Result<Vec<Sample>, String> {
    if samples.len() > MAX_SAMPLES {
        return Err(format!("{} samples in one report; send at most {MAX_SAMPLES} per call", samples.len()));
    }
    samples.iter().enumerate().map(|(i, s)| check_sample(map, s).map_err(|why| format!("sample #{i}: {why}"))).collect()
}

fn check_sample(map: &ShardMap, s: &crate::proto::LoadSample) -> Result<Sample, String> {
    for (name, value, max) in [("ops", s.ops, MAX_OPS), ("bytes", s.bytes, MAX_BYTES)] {
        if !(value.is_finite() && (0.0..=max).contains(&value)) {
            return Err(format!("{name} = {value} is not a number of 0..={max:e}"));
        }
    }
    let (shard, spot) = match (s.application.is_empty(), s.shard.is_empty()) {
        (false, true) => (map.route(&s.application, s.key).map_err(|e| e.to_string())?, Spot::Key(s.key)),
        (true, false) => {
            let shard =
                map.shard(&s.shard).ok_or_else(|| format!("no shard `{}` carries a lease in the served config", s.shard))?;
            (shard, Spot::Whole)
        }
        _ => return Err("name either an application and a key, or a shard (not both, not neither)".into()),
    };
    Ok(Sample { shard: shard.id.clone(), lower: shard.lower, upper: shard.upper, spot, ops: s.ops, bytes: s.bytes })
}

impl Load {
    /// Counts one append of `bytes` to `key` of `shard` (`[lower, upper]`).
    pub fn record(&self, shard: &str, lower: u32, upper: u32, key: u32, bytes: usize) {
        self.record_at(shard, lower, upper, key, bytes, Instant::now());
    }

    fn record_at(&self, shard: &str, lower: u32, upper: u32, key: u32, bytes: usize, now: Instant) {
        self.add(shard, lower, upper, now, |counts| {
            let i = bucket_of(lower, upper, key);
            counts.ops[i] += 1.0;
            counts.bytes[i] += bytes as f64;
        });
    }

    /// Counts an application's sample with the appends.
    pub fn record_sample(&self, sample: &Sample) {
        self.record_sample_at(sample, Instant::now());
    }

    fn record_sample_at(&self, s: &Sample, now: Instant) {
        self.add(&s.shard, s.lower, s.upper, now, |counts| match s.spot {
            Spot::Key(key) => {
                let i = bucket_of(s.lower, s.upper, key);
                counts.ops[i] += s.ops;
                counts.bytes[i] += s.bytes;
            }
            Spot::Whole => {
                let buckets: Vec<usize> = (0..BUCKETS).filter(|&i| bucket_range(s.lower, s.upper, i).is_some()).collect();
                let share = 1.0 / buckets.len() as f64;
                for i in buckets {
                    counts.ops[i] += s.ops * share;
                    counts.bytes[i] += s.bytes * share;
                }
            }
        });
    }

    /// Applies `count` to `shard`'s counts, decayed to `now` (new counts
    /// for a shard first seen, or whose range changed).
    fn add(&self, shard: &str, lower: u32, upper: u32, now: Instant, count: impl FnOnce(&mut Counts)) {
        let mut shards = self.shards.lock().unwrap_or_else(|p| p.into_inner());
        let counts = shards.entry(shard.to_string()).or_insert_with(|| Counts::new(lower, upper, now));
        if (counts.lower, counts.upper) != (lower, upper) {
            *counts = Counts::new(lower, upper, now);
        }
        counts.decay_to(now);
        count(counts);
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
    fn application_samples_are_checked_and_routed_or_refused_with_the_reason() {
        use crate::proto::LoadSample;
        let map = ShardMap::from_config(&super::super::shard_map::standalone_config("n", "127.0.0.1:1", 4));
        let app = map.shards()[0].application.clone();
        let first = map.shards()[0].id.clone();
        let key = |key: u32, ops: f64| LoadSample { application: app.clone(), key, ops, bytes: 10.0, ..Default::default() };
        let whole = LoadSample { shard: first.clone(), ops: 4.0, ..Default::default() };
        let checked = check_samples(&map, &[key(0xffff_ffff, 2.0), whole.clone()]).unwrap();
        assert_eq!(checked[0].spot, Spot::Key(0xffff_ffff));
        assert_eq!(checked[0].shard, map.route(&app, 0xffff_ffff).unwrap().id);
        assert_eq!((checked[1].shard.as_str(), checked[1].spot), (first.as_str(), Spot::Whole));
        for (bad, why) in [
            (LoadSample { application: "nope".into(), ops: 1.0, ..Default::default() }, "sample #1: unknown application `nope`"),
            (LoadSample { shard: "nope".into(), ops: 1.0, ..Default::default() }, "sample #1: no shard `nope`"),
            (LoadSample { ops: 1.0, ..Default::default() }, "sample #1: name either an application and a key, or a shard"),
            (LoadSample { shard: first.clone(), application: app.clone(), ..Default::default() }, "not both, not neither"),
            (key(1, f64::NAN), "sample #1: ops = NaN is not a number of 0..=1e12"),
            (key(1, -1.0), "ops = -1 is not a number"),
            (key(1, 2e12), "ops = 2000000000000 is not a number"),
            (LoadSample { bytes: f64::INFINITY, ..key(1, 1.0) }, "bytes = inf is not a number of 0..=1e15"),
        ] {
            let err = check_samples(&map, &[key(1, 1.0), bad]).unwrap_err();
            assert!(err.contains(why), "{err} ∌ {why}");
        }
        let many = vec![key(1, 1.0); MAX_SAMPLES + 1];
        assert!(check_samples(&map, &many).unwrap_err().contains("send at most 10000 per call"));
    }

    #[test]
    fn reported_load_counts_with_the_appends_on_its_key_or_over_the_shard() {
        let load = Load::default();
        let now = Instant::now();
        let upper = u32::MAX;
        load.record_at("s", 0, upper, 7, 100, now);
        let on_key = Sample { shard: "s".into(), lower: 0, upper, spot: Spot::Key(upper), ops: 99.0, bytes: 0.0 };
        load.record_sample_at(&on_key, now);
        let lambda = std::f64::consts::LN_2 / HALF_LIFE.as_secs_f64();
        let s = &load.snapshot_at(None, now)[0];
        assert!((s.ops_per_sec - 100.0 * lambda).abs() < 1e-9, "one append and 99 reported ops");
        assert!((s.ranges[BUCKETS - 1].ops_per_sec - 99.0 * lambda).abs() < 1e-9, "in the last key's sub-range");
        let spread = Sample { spot: Spot::Whole, ops: BUCKETS as f64, ..on_key };
        load.record_sample_at(&spread, now);
        let s = &load.snapshot_at(None, now)[0];
        assert!((s.ranges[1].ops_per_sec - lambda).abs() < 1e-9, "one op in each sub-range");
        assert!((s.ops_per_sec - (100.0 + BUCKETS as f64) * lambda).abs() < 1e-9);
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
