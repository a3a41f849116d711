//! The component glue: exports [`Defaults`] as the `all-policies` world of
//! `chitin:policy@0.1.0` (all four slots) through the SDK's export macro,
//! which owns the bindings and the conversions. Compiled only for `wasm32`.

use crate::Defaults;

chitin_policy_sdk::export_policies!(Defaults: instance_id, placement, split, drain);
