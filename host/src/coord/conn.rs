//! One shared, self-healing Redis connection.
//!
//! [`RedisConn`] makes its connection lazily: a node whose Redis is down at
//! start still starts, and the first call after Redis comes up connects.
//! Bounded connect and response timeouts make a dead or unreachable Redis
//! fail fast, so dispatch can fail open instead of hanging. What it connects
//! to is what `cluster.redis_url` names ([`RedisTarget`]):
//!
//! - one server: redis' `ConnectionManager`, one multiplexed connection
//!   that reconnects after an I/O error;
//! - a master Redis Sentinel watches: the Sentinels are asked for the
//!   master's address, and asked again when the master stops answering or
//!   answers as a read-only replica (it failed over), so the node follows
//!   the failover instead of reconnecting to the old address;
//! - a Redis Cluster: redis' cluster client, which follows slot moves and
//!   failovers; every key of one namespace must share a hash slot (see
//!   [`crate::settings::redis_url::hash_tag`]).
//!
//! A connect that fails fails for every caller that waited on it: the
//! callers that arrive while it runs share its outcome, and for one connect
//! timeout after it failed (a tenth of one behind Sentinel, where a failed
//! connect means a failover under way) every caller is answered at once, instead of
//! each trying again in turn (with Redis unreachable, the hundredth of a
//! hundred concurrent dispatches would otherwise wait a hundred timeouts).
//!
//! `rediss://` is TLS (rustls), verified against the system's roots or, with
//! [`RedisSettings::ca_file`], against the CA certificates of that file.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use crate::settings::redis_url::RedisTarget;

/// How to reach Redis.
#[derive(Debug, Clone)]
pub struct RedisSettings {
    /// `redis://[:password@]host:port[/db]`, `rediss://…` for TLS,
    /// `redis+sentinel://…` or `redis+cluster://…` ([`RedisTarget`]).
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
    #[error("invalid Redis URL {url:?}: it {reason}")]
    Target { url: String, reason: String },
    #[error("cannot read `cluster.redis_ca_file` = {}: {source}; point it at the PEM file of the CA that signed Redis' certificate", .path.display())]
    CaFile { path: PathBuf, source: std::io::Error },
}

/// How to reach a connection: a client of one server, the Sentinels that
/// name the master, or a Redis Cluster's client.
enum Source {
    Single(redis::Client),
    /// Asked on every (re)connect; behind a lock because asking mutates it.
    Sentinel {
        /// Asks the Sentinels and connects to the master they name.
        client: tokio::sync::Mutex<redis::sentinel::SentinelClient>,
        /// What is asked of whom (`master `m` from h:p, h:p`), for errors.
        asked: String,
    },
    Cluster(redis::cluster::ClusterClient),
}

/// Cheap to clone; every clone shares the one connection.
#[derive(Clone)]
pub struct RedisConn {
    source: Arc<Source>,
    settings: Arc<RedisSettings>,
    /// The live connection and the number of the connect that made it (a
    /// Sentinel connection that failed over is forgotten by number, so a
    /// late error of the old one never drops its successor).
    current: Arc<std::sync::Mutex<Option<(u64, Conn)>>>,
    /// Connects made so far: the next one's number.
    connects: Arc<AtomicU64>,
    /// Held while a connect runs; the last one's failure, and when.
    connecting: Arc<tokio::sync::Mutex<Option<(Instant, String)>>>,
}

impl std::fmt::Debug for RedisConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisConn").field("connected", &self.connected().is_some()).finish()
    }
}

impl RedisConn {
    /// Parses the URL; connects on first use.
    pub fn new(settings: RedisSettings) -> Result<Self, ConnError> {
        let bad_url = |source| ConnError::Url { url: crate::redact::redact(&settings.url), source };
        let target = RedisTarget::parse(&settings.url)
            .map_err(|reason| ConnError::Target { url: crate::redact::redact(&settings.url), reason })?;
        let source = match target {
            RedisTarget::Single(url) => Source::Single(match &settings.ca_file {
                Some(path) => {
                    let root_cert = std::fs::read(path).map_err(|source| ConnError::CaFile { path: path.clone(), source })?;
                    let certificates = redis::TlsCertificates { client_tls: None, root_cert: Some(root_cert) };
                    redis::Client::build_with_tls(url.as_str(), certificates).map_err(bad_url)?
                }
                None => redis::Client::open(url.as_str()).map_err(bad_url)?,
            }),
            RedisTarget::Sentinel { sentinels, master, node } => {
                let addresses: Vec<&str> = sentinels.iter().map(|s| s.trim_start_matches("redis://")).collect();
                let asked = format!("master `{master}` from the Sentinels at {}", addresses.join(", "));
                let node = redis::IntoConnectionInfo::into_connection_info(node.as_str()).map_err(bad_url)?;
                let info =
                    redis::sentinel::SentinelNodeConnectionInfo { tls_mode: None, redis_connection_info: Some(node.redis) };
                let client = redis::sentinel::SentinelClient::build(
                    sentinels,
                    master,
                    Some(info),
                    redis::sentinel::SentinelServerType::Master,
                )
                .map_err(bad_url)?;
                Source::Sentinel { client: tokio::sync::Mutex::new(client), asked }
            }
            RedisTarget::Cluster(seeds) => Source::Cluster(
                redis::cluster::ClusterClient::builder(seeds)
                    .connection_timeout(settings.connection_timeout)
                    .response_timeout(settings.response_timeout)
                    // A moved slot or a failed-over master is retried a
                    // few times inside the client; past that the caller's
                    // own retry (and fail-open) decides.
                    .retries(settings.reconnect_retries.max(2) as u32)
                    .build()
                    .map_err(bad_url)?,
            ),
        };
        Ok(RedisConn {
            source: Arc::new(source),
            settings: Arc::new(settings),
            current: Arc::default(),
            connects: Arc::default(),
            connecting: Arc::default(),
        })
    }

    /// Shorthand for [`RedisConn::new`] with default timeouts.
    pub fn open(url: &str) -> Result<Self, ConnError> {
        Self::new(RedisSettings::new(url))
    }

    pub fn settings(&self) -> &RedisSettings {
        &self.settings
    }

    /// Whether this is a Redis Cluster, where every key one script touches
    /// must share a hash slot.
    pub fn is_cluster(&self) -> bool {
        matches!(*self.source, Source::Cluster(_))
    }

    fn connected(&self) -> Option<Conn> {
        self.current.lock().unwrap_or_else(|p| p.into_inner()).as_ref().map(|(_, c)| c.clone())
    }

    /// The shared connection, connecting first if needed. Fails fast
    /// (within the connect timeout and retries) when Redis is down, and at
    /// once for one connect timeout after a connect failed.
    pub async fn get(&self) -> redis::RedisResult<Conn> {
        if let Some(c) = self.connected() {
            return Ok(c);
        }
        let mut last_failure = self.connecting.lock().await;
        if let Some(c) = self.connected() {
            return Ok(c);
        }
        if let Some((at, why)) = last_failure.as_ref()
            && at.elapsed() < self.hold_after_failure()
        {
            return Err(redis::RedisError::from((
                redis::ErrorKind::IoError,
                "Redis unreachable: the connect tried under a second ago failed (tried again after the connect timeout; \
                 check cluster.redis_url and that Redis is up)",
                why.clone(),
            )));
        }
        match self.connect().await {
            Ok(link) => {
                *last_failure = None;
                let number = self.connects.fetch_add(1, Ordering::Relaxed);
                let conn = Conn { link, forget: matches!(*self.source, Source::Sentinel { .. }).then(|| self.forgetter(number)) };
                *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some((number, conn.clone()));
                Ok(conn)
            }
            Err(e) => {
                *last_failure = Some((Instant::now(), e.to_string()));
                Err(e)
            }
        }
    }

    /// How long callers are answered with the last connect's failure
    /// instead of connecting again: a connect timeout, so that a dead Redis
    /// is not dialled by every caller in turn. Behind Sentinel a failed
    /// connect is most likely a failover under way, and asking again costs
    /// one Sentinel round trip: a tenth of that, so the node reaches the new
    /// master soon after the Sentinels name it.
    fn hold_after_failure(&self) -> Duration {
        match *self.source {
            Source::Sentinel { .. } => self.settings.connection_timeout / 10,
            _ => self.settings.connection_timeout,
        }
    }

    async fn connect(&self) -> redis::RedisResult<Link> {
        let s = &self.settings;
        let manager = |client: redis::Client| {
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
            ConnectionManager::new_with_config(client, cfg)
        };
        match &*self.source {
            Source::Single(client) => Ok(Link::Manager(manager(client.clone()).await?)),
            Source::Sentinel { client, asked } => {
                // Asking walks the Sentinels in turn, each without a timeout
                // of its own: one bound for the whole question.
                let ask = async { client.lock().await.async_get_client().await };
                let client = tokio::time::timeout(s.connection_timeout * 2, ask).await.map_err(|_| {
                    redis::RedisError::from((
                        redis::ErrorKind::IoError,
                        "no Sentinel named the master in time",
                        format!(
                            "asked for the {asked} for {:?}; check that they run and monitor that name (cluster.redis_url)",
                            s.connection_timeout * 2
                        ),
                    ))
                })??;
                Ok(Link::Manager(manager(client).await?))
            }
            Source::Cluster(client) => Ok(Link::Cluster(client.get_async_connection().await?)),
        }
    }

    /// Drops connection `number` if it is still the current one: the next
    /// [`RedisConn::get`] asks the Sentinels for the master again.
    fn forgetter(&self, number: u64) -> Forget {
        let current = Arc::downgrade(&self.current);
        Forget(Arc::new(move || {
            if let Some(current) = current.upgrade() {
                let mut current = current.lock().unwrap_or_else(|p| p.into_inner());
                if current.as_ref().is_some_and(|(n, _)| *n == number) {
                    *current = None;
                }
            }
        }))
    }
}

/// Forgets the connection it was made for.
#[derive(Clone)]
struct Forget(Arc<dyn Fn() + Send + Sync>);

#[derive(Clone)]
enum Link {
    Manager(ConnectionManager),
    Cluster(redis::cluster_async::ClusterConnection),
}

/// One handle on the shared connection, to one server, a Sentinel-watched
/// master or a Redis Cluster; commands and pipelines run on it as on any
/// redis connection.
#[derive(Clone)]
pub struct Conn {
    link: Link,
    /// For a master Sentinel named: forgets this connection when an error
    /// says the master may have moved (its address refuses or drops us,
    /// or it became a read-only replica), so the next caller asks again.
    forget: Option<Forget>,
}

/// Whether `e` says the master this connection reached may no longer be the
/// master: the connection was refused, dropped or timed out, or a master
/// turned replica answered `READONLY`. A refusal by the script or the data
/// (a wrong type, a script error) says nothing of where the master is.
fn master_may_have_moved(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.kind() == redis::ErrorKind::ReadOnly
}

impl Conn {
    fn noted<T>(&self, r: redis::RedisResult<T>) -> redis::RedisResult<T> {
        if let (Err(e), Some(forget)) = (&r, &self.forget)
            && master_may_have_moved(e)
        {
            (forget.0)();
        }
        r
    }

    /// Every key that starts with `prefix` (glob metacharacters in it
    /// escaped), unsorted and possibly repeated, as `SCAN` returns them.
    /// On a Redis Cluster the scan runs on the master of the prefix's hash
    /// slot: a namespace with a hash tag keeps all its keys there.
    pub async fn scan_prefix(&mut self, prefix: &str) -> redis::RedisResult<Vec<String>> {
        let pattern = super::keys::Keys::scan_pattern(prefix);
        let route = match &mut self.link {
            Link::Manager(_) => None,
            Link::Cluster(c) => {
                let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(prefix).query_async(c).await?;
                Some(RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master))))
            }
        };
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000);
            let (next, batch): (u64, Vec<String>) = match (&mut self.link, &route) {
                (Link::Cluster(c), Some(route)) => {
                    let value = c.route_command(&scan, route.clone()).await;
                    redis::from_redis_value(&self.noted(value)?)?
                }
                _ => scan.query_async(self).await?,
            };
            keys.extend(batch);
            if next == 0 {
                return Ok(keys);
            }
            cursor = next;
        }
    }
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, redis::Value> {
        Box::pin(async move {
            let r = match &mut self.link {
                Link::Manager(m) => m.req_packed_command(cmd).await,
                Link::Cluster(c) => c.req_packed_command(cmd).await,
            };
            self.noted(r)
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        Box::pin(async move {
            let r = match &mut self.link {
                Link::Manager(m) => m.req_packed_commands(cmd, offset, count).await,
                Link::Cluster(c) => c.req_packed_commands(cmd, offset, count).await,
            };
            self.noted(r)
        })
    }

    fn get_db(&self) -> i64 {
        match &self.link {
            Link::Manager(m) => m.get_db(),
            Link::Cluster(c) => c.get_db(),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_errors_of_the_link_or_a_demoted_master_forget_the_connection() {
        use std::io::{Error, ErrorKind as Io};
        let io = |kind| redis::RedisError::from(Error::new(kind, "test"));
        let answer = |kind| redis::RedisError::from((kind, "test"));
        let cases = [
            (io(Io::ConnectionRefused), true),
            (io(Io::ConnectionReset), true),
            (io(Io::BrokenPipe), true),
            (io(Io::TimedOut), true),
            (answer(redis::ErrorKind::ReadOnly), true),
            // The data or the script refused: the master is where it was.
            (answer(redis::ErrorKind::TypeError), false),
            (answer(redis::ErrorKind::ResponseError), false),
            (answer(redis::ErrorKind::NoScriptError), false),
            (answer(redis::ErrorKind::AuthenticationFailed), false),
        ];
        for (e, moved) in cases {
            assert_eq!(master_may_have_moved(&e), moved, "{e:?}");
        }
    }
}
