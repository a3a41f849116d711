//! Stable rendezvous (highest-random-weight) ranking of nodes for a key.
//!
//! The weight of node `n` for shard `s` is `mix64(fnv1a64(s ++ 0x00 ++ n))`
//! (FNV-1a 64 over the UTF-8 bytes, then the splitmix64 finaliser). Nodes are
//! ranked by descending weight, ties broken by node id. Any language can
//! compute the same ranking from this definition. Adding or removing one node
//! changes the first choice only for the shards that node wins or held.

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The splitmix64 finaliser: spreads FNV's weak low bits over the word.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The rendezvous weight of `node` for `key`.
pub fn weight(key: &str, node: &str) -> u64 {
    let mut bytes = Vec::with_capacity(key.len() + node.len() + 1);
    bytes.extend_from_slice(key.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(node.as_bytes());
    mix64(fnv1a64(&bytes))
}

/// `nodes` ordered by descending rendezvous weight for `key` (ties by id).
pub fn rank<'a, I>(key: &str, nodes: I) -> Vec<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let mut weighted: Vec<(u64, &str)> = nodes.into_iter().map(|n| (weight(key, n), n)).collect();
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
