//! The checker: pure judgement of a run from what the database holds, what
//! the clients were told and when nodes died. No I/O, so that every rule is
//! tested on hand-made histories below.
//!
//! Rules (each broken one is a [`Violation`] carrying its evidence):
//! - every acknowledged append is stored, once, with the sequence and epoch
//!   the client was told (also when it sent the request again to another
//!   node after its acknowledgement);
//! - no request id is stored twice;
//! - no request answered "not applied" (which the client then gave up) is
//!   stored;
//! - every entry's epoch was the shard's current epoch (the newest grant in
//!   the lease history) when it committed;
//! - after a node crashes (`kill -9`: its liveness session ends), each shard
//!   it held is granted again within the crash bound (session liveness: a
//!   second and the slack); after it stalls (a pause, a network cut: it
//!   keeps its session), within the lease TTL + renew interval + slack, and
//!   not before its leases can have expired (TTL − renew interval − margin);
//! - ownership is judged per key range, from the configs the run pushed
//!   ([`check_ownership`]): no two leases whose key ranges overlap are live
//!   at once, no row of a split parent commits after its retirement, and no
//!   (shard, epoch) is held by two holders;
//! - at most one owner per dispatch target at any time outside a fail-open
//!   window of the granting node ([`super::claims`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde::{Deserialize, Serialize};

use super::clients::{Abandoned, Ack};
use super::clock::{Step, unstep_us};
use super::violation::{Owner, Takeover, Verdict, Violation};
use crate::lease::Via;

/// A stored journal entry. Times are microseconds since the Unix epoch by
/// the database clock.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Row {
    pub stream: String,
    pub seq: i64,
    pub request_id: String,
    pub shard: String,
    pub epoch: i64,
    pub committed_us: i64,
}

/// One entry of the lease history: `epoch` of `shard` granted to `holder`.
#[derive(Clone, Debug)]
pub(crate) struct Grant {
    pub shard: String,
    pub epoch: i64,
    pub holder: String,
    pub acquired_us: i64,
    /// Taken, or written by the shard's holder as it handed the shard over
    /// (a handoff, or a split's child).
    pub via: Via,
}

/// A split parent's retirement, from `chitin_shard_retirements`: `epoch`
/// is the parent's epoch after it (a retirement moves the epoch past every
/// grant, so no token of the parent passes the fence again).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Retired {
    pub shard: String,
    pub epoch: i64,
    pub retired_us: i64,
}

/// Every shard's key range (inclusive bounds), from every config the run
/// pushed: a split's parent keeps its range, its children cover parts of it.
pub(crate) type Ranges = BTreeMap<String, (u32, u32)>;

/// A node that stopped serving at `at_us` (database clock) while holding `shards`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Death {
    pub fault: usize,
    pub node: String,
    pub at_us: i64,
    pub shards: Vec<String>,
    /// The process died (its session ended), rather than stalled.
    #[serde(default)]
    pub crash: bool,
}

/// How soon a dead node's shards must be granted again, and how soon they may.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// After a crash: within this (session liveness).
    pub crash_ms: u64,
    /// After a stall: within this (TTL + renew interval + slack).
    pub stall_ms: u64,
    /// After a stall: not before this (the stalled node keeps its session,
    /// and its last renewal's TTL runs).
    pub stall_floor_ms: u64,
}

impl Bounds {
    /// The bounds of a run's lease timing: a crash is seen by its session
    /// within a second (and the slack). A stalled node's last renewal was a
    /// renew interval and a round before it stalled, at most: its shards may
    /// go from TTL − 2 × renew interval (no later than half a TTL), wide
    /// enough for slow rounds on loaded machines, far above the milliseconds
    /// a wrongly judged session takes.
    ///
    /// With failpoints armed, parked appends hold the lease rows and delay
    /// renewals by seconds, so a paused node's last renewal may be long
    /// before its pause: no takeover is early (`stall_floor_ms` 0).
    pub fn of(ttl: std::time::Duration, renew: std::time::Duration, slack: std::time::Duration, failpoints: bool) -> Bounds {
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        let floor = ms(ttl).saturating_sub(2 * ms(renew)).min(ms(ttl) / 2);
        Bounds {
            crash_ms: ms(slack) + 1_000,
            stall_ms: ms(ttl + renew + slack),
            stall_floor_ms: if failpoints { 0 } else { floor },
        }
    }
}

/// Judges a run; `steps` are the wall clock's steps on the database clock
/// ([`super::clock`]), taken out of every takeover measured across one.
pub(crate) fn check(
    acks: &[Ack],
    abandoned: &[Abandoned],
    rows: &[Row],
    grants: &[Grant],
    deaths: &[Death],
    bounds: Bounds,
    steps: &[Step],
) -> Verdict {
    let mut v = Verdict::default();
    check_acks(acks, rows, &mut v);
    check_abandoned(abandoned, rows, &mut v);
    check_duplicates(rows, &mut v);
    check_epochs(rows, grants, &mut v);
    check_takeovers(grants, deaths, bounds, steps, &mut v);
    v
}

fn check_acks(acks: &[Ack], rows: &[Row], v: &mut Verdict) {
    let stored: HashMap<(&str, &str), &Row> = rows.iter().map(|r| ((r.stream.as_str(), r.request_id.as_str()), r)).collect();
    for a in acks {
        match stored.get(&(a.stream.as_str(), a.request_id.as_str())) {
            None => {
                v.lost += 1;
                v.violations.push(Violation::Lost {
                    stream: a.stream.clone(),
                    request_id: a.request_id.clone(),
                    sequence: a.sequence,
                    epoch: a.epoch,
                });
            }
            Some(r) if (r.seq, r.epoch) != (a.sequence, a.epoch) => {
                v.mismatched += 1;
                v.violations.push(Violation::AckMismatch {
                    stream: a.stream.clone(),
                    request_id: a.request_id.clone(),
                    acked: (a.sequence, a.epoch),
                    stored: (r.seq, r.epoch),
                });
            }
            Some(_) => {}
        }
    }
}

fn check_abandoned(abandoned: &[Abandoned], rows: &[Row], v: &mut Verdict) {
    let stored: HashMap<(&str, &str), &Row> = rows.iter().map(|r| ((r.stream.as_str(), r.request_id.as_str()), r)).collect();
    for a in abandoned {
        if let Some(r) = stored.get(&(a.stream.as_str(), a.request_id.as_str())) {
            v.not_applied_stored += 1;
            v.violations.push(Violation::NotAppliedStored {
                stream: a.stream.clone(),
                request_id: a.request_id.clone(),
                seq: r.seq,
            });
        }
    }
}

fn check_duplicates(rows: &[Row], v: &mut Verdict) {
    let mut by_id: BTreeMap<&str, Vec<(String, i64)>> = BTreeMap::new();
    for r in rows {
        by_id.entry(&r.request_id).or_default().push((r.stream.clone(), r.seq));
    }
    for (id, copies) in by_id {
        if copies.len() > 1 {
            v.duplicates += copies.len() - 1;
            v.violations.push(Violation::Duplicate { request_id: id.to_string(), copies });
        }
    }
}

/// Grants of each shard, by epoch.
fn grants_by_shard(grants: &[Grant]) -> HashMap<&str, Vec<&Grant>> {
    let mut by: HashMap<&str, Vec<&Grant>> = HashMap::new();
    for g in grants {
        by.entry(&g.shard).or_default().push(g);
    }
    for list in by.values_mut() {
        list.sort_by_key(|g| g.epoch);
    }
    by
}

fn check_epochs(rows: &[Row], grants: &[Grant], v: &mut Verdict) {
    let by = grants_by_shard(grants);
    for r in rows {
        let current = by
            .get(r.shard.as_str())
            .and_then(|list| list.iter().rev().find(|g| g.acquired_us <= r.committed_us))
            .map(|g| g.epoch);
        if current != Some(r.epoch) {
            v.stale_epoch += 1;
            v.violations.push(Violation::StaleEpoch {
                stream: r.stream.clone(),
                seq: r.seq,
                request_id: r.request_id.clone(),
                shard: r.shard.clone(),
                epoch: r.epoch,
                current,
                committed_us: r.committed_us,
            });
        }
    }
}

fn check_takeovers(grants: &[Grant], deaths: &[Death], bounds: Bounds, steps: &[Step], v: &mut Verdict) {
    let by = grants_by_shard(grants);
    let none = Vec::new();
    for d in deaths {
        for shard in &d.shards {
            let list = by.get(shard.as_str()).unwrap_or(&none);
            // Only shards the dead node still held by the history: one
            // handed away before the death is not its to lose.
            let holder = list.iter().rev().find(|g| g.acquired_us <= d.at_us).map(|g| g.holder.as_str());
            if holder != Some(d.node.as_str()) {
                continue;
            }
            let first = list.iter().find(|g| g.acquired_us > d.at_us);
            let next = first.map(|g| g.acquired_us);
            // A handover after the fault's time is the stalled node's own
            // act in the moment before the fault took hold (its holder
            // writes it): nobody judged it dead.
            let taken = first.is_some_and(|g| g.via == Via::Acquire);
            // On a wall clock that never stepped ([`super::clock`]).
            let ms = next.map(|t| ((unstep_us(steps, t) - unstep_us(steps, d.at_us)).max(0) / 1000) as u64);
            let bound_ms = if d.crash { bounds.crash_ms } else { bounds.stall_ms };
            if let (Some(granted_us), Some(ms)) = (next, ms)
                && !d.crash
                && taken
                && ms < bounds.stall_floor_ms
            {
                v.early_takeovers += 1;
                v.violations.push(Violation::EarlyTakeover {
                    fault: d.fault,
                    node: d.node.clone(),
                    shard: shard.clone(),
                    died_us: d.at_us,
                    granted_us,
                    floor_ms: bounds.stall_floor_ms,
                });
            }
            match ms {
                Some(ms) if ms <= bound_ms => {
                    v.takeovers.push(Takeover { fault: d.fault, node: d.node.clone(), shard: shard.clone(), ms });
                }
                _ => {
                    if let Some(ms) = ms {
                        v.takeovers.push(Takeover { fault: d.fault, node: d.node.clone(), shard: shard.clone(), ms });
                    }
                    v.slow_takeovers += 1;
                    v.violations.push(Violation::SlowTakeover {
                        fault: d.fault,
                        node: d.node.clone(),
                        shard: shard.clone(),
                        died_us: d.at_us,
                        granted_us: next,
                        bound_ms,
                    });
                }
            }
        }
    }
}

/// Judges ownership per key range (see the module docs): adds its
/// violations to `v`. `acks` are every answer the clients got; only
/// first-attempt commits that were not re-sent name the holder that
/// committed them (a repeated request is answered by whichever holder finds
/// it stored, with the original epoch).
pub(crate) fn check_ownership(
    acks: &[Ack],
    rows: &[Row],
    grants: &[Grant],
    retirements: &[Retired],
    ranges: &Ranges,
    v: &mut Verdict,
) {
    check_overlaps(grants, retirements, ranges, v);
    check_retired_writes(rows, retirements, v);
    check_epoch_reuse(acks, grants, v);
}

/// When each grant could pass the fence: from its grant until the next
/// grant of its shard, or until the shard's retirement if the retirement
/// moved the epoch past it. A grant neither superseded nor retired past its
/// epoch is live to the end (`None`): its expiry is in no record, and a
/// retirement that left the epoch where it was left the token valid.
fn live_intervals<'a>(grants: &'a [Grant], retirements: &[Retired]) -> BTreeMap<&'a str, Vec<(&'a Grant, i64, Option<i64>)>> {
    let retired: HashMap<&str, &Retired> = retirements.iter().map(|r| (r.shard.as_str(), r)).collect();
    let mut out = BTreeMap::new();
    for (shard, list) in grants_by_shard(grants) {
        let ret = retired.get(shard);
        let spans = list
            .iter()
            .enumerate()
            .map(|(i, g)| {
                let next = list.get(i + 1).map(|n| n.acquired_us);
                let retired_at = ret.filter(|r| r.epoch > g.epoch).map(|r| r.retired_us);
                let end = match (next, retired_at) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                (*g, g.acquired_us, end)
            })
            .collect();
        out.insert(shard, spans);
    }
    out
}

fn owner(g: &Grant) -> Owner {
    Owner { shard: g.shard.clone(), epoch: g.epoch, holder: g.holder.clone() }
}

fn check_overlaps(grants: &[Grant], retirements: &[Retired], ranges: &Ranges, v: &mut Verdict) {
    let live = live_intervals(grants, retirements);
    let shards: Vec<(&str, (u32, u32))> = live.keys().filter_map(|s| ranges.get(*s).map(|r| (*s, *r))).collect();
    for (i, &(a, (a_lo, a_hi))) in shards.iter().enumerate() {
        for &(b, (b_lo, b_hi)) in &shards[i + 1..] {
            if a_lo > b_hi || b_lo > a_hi {
                continue;
            }
            for &(ga, a_from, a_until) in &live[a] {
                for &(gb, b_from, b_until) in &live[b] {
                    let from = a_from.max(b_from);
                    let until = match (a_until, b_until) {
                        (Some(x), Some(y)) => Some(x.min(y)),
                        (x, y) => x.or(y),
                    };
                    if until.is_none_or(|u| from < u) {
                        v.overlapping_owners += 1;
                        v.violations.push(Violation::OverlappingOwners {
                            first: owner(ga),
                            second: owner(gb),
                            from_us: from,
                            until_us: until,
                        });
                    }
                }
            }
        }
    }
}

fn check_retired_writes(rows: &[Row], retirements: &[Retired], v: &mut Verdict) {
    let retired: HashMap<&str, i64> = retirements.iter().map(|r| (r.shard.as_str(), r.retired_us)).collect();
    for r in rows {
        if let Some(&at) = retired.get(r.shard.as_str()).filter(|&&at| r.committed_us > at) {
            v.retired_writes += 1;
            v.violations.push(Violation::RetiredShardWrite {
                stream: r.stream.clone(),
                seq: r.seq,
                request_id: r.request_id.clone(),
                shard: r.shard.clone(),
                epoch: r.epoch,
                retired_us: at,
                committed_us: r.committed_us,
            });
        }
    }
}

fn check_epoch_reuse(acks: &[Ack], grants: &[Grant], v: &mut Verdict) {
    let mut holders: BTreeMap<(&str, i64), BTreeSet<&str>> = BTreeMap::new();
    for g in grants {
        holders.entry((&g.shard, g.epoch)).or_default().insert(&g.holder);
    }
    for a in acks.iter().filter(|a| a.attempts == 1 && !a.resent && !a.holder.is_empty()) {
        holders.entry((&a.shard, a.epoch)).or_default().insert(&a.holder);
    }
    for ((shard, epoch), names) in holders {
        if names.len() > 1 {
            v.epoch_reused += 1;
            v.violations.push(Violation::EpochReused {
                shard: shard.to_string(),
                epoch,
                holders: names.into_iter().map(str::to_string).collect(),
            });
        }
    }
}

/// Stretches during which some client waited longer than `threshold_ms`
/// for an acknowledgement, merged across clients: `(start_ms, end_ms)`.
pub(crate) fn unavailability(acks: &[Ack], threshold_ms: u64) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> =
        acks.iter().filter(|a| a.acked_ms - a.first_try_ms > threshold_ms).map(|a| (a.first_try_ms, a.acked_ms)).collect();
    spans.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// The `p`-th percentile (0–100) of `values` by nearest rank.
pub(crate) fn percentile(values: &[u64], p: f64) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_unstable();
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    Some(v[rank.min(v.len()) - 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stalls within 3.5 s and not before 1 s; crashes within 1.5 s.
    const BOUNDS: Bounds = Bounds { crash_ms: 1_500, stall_ms: 3_500, stall_floor_ms: 1_000 };

    fn check_no_abandoned(acks: &[Ack], rows: &[Row], grants: &[Grant], deaths: &[Death]) -> Verdict {
        check(acks, &[], rows, grants, deaths, BOUNDS, &[])
    }

    #[test]
    fn a_request_answered_not_applied_must_not_be_stored() {
        let gave_up = [Abandoned { stream: "x".into(), request_id: "r2".into() }];
        let rows = [row("x", "r1", 1, 1, 10), row("x", "r2", 2, 1, 20)];
        let v = check(&[ack("x", "r1", 1, 1)], &gave_up, &rows, &[grant(1, "a", 0)], &[], BOUNDS, &[]);
        assert_eq!(v.not_applied_stored, 1);
        assert_eq!(v.violations, vec![Violation::NotAppliedStored { stream: "x".into(), request_id: "r2".into(), seq: 2 }]);
        let v = check(&[ack("x", "r1", 1, 1)], &gave_up, &rows[..1], &[grant(1, "a", 0)], &[], BOUNDS, &[]);
        assert!(v.violations.is_empty());
    }

    fn ack(stream: &str, id: &str, seq: i64, epoch: i64) -> Ack {
        Ack {
            stream: stream.into(),
            request_id: id.into(),
            sequence: seq,
            epoch,
            shard: "s".into(),
            first_try_ms: 0,
            acked_ms: 1,
            attempts: 1,
            holder: String::new(),
            resent: false,
        }
    }

    fn row(stream: &str, id: &str, seq: i64, epoch: i64, at: i64) -> Row {
        Row { stream: stream.into(), seq, request_id: id.into(), shard: "s".into(), epoch, committed_us: at }
    }

    fn grant(epoch: i64, holder: &str, at: i64) -> Grant {
        Grant { shard: "s".into(), epoch, holder: holder.into(), acquired_us: at, via: Via::Acquire }
    }

    #[test]
    fn a_clean_history_passes() {
        let grants = [grant(1, "a", 0), grant(2, "b", 5_000_000)];
        let rows = [row("x", "r1", 1, 1, 1_000), row("x", "r2", 2, 2, 5_000_001)];
        let acks = [ack("x", "r1", 1, 1), ack("x", "r2", 2, 2)];
        let deaths = [Death { fault: 0, node: "a".into(), at_us: 3_000_000, shards: vec!["s".into()], crash: false }];
        let v = check_no_abandoned(&acks, &rows, &grants, &deaths);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.takeovers, vec![Takeover { fault: 0, node: "a".into(), shard: "s".into(), ms: 2_000 }]);
    }

    #[test]
    fn an_acknowledged_append_missing_is_lost() {
        let v = check_no_abandoned(&[ack("x", "r1", 1, 1)], &[], &[grant(1, "a", 0)], &[]);
        assert_eq!(v.lost, 1);
        assert!(matches!(&v.violations[0], Violation::Lost { request_id, .. } if request_id == "r1"));
    }

    #[test]
    fn an_ack_that_disagrees_with_the_store_is_reported() {
        let v = check_no_abandoned(&[ack("x", "r1", 1, 1)], &[row("x", "r1", 2, 1, 10)], &[grant(1, "a", 0)], &[]);
        assert_eq!(v.mismatched, 1);
        assert_eq!(v.lost, 0);
    }

    #[test]
    fn a_request_id_stored_twice_is_a_duplicate() {
        let rows = [row("x", "r1", 1, 1, 10), row("y", "r1", 1, 1, 20)];
        let v = check_no_abandoned(&[], &rows, &[grant(1, "a", 0)], &[]);
        assert_eq!(v.duplicates, 1);
        assert!(matches!(&v.violations[0], Violation::Duplicate { copies, .. } if copies.len() == 2));
    }

    #[test]
    fn a_commit_under_a_superseded_epoch_is_stale() {
        // Epoch 2 was granted at t=100; a commit under epoch 1 at t=150 is stale.
        let grants = [grant(1, "a", 0), grant(2, "b", 100)];
        let v = check_no_abandoned(&[], &[row("x", "r1", 1, 1, 150)], &grants, &[]);
        assert_eq!(v.stale_epoch, 1);
        assert!(matches!(&v.violations[0], Violation::StaleEpoch { current: Some(2), epoch: 1, .. }));
        // A commit before any grant is stale too.
        let v = check_no_abandoned(&[], &[row("x", "r1", 1, 1, 5)], &[grant(1, "a", 10)], &[]);
        assert_eq!(v.stale_epoch, 1);
    }

    #[test]
    fn a_slow_or_missing_takeover_is_reported() {
        let death = Death { fault: 3, node: "a".into(), at_us: 1_000_000, shards: vec!["s".into()], crash: false };
        let slow = check_no_abandoned(&[], &[], &[grant(1, "a", 0), grant(2, "b", 6_000_000)], std::slice::from_ref(&death));
        assert_eq!(slow.slow_takeovers, 1);
        assert_eq!(slow.takeovers[0].ms, 5_000);
        let never = check_no_abandoned(&[], &[], &[grant(1, "a", 0)], std::slice::from_ref(&death));
        assert!(matches!(&never.violations[0], Violation::SlowTakeover { granted_us: None, .. }));
        // The same grant with the wall clock stepped 3.5 s forward in between: 1.5 s in fact.
        let step = [Step { wall_us: 2_000_000, step_us: 3_500_000 }];
        let grants = [grant(1, "a", 0), grant(2, "b", 6_000_000)];
        let stepped = check(&[], &[], &[], &grants, std::slice::from_ref(&death), BOUNDS, &step);
        assert!(stepped.violations.is_empty(), "{:?}", stepped.violations);
        assert_eq!(stepped.takeovers[0].ms, 1_500);
    }

    #[test]
    fn a_crash_is_held_to_the_session_bound_and_a_stall_to_the_ttl_both_ways() {
        let died = |crash| Death { fault: 0, node: "a".into(), at_us: 1_000_000, shards: vec!["s".into()], crash };
        let after = |ms: i64| [grant(1, "a", 0), grant(2, "b", 1_000_000 + ms * 1000)];
        // A crash taken over in 2 s is slow for its session bound, fine for a stall's.
        assert_eq!(check_no_abandoned(&[], &[], &after(2_000), &[died(true)]).slow_takeovers, 1);
        assert!(check_no_abandoned(&[], &[], &after(2_000), &[died(false)]).violations.is_empty());
        // A crash taken over at once is what session liveness is for; a
        // stall taken over at once means something judged a live node dead.
        assert!(check_no_abandoned(&[], &[], &after(50), &[died(true)]).violations.is_empty());
        let early = check_no_abandoned(&[], &[], &after(50), &[died(false)]);
        assert_eq!(early.early_takeovers, 1);
        assert!(matches!(&early.violations[0], Violation::EarlyTakeover { floor_ms: 1_000, .. }));
        // A handover the stalled node itself wrote just after the fault's
        // recorded time (a CI run's paused node, 16 ms) is no takeover.
        let mut handed = after(16);
        handed[1].via = Via::Handover;
        let own = check_no_abandoned(&[], &[], &handed, &[died(false)]);
        assert_eq!((own.early_takeovers, own.takeovers.len()), (0, 1), "{:?}", own.violations);
    }

    #[test]
    fn bounds_follow_the_lease_timing() {
        use std::time::Duration;
        let b = Bounds::of(Duration::from_secs(2), Duration::from_millis(500), Duration::from_secs(1), false);
        assert_eq!(b, Bounds { crash_ms: 2_000, stall_ms: 3_500, stall_floor_ms: 1_000 });
        let b = Bounds::of(Duration::from_secs(15), Duration::from_secs(5), Duration::from_secs(1), false);
        assert_eq!(b.stall_floor_ms, 5_000);
        let b = Bounds::of(Duration::from_secs(2), Duration::from_millis(500), Duration::from_secs(1), true);
        assert_eq!(b.stall_floor_ms, 0, "failpoints delay renewals: no takeover is early");
    }

    #[test]
    fn a_shard_handed_away_before_the_death_is_not_judged() {
        let death = Death { fault: 0, node: "a".into(), at_us: 1_000_000, shards: vec!["s".into()], crash: false };
        let v = check_no_abandoned(&[], &[], &[grant(1, "a", 0), grant(2, "b", 500_000)], &[death]);
        assert!(v.violations.is_empty());
        assert!(v.takeovers.is_empty());
    }

    fn granted(shard: &str, epoch: i64, holder: &str, at: i64) -> Grant {
        Grant { shard: shard.into(), epoch, holder: holder.into(), acquired_us: at, via: Via::Acquire }
    }

    fn retired(shard: &str, epoch: i64, at: i64) -> Retired {
        Retired { shard: shard.into(), epoch, retired_us: at }
    }

    fn ownership(acks: &[Ack], rows: &[Row], grants: &[Grant], retirements: &[Retired]) -> Verdict {
        // p covers 0..=99, split into c0 (0..=49) and c1 (50..=99); q is beside them.
        let ranges: Ranges = [("p", (0, 99)), ("c0", (0, 49)), ("c1", (50, 99)), ("q", (100, 199))]
            .into_iter()
            .map(|(s, r)| (s.to_string(), r))
            .collect();
        let mut v = Verdict::default();
        check_ownership(acks, rows, grants, retirements, &ranges, &mut v);
        v
    }

    fn kinds(v: &Verdict) -> Vec<String> {
        v.violations.iter().map(|x| serde_json::to_value(x).unwrap()["kind"].as_str().unwrap().to_string()).collect()
    }

    #[test]
    fn ownership_is_judged_per_key_range() {
        // The parent p, held by a from t=0 (epoch 3), is retired at t=100
        // (epoch 4) and its children granted in the same transaction.
        let before = [granted("p", 2, "b", 0), granted("p", 3, "a", 50), granted("q", 1, "b", 0), granted("q", 2, "a", 70)];
        let split = |child_at: i64| {
            let mut g = before.to_vec();
            g.extend([granted("c0", 1, "a", child_at), granted("c1", 1, "a", child_at), granted("c1", 2, "b", 400)]);
            g
        };
        let clean = split(100);
        let cases: Vec<(&str, Vec<Grant>, Vec<Retired>, Vec<&str>)> = vec![
            ("a clean split", clean.clone(), vec![retired("p", 4, 100)], vec![]),
            ("the same under statement times (children after the retirement)", split(101), vec![retired("p", 4, 100)], vec![]),
            (
                "a retirement that left the epoch: the parent's token outlives the split",
                clean.clone(),
                vec![retired("p", 3, 100)],
                vec!["overlapping_owners"; 3],
            ),
            ("no retirement at all", clean.clone(), vec![], vec!["overlapping_owners"; 3]),
            ("a child granted before its parent retired", split(90), vec![retired("p", 4, 100)], vec!["overlapping_owners"; 2]),
            ("shards side by side are never judged together", before.to_vec(), vec![], vec![]),
        ];
        for (name, grants, retirements, want) in cases {
            let v = ownership(&[], &[], &grants, &retirements);
            assert_eq!(kinds(&v), want, "{name}: {:?}", v.violations);
            assert_eq!(v.overlapping_owners, want.len(), "{name}");
        }
        // The overlap says who and when.
        let v = ownership(&[], &[], &split(90), &[retired("p", 4, 100)]);
        let first = Owner { shard: "c0".into(), epoch: 1, holder: "a".into() };
        let second = Owner { shard: "p".into(), epoch: 3, holder: "a".into() };
        assert_eq!(v.violations[0], Violation::OverlappingOwners { first, second, from_us: 90, until_us: Some(100) });
    }

    #[test]
    fn a_row_of_a_retired_parent_committed_after_its_retirement_is_a_violation() {
        let grants = [granted("p", 3, "a", 0)];
        let at = |t| Row { shard: "p".into(), ..row("x", "r1", 1, 3, t) };
        for (committed, want) in [(99, 0), (100, 0), (101, 1)] {
            let v = ownership(&[], &[at(committed)], &grants, &[retired("p", 4, 100)]);
            assert_eq!(v.retired_writes, want, "committed at {committed}");
        }
        let v = ownership(&[], &[at(500)], &grants, &[retired("p", 4, 100)]);
        assert!(matches!(&v.violations[0], Violation::RetiredShardWrite { retired_us: 100, committed_us: 500, .. }));
    }

    #[test]
    fn an_epoch_held_by_two_holders_is_reused() {
        let grants = [granted("s", 1, "a", 0), granted("s", 2, "b", 100)];
        let by = |holder: &str, epoch: i64, attempts: u32, resent: bool| Ack {
            holder: holder.into(),
            attempts,
            resent,
            ..ack("x", "r", 1, epoch)
        };
        let cases = [
            ("every holder under its own epoch", vec![by("a", 1, 1, false), by("b", 2, 1, false)], 0),
            ("b committed under a's epoch", vec![by("a", 1, 1, false), by("b", 1, 1, false)], 1),
            // A repeated request is answered by whichever holder finds it, with the first epoch.
            ("a retried request answered by the next holder", vec![by("b", 1, 3, false)], 0),
            ("a re-sent request answered by the next holder", vec![by("b", 1, 1, true)], 0),
            ("an answer that names no holder", vec![by("", 1, 1, false)], 0),
        ];
        for (name, acks, want) in cases {
            let v = ownership(&acks, &[], &grants, &[]);
            assert_eq!(v.epoch_reused, want, "{name}: {:?}", v.violations);
        }
        let v = ownership(&[by("b", 1, 1, false)], &[], &grants, &[]);
        assert_eq!(
            v.violations,
            vec![Violation::EpochReused { shard: "s".into(), epoch: 1, holders: vec!["a".into(), "b".into()] }]
        );
    }

    #[test]
    fn unavailability_merges_overlapping_waits() {
        let mut a = ack("x", "r", 1, 1);
        let spans: Vec<Ack> = [(0, 10), (100, 1_500), (1_000, 2_600), (5_000, 5_200), (7_000, 9_000)]
            .iter()
            .map(|&(s, e)| {
                a.first_try_ms = s;
                a.acked_ms = e;
                a.clone()
            })
            .collect();
        assert_eq!(unavailability(&spans, 1_000), vec![(100, 2_600), (7_000, 9_000)]);
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Some(50));
        assert_eq!(percentile(&v, 99.0), Some(99));
        assert_eq!(percentile(&v, 100.0), Some(100));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
