//! Key names: the reference's layout under a namespace.

/// The namespace and every key name derived from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    ns: String,
}

/// An instance id that cannot be used in keys and claim values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid instance id {id:?}: {reason}")]
pub struct InvalidInstanceId {
    pub id: String,
    pub reason: &'static str,
}

/// Instance ids follow the node name rule ([`crate::names::problem`]): the
/// claim value is `{instance_id}:` and ownership is a prefix test on it.
pub fn validate_instance_id(id: &str) -> Result<(), InvalidInstanceId> {
    match crate::names::problem(id) {
        None => Ok(()),
        Some(reason) => Err(InvalidInstanceId { id: id.to_string(), reason }),
    }
}

impl Keys {
    pub fn new(namespace: &str) -> Self {
        Keys { ns: namespace.to_string() }
    }

    pub fn namespace(&self) -> &str {
        &self.ns
    }

    /// `{ns}:instances:{id}`
    pub fn instance(&self, id: &str) -> String {
        format!("{}:instances:{id}", self.ns)
    }

    /// `{ns}:instances:index`
    pub fn instances_index(&self) -> String {
        format!("{}:instances:index", self.ns)
    }

    /// `{ns}:affinity:{target_id}`
    pub fn affinity(&self, target: &str) -> String {
        format!("{}:affinity:{target}", self.ns)
    }

    /// `{ns}:affinity:` (scripts append the target id)
    pub fn affinity_prefix(&self) -> String {
        format!("{}:affinity:", self.ns)
    }

    /// `{ns}:affinity:by-instance:{id}`
    pub fn affinity_by_instance(&self, id: &str) -> String {
        format!("{}:affinity:by-instance:{id}", self.ns)
    }

    /// `{ns}:deployments:{uuid}`
    pub fn deployment(&self, id: &str) -> String {
        format!("{}:deployments:{id}", self.ns)
    }

    /// `{ns}:deployments:` (scripts append the deployment id)
    pub fn deployment_prefix(&self) -> String {
        format!("{}:deployments:", self.ns)
    }

    /// `{ns}:deployments:active`
    pub fn deployments_active(&self) -> String {
        format!("{}:deployments:active", self.ns)
    }

    /// `{ns}:deployments:by-instance:{id}`
    pub fn deployments_by_instance(&self, id: &str) -> String {
        format!("{}:deployments:by-instance:{id}", self.ns)
    }

    /// The claim value an instance writes: `{instance_id}:`.
    pub fn claim_value(instance_id: &str) -> String {
        format!("{instance_id}:")
    }

    /// The owner named by a claim value (`"abc:"` → `"abc"`).
    pub fn owner_of_claim(value: &str) -> &str {
        value.split_once(':').map(|(o, _)| o).unwrap_or(value)
    }

    /// A `SCAN MATCH` pattern matching keys that start with `prefix`
    /// (glob metacharacters in the namespace escaped).
    pub fn scan_pattern(prefix: &str) -> String {
        let mut p = String::with_capacity(prefix.len() + 1);
        for c in prefix.chars() {
            if matches!(c, '*' | '?' | '[' | ']' | '\\') {
                p.push('\\');
            }
            p.push(c);
        }
        p.push('*');
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_matches_reference() {
        let k = Keys::new("chitin");
        assert_eq!(k.instance("u1"), "chitin:instances:u1");
        assert_eq!(k.instances_index(), "chitin:instances:index");
        assert_eq!(k.affinity("t1"), "chitin:affinity:t1");
        assert_eq!(k.affinity_by_instance("u1"), "chitin:affinity:by-instance:u1");
        assert_eq!(k.deployment("d1"), "chitin:deployments:d1");
        assert_eq!(k.deployments_active(), "chitin:deployments:active");
        assert_eq!(k.deployments_by_instance("u1"), "chitin:deployments:by-instance:u1");
        assert_eq!(Keys::claim_value("n-1"), "n-1:");
        assert_eq!(Keys::owner_of_claim("n-10:"), "n-10");
    }

    #[test]
    fn instance_ids() {
        for ok in ["n-1", "01a0b519-67f5-88c1-b926-2e2c1f3a20fd", "chitin"] {
            assert!(validate_instance_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "a:b", "a b", "x\n"] {
            assert!(validate_instance_id(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scan_pattern_escapes() {
        assert_eq!(Keys::scan_pattern("ns:affinity:"), "ns:affinity:*");
        assert_eq!(Keys::scan_pattern("a*b?[c]:"), "a\\*b\\?\\[c\\]:*");
    }
}
