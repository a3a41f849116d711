//! The fixtures of `fixtures/` hold for the native logic; `chitin policy
//! test --plugin pod_instance_id.wasm fixtures/` checks them against the component.

use chitin_policy_sdk::testing::Fixtures;
use pod_instance_id::PodInstanceId;

#[test]
fn fixtures_hold_natively() {
    let n = Fixtures::new(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures")).instance_id::<PodInstanceId>().assert_all_hold();
    assert!(n >= 4, "only {n} fixtures");
}
