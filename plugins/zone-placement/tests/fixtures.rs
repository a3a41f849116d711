//! The fixtures of `fixtures/` hold for the native logic; `chitin policy
//! test --plugin zone_placement.wasm fixtures/` checks them against the component.

use chitin_policy_sdk::testing::Fixtures;
use zone_placement::ZonePlacement;

#[test]
fn fixtures_hold_natively() {
    let n = Fixtures::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures")).placement::<ZonePlacement>().assert_all_hold();
    assert!(n >= 4, "only {n} fixtures");
}
