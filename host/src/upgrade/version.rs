//! Release lines and protocol numbers: what a binary is, what it speaks,
//! and which cluster versions it may join.

use std::fmt;
use std::str::FromStr;

/// This binary's version, from the workspace `Cargo.toml` (`0.2.0-dev`
/// between releases).
pub const BINARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version a registration without a recorded version runs: 0.1.0
/// records none.
pub(crate) const UNRECORDED_VERSION: &str = "0.1.0";

/// The highest wire protocol this binary speaks: one number per release
/// line (0.1 → 1, 0.2 → 2).
pub const PROTOCOL: u32 = 2;

/// The lowest wire protocol this binary still serves: the previous release
/// line, so that two adjacent releases run side by side.
pub const MIN_PROTOCOL: u32 = 1;

/// A release line, `major.minor`: what cluster versions and gates name.
/// Patch releases and `-dev` builds of a line behave alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    pub major: u32,
    pub minor: u32,
}

impl Release {
    pub const fn new(major: u32, minor: u32) -> Release {
        Release { major, minor }
    }

    /// The line of this binary.
    pub fn binary() -> Release {
        BINARY_VERSION.parse().expect("the crate version is semver")
    }

    /// The cluster version of a database no binary has finalized: a cluster
    /// made by 0.1.0.
    pub const fn first() -> Release {
        Release::new(0, 1)
    }

    /// Whether `self` is the line right after `earlier` (0.1 → 0.2, 0.9 →
    /// 0.10, or the first of a new major: 0.4 → 1.0).
    pub fn follows(self, earlier: Release) -> bool {
        (self.major == earlier.major && self.minor == earlier.minor + 1) || (self.major == earlier.major + 1 && self.minor == 0)
    }
}

impl fmt::Display for Release {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A version that is not `major.minor[.patch][-pre]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a chitin version (major.minor[.patch][-suffix], e.g. 0.2 or 0.2.0-dev)")]
pub struct BadVersion(pub String);

impl FromStr for Release {
    type Err = BadVersion;
    /// `0.2`, `0.2.1` and `0.2.0-dev` are all line 0.2.
    fn from_str(s: &str) -> Result<Release, BadVersion> {
        let bad = || BadVersion(s.to_string());
        let core = s.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut number = || parts.next().ok_or_else(bad)?.parse::<u32>().map_err(|_| bad());
        let (major, minor) = (number()?, number()?);
        let patch = parts.next();
        if patch.is_some_and(|p| p.parse::<u32>().is_err()) || parts.next().is_some() {
            return Err(bad());
        }
        Ok(Release { major, minor })
    }
}

/// Why a binary may not join a cluster at `cluster`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JoinRefused {
    #[error(
        "this node runs chitin {binary} but the cluster was finalized at {cluster}: a node older than the \
         cluster version cannot join (finalize cannot be undone); run chitin {cluster} or newer"
    )]
    Older { binary: String, cluster: Release },
    #[error(
        "this node runs chitin {binary} but the cluster is at {cluster}: upgrade one release at a time — run the \
         release after {cluster} on every node and `chitin cluster finalize-upgrade` before starting {line}"
    )]
    Skips { binary: String, cluster: Release, line: Release },
}

/// Whether a binary of line `binary` may join a cluster at `cluster`: the
/// same line, or the one right after it.
pub(crate) fn may_join(binary: Release, cluster: Release) -> Result<(), JoinRefused> {
    let version = BINARY_VERSION.to_string();
    if binary < cluster {
        Err(JoinRefused::Older { binary: version, cluster })
    } else if binary == cluster || binary.follows(cluster) {
        Ok(())
    } else {
        Err(JoinRefused::Skips { binary: version, cluster, line: binary })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_to_their_release_line() {
        for (text, line) in
            [("0.1.0", (0, 1)), ("0.2.0-dev", (0, 2)), ("0.2", (0, 2)), ("1.12.3", (1, 12)), ("0.3.0+build.5", (0, 3))]
        {
            assert_eq!(text.parse::<Release>(), Ok(Release::new(line.0, line.1)), "{text}");
        }
        for bad in ["", "0", "x.1", "0.1.x", "0.1.0.0", "v0.1"] {
            let err = bad.parse::<Release>().unwrap_err();
            assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
        }
        assert_eq!(Release::binary().to_string(), BINARY_VERSION.split('.').take(2).collect::<Vec<_>>().join("."));
    }

    #[test]
    fn a_binary_joins_its_own_line_or_the_one_before() {
        let (r01, r02, r03) = (Release::new(0, 1), Release::new(0, 2), Release::new(0, 3));
        assert_eq!(may_join(r02, r01), Ok(()));
        assert_eq!(may_join(r02, r02), Ok(()));
        assert!(matches!(may_join(r02, r03), Err(JoinRefused::Older { .. })));
        let skip = may_join(r03, r01).unwrap_err();
        assert!(matches!(skip, JoinRefused::Skips { .. }));
        assert!(skip.to_string().contains("one release at a time"), "{skip}");
        assert_eq!(may_join(Release::new(1, 0), Release::new(0, 7)), Ok(()));
        assert_eq!(may_join(Release::new(0, 10), Release::new(0, 9)), Ok(()));
    }

    /// The protocol window is the previous line and this one.
    #[test]
    fn the_protocol_window_is_two_adjacent_lines() {
        assert_eq!(PROTOCOL - MIN_PROTOCOL, 1);
        assert_eq!(PROTOCOL, Release::binary().minor, "protocol N is line 0.N while the major is 0");
    }
}
