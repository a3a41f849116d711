//! Node settings: `chitin.toml` plus `CHITIN__SECTION__KEY` environment
//! overrides. ("Config" is kept for `cluster_config.json`.)
//!
//! Loading is a pure function of the file's text and an environment map
//! ([`Settings::from_toml`]); [`Settings::load_from_process`] is the thin
//! wrapper that reads the real file and process environment.
//!
//! - [`types`]: the serde structs, the only schema. Every key has a default,
//!   so an empty file (or none) is a standalone node.
//! - [`load`]: the file's TOML tree, the environment overlaid on it
//!   (`CHITIN__LEASES__TTL_SECS=2` sets `leases.ttl_secs`; the value is read
//!   as TOML when the key takes it, else as a string; an empty value resets
//!   the key to its default), then serde with `deny_unknown_fields`: an
//!   unknown section or key, in the file or as a variable, or a value of the
//!   wrong type, is refused naming it. `CHITIN__CLUSTER__INSTANCE_ID` is
//!   also what the default `instance-id` policy reads.
//! - [`rules`]: the rules values must keep, each refusal with its key, its
//!   value and the rule;
//! - [`exposure`]: the rule that a listener other hosts can reach has a
//!   token on every plane it serves (`security` serves it as its own).
//!
//! All problems of a kind are reported at once; unknown keys and wrong types
//! come before the rules. Golden cases: `tests/fixtures/settings/`.
//!
//! Durations are seconds and accept fractions (`0.5`). Lease timing rule:
//! `renew_interval_secs < ttl_secs / 2`, so at least two renewals are tried
//! before a lease can expire and one failed renewal never loses it.

pub mod exposure;
pub(crate) mod load;
pub(crate) mod redis_url;
pub(crate) mod rules;
pub(crate) mod types;

use std::fmt;
use std::path::PathBuf;

pub use load::ENV_PREFIX;
pub use types::*;

/// One thing wrong with the settings.
#[derive(Clone, Debug, PartialEq)]
pub enum Problem {
    /// A `CHITIN__…` variable that is not of the form `CHITIN__SECTION__KEY`.
    MalformedEnvVar {
        /// The variable.
        var: String,
        /// What is wrong with its name.
        reason: String,
    },
    /// A key refused: unknown, of the wrong type, or breaking a rule.
    Refused {
        /// The dotted key (`leases.ttl_secs`), or the section.
        key: String,
        /// The value as given (strings quoted, URL passwords masked).
        value: String,
        /// Why: serde's words for unknown keys and types, else the rule.
        rule: String,
        /// The file or the environment variable the value came from.
        origin: String,
    },
}

impl Problem {
    /// The dotted key (or variable) the problem is about.
    pub fn key(&self) -> &str {
        match self {
            Problem::Refused { key, .. } => key,
            Problem::MalformedEnvVar { var, .. } => var,
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::MalformedEnvVar { var, reason } => {
                write!(f, "environment variable `{var}`: {reason}")
            }
            Problem::Refused { key, value, rule, origin } => {
                write!(f, "`{key}` = {value} (from {origin}): {rule}")
            }
        }
    }
}

/// Why settings could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// The file could not be read.
    #[error("cannot read settings file `{}`: {source}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("settings file `{origin}` is not valid TOML: {message}")]
    Syntax {
        /// The file, as messages name it.
        origin: String,
        /// The parser's message, with line and column.
        message: String,
    },
    /// Keys or values were refused; every problem found is listed.
    #[error(
        "invalid settings:\n{}",
        .0.iter().map(|p| format!("  - {p}")).collect::<Vec<_>>().join("\n")
    )]
    Invalid(Vec<Problem>),
}

impl SettingsError {
    /// The problems, for [`SettingsError::Invalid`].
    pub fn problems(&self) -> &[Problem] {
        match self {
            SettingsError::Invalid(p) => p,
            _ => &[],
        }
    }
}
