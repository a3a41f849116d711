//! Stable rendezvous (highest-random-weight) ranking of nodes for a key.
//!
//! The weight of node `n` for shard `s` is `mix64(fnv1a64(s ++ 0x00 ++ n))`
//! (FNV-1a 64 over the UTF-8 bytes, then the splitmix64 finaliser). Nodes are
//! ranked by descending weight, ties broken by node id. Any language can
//! compute the same ranking from this definition. Adding or removing one node
//! changes the first choice only for the shards that node wins or held.

/// FNV-1a 64 offset basis: the hash of no bytes.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a 64 prime.
pub const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_extend(FNV_OFFSET, bytes)
}

/// Continues the FNV-1a 64 hash `hash` over `bytes`:
/// `fnv1a64_extend(fnv1a64(a), b) == fnv1a64(a ++ b)`.
pub fn fnv1a64_extend(mut hash: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// The splitmix64 finaliser: spreads FNV's weak low bits over the word.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous weights of any number of nodes for one key: hashes the key
/// (and the 0x00 separator) once, then only each node id. Allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Weigher {
    prefix: u64,
}

impl Weigher {
    /// Prepares the weights for `key`.
    pub fn new(key: &str) -> Self {
        Weigher { prefix: fnv1a64_extend(fnv1a64(key.as_bytes()), &[0]) }
    }

    /// The rendezvous weight of `node` for this key (same as [`weight`]).
    pub fn weight(&self, node: &str) -> u64 {
        mix64(fnv1a64_extend(self.prefix, node.as_bytes()))
    }
}

/// The rendezvous weight of `node` for `key`.
pub fn weight(key: &str, node: &str) -> u64 {
    Weigher::new(key).weight(node)
}

/// `nodes` ordered by descending rendezvous weight for `key` (ties by id).
pub fn rank<'a, I>(key: &str, nodes: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let weigher = Weigher::new(key);
    let mut weighted: Vec<(u64, &str)> = nodes.into_iter().map(|n| (weigher.weight(n), n)).collect();
    weighted.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
    weighted.into_iter().map(|(_, n)| n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_matches_the_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn weights_follow_the_definition() {
        // mix64(fnv1a64(key ++ 0x00 ++ node)), computed the long way.
        for (key, node) in [("", ""), ("s1", "n1"), ("app_00042", "node-017"), ("ключ", "узел")] {
            let bytes = [key.as_bytes(), &[0], node.as_bytes()].concat();
            assert_eq!(weight(key, node), mix64(fnv1a64(&bytes)), "{key:?} {node:?}");
            assert_eq!(Weigher::new(key).weight(node), weight(key, node));
        }
        assert_eq!(fnv1a64_extend(fnv1a64(b"ab"), b"cd"), fnv1a64(b"abcd"));
    }

    #[test]
    fn removing_a_node_only_moves_what_it_won() {
        let all = ["n1", "n2", "n3", "n4", "n5"];
        let fewer = ["n1", "n2", "n3", "n4"];
        for i in 0..500 {
            let key = format!("shard-{i}");
            let before = rank(&key, all.iter().copied())[0];
            let after = rank(&key, fewer.iter().copied())[0];
            if before != "n5" {
                assert_eq!(before, after, "{key} moved although n5 did not hold it");
            }
        }
    }
}
