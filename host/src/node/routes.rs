//! Where this node last found each shard held elsewhere, so that a forward
//! needs no database read: the holder and until when its lease ran when the
//! row was read. A route is a hint, never a judgement of the lease: the
//! holder's fence decides, and a forward it refuses ("not applied", certainly
//! not committed) drops the route and the append looks the shard up again.
//! A route ends at that expiry by this node's clock, and at once on any
//! notice of a change of ownership.

use std::collections::HashMap;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::lease::LeaseRow;

/// A shard's holder as last read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Route {
    pub holder: Uuid,
    pub expires_at: DateTime<Utc>,
}

#[derive(Default)]
pub(crate) struct Routes {
    by_shard: Mutex<HashMap<String, Route>>,
}

impl Routes {
    /// The route of `shard`, while it has not run out at `now`.
    pub(crate) fn get(&self, shard: &str, now: DateTime<Utc>) -> Option<Route> {
        self.lock().get(shard).copied().filter(|r| r.expires_at > now)
    }

    /// Keeps the route a freshly read row gives: a live lease held by
    /// another node than `me`; any other row ends the shard's route.
    pub(crate) fn learn(&self, row: &LeaseRow, me: Uuid) {
        match (row.holder, row.expires_at) {
            (Some(holder), Some(expires_at)) if row.live && holder != me => {
                self.lock().insert(row.shard.clone(), Route { holder, expires_at });
            }
            _ => self.forget(&row.shard),
        }
    }

    pub(crate) fn forget(&self, shard: &str) {
        self.lock().remove(shard);
    }

    /// Every route ends (a node died: its shards move).
    pub(crate) fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Route>> {
        self.by_shard.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(holder: Option<Uuid>, live: bool, expires_at: Option<DateTime<Utc>>) -> LeaseRow {
        LeaseRow { shard: "s".into(), holder, holder_name: None, epoch: 2, liveness_epoch: Some(1), expires_at, live }
    }

    #[test]
    fn a_route_is_a_live_lease_elsewhere_until_it_runs_out_or_changes() {
        let (me, peer) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let now = Utc::now();
        let until = now + chrono::Duration::seconds(10);
        let routes = Routes::default();
        routes.learn(&row(Some(peer), true, Some(until)), me);
        assert_eq!(routes.get("s", now), Some(Route { holder: peer, expires_at: until }));
        assert_eq!(routes.get("s", until), None, "run out by this node's clock");
        for (stale, why) in [
            (row(Some(me), true, Some(until)), "held here"),
            (row(Some(peer), false, Some(until)), "expired"),
            (row(None, false, None), "released"),
        ] {
            routes.learn(&row(Some(peer), true, Some(until)), me);
            routes.learn(&stale, me);
            assert_eq!(routes.get("s", now), None, "{why}: the old route ends");
        }
        routes.learn(&row(Some(peer), true, Some(until)), me);
        routes.forget("s");
        assert_eq!(routes.get("s", now), None);
        routes.learn(&row(Some(peer), true, Some(until)), me);
        routes.clear();
        assert_eq!(routes.get("s", now), None);
    }
}
