//! The key-space strip's boxes: one per shard while they are few, else
//! neighbours with one holder merged, and past [`MAX_SEGMENTS`] even those
//! gathered into equal stretches of the key space. A box never hides an
//! unowned shard: it counts them, and is drawn as unowned when it holds one.

use super::{PageShard, tally};

/// Most boxes one strip draws (a wider strip is no more readable).
pub(super) const MAX_SEGMENTS: usize = 256;

/// A stretch of the key space drawn as one box.
#[derive(Debug)]
pub(super) struct Segment<'a> {
    pub lower: u32,
    pub upper: u32,
    /// Its shards, in key order.
    pub shards: Vec<&'a PageShard>,
}

impl<'a> Segment<'a> {
    fn of(shard: &'a PageShard) -> Segment<'a> {
        Segment { lower: shard.lower, upper: shard.upper, shards: vec![shard] }
    }

    fn absorb(&mut self, other: Segment<'a>) {
        self.upper = self.upper.max(other.upper);
        self.shards.extend(other.shards);
    }

    /// Its shards with no live holder.
    pub(super) fn unowned(&self) -> usize {
        self.shards.iter().filter(|s| s.holder.is_none()).count()
    }

    /// Whether any of its shards is being drained.
    pub(super) fn draining(&self) -> bool {
        self.shards.iter().any(|s| s.draining)
    }

    /// Shards per holder, the holder of most first.
    pub(super) fn holders(&self) -> Vec<(&'a str, usize)> {
        let mut counts = tally(self.shards.iter().filter_map(|s| s.holder.as_deref()));
        counts.sort_by_key(|h| std::cmp::Reverse(h.1));
        counts
    }
}

/// The boxes of one strip.
pub(super) fn segments<'a>(mut shards: Vec<&'a PageShard>) -> Vec<Segment<'a>> {
    shards.sort_by_key(|s| s.lower);
    let each: Vec<Segment> = shards.into_iter().map(Segment::of).collect();
    if each.len() <= MAX_SEGMENTS {
        return each;
    }
    let same_holder = |a: &Segment, b: &Segment| a.shards[0].holder == b.shards[0].holder && a.draining() == b.draining();
    let runs = merge(each, same_holder);
    if runs.len() <= MAX_SEGMENTS {
        return runs;
    }
    let bucket = |key: u32| ((u64::from(key) * MAX_SEGMENTS as u64) >> 32) as usize;
    merge(runs, |a, b| bucket(a.lower) == bucket(b.lower))
}

/// Merges each segment into the one before it while `joins` says so.
fn merge<'a>(segments: Vec<Segment<'a>>, joins: impl Fn(&Segment, &Segment) -> bool) -> Vec<Segment<'a>> {
    let mut out: Vec<Segment> = Vec::new();
    for s in segments {
        match out.last_mut() {
            Some(last) if joins(last, &s) => last.absorb(s),
            _ => out.push(s),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::tests::shard;
    use super::*;

    /// `n` equal shards, the holder of shard `i` chosen by `holder(i)`.
    fn shards(n: u64, holder: impl Fn(u64) -> Option<&'static str>) -> Vec<PageShard> {
        (0..n)
            .map(|i| {
                let lower = ((i << 32) / n) as u32;
                let upper = if i + 1 == n { u32::MAX } else { (((i + 1) << 32) / n) as u32 - 1 };
                shard(&format!("s{i}"), lower, upper, holder(i), false)
            })
            .collect()
    }

    /// Every shard in exactly one box, boxes in key order.
    fn check_cover(all: &[PageShard], boxes: &[Segment]) {
        assert_eq!(boxes.iter().map(|b| b.shards.len()).sum::<usize>(), all.len());
        assert!(boxes.windows(2).all(|w| w[0].upper < w[1].lower), "boxes overlap or are out of order");
        assert_eq!(boxes.iter().map(Segment::unowned).sum::<usize>(), all.iter().filter(|s| s.holder.is_none()).count());
    }

    #[test]
    fn few_shards_get_a_box_each_many_are_merged_then_bucketed() {
        let nodes = ["n1", "n2", "n3"];
        // (shards, holder of shard i, boxes expected)
        type Holder = fn(u64, &[&'static str; 3]) -> Option<&'static str>;
        let cases: [(u64, Holder, usize); 4] = [
            (3, |i, n| Some(n[i as usize % 3]), 3),
            (256, |i, n| Some(n[i as usize % 3]), 256),
            // Runs of ten: 1,000 shards, 100 runs.
            (1_000, |i, n| Some(n[(i / 10) as usize % 3]), 100),
            // Every shard its own run: bucketed to the most boxes.
            (100_000, |i, n| if i % 997 == 0 { None } else { Some(n[i as usize % 3]) }, MAX_SEGMENTS),
        ];
        for (n, holder, want) in cases {
            let all = shards(n, |i| holder(i, &nodes));
            let boxes = segments(all.iter().collect());
            assert_eq!(boxes.len(), want, "{n} shards");
            check_cover(&all, &boxes);
        }
    }

    #[test]
    fn a_box_counts_its_holders_and_never_hides_an_unowned_shard() {
        let all = shards(100_000, |i| match i {
            50_000 => None,
            i if i % 2 == 0 => Some("n1"),
            _ => Some("n2"),
        });
        let boxes = segments(all.iter().collect());
        let with_unowned: Vec<&Segment> = boxes.iter().filter(|b| b.unowned() > 0).collect();
        assert_eq!(with_unowned.len(), 1);
        assert!(with_unowned[0].shards.iter().any(|s| s.id == "s50000"));
        let holders = boxes[0].holders();
        assert_eq!(holders.iter().map(|h| h.1).sum::<usize>(), boxes[0].shards.len());
        assert!(holders[0].1 >= holders[1].1, "{holders:?}");
        assert!(!boxes[0].draining());
    }
}
