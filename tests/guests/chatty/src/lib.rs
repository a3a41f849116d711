//! An instance-id policy that prints on every call: 200 bytes to stdout
//! naming the call, then answers `chatty`, or traps when the host name is
//! `trap`. The host keeps a small buffer of a guest's output for its error
//! messages: it must never fill up over many calls (a guest that prints
//! would trap after a few dozen), and a trap must show only its own call's
//! output.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "instance-id-policy" });

use std::sync::atomic::{AtomicU64, Ordering};

use exports::chitin::policy::instance_id::*;

static CALLS: AtomicU64 = AtomicU64::new(0);

struct Chatty;

impl Guest for Chatty {
    fn resolve(ctx: InstanceContext) -> Result<String, PolicyError> {
        let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
        println!("call {call:06}: {}", "x".repeat(186));
        if ctx.hostname.as_deref() == Some("trap") {
            panic!("asked to trap in call {call}");
        }
        Ok("chatty".to_string())
    }
}

export!(Chatty);
