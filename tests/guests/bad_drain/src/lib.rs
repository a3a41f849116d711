//! A drain policy that panics (a trap) on every call.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "drain-policy" });

use exports::chitin::policy::drain::*;

struct Bad;

impl Guest for Bad {
    fn plan_drain(_request: DrainRequest) -> Result<Vec<Vec<Handoff>>, PolicyError> {
        panic!("bad_drain always panics")
    }
}

export!(Bad);
