//! The one rule for a node's name, wherever it comes from: the settings'
//! `cluster.instance_id`, the id `Bootstrap` provisioned, an instance-id
//! policy's answer, and the Redis instance ids named by callers; and the
//! rule for a shard's id, which is a key of the lease table.

/// Longest a node name may be: the registry's `VARCHAR(255)` on MySQL and
/// MariaDB, counted in bytes so that every dialect stores it whole.
pub const MAX_NODE_NAME: usize = 255;

/// [`problem`]'s answer for a name past [`MAX_NODE_NAME`] (a literal, so
/// that the answer needs no allocation; a test holds it to the constant).
const TOO_LONG: &str = "is longer than 255 bytes";

/// Why `name` may not be a node name, if it may not: [`id_problem`]'s
/// reasons, or a `:` (store and Redis keys use it as their separator, and a
/// claim's owner is a prefix test on `{name}:`).
pub fn problem(name: &str) -> Option<&'static str> {
    id_problem(name).or_else(|| name.contains(':').then_some("contains `:` (store keys use `:` as separator)"))
}

/// Why `id` may not be the key of a stored row (a node's name, a shard's
/// id), if it may not: empty or longer than [`MAX_NODE_NAME`] bytes (the
/// tables' `VARCHAR(255)`); whitespace (MySQL and MariaDB compare keys
/// without trailing spaces, so `a` and `a ` would be one row, and operators'
/// shell loops split on it); a control character such as NUL (PostgreSQL
/// text refuses NUL, and logs and terminals would show the others raw).
pub fn id_problem(id: &str) -> Option<&'static str> {
    if id.is_empty() {
        Some("is empty")
    } else if id.len() > MAX_NODE_NAME {
        Some(TOO_LONG)
    } else if id.chars().any(char::is_whitespace) {
        Some("contains whitespace")
    } else if id.chars().any(char::is_control) {
        Some("contains a control character")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_length_named_is_the_limit() {
        assert_eq!(TOO_LONG, format!("is longer than {MAX_NODE_NAME} bytes"));
    }

    #[test]
    fn the_name_rule_table() {
        let long = "n".repeat(MAX_NODE_NAME);
        let too_long = "n".repeat(MAX_NODE_NAME + 1);
        let wide = "é".repeat(128);
        for (name, why) in [
            ("node-01", None),
            ("pod-7.chitin.svc", None),
            ("ünï", None),
            (long.as_str(), None),
            ("", Some("is empty")),
            (too_long.as_str(), Some("is longer than 255 bytes")),
            (wide.as_str(), Some("is longer than 255 bytes")),
            ("a:b", Some("contains `:` (store keys use `:` as separator)")),
            ("node 1", Some("contains whitespace")),
            ("node1 ", Some("contains whitespace")),
            ("\tnode", Some("contains whitespace")),
            ("node\u{a0}1", Some("contains whitespace")),
            ("node\u{0}1", Some("contains a control character")),
            ("node\u{1b}[31m", Some("contains a control character")),
        ] {
            assert_eq!(problem(name), why, "{name:?}");
        }
    }
}
