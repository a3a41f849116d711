//! Which shard serves a key.
//!
//! A [`Router`] indexes the routable (active and splitting) shards of every
//! application, sorted by lower bound; a lookup is one hash of the
//! application name and one binary search, O(log n). On a valid config every
//! key of every application has exactly one routable shard; on an invalid one
//! a key in a gap has none and a key in an overlap gets the shard with the
//! highest lower bound at or below it.

use std::collections::HashMap;

use super::model::{ClusterConfig, Shard};

/// A routable shard: its range and where it sits in the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    pub lower: u32,
    pub upper: u32,
    /// Index of the application in `config.applications`.
    pub application: usize,
    /// Index of the shard in that application's `shards`.
    pub shard: usize,
}

/// The routable shards of every application of a config.
#[derive(Clone, Debug, Default)]
pub struct Router {
    apps: HashMap<String, Vec<Route>>,
}

impl Router {
    pub fn new(config: &ClusterConfig) -> Router {
        let mut apps = HashMap::with_capacity(config.applications.len());
        for (ai, a) in config.applications.iter().enumerate() {
            let mut routes: Vec<Route> = a
                .shards
                .iter()
                .enumerate()
                .filter(|(_, s)| s.state.is_routable())
                .map(|(si, s)| Route { lower: s.lower, upper: s.upper, application: ai, shard: si })
                .collect();
            routes.sort_unstable_by_key(|r| (r.lower, r.upper));
            apps.entry(a.name.clone()).or_insert(routes);
        }
        Router { apps }
    }

    /// The routable shard of `application` covering `key`.
    pub fn route(&self, application: &str, key: u32) -> Option<Route> {
        let routes = self.apps.get(application)?;
        let after = routes.partition_point(|r| r.lower <= key);
        let r = *routes.get(after.checked_sub(1)?)?;
        (key <= r.upper).then_some(r)
    }

    /// The shard itself, looked up in the config the router was built from.
    pub fn shard<'c>(&self, config: &'c ClusterConfig, application: &str, key: u32) -> Option<&'c Shard> {
        let r = self.route(application, key)?;
        Some(&config.applications[r.application].shards[r.shard])
    }

    /// Number of routable shards of `application`.
    pub fn routable_count(&self, application: &str) -> usize {
        self.apps.get(application).map_or(0, Vec::len)
    }
}

/// 32-bit FNV-1a (offset basis 0x811c9dc5, prime 0x01000193): the key hash
/// of journal streams and of replica ids (defined in the client crate).
pub(crate) use chitin_client::fnv1a;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::testutil::*;

    #[test]
    fn routes_keys() {
        let mut c = base();
        start_split(&mut c, "A_00_3f", 2);
        start_split(&mut c, "A_40_7f", 2);
        finish_split(&mut c, "A_40_7f");
        let r = Router::new(&c);
        let id = |k: u32| r.shard(&c, "A", k).map(|s| s.id.as_str());
        let cases: &[(u32, Option<&str>)] = &[
            (0, Some("A_00_3f")), // splitting still routes
            (0x3fff_ffff, Some("A_00_3f")),
            (0x4000_0000, Some("A_40_7f_c0")), // finished split: children route
            (0x5fff_ffff, Some("A_40_7f_c0")),
            (0x6000_0000, Some("A_40_7f_c1")),
            (0x8000_0000, Some("A_80_bf")),
            (0xffff_ffff, Some("A_c0_ff")),
        ];
        for (k, want) in cases {
            assert_eq!(id(*k), *want, "{k:08x}");
        }
        assert_eq!(r.route("nope", 0), None);
        assert_eq!(r.routable_count("A"), 5);
    }

    #[test]
    fn gaps_route_nowhere() {
        let mut c = base();
        c.applications[0].shards[0].lower = 0x10;
        c.applications[0].shards[3].upper = 0xffff_fff0;
        let r = Router::new(&c);
        assert_eq!(r.route("A", 0), None);
        assert_eq!(r.route("A", 0x0f), None);
        assert!(r.route("A", 0x10).is_some());
        assert_eq!(r.route("A", u32::MAX), None);
    }
}
