//! The rules a service's own table is judged by (`chitin chaos --service`):
//! pure, over the rows the service stored and the writes its callers were
//! told were stored.
//!
//! A service that fences its writes with chitin's tokens records each write
//! as a row `(seq, request_id, item_key, shard, epoch)`: `seq` increases
//! with every write (an identity or auto-increment column), and `(shard,
//! epoch)` is the token it was written under. Storage-side fencing promises
//! that a write under an older token commits only before the newer
//! holder's claim, and the newer holder writes only after it; so per key,
//! in `seq` order, the rows never go back to an older token:
//! - within one shard the epoch never falls;
//! - a key that moved to another shard (a split hands a parent's keys to
//!   its children; shards are never merged) is never written under the
//!   shard it left.
//!
//! And every acknowledged write is stored exactly once.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::{Deserialize, Serialize};

use super::violation::{Verdict, Violation, Written};

/// One row of the service's table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerRow {
    /// The row's place in the order of writes.
    pub seq: i64,
    /// The caller's id of the write.
    pub request_id: String,
    /// The key written.
    pub key: String,
    /// The token's shard.
    pub shard: String,
    /// The token's epoch.
    pub epoch: i64,
}

/// The token `row` was written under.
fn written(row: &LedgerRow) -> Written {
    Written { seq: row.seq, shard: row.shard.clone(), epoch: row.epoch }
}

/// Judges the service's `rows` against the request ids its callers were
/// told were stored (`acked`: request id → key), into `v`.
pub(crate) fn check(acked: &BTreeMap<String, String>, rows: &[LedgerRow], v: &mut Verdict) {
    let mut copies: HashMap<&str, Vec<i64>> = HashMap::new();
    for row in rows {
        copies.entry(&row.request_id).or_default().push(row.seq);
    }
    for (request_id, key) in acked {
        if !copies.contains_key(request_id.as_str()) {
            v.service_lost += 1;
            v.violations.push(Violation::ServiceLost { key: key.clone(), request_id: request_id.clone() });
        }
    }
    let mut duplicated: Vec<(&str, Vec<i64>)> = copies.into_iter().filter(|(_, seqs)| seqs.len() > 1).collect();
    duplicated.sort();
    for (request_id, seqs) in duplicated {
        v.service_duplicates += 1;
        v.violations.push(Violation::ServiceDuplicate { request_id: request_id.to_owned(), seqs });
    }
    check_order(rows, v);
}

/// Per key, in `seq` order: never back to an older token (module docs).
fn check_order(rows: &[LedgerRow], v: &mut Verdict) {
    let mut ordered: Vec<&LedgerRow> = rows.iter().collect();
    ordered.sort_by_key(|r| r.seq);
    /// What one key's rows so far said: its shard now, the newest row under
    /// each shard, the shards it left.
    #[derive(Default)]
    struct Key<'a> {
        shard: Option<&'a str>,
        newest: HashMap<&'a str, &'a LedgerRow>,
        left: HashSet<&'a str>,
    }
    let mut keys: HashMap<&str, Key> = HashMap::new();
    for row in ordered {
        let k = keys.entry(&row.key).or_default();
        let newer = if k.left.contains(row.shard.as_str()) {
            // The newest row of any other shard is a newer token's write.
            k.shard.and_then(|s| k.newest.get(s)).copied()
        } else {
            k.newest.get(row.shard.as_str()).copied().filter(|n| n.epoch > row.epoch)
        };
        if let Some(newer) = newer {
            v.service_interleaved += 1;
            v.violations.push(Violation::ServiceInterleaved {
                key: row.key.clone(),
                request_id: row.request_id.clone(),
                written: written(row),
                after: written(newer),
            });
            continue;
        }
        if let Some(before) = k.shard.filter(|s| *s != row.shard) {
            k.left.insert(before);
        }
        k.shard = Some(&row.shard);
        let newest = k.newest.entry(&row.shard).or_insert(row);
        if row.epoch >= newest.epoch {
            *newest = row;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, key: &str, shard: &str, epoch: i64) -> LedgerRow {
        LedgerRow { seq, request_id: format!("r{seq}"), key: key.into(), shard: shard.into(), epoch }
    }

    fn kinds(acked: &[(&str, &str)], rows: &[LedgerRow]) -> Vec<String> {
        let acked = acked.iter().map(|(r, k)| (r.to_string(), k.to_string())).collect();
        let mut v = Verdict::default();
        check(&acked, rows, &mut v);
        assert_eq!(v.violations.len(), v.service_lost + v.service_duplicates + v.service_interleaved);
        v.violations.iter().map(Violation::kind).collect()
    }

    #[test]
    fn a_service_table_is_judged_by_its_tokens_order_and_its_acknowledgements() {
        let a = |s: i64, e: i64| row(s, "a", "s1", e);
        let cases: Vec<(&str, Vec<(&str, &str)>, Vec<LedgerRow>, Vec<&str>)> = vec![
            ("every acknowledged write stored, epochs rising", vec![("r1", "a"), ("r2", "a")], vec![a(1, 3), a(2, 4)], vec![]),
            ("a stored write nobody was told of is fine", vec![], vec![a(1, 3)], vec![]),
            ("an acknowledged write missing", vec![("r1", "a"), ("r9", "a")], vec![a(1, 3)], vec!["service_lost"]),
            (
                "one request stored twice",
                vec![("r1", "a")],
                vec![a(1, 3), LedgerRow { request_id: "r1".into(), ..a(2, 3) }],
                vec!["service_duplicate"],
            ),
            ("a deposed epoch written after the newer", vec![], vec![a(1, 3), a(2, 4), a(3, 3)], vec!["service_interleaved"]),
            ("the same epoch again is fine", vec![], vec![a(1, 4), a(2, 4), a(3, 4)], vec![]),
            ("order is seq's, not the rows' order", vec![], vec![a(2, 4), a(1, 3)], vec![]),
            ("another key's epochs are its own", vec![], vec![a(1, 4), row(2, "b", "s1", 3)], vec![]),
            (
                "a key moved to a split's child, any epoch",
                vec![],
                vec![a(1, 7), row(2, "a", "s1c", 1), row(3, "a", "s1c", 2)],
                vec![],
            ),
            (
                "written under the parent after the child",
                vec![],
                vec![a(1, 7), row(2, "a", "s1c", 1), row(3, "a", "s1", 7)],
                vec!["service_interleaved"],
            ),
            (
                "each late write counted, the newer ones kept",
                vec![],
                vec![a(1, 5), a(2, 4), a(3, 6), a(4, 5)],
                vec!["service_interleaved", "service_interleaved"],
            ),
        ];
        for (name, acked, rows, want) in cases {
            assert_eq!(kinds(&acked, &rows), want, "{name}");
        }
    }

    #[test]
    fn a_late_write_names_both_tokens() {
        let mut v = Verdict::default();
        check(&BTreeMap::new(), &[row(1, "a", "s1", 4), row(2, "a", "s1", 3)], &mut v);
        let Violation::ServiceInterleaved { key, written, after, .. } = &v.violations[0] else { panic!("{:?}", v.violations) };
        assert_eq!((key.as_str(), written.epoch, after.epoch, after.seq), ("a", 3, 4, 1));
    }
}
