//! Who may reach what, and what is never shown (threat model and settings:
//! `docs/security.md`).
//!
//! - [`exposure`]: which listen addresses other hosts can reach, and the rule
//!   that a reachable listener has a token on every plane (pure; a rule of
//!   the settings, kept with them in `settings::exposure`);
//! - [`auth`]: the bearer tokens of the admin, client and peer planes: read
//!   from their files at start, checked in constant time before anything
//!   else a call costs, sent by one client interceptor;
//! - [`listen`]: the listeners' bounds (`[limits]`): connections open at
//!   once, the handshake and idle deadlines, TLS handshakes off the accept
//!   loop;
//! - [`tls`]: rustls for the listeners (mutual TLS with a client CA), the
//!   node's calls to its peers and the CLI's to a node;
//! - [`redact`]: the one redaction of URL passwords, bearer tokens and the
//!   node's own secrets, applied to every log line, error and report (a
//!   leaf, `crate::redact`, so that the settings' refusals use it too).

pub mod auth;
pub(crate) mod listen;
pub mod tls;

pub use crate::redact::{self, redact};
pub use crate::settings::exposure;
pub use auth::{Caller, Credentials, Gatekeeper, Guard, Plane};
