//! The environment the instance-id policy sees: an allow-list, never the
//! whole process environment (which holds the database URL and tokens; a
//! policy could encode them into the name that is then logged, stored and
//! shown).

use super::PolicySettings;

/// Variables the instance-id policy always sees when they are set; more are
/// named in `policies.instance_id_env`.
pub const INSTANCE_ENV: &[&str] = &["CHITIN__CLUSTER__INSTANCE_ID", "HOSTNAME", "POD_NAME"];

/// The allow-listed variables of this process, for `InstanceContext::env`.
/// Variables whose name or value is not UTF-8 are left out.
pub fn instance_env(settings: &PolicySettings) -> Vec<(String, String)> {
    let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    allowed_env(vars, &settings.instance_id_env)
}

/// The variables of `vars` that [`INSTANCE_ENV`] or `extra` name, in the
/// order of `vars`.
pub fn allowed_env(vars: impl IntoIterator<Item = (String, String)>, extra: &[String]) -> Vec<(String, String)> {
    vars.into_iter().filter(|(k, _)| INSTANCE_ENV.contains(&k.as_str()) || extra.iter().any(|e| e == k)).collect()
}

pub use crate::settings::invalid_var_reason;

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn only_the_allow_list_and_the_named_extras_pass() {
        let env = vars(&[
            ("CHITIN__DATABASE__URL", "postgres://u:secret@db/chitin"),
            ("HOSTNAME", "h1"),
            ("CHITIN_ADMIN_TOKEN", "t0ken"),
            ("POD_NAME", "web-0"),
            ("RACK", "r7"),
            ("CHITIN__CLUSTER__INSTANCE_ID", "n1"),
        ]);
        assert_eq!(
            allowed_env(env.clone(), &[]),
            vars(&[("HOSTNAME", "h1"), ("POD_NAME", "web-0"), ("CHITIN__CLUSTER__INSTANCE_ID", "n1")])
        );
        let with_rack = allowed_env(env, &["RACK".to_string()]);
        assert!(with_rack.contains(&("RACK".into(), "r7".into())), "{with_rack:?}");
        assert!(with_rack.iter().all(|(k, _)| k != "CHITIN__DATABASE__URL" && k != "CHITIN_ADMIN_TOKEN"));
    }

    #[test]
    fn variable_names_are_checked() {
        assert_eq!(invalid_var_reason("RACK_ID"), None);
        assert_eq!(invalid_var_reason("_X1"), None);
        assert!(invalid_var_reason("").is_some());
        assert!(invalid_var_reason("1RACK").is_some());
        assert!(invalid_var_reason("RACK-ID").is_some());
        assert!(invalid_var_reason("A=B").is_some());
    }
}
