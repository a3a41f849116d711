//! The placement policy's preferred holders, asked for again only when what
//! they are ranked on changed: the served config, the components, or a
//! node's state. A steady round then costs no policy call, whatever the
//! number of shards.

use std::sync::{Arc, Mutex};

use chitin_policy_sdk as sdk;

use super::Topology;
use super::shard_map::ShardMap;
use crate::policy::Policies;

/// Per shard of the served config, its replica nodes best first.
pub type Rankings = Arc<Vec<(String, Vec<String>)>>;

/// A placement answer made safe to obey: per shard of `map`, the nodes the
/// answer names that host one of its replicas, each once, in the answer's
/// order; shards it does not know are dropped. Also what was dropped, one
/// line per shard, for the log: a plugin's mistake never moves a lease to a
/// node that does not host the shard.
pub fn validated(answer: Vec<sdk::HolderRanking>, map: &ShardMap) -> (Vec<(String, Vec<String>)>, Vec<String>) {
    let mut kept = Vec::with_capacity(answer.len());
    let mut dropped = Vec::new();
    for ranking in answer {
        let Some(shard) = map.shard(&ranking.shard) else {
            dropped.push(format!("shard `{}` is not in the config", ranking.shard));
            continue;
        };
        let mut nodes: Vec<String> = Vec::with_capacity(ranking.nodes.len());
        let mut outside = Vec::new();
        for node in ranking.nodes {
            if !shard.replica_nodes.contains(&node) {
                outside.push(node);
            } else if !nodes.contains(&node) {
                nodes.push(node);
            }
        }
        if !outside.is_empty() {
            dropped.push(format!("shard `{}`: {} host no replica of it", shard.id, outside.join(", ")));
        }
        kept.push((shard.id.clone(), nodes));
    }
    (kept, dropped)
}

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
    fn a_ranking_keeps_only_replica_nodes_once_and_known_shards() {
        use crate::topology::model::{Node, Replica};
        // One shard with replicas on a and b; c is a node of the config without one.
        let mut config = super::super::shard_map::standalone_config("a", "a:1", 1);
        for id in ["b", "c"] {
            config.nodes.push(Node { id: id.into(), grpc_address: format!("{id}:1"), metadata: Vec::new() });
        }
        config.applications[0].shards[0].replicas.push(Replica { id: "r-b".into(), node_id: "b".into(), metadata: Vec::new() });
        let shard = config.applications[0].shards[0].id.clone();
        let map = ShardMap::from_config(&config);
        let ranking = |shard: &str, nodes: &[&str]| sdk::HolderRanking {
            shard: shard.into(),
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
        };
        let cases: &[(&[&str], &[&str], bool)] = &[
            (&["b", "a"], &["b", "a"], false),
            (&["c", "b", "a"], &["b", "a"], true),
            (&["b", "b", "a", "b"], &["b", "a"], false),
            (&["zz", "c"], &[], true),
            (&[], &[], false),
        ];
        for &(answer, want, complains) in cases {
            let (kept, dropped) = validated(vec![ranking(&shard, answer)], &map);
            assert_eq!(kept, vec![(shard.clone(), want.iter().map(|n| n.to_string()).collect::<Vec<_>>())], "{answer:?}");
            assert_eq!(!dropped.is_empty(), complains, "{answer:?}: {dropped:?}");
        }
        let (kept, dropped) = validated(vec![ranking("nope", &["a"])], &map);
        assert!(kept.is_empty() && dropped[0].contains("not in the config"), "{dropped:?}");
    }

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
