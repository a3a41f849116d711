//! Helpers for inclusive 32-bit key ranges.

/// Number of keys in `[lower, upper]` (as u64: the full range holds 2³²).
pub fn len(lower: u32, upper: u32) -> u64 {
    u64::from(upper) - u64::from(lower) + 1
}

/// Whether `point` may start the second part of a split of `[lower, upper]`:
/// both parts must be non-empty, so `lower < point <= upper`.
pub fn is_split_point(lower: u32, upper: u32, point: u32) -> bool {
    lower < point && point <= upper
}

/// The `parts - 1` points that cut `[lower, upper]` into `parts` ranges of
/// (nearly) equal size, or `None` when the range holds fewer keys than parts.
pub fn even_split_points(lower: u32, upper: u32, parts: u32) -> Option<Vec<u32>> {
    let total = len(lower, upper);
    if parts < 2 || total < u64::from(parts) {
        return None;
    }
    Some((1..u64::from(parts)).map(|i| (u64::from(lower) + total * i / u64::from(parts)) as u32).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_of_the_full_range() {
        assert_eq!(even_split_points(0, u32::MAX, 2), Some(vec![0x8000_0000]));
        assert_eq!(even_split_points(0, u32::MAX, 4), Some(vec![0x4000_0000, 0x8000_0000, 0xc000_0000]));
    }

    #[test]
    fn a_one_key_range_cannot_split() {
        assert_eq!(even_split_points(7, 7, 2), None);
        assert!(!is_split_point(7, 7, 7));
        assert_eq!(even_split_points(7, 8, 2), Some(vec![8]));
    }
}
