//! One shared, self-healing Redis connection.
//!
//! [`RedisConn`] wraps redis' `ConnectionManager` (one multiplexed connection
//! that reconnects after an I/O error) and makes it lazily: a node whose
//! Redis is down at start still starts, and the first call after Redis
//! comes up connects. Bounded connect and response timeouts make a dead or
//! unreachable Redis fail fast, so dispatch can fail open instead of hanging.
//!
//! A first connect that fails fails for every caller that waited on it: the
//! callers that arrive while it runs share its outcome, and for one connect
//! timeout after it failed every caller is answered at once, instead of
//! each trying again in turn (with Redis unreachable, the hundredth of a
//! hundred concurrent dispatches would otherwise wait a hundred timeouts).
//!
//! `rediss://` is TLS (rustls), verified against the system's roots or, with
//! [`RedisSettings::ca_file`], against the CA certificates of that file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::OnceCell;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://[:password@]host:port[/db]`, or `rediss://…` for TLS.
    pub url: String,
    /// CA certificates (PEM) that verify a `rediss://` server
    /// (`[cluster] redis_ca_file`); `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Each connection attempt gives up after this long (default 1 s).
    pub connection_timeout: Duration,
    /// Each command gives up after this long (default 1 s).
    pub response_timeout: Duration,
    /// Connection attempts after the first one, per (re)connect (default 0:
    /// the redis client's backoff starts at one second, so callers retry
    /// instead, on their own schedule; see `FailOpenPolicy`).
    pub reconnect_retries: usize,
}

impl RedisSettings {
    pub fn new(url: impl Into<String>) -> Self {
        RedisSettings {
            url: url.into(),
            ca_file: None,
            connection_timeout: Duration::from_secs(1),
            response_timeout: Duration::from_secs(1),
            reconnect_retries: 0,
        }
    }
}

/// A Redis URL (or CA file) that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("invalid Redis URL {url:?}: {source}")]
    Url {
        url: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("cannot read `cluster.redis_ca_file` = {}: {source}; point it at the PEM file of the CA that signed Redis' certificate", .path.display())]
    CaFile { path: PathBuf, source: std::io::Error },
}

/// Cheap to clone; every clone shares the one connection.
#[derive(Clone)]
pub struct RedisConn {
    client: redis::Client,
    settings: Arc<RedisSettings>,
    manager: Arc<OnceCell<ConnectionManager>>,
    /// Held while a first connect runs; the last one's failure, and when.
    connecting: Arc<tokio::sync::Mutex<Option<(Instant, String)>>>,
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConn").field("connected", &self.manager.initialized()).finish()
    }
}

impl RedisConn {
    /// Parses the URL; connects on first use.
    pub fn new(settings: RedisSettings) -> Result<Self, ConnError> {
        let bad_url = |source| ConnError::Url { url: redact(&settings.url), source };
        let client = match &settings.ca_file {
            Some(path) => {
                let root_cert = std::fs::read(path).map_err(|source| ConnError::CaFile { path: path.clone(), source })?;
                let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
                redis::Client::build_with_tls(settings.url.as_str(), certificates).map_err(bad_url)?
            }
            None => redis::Client::open(settings.url.as_str()).map_err(bad_url)?,
        };
        Ok(RedisConn { client, settings: Arc::new(settings), manager: Arc::new(OnceCell::new()), connecting: Arc::default() })
    }

    /// Shorthand for [`RedisConn::new`] with default timeouts.
    pub fn open(url: &str) -> Result<Self, ConnError> {
        Self::new(RedisSettings::new(url))
    }

    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// The shared connection manager, connecting first if needed. Fails
    /// fast (within the connect timeout and retries) when Redis is down, and
    /// at once for one connect timeout after a first connect failed.
    pub async fn get(&self) -> redis::RedisResult<ConnectionManager> {
        if let Some(m) = self.manager.get() {
            return Ok(m.clone());
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(m) = self.manager.get() {
            return Ok(m.clone());
        }
        let s = &self.settings;
        if let Some((at, why)) = last_failure.as_ref()
            && at.elapsed() < s.connection_timeout
        {
            return Err(redis::RedisError::from((
                redis::ErrorKind::IoError,
                "Redis unreachable: the connect tried under a second ago failed (tried again after the connect timeout; \
                 check cluster.redis_url and that Redis is up)",
                why.clone(),
            )));
        }
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(s.connection_timeout)
            .set_response_timeout(s.response_timeout)
            .set_number_of_retries(s.reconnect_retries)
            .set_factor(50)
            .set_max_delay(500)
            // The redis crate leaves Nagle's algorithm on: commands of
            // concurrent callers multiplexed on this one socket would
            // wait behind an unacknowledged write.
            .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
        match ConnectionManager::new_with_config(self.client.clone(), cfg).await {
            Ok(m) => {
                *last_failure = None;
                Ok(self.manager.get_or_init(|| async { m }).await.clone())
            }
            Err(e) => {
                *last_failure = Some((Instant::now(), e.to_string()));
                Err(e)
            }
        }
    }
}

impl RedisConn {
    /// For a `rediss://` URL: connects once, and answers the TLS error if
    /// the handshake failed on a certificate (a wrong CA, a host name not in
    /// the certificate). Any other failure (Redis down) is no answer here:
    /// the connection is retried on use, as for plain Redis.
    pub async fn check_tls(&self) -> Result<(), String> {
        if !self.settings.url.starts_with("rediss://") {
            return Ok(());
        }
        match self.get().await {
            Err(e) => crate::security::tls::tls_cause(&e).map_or(Ok(()), Err),
            Ok(_) => Ok(()),
        }
    }
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    crate::security::redact(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_password() {
        assert_eq!(redact("redis://:secret@redis:6379"), "redis://:***@redis:6379");
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
    }
}
