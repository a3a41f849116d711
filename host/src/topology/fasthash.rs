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
pub struct FxHasher {
    hash: u64,
}

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
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

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        // Spread the entropy of the multiply's high bits, which hashbrown's
        // control bytes (the top 7 bits) and bucket index (the low bits) use.
        self.hash.rotate_left(26)
    }
}

pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;

pub fn map<K, V>(capacity: usize) -> FastMap<K, V> {
    HashMap::with_capacity_and_hasher(capacity, Default::default())
}

pub fn set<K>(capacity: usize) -> FastSet<K> {
    HashSet::with_capacity_and_hasher(capacity, Default::default())
}

/// Hashes a string once with [`FxHasher`].
#[inline]
pub fn hash_str(s: &str) -> u64 {
    let mut h = FxHasher::default();
    h.write(s.as_bytes());
    h.finish()
}

/// Ids hashed once and sorted by (hash, position): finds duplicates and
/// looks ids up with sequential work only, which beats a hash table of
/// 300,000 string ids whose every insert is a cache miss.
pub struct SortedIds {
    keys: Vec<(u64, u32)>,
}

impl SortedIds {
    /// `ids` yields (position, id); positions are the caller's.
    pub fn new<'a>(ids: impl Iterator<Item = (u32, &'a str)>) -> SortedIds {
        let mut keys: Vec<(u64, u32)> = ids.map(|(pos, id)| (hash_str(id), pos)).collect();
        keys.sort_unstable();
        SortedIds { keys }
    }

    /// (first position, later position) of every repeated id, ordered by the
    /// later position. `id_of` gives the id at a position.
    pub fn duplicates<'a>(&self, id_of: impl Fn(u32) -> &'a str) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        for run in self.keys.chunk_by(|a, b| a.0 == b.0) {
            for (j, &(_, later)) in run.iter().enumerate().skip(1) {
                let id = id_of(later);
                if let Some(&(_, first)) = run[..j].iter().find(|&&(_, p)| id_of(p) == id) {
                    out.push((first, later));
                }
            }
        }
        out.sort_unstable_by_key(|&(_, later)| later);
        out
    }

    /// The first position of `id`.
    pub fn find<'a>(&self, id: &str, id_of: impl Fn(u32) -> &'a str) -> Option<u32> {
        let h = hash_str(id);
        let start = self.keys.partition_point(|k| k.0 < h);
        self.keys[start..].iter().take_while(|k| k.0 == h).map(|k| k.1).find(|&p| id_of(p) == id)
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
    }
}
