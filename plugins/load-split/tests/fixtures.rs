//! The fixtures of `fixtures/` hold for the native logic; `chitin policy
//! test --plugin load_split.wasm fixtures/` checks them against the component.

use chitin_policy_sdk::testing::Fixtures;
use load_split::LoadSplit;

#[test]
fn fixtures_hold_natively() {
    let n = Fixtures::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures")).split::<LoadSplit>().assert_all_hold();
    assert!(n >= 4, "only {n} fixtures");
}
