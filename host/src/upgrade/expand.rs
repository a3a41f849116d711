//! The expand/contract rule for migrations: a migration of release N+1
//! only adds (new tables, indexes, columns that are nullable or have a
//! default), because nodes of release N run on the schema it leaves. A
//! statement that removes, renames, retypes or newly constrains what N
//! reads or writes is a contract step: it goes in a migration of its own,
//! headed `-- contract: gated by <gate>`, shipped a release after that
//! gate, so that it runs only where every node has left N.
//!
//! The checker is textual (comments stripped, statements split at `;`,
//! `ALTER TABLE` split into its clauses): it is a guard for review, not a
//! SQL parser.

/// A statement the rule forbids outside a contract step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// 1-based, in the file.
    pub statement: usize,
    /// The statement, whitespace collapsed.
    pub sql: String,
    pub why: &'static str,
}

/// The gate a contract migration names in its header, if it is one:
/// `-- contract: gated by <gate>` among the comment lines before the first
/// statement.
pub fn contract_gate(sql: &str) -> Option<&str> {
    sql.lines()
        .map(str::trim)
        .take_while(|l| l.is_empty() || l.starts_with("--"))
        .filter_map(|l| l.trim_start_matches('-').trim().strip_prefix("contract:"))
        .map(|rest| rest.trim().strip_prefix("gated by").map(str::trim).unwrap_or(""))
        .next()
}

/// Every statement of `sql` that is not expand-only.
pub fn destructive(sql: &str) -> Vec<Finding> {
    statements(sql)
        .into_iter()
        .enumerate()
        .filter_map(|(i, stmt)| why(&stmt).map(|why| Finding { statement: i + 1, sql: stmt, why }))
        .collect()
}

/// The statements of `sql`, comments removed and whitespace collapsed.
fn statements(sql: &str) -> Vec<String> {
    let mut text = String::with_capacity(sql.len());
    let mut rest = sql;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.find('\n').map_or("", |n| &after[n..]);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.find("*/").map_or("", |n| &after[n + 2..]);
        } else {
            let c = rest.chars().next().expect("not empty");
            text.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    text.split(';').map(|s| s.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|s| !s.is_empty()).collect()
}

/// Why `stmt` is not expand-only, or None.
fn why(stmt: &str) -> Option<&'static str> {
    let upper = stmt.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(' ').collect();
    match words.as_slice() {
        ["DROP", ..] => Some("drops a table, index or view (DROP) an older release still uses"),
        ["TRUNCATE", ..] | ["DELETE", ..] => Some("deletes rows (TRUNCATE/DELETE) an older release may still read"),
        ["RENAME", ..] => Some("renames a table (RENAME) an older release still names"),
        ["ALTER", "TABLE", ..] => alter_clauses(&upper).into_iter().find_map(|c| alter_clause(&c)),
        _ => None,
    }
}

/// The clauses of an `ALTER TABLE t …` statement (split at top-level commas).
fn alter_clauses(upper: &str) -> Vec<String> {
    let body = upper.splitn(4, ' ').nth(3).unwrap_or("");
    let (mut clauses, mut depth, mut current) = (Vec::new(), 0i32, String::new());
    for c in body.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                clauses.push(std::mem::take(&mut current).trim().to_string());
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    clauses.push(current.trim().to_string());
    clauses
}

fn alter_clause(clause: &str) -> Option<&'static str> {
    let words: Vec<&str> = clause.split(' ').collect();
    let has = |w: &str| words.contains(&w);
    let has_seq = |a: &str, b: &str| words.windows(2).any(|p| p[0] == a && p[1] == b);
    match words.first().copied() {
        Some("DROP") => Some("drops a column, constraint or default (ALTER … DROP) an older release still relies on"),
        Some("RENAME") => Some("renames a column or table (ALTER … RENAME) an older release still names"),
        Some("MODIFY") | Some("CHANGE") => Some("changes a column's definition (MODIFY/CHANGE) under an older release"),
        Some("ALTER") if has("TYPE") => Some("changes a column's type (ALTER … TYPE) under an older release"),
        Some("ALTER") if has_seq("SET", "NOT") => Some("makes a column NOT NULL, which an older release's writes may violate"),
        Some("ADD") if has("CONSTRAINT") || has("CHECK") || has("UNIQUE") || has("FOREIGN") || has_seq("PRIMARY", "KEY") => {
            Some("adds a constraint to an existing table, which an older release's writes may violate")
        }
        Some("ADD") if has_seq("NOT", "NULL") && !has("DEFAULT") && !has("GENERATED") => {
            Some("adds a NOT NULL column without a DEFAULT: an older release's inserts fail")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additive_statements_pass() {
        let sql = "-- a comment; with DROP in it\nCREATE TABLE t (id bigint NOT NULL PRIMARY KEY, CHECK (id = 1));\n\
                   CREATE INDEX t_i ON t (id);\n/* DROP TABLE t; */\n\
                   ALTER TABLE t ADD COLUMN a text NULL, ADD COLUMN b bigint NOT NULL DEFAULT 0;\n\
                   ALTER TABLE t ALTER COLUMN a SET DEFAULT 'x';\nINSERT INTO t VALUES (1);\nUPDATE t SET b = 1;";
        assert_eq!(destructive(sql), vec![]);
    }

    #[test]
    fn destructive_statements_are_found_with_the_reason() {
        let cases = [
            ("DROP TABLE chitin_nodes", "DROP"),
            ("drop index chitin_nodes_name_not_down", "DROP"),
            ("ALTER TABLE chitin_nodes DROP COLUMN address", "ALTER … DROP"),
            ("ALTER TABLE t ADD COLUMN a text NULL, DROP COLUMN b", "ALTER … DROP"),
            ("ALTER TABLE t RENAME COLUMN a TO b", "RENAME"),
            ("ALTER TABLE t RENAME TO u", "RENAME"),
            ("RENAME TABLE t TO u", "RENAME"),
            ("ALTER TABLE t MODIFY a BIGINT", "MODIFY"),
            ("ALTER TABLE t CHANGE a b BIGINT", "MODIFY"),
            ("ALTER TABLE t ALTER COLUMN a TYPE bigint", "TYPE"),
            ("ALTER TABLE t ALTER COLUMN a SET DATA TYPE bigint", "TYPE"),
            ("ALTER TABLE t ALTER COLUMN a SET NOT NULL", "NOT NULL"),
            ("ALTER TABLE t ADD COLUMN a bigint NOT NULL", "NOT NULL column without a DEFAULT"),
            ("ALTER TABLE t ADD CONSTRAINT c CHECK (a > 0)", "constraint"),
            ("ALTER TABLE t ADD UNIQUE (a)", "constraint"),
            ("TRUNCATE chitin_journal", "deletes rows"),
            ("DELETE FROM chitin_nodes WHERE state = 'down'", "deletes rows"),
        ];
        for (sql, reason) in cases {
            let found = destructive(&format!("CREATE TABLE x (a int);\n{sql};"));
            assert_eq!(found.len(), 1, "{sql}: {found:?}");
            assert_eq!(found[0].statement, 2, "{sql}");
            assert!(found[0].why.contains(reason), "{sql}: {}", found[0].why);
        }
    }

    #[test]
    fn a_contract_step_names_its_gate_in_the_header() {
        assert_eq!(contract_gate("-- contract: gated by node-liveness\nDROP TABLE t;"), Some("node-liveness"));
        assert_eq!(
            contract_gate("-- Removes the old column.\n--   contract:   gated by   g2  \n\nALTER TABLE t DROP COLUMN a;"),
            Some("g2")
        );
        assert_eq!(
            contract_gate("-- contract:\nDROP TABLE t;"),
            Some(""),
            "a header without a gate is still a (bad) contract header"
        );
        assert_eq!(contract_gate("DROP TABLE t;\n-- contract: gated by g"), None, "only the header counts");
        assert_eq!(contract_gate("-- an expand step\nCREATE TABLE t (a int);"), None);
    }
}
