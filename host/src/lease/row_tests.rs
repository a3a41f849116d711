//! The pure rules read off a lease row.

use uuid::Uuid;

use super::LeaseRow;

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
