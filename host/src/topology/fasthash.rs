//! A fast, non-cryptographic hasher for the id maps of the checks.
//!
//! The maps key on ids taken from a config file, hashed once per check; the
//! default SipHash dominated validation time at 100,000 shards. This is the
//! Fx hash (as in rustc): 8 bytes per step, a rotate, a xor and a multiply.
//! It is not resistant to deliberately colliding keys, which only costs time
//! on a hostile config, never a wrong answer.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline(always)]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline(always)]
    fn write(&mut self, mut bytes: &[u8]) {
        while bytes.len() >= 8 {
            self.add(u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")));
            bytes = &bytes[8..];
        }
        if bytes.len() >= 4 {
            self.add(u64::from(u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"))));
            bytes = &bytes[4..];
        }
        for b in bytes {
            self.add(u64::from(*b));
        }
    }

    #[inline(always)]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline(always)]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline(always)]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline(always)]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline(always)]
    fn finish(&self) -> u64 {
        // Spread the entropy of the multiply's high bits, which hashbrown's
        // control bytes (the top 7 bits) and bucket index (the low bits) use.
        self.hash.rotate_left(26)
    }
}

pub(super) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
pub(super) type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

pub(super) fn map<K, V>(capacity: usize) -> FastMap<K, V> {
    HashMap::with_capacity_and_hasher(capacity, Default::default())
}

pub(super) fn set<K>(capacity: usize) -> FastSet<K> {
    HashSet::with_capacity_and_hasher(capacity, Default::default())
}

/// Hashes a string once with [`FxHasher`].
#[inline(always)]
pub(super) fn hash_str(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    h.finish()
}

/// Whether two ids are equal. Config ids are short and, within a shard,
/// differ only in their last bytes: comparing a few overlapping 8-byte words
/// from the end inline is several times cheaper than a call to `memcmp`,
/// which was the largest single cost of validating 100,000 shards. Always
/// inlined: our crate is built at opt-level 1 for tests and benches, where a
/// plain `#[inline]` leaves a call per comparison.
#[inline(always)]
pub(super) fn str_eq(a: &str, b: &str) -> bool {
    bytes_eq(a.as_bytes(), b.as_bytes())
}

/// [`str_eq`] on bytes.
#[inline(always)]
pub(super) fn bytes_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    #[inline(always)]
    fn w8(s: &[u8], i: usize) -> u64 {
        u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"))
    }
    #[inline(always)]
    fn w4(s: &[u8], i: usize) -> u32 {
        u32::from_le_bytes(s[i..i + 4].try_into().expect("4 bytes"))
    }
    // Each arm's words overlap and together cover all `n` bytes.
    match n {
        0..=3 => a == b,
        4..=7 => w4(a, n - 4) == w4(b, n - 4) && w4(a, 0) == w4(b, 0),
        8..=16 => w8(a, n - 8) == w8(b, n - 8) && w8(a, 0) == w8(b, 0),
        17..=32 => w8(a, n - 8) == w8(b, n - 8) && w8(a, n - 16) == w8(b, n - 16) && w8(a, 0) == w8(b, 0) && w8(a, 8) == w8(b, 8),
        _ => w8(a, n - 8) == w8(b, n - 8) && a == b,
    }
}

/// Ids hashed once and sorted by (hash, position): finds duplicates and
/// looks ids up with sequential work only, which beats a hash table of
/// 300,000 string ids whose every insert is a cache miss.
///
/// The sort is a counting sort on the top bits of the hash followed by an
/// insertion sort of each (tiny) bucket: two linear passes instead of a
/// comparison sort, and the bucket offsets make a lookup one bucket scan.
pub(crate) struct SortedIds {
    keys: Vec<(u64, u32)>,
    /// `keys[starts[b]..starts[b + 1]]` holds the hashes whose top bits are `b`.
    starts: Vec<u32>,
    shift: u32,
}

impl SortedIds {
    /// `ids` yields (position, id); positions are the caller's.
    pub(crate) fn new<'a>(ids: impl Iterator<Item = (u32, &'a str)>) -> SortedIds {
        let keys: Vec<(u64, u32)> = ids.map(|(pos, id)| (hash_str(id), pos)).collect();
        SortedIds::from_keys(keys)
    }

    fn from_keys(keys: Vec<(u64, u32)>) -> SortedIds {
        // About one bucket per key; at least 2 buckets so the shift stays below 64.
        let bits = (usize::BITS - keys.len().leading_zeros()).clamp(1, 24);
        let shift = 64 - bits;
        let buckets = 1usize << bits;
        // Counts at `b + 2`; after the prefix sum `starts[b + 1]` is where
        // bucket `b` begins, and scattering through it leaves it at the
        // bucket's end, which is where bucket `b + 1` begins.
        let mut starts = vec![0u32; buckets + 2];
        for &(h, _) in &keys {
            starts[(h >> shift) as usize + 2] += 1;
        }
        for b in 1..starts.len() {
            starts[b] += starts[b - 1];
        }
        let mut sorted = vec![(0u64, 0u32); keys.len()];
        for &k in &keys {
            let at = &mut starts[(k.0 >> shift) as usize + 1];
            sorted[*at as usize] = k;
            *at += 1;
        }
        starts.pop();
        for b in 0..buckets {
            let bucket = &mut sorted[starts[b] as usize..starts[b + 1] as usize];
            for i in 1..bucket.len() {
                let mut j = i;
                while j > 0 && bucket[j - 1] > bucket[j] {
                    bucket.swap(j - 1, j);
                    j -= 1;
                }
            }
        }
        SortedIds { keys: sorted, starts, shift }
    }

    /// (first position, later position) of every repeated id, ordered by the
    /// later position. `id_of` gives the id at a position.
    pub(crate) fn duplicates<'a>(&self, id_of: impl Fn(u32) -> &'a str) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for run in self.keys.chunk_by(|a, b| a.0 == b.0) {
            for (j, &(_, later)) in run.iter().enumerate().skip(1) {
                let id = id_of(later);
                if let Some(&(_, first)) = run[..j].iter().find(|&&(_, p)| str_eq(id_of(p), id)) {
                    out.push((first, later));
                }
            }
        }
        out.sort_unstable_by_key(|&(_, later)| later);
        out
    }

    /// The first position of `id`.
    pub(crate) fn find<'a>(&self, id: &str, id_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        self.find_in(id, 0..u32::MAX, id_of)
    }

    /// The first position of `id` within `range`; `id_of` is only asked
    /// about positions in `range`. One index over a whole config answers
    /// for each of its applications this way.
    pub(crate) fn find_in<'a>(&self, id: &str, range: std::ops::Range<u32>, id_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        let h = hash_str(id);
        let b = (h >> self.shift) as usize;
        self.keys[self.starts[b] as usize..self.starts[b + 1] as usize]
            .iter()
            .filter(|k| k.0 == h && range.contains(&k.1))
            .map(|k| k.1)
            .find(|&p| str_eq(id_of(p), id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_ids() {
        let ids = ["a", "b", "a", "c", "b", "a"];
        let s = SortedIds::new(ids.iter().enumerate().map(|(i, id)| (i as u32, *id)));
        assert_eq!(s.duplicates(|p| ids[p as usize]), vec![(0, 2), (1, 4), (0, 5)]);
        assert_eq!(s.find("b", |p| ids[p as usize]), Some(1));
        assert_eq!(s.find("z", |p| ids[p as usize]), None);
        assert_eq!(s.find_in("a", 1..6, |p| ids[p as usize]), Some(2));
        assert_eq!(s.find_in("a", 3..5, |p| ids[p as usize]), None);
        assert_eq!(s.find_in("c", 3..4, |p| ids[p as usize]), Some(3));
    }

    /// The bucket sort leaves the keys as a comparison sort would, and every
    /// id is found at its first position, at sizes around bucket-count steps.
    #[test]
    fn sorted_ids_at_scale() {
        for n in [0usize, 1, 2, 3, 63, 64, 65, 1000, 4097] {
            // Every third id repeats an earlier one.
            let ids: Vec<String> = (0..n).map(|i| format!("s_{}", if i % 3 == 2 { i / 2 } else { i })).collect();
            let s = SortedIds::new(ids.iter().enumerate().map(|(i, id)| (i as u32, id.as_str())));
            let mut want: Vec<(u64, u32)> = ids.iter().enumerate().map(|(i, id)| (hash_str(id), i as u32)).collect();
            want.sort_unstable();
            assert_eq!(s.keys, want, "{n} ids");
            for id in &ids {
                let first = ids.iter().position(|x| x == id).map(|p| p as u32);
                assert_eq!(s.find(id, |p| &ids[p as usize]), first, "{id} of {n}");
            }
            assert_eq!(s.find("absent", |p| &ids[p as usize]), None);
            let dups = s.duplicates(|p| &ids[p as usize]).len();
            assert_eq!(dups, n - ids.iter().collect::<std::collections::HashSet<_>>().len(), "{n} ids");
        }
    }

    /// Equal strings are equal and a difference in any single byte is
    /// found, at every length each comparison arm handles.
    #[test]
    fn str_eq_sees_every_byte() {
        for n in 0..=48usize {
            let a: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
            assert!(bytes_eq(&a, &a.clone()), "length {n}");
            for i in 0..n {
                let mut b = a.clone();
                b[i] = b'_';
                assert!(!bytes_eq(&a, &b), "length {n}, byte {i}");
            }
            assert!(!bytes_eq(&a, &a[..n.saturating_sub(1)]) || n == 0, "length {n} against a prefix");
        }
        assert!(str_eq("node-0001", "node-0001") && !str_eq("node-0001", "node-0002"));
    }
}
