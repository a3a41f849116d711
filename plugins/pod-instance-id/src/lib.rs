//! Pod instance id: a chitin `instance-id` plugin for Kubernetes.
//!
//! A StatefulSet pod has a stable name (`web-0`, `web-1`, …) that survives
//! rescheduling; exposing it to the container with the downward API
//!
//! ```yaml
//! env:
//!   - name: POD_NAME
//!     valueFrom: { fieldRef: { fieldPath: metadata.name } }
//! ```
//!
//! makes it the node's name: `POD_NAME=web-2` names the node `web-2`. When
//! `POD_NAME` is unset or empty the plugin falls back to the default policy
//! (`CHITIN__CLUSTER__INSTANCE_ID`, else `chitin-<hostname>`, else `chitin`).
//! The name is taken verbatim; the host still refuses a name with `:`.

use chitin_default_policies::instance_id as defaults;
use chitin_policy_sdk::{InstanceContext, InstanceIdPolicy, PolicyError};

/// The environment variable holding the pod name.
pub const POD_NAME: &str = "POD_NAME";

/// The plugin: implements [`InstanceIdPolicy`].
pub struct PodInstanceId;

chitin_policy_sdk::export_policies!(PodInstanceId: instance_id);

/// The node's name (see the crate documentation).
pub fn resolve(ctx: &InstanceContext) -> String {
    match ctx.var(POD_NAME) {
        Some(pod) if !pod.is_empty() => pod.to_owned(),
        _ => defaults::resolve(ctx),
    }
}

impl InstanceIdPolicy for PodInstanceId {
    fn resolve(ctx: InstanceContext) -> Result<String, PolicyError> {
        Ok(resolve(&ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(env: &[(&str, &str)], hostname: Option<&str>) -> InstanceContext {
        InstanceContext {
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            hostname: hostname.map(Into::into),
        }
    }

    #[test]
    fn the_pod_name_wins() {
        let c = ctx(&[("POD_NAME", "web-2"), ("CHITIN__CLUSTER__INSTANCE_ID", "n1")], Some("h"));
        assert_eq!(resolve(&c), "web-2");
    }

    #[test]
    fn falls_back_like_the_default() {
        assert_eq!(resolve(&ctx(&[("CHITIN__CLUSTER__INSTANCE_ID", "n1")], Some("h"))), "n1");
        assert_eq!(resolve(&ctx(&[("POD_NAME", "")], Some("web-0"))), "chitin-web-0");
        assert_eq!(resolve(&ctx(&[], None)), "chitin");
    }
}
