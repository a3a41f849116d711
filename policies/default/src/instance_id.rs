//! Slot `instance-id`: the name a node registers with.
//!
//! 1. the environment variable [`ENV_VAR`], verbatim — even when empty or
//!    containing `:`: the host refuses such a name with a clear error, which
//!    beats silently falling back to another name;
//! 2. else `chitin-<hostname>` when the host name is known and non-empty;
//! 3. else [`FALLBACK`].

use chitin_policy_sdk::InstanceContext;

/// The environment variable that names the node explicitly.
pub const ENV_VAR: &str = "CHITIN__CLUSTER__INSTANCE_ID";

/// Prefix of a name derived from the host name.
pub const HOSTNAME_PREFIX: &str = "chitin-";

/// The name when neither the environment nor the host name gives one.
pub const FALLBACK: &str = "chitin";

/// The node's name (see the module documentation).
pub fn resolve(ctx: &InstanceContext) -> String {
    if let Some(name) = ctx.var(ENV_VAR) {
        return name.to_owned();
    }
    match ctx.hostname.as_deref() {
        Some(host) if !host.is_empty() => format!("{HOSTNAME_PREFIX}{host}"),
        _ => FALLBACK.to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;

    fn ctx(env: &[(&str, &str)], hostname: Option<&str>) -> InstanceContext {
        InstanceContext {
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            hostname: hostname.map(str::to_owned),
        }
    }

    #[test]
    fn table() {
        let cases: &[(&[(&str, &str)], Option<&str>, &str)] = &[
            (&[(ENV_VAR, "node-01")], Some("box"), "node-01"),
            (&[(ENV_VAR, "")], Some("box"), ""),
            (&[(ENV_VAR, "a:b")], None, "a:b"),
            (&[("OTHER", "x")], Some("box"), "chitin-box"),
            (&[], Some(""), "chitin"),
            (&[], None, "chitin"),
            // The first entry of a repeated variable wins.
            (&[(ENV_VAR, "first"), (ENV_VAR, "second")], None, "first"),
            // Names are case-sensitive.
            (&[("chitin__cluster__instance_id", "lower")], None, "chitin"),
        ];
        for (env, host, want) in cases {
            assert_eq!(resolve(&ctx(env, *host)), *want, "env {env:?}, hostname {host:?}");
        }
    }
}
