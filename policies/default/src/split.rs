//! Slot `split`: where a shard is split.
//!
//! Only an `active` shard splits, into at least two children. An explicit
//! point from the operator (`at`) is taken as is when it is valid for a split
//! in two; otherwise the range is cut into equal parts
//! ([`range::even_split_points`]: halves at the midpoint, quarters for four
//! children). The default ignores load.

use chitin_policy_sdk::range;
use chitin_policy_sdk::{PolicyError, ShardState, SplitRequest};

/// The kebab-case name of a shard state, as the WIT and fixture files spell it.
pub fn state_name(state: ShardState) -> &'static str {
    match state {
        ShardState::Active => "active",
        ShardState::Splitting => "splitting",
        ShardState::Activating => "activating",
        ShardState::Inactive => "inactive",
    }
}

/// `[lower, upper]` with both bounds as 8 hex digits.
pub fn range_name(lower: u32, upper: u32) -> String {
    format!("[{lower:08x}, {upper:08x}]")
}

/// `split-points`: the first key of every child but the first.
pub fn split_points(req: &SplitRequest) -> Result<Vec<u32>, PolicyError> {
    let shard = &req.shard;
    let id = &shard.id;
    let (lower, upper) = (shard.lower, shard.upper);
    let invalid = |why: String| Err(PolicyError::InvalidSplit(why));
    if lower > upper {
        return Err(PolicyError::InvalidInput(format!(
            "shard {id} has lower bound {lower:08x} above its upper bound {upper:08x}"
        )));
    }
    if shard.state != ShardState::Active {
        return invalid(format!("shard {id} is {}; only an active shard splits", state_name(shard.state)));
    }
    if req.children < 2 {
        return invalid(format!("shard {id}: a split needs at least 2 children, {} asked", req.children));
    }
    if lower == upper {
        return invalid(format!("shard {id} covers the single key {lower:08x}; a one-key range cannot split"));
    }
    if let Some(point) = req.at {
        if req.children != 2 {
            return invalid(format!("shard {id}: an explicit split point makes 2 children, {} asked", req.children));
        }
        if !range::is_split_point(lower, upper, point) {
            return invalid(format!(
                "split point {point:08x} is outside shard {id}'s range {}; \
                 it must satisfy lower < point <= upper",
                range_name(lower, upper)
            ));
        }
        return Ok(vec![point]);
    }
    range::even_split_points(lower, upper, req.children).map_or_else(
        || {
            invalid(format!(
                "shard {id} covers {} keys {}, fewer than the {} children asked",
                range::len(lower, upper),
                range_name(lower, upper),
                req.children
            ))
        },
        Ok,
    )
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use chitin_policy_sdk::Shard;

    fn req(lower: u32, upper: u32, state: ShardState, children: u32, at: Option<u32>) -> SplitRequest {
        SplitRequest {
            shard: Shard { id: "s".into(), lower, upper, state, ..Shard::default() },
            children,
            at,
            ..SplitRequest::default()
        }
    }

    #[test]
    fn table() {
        use ShardState::*;
        let ok: &[(u32, u32, u32, Option<u32>, &[u32])] = &[
            (0, u32::MAX, 2, None, &[0x8000_0000]),
            (0, u32::MAX, 4, None, &[0x4000_0000, 0x8000_0000, 0xc000_0000]),
            (0x1000, 0x1fff, 2, None, &[0x1800]),
            (0x1000, 0x1fff, 2, Some(0x1001), &[0x1001]),
            (0x1000, 0x1fff, 2, Some(0x1fff), &[0x1fff]),
            (7, 8, 2, None, &[8]),
            (7, 9, 3, None, &[8, 9]),
            (0x8000_0000, u32::MAX, 2, Some(u32::MAX), &[u32::MAX]),
        ];
        for (lower, upper, children, at, want) in ok {
            assert_eq!(
                split_points(&req(*lower, *upper, Active, *children, *at)).as_deref(),
                Ok(*want),
                "[{lower:x}, {upper:x}] / {children} at {at:?}"
            );
        }
        let err: &[(u32, u32, ShardState, u32, Option<u32>, &str)] = &[
            (0, 9, Splitting, 2, None, "shard s is splitting; only an active shard splits"),
            (0, 9, Inactive, 2, None, "shard s is inactive; only an active shard splits"),
            (0, 9, Activating, 2, None, "shard s is activating; only an active shard splits"),
            (0, 9, Active, 1, None, "shard s: a split needs at least 2 children, 1 asked"),
            (0, 9, Active, 0, None, "shard s: a split needs at least 2 children, 0 asked"),
            (5, 5, Active, 2, None, "shard s covers the single key 00000005; a one-key range cannot split"),
            (5, 5, Active, 2, Some(5), "shard s covers the single key 00000005; a one-key range cannot split"),
            (0, 9, Active, 3, Some(5), "shard s: an explicit split point makes 2 children, 3 asked"),
            (
                0x1000,
                0x1fff,
                Active,
                2,
                Some(0x1000),
                "split point 00001000 is outside shard s's range [00001000, 00001fff]; \
                 it must satisfy lower < point <= upper",
            ),
            (
                0x1000,
                0x1fff,
                Active,
                2,
                Some(0x2000),
                "split point 00002000 is outside shard s's range [00001000, 00001fff]; \
                 it must satisfy lower < point <= upper",
            ),
            (7, 9, Active, 4, None, "shard s covers 3 keys [00000007, 00000009], fewer than the 4 children asked"),
        ];
        for (lower, upper, state, children, at, want) in err {
            assert_eq!(
                split_points(&req(*lower, *upper, *state, *children, *at)),
                Err(PolicyError::InvalidSplit(want.to_string())),
            );
        }
        assert_eq!(
            split_points(&req(9, 8, Active, 2, None)),
            Err(PolicyError::InvalidInput("shard s has lower bound 00000009 above its upper bound 00000008".into()))
        );
    }
}
