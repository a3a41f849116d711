//! The placement policy's preferred holders, asked for again only when what
//! they are ranked on changed: the served config, the components, or a
//! node's state. A steady round then costs no policy call, whatever the
//! number of shards.

use std::sync::{Arc, Mutex};

use chitin_policy_sdk as sdk;

use super::Topology;
use crate::policy::Policies;

/// Per shard of the served config, its replica nodes best first.
pub type Rankings = Arc<Vec<(String, Vec<String>)>>;

/// What rankings were computed from: the config and components by identity
/// (each reload or new config is a new `Arc`), the node states by value.
pub struct RankingKey {
    pub topology: Arc<Topology>,
    pub policies: Arc<Policies>,
    pub nodes: Vec<sdk::Node>,
}

impl PartialEq for RankingKey {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.topology, &other.topology) && Arc::ptr_eq(&self.policies, &other.policies) && self.nodes == other.nodes
    }
}

/// The last answer and what it answered.
pub struct Memo<K, V> {
    last: Mutex<Option<(K, V)>>,
}

impl<K, V> Default for Memo<K, V> {
    fn default() -> Self {
        Memo { last: Mutex::new(None) }
    }
}

impl<K: PartialEq, V: Clone> Memo<K, V> {
    /// The last answer, when it answered `key`.
    pub fn get(&self, key: &K) -> Option<V> {
        let last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.as_ref().filter(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// Keeps `value` as the answer to `key`, in place of the last.
    pub fn put(&self, key: K, value: V) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_answer_is_kept_for_its_own_question_only() {
        let memo: Memo<Vec<u8>, &str> = Memo::default();
        assert_eq!(memo.get(&vec![1]), None);
        memo.put(vec![1], "one");
        assert_eq!(memo.get(&vec![1]), Some("one"));
        assert_eq!(memo.get(&vec![2]), None);
        memo.put(vec![2], "two");
        assert_eq!(memo.get(&vec![1]), None, "only the last answer is kept");
        assert_eq!(memo.get(&vec![2]), Some("two"));
    }
}
