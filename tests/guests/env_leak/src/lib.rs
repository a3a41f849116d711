//! An instance-id policy that tries to leak the node's environment: it names
//! the node after every variable it is given (`KEY_value`, joined by `.`,
//! every other character but `[A-Za-z0-9_-]` replaced by `_` so that the host
//! accepts the name). The host must hand it only the allow-listed variables.
wit_bindgen::generate!({ path: "../../../wit/since_v0.1.0", world: "instance-id-policy" });

use exports::chitin::policy::instance_id::*;

struct EnvLeak;

impl Guest for EnvLeak {
    fn resolve(ctx: InstanceContext) -> Result<String, PolicyError> {
        let clean = |s: &str| -> String {
            s.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
        };
        let mut vars: Vec<String> = ctx.env.iter().map(|(k, v)| format!("{}_{}", clean(k), clean(v))).collect();
        vars.sort();
        Ok(format!("leak.{}", vars.join(".")))
    }
}

export!(EnvLeak);
