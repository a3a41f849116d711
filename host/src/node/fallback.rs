//! The embedded default answering for a slot whose component failed.
//!
//! A round ranks holders with the placement policy and a drain plans its
//! handoffs with the drain policy: a component that traps, runs out of time
//! or memory, or refuses on every call would otherwise stop every takeover
//! and every drain in the cluster. So a failed call of those is answered by
//! the embedded default policy instead, loudly: a warning (once per failure
//! streak), `chitin_policy_fallbacks_total`, and the slot in the node's
//! status until its component answers again. The component is asked first
//! on every call, so a fixed or recovered one takes over again at once.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::policy::{Policies, PolicyCallError, Slot};

/// What the fallback keeps between calls.
#[derive(Default)]
pub(crate) struct Fallback {
    /// The embedded defaults, loaded on the first failure (compiling them
    /// costs a node that never needs them nothing).
    defaults: Mutex<Option<Arc<Policies>>>,
    /// The slots whose component failed its last call, with the error.
    failing: Mutex<BTreeMap<Slot, String>>,
}

impl Fallback {
    /// The embedded default policies, loaded once.
    pub(crate) fn defaults(&self) -> Result<Arc<Policies>, PolicyCallError> {
        let mut defaults = self.defaults.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(d) = defaults.as_ref() {
            return Ok(d.clone());
        }
        let loaded = Arc::new(Policies::embedded_defaults()?);
        *defaults = Some(loaded.clone());
        Ok(loaded)
    }

    /// Records how `slot`'s call ended; `true` when this starts a streak of
    /// failures (the moment to warn).
    pub(crate) fn record(&self, slot: Slot, failure: Option<&PolicyCallError>) -> bool {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match failure {
            Some(e) => failing.insert(slot, e.to_string()).is_none(),
            None => {
                if failing.remove(&slot).is_some() {
                    tracing::info!(%slot, "the policy component answers again; the embedded default stands down");
                }
                false
            }
        }
    }

    /// `slot: error` for each slot the embedded default answers for now.
    pub(crate) fn failing(&self) -> Vec<String> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        failing.iter().map(|(slot, e)| format!("{slot}: {e}")).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streak_of_failures_warns_once_and_ends_with_the_first_answer() {
        let f = Fallback::default();
        let e = PolicyCallError::Trap { plugin: "p.wasm".into(), slot: Slot::Placement, reason: "boom".into() };
        assert!(f.record(Slot::Placement, Some(&e)), "the first failure starts a streak");
        assert!(!f.record(Slot::Placement, Some(&e)), "the second is the same streak");
        assert!(f.record(Slot::Drain, Some(&e)), "a streak per slot");
        assert_eq!(f.failing().len(), 2);
        assert!(f.failing()[0].starts_with("placement: ") && f.failing()[0].contains("boom"), "{:?}", f.failing());
        assert!(!f.record(Slot::Placement, None));
        assert_eq!(f.failing(), vec![format!("drain: {e}")]);
        assert!(f.record(Slot::Placement, Some(&e)), "a failure after an answer starts a new streak");
    }
}
