//! Waits on the host without sleeping through std: `place-replicas` polls a
//! ten-second `monotonic-clock` subscription with `wasi:io/poll.poll`,
//! `rebalance` blocks on a subscription for the end of time, and
//! `preferred-holders` reads stdin to its end (std's blocking read). A host
//! that waited for real would hold the slot for as long as the guest asks.
wit_bindgen::generate!({ path: "wit", world: "waits", generate_all });

use std::io::Read;

use exports::chitin::policy::placement::*;
use wasi::clocks::monotonic_clock;
use wasi::io::poll;

struct Waits;

impl Guest for Waits {
    fn place_replicas(_request: PlacementRequest) -> Result<Vec<ShardPlacement>, PolicyError> {
        let nap = monotonic_clock::subscribe_duration(10_000_000_000);
        let ready = poll::poll(&[&nap]);
        Err(PolicyError::Unsupported(format!("poll returned {ready:?}")))
    }
    fn rebalance(_request: RebalanceRequest) -> Result<Vec<ReplicaMove>, PolicyError> {
        monotonic_clock::subscribe_instant(u64::MAX).block();
        Err(PolicyError::Unsupported("the end of time came".into()))
    }
    fn preferred_holders(_request: RankingRequest) -> Result<Vec<HolderRanking>, PolicyError> {
        let mut input = Vec::new();
        match std::io::stdin().read_to_end(&mut input) {
            // The host's stdin is empty and closed: the read ends at once.
            Ok(0) => Ok(Vec::new()),
            Ok(n) => Err(PolicyError::InvalidInput(format!("stdin gave {n} bytes"))),
            Err(e) => Err(PolicyError::InvalidInput(format!("stdin failed: {e}"))),
        }
    }
}

export!(Waits);
