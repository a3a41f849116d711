//! The pure rules read off a lease row.

use uuid::Uuid;

use super::{LeaseRow, Via};

#[test]
fn only_a_held_lease_on_liveness_that_is_not_live_has_its_holders_epoch_ended() {
    let holder = Uuid::from_u128(7);
    let row = |holder: Option<Uuid>, liveness_epoch: Option<i64>, live: bool| LeaseRow {
        shard: "s".into(),
        holder,
        holder_name: None,
        epoch: 4,
        liveness_epoch,
        expires_at: None,
        live,
    };
    let cases = [
        (row(Some(holder), Some(3), false), Some((holder, 3)), "lapsed: end epoch 3 first"),
        (row(Some(holder), Some(3), true), None, "live: nothing to end (and no takeover)"),
        (row(Some(holder), None, false), None, "its own expiry: nothing rides on the holder"),
        (row(None, Some(3), false), None, "released: no holder to end"),
    ];
    for (row, ended, why) in cases {
        assert_eq!(row.lapsed_liveness(), ended, "{why}");
    }
}

/// The history's `via` words are the ones every dialect's first migration
/// allows, and each reads back as the grant it was written for.
#[test]
fn a_grants_via_is_a_word_every_dialects_migration_allows() {
    let check = format!("CHECK (via IN ('{}', '{}'))", Via::Acquire.as_str(), Via::Handover.as_str());
    for migration in [
        include_str!("../../migrations/postgres/0001_init.sql"),
        include_str!("../../migrations/mysql/0001_init.sql"),
        include_str!("../../migrations/sqlite/0001_init.sql"),
    ] {
        assert!(migration.contains(&check), "a migration's CHECK differs from `Via`: {check}");
    }
    for via in [Via::Acquire, Via::Handover] {
        assert_eq!(Via::from_column(via.as_str()).unwrap(), via);
    }
    let refused = Via::from_column("stolen").unwrap_err().to_string();
    assert!(refused.contains("chitin_lease_history.via holds `stolen`") && refused.contains("changed by hand"), "{refused}");
}
