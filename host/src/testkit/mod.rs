//! The kit that `chitin chaos` and the test suite build clusters from:
//! real `chitin node` processes, private servers, free ports, HTTP probes,
//! fresh databases and node settings written through [`Settings`].
//!
//! One kit, so that a fix to how a node is started, stopped or probed
//! reaches the fault suite and the integration tests at once.
//!
//! - [`ports`]: free loopback ports and waiting for a listener;
//! - [`http`]: the minimal HTTP/1.0 GET the node's own endpoints need;
//! - [`node`]: one node process (spawn, wait ready, signals, its log);
//! - [`servers`]: private Redis, PostgreSQL (with a synchronous standby)
//!   and MariaDB servers;
//! - [`switch`]: one address moved from one server to another;
//! - [`db`]: fresh databases in a configured server;
//! - [`settings`]: node settings as the suite and the chaos lab write them.
//!
//! [`Settings`]: crate::settings::Settings

pub(crate) mod db;
pub(crate) mod http;
pub(crate) mod node;
pub mod ports;
pub mod servers;
pub mod settings;
pub(crate) mod switch;

use std::path::PathBuf;
use std::time::Duration;

pub use db::{FreshDb, create_database, drop_database, with_database};
pub use http::{http_get, http_status, https_get, https_status};
pub use node::NodeProc;
pub use ports::{free_port, free_ports};
pub use servers::{
    PrivateMariadb, PrivatePgBouncer, PrivatePostgres, PrivateRedis, PrivateRedisCluster, PrivateSentinel, redis_cli,
};
pub use switch::Switch;

/// What went wrong while building or driving a test cluster.
#[derive(Debug, thiserror::Error)]
pub enum KitError {
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start {program}{hint}: {source}")]
    Spawn {
        program: String,
        /// How to fix it, starting with "; " (or empty).
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("{command} failed: {output}")]
    Tool { command: String, output: String },
    #[error("nothing listens on {addr} after {within:?}{log}")]
    NotListening { addr: String, within: Duration, log: String },
    #[error("{name} exited while starting; log tail:\n{log_tail}")]
    ExitedEarly { name: String, log_tail: String },
    #[error("{name} not ready within {within:?}; log tail:\n{log_tail}")]
    NotReady { name: String, within: Duration, log_tail: String },
    #[error("{name} logged `{line}` fewer than {count} time(s) within {within:?}; log tail:\n{log_tail}")]
    NotLogged { name: String, line: String, count: usize, within: Duration, log_tail: String },
    #[error("{name} is not running")]
    NotRunning { name: String },
    #[error("kill {signal} {pid} ({name}) failed")]
    Signal { name: String, signal: &'static str, pid: u32 },
    /// SIGTERM did not end the process in time; it was SIGKILLed.
    #[error("{name} did not exit within {within:?} after SIGTERM and was killed; log tail:\n{log_tail}")]
    StopTimedOut { name: String, within: Duration, log_tail: String },
    #[error("HTTP GET {path} from {addr}: {detail}")]
    Http { addr: String, path: String, detail: String },
    #[error("{what}: {source}")]
    Sql {
        what: String,
        #[source]
        source: sqlx::Error,
    },
    #[error("the database URL must be postgres://… or mysql://… (got {0}); SQLite cannot be shared by node processes")]
    UnsupportedUrl(String),
    #[error("no PostgreSQL server binaries: {0}")]
    NoPostgres(String),
    #[error("write settings {path}: {source}")]
    SettingsWrite {
        path: PathBuf,
        #[source]
        source: toml::ser::Error,
    },
    #[error("read settings {path}: {source}")]
    SettingsRead {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
}

impl KitError {
    /// An I/O error, saying what was being done.
    pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> KitError {
        let what = what.into();
        move |source| KitError::Io { what, source }
    }
}

/// The last `lines` lines of a log file ("" when it cannot be read).
pub fn log_tail(path: &std::path::Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::log_tail;

    #[test]
    fn a_log_tail_is_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        for (text, n, tail) in [("", 3, ""), ("a\nb\nc\n", 2, "b\nc"), ("a\nb", 5, "a\nb"), ("a\nb\n", 0, "")] {
            std::fs::write(&path, text).unwrap();
            assert_eq!(log_tail(&path, n), tail, "{text:?} / {n}");
        }
        assert_eq!(log_tail(&dir.path().join("missing.log"), 3), "");
    }
}
