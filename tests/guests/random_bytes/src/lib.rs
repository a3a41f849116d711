//! Reads randomness and returns it as its name: 16 bytes of
//! `wasi:random/random.get-random-bytes`, one `get-random-u64`, and the hash
//! of a constant under std's `RandomState` (seeded through
//! `wasi:random/insecure-seed`). The host must make these deterministic: the
//! same name from every fresh instance, on every node.
wit_bindgen::generate!({ path: "wit", world: "random-bytes", generate_all });

use std::hash::BuildHasher;

use exports::chitin::policy::instance_id::*;
use wasi::random::random;

struct RandomBytes;

impl Guest for RandomBytes {
    fn resolve(_ctx: InstanceContext) -> Result<String, PolicyError> {
        let bytes: String = random::get_random_bytes(16).iter().map(|b| format!("{b:02x}")).collect();
        let word = random::get_random_u64();
        let hash = std::collections::hash_map::RandomState::new().hash_one(42u64);
        Ok(format!("{bytes}-{word:016x}-{hash:016x}"))
    }
}

export!(RandomBytes);
