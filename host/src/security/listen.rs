//! The node's two listeners, bounded (`[limits]`): at most so many
//! connections open at once (one more is closed as soon as it is accepted),
//! a deadline for a new connection's first bytes, and an idle deadline after
//! them. TLS handshakes run each in a task of its own, so a silent client
//! holds up no one; every accepted socket has TCP_NODELAY.
//!
//! What the deadlines cover, with the servers' own limits (`server.rs`):
//! - a connection that sends nothing, or fewer than the HTTP/2 preface's
//!   24 bytes, is closed at `handshake_timeout_secs` ([`Conn`]);
//! - a TLS handshake that has not finished by then is dropped;
//! - HTTP/1 headers that never end: hyper's header-read timeout, set to the
//!   same `handshake_timeout_secs`;
//! - a connection from which nothing was read for `idle_timeout_secs` is
//!   closed ([`Conn`]); the gRPC server pings quiet connections, so a live
//!   client answers and stays.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::tls::LiveConfig;
use crate::settings::LimitSettings;

/// Bytes a connection owes before its handshake deadline ends: the HTTP/2
/// client preface is 24 bytes, a TLS ClientHello or an HTTP/1 request line
/// with its first header longer.
const EARLY_BYTES: usize = 24;

/// How often a listener at its limit says so in the log.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// One listener's connection counts, for `/metrics`.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections open now.
    open: AtomicUsize,
    /// Connections closed at accept because the listener was at its limit.
    refused: AtomicU64,
    /// Connections closed by a deadline (handshake or idle).
    timed_out: AtomicU64,
}

impl ListenerStats {
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Connections refused at the limit since start.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// Connections closed by a deadline since start.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }
}

/// What the two listeners and the planes' guards counted since start.
#[derive(Debug, Default)]
pub struct Counts {
    /// The gRPC listener's.
    pub api: Arc<ListenerStats>,
    /// The HTTP listener's.
    pub metrics: Arc<ListenerStats>,
    /// Calls refused for a missing or wrong credential, on any plane.
    pub unauthenticated: Arc<AtomicU64>,
}

/// What one listener admits: its name for the log and metrics, its limit
/// and deadlines, its counts.
#[derive(Debug)]
pub(crate) struct Bounds {
    /// `api` or `metrics`, as the log and the metrics' label say.
    name: &'static str,
    /// The settings key of the limit, for the log line that names it.
    key: &'static str,
    max_connections: usize,
    handshake: Duration,
    idle: Duration,
    stats: Arc<ListenerStats>,
    /// A refusal log line at most every [`REFUSAL_LOG_EVERY`].
    refusal_log: Throttle,
}

impl Bounds {
    /// The gRPC listener's bounds.
    pub(crate) fn api(limits: &LimitSettings, stats: Arc<ListenerStats>) -> Bounds {
        Bounds::new("api", "[limits] api_max_connections", limits.api_max_connections, limits, stats)
    }

    /// The HTTP listener's bounds.
    pub(crate) fn metrics(limits: &LimitSettings, stats: Arc<ListenerStats>) -> Bounds {
        Bounds::new("metrics", "[limits] metrics_max_connections", limits.metrics_max_connections, limits, stats)
    }

    fn new(
        name: &'static str,
        key: &'static str,
        max_connections: usize,
        limits: &LimitSettings,
        stats: Arc<ListenerStats>,
    ) -> Bounds {
        Bounds {
            name,
            key,
            max_connections,
            handshake: limits.handshake_timeout(),
            idle: limits.idle_timeout(),
            stats,
            refusal_log: Throttle::new(REFUSAL_LOG_EVERY),
        }
    }

    /// `tcp` as a bounded connection, or `None` (and `tcp` closed) when the
    /// listener is at its limit.
    fn admit(self: &Arc<Bounds>, tcp: TcpStream) -> Option<Conn> {
        let admitted =
            self.stats.open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max_connections).then_some(n + 1));
        if admitted.is_err() {
            self.stats.refused.fetch_add(1, Ordering::Relaxed);
            if let Some(since) = self.refusal_log.due() {
                tracing::warn!(
                    listener = self.name,
                    limit = self.max_connections,
                    refused = since,
                    "connections refused: the listener is at its limit of open connections ({}); \
                     raise it or find who holds them (chitin_connections_open)",
                    self.key
                );
            }
            return None;
        }
        // See `Incoming`: Nagle's algorithm would hold small answers back by
        // a delayed ACK, about 40 ms on every other call.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let now = Instant::now();
        Some(Conn {
            tcp,
            accepted: now,
            last_read: now,
            owed: EARLY_BYTES,
            deadline: Box::pin(tokio::time::sleep_until(now + self.handshake)),
            bounds: self.clone(),
        })
    }
}

/// Counts events and says when one may be logged: at most once per period,
/// with how many happened since the last line.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    pub(crate) fn new(every: Duration) -> Throttle {
        Throttle { every, state: Mutex::new((None, 0)) }
    }

    /// Counts one event; `Some(n)` when a line is due, `n` the events since
    /// the last line (this one included).
    pub(crate) fn due(&self) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 += 1;
        let now = Instant::now();
        if state.0.is_some_and(|last| now.duration_since(last) < self.every) {
            return None;
        }
        let n = state.1;
        *state = (Some(now), 0);
        Some(n)
    }
}

/// An accepted TCP connection within its listener's bounds: it counts as
/// open until dropped, and a read fails with `TimedOut` once the connection
/// has owed its first bytes past the handshake deadline, or has been quiet
/// past the idle deadline.
#[derive(Debug)]
pub(crate) struct Conn {
    tcp: TcpStream,
    accepted: Instant,
    last_read: Instant,
    /// Bytes still owed before the handshake deadline stops applying.
    owed: usize,
    /// Fires at the earliest moment a deadline could be due; checked, and
    /// moved on, lazily, so a read costs no timer update.
    deadline: Pin<Box<Sleep>>,
    bounds: Arc<Bounds>,
}

impl Conn {
    /// The socket, for a test of its options.
    #[cfg(test)]
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The moment this connection is closed unless it reads.
    fn due(&self) -> Instant {
        if self.owed > 0 { self.accepted + self.bounds.handshake } else { self.last_read + self.bounds.idle }
    }

    /// Whether a deadline passed (after registering the waker for the next).
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        loop {
            if self.deadline.as_mut().poll(cx).is_pending() {
                return false;
            }
            let due = self.due();
            if Instant::now() >= due {
                return true;
            }
            self.deadline.as_mut().reset(due);
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.bounds.stats.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl AsyncRead for Conn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                let n = buf.filled().len() - before;
                if n > 0 {
                    self.last_read = Instant::now();
                    self.owed = self.owed.saturating_sub(n);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending if self.expired(cx) => {
                self.bounds.stats.timed_out.fetch_add(1, Ordering::Relaxed);
                let what = if self.owed > 0 {
                    format!("no handshake within {:?} ([limits] handshake_timeout_secs)", self.bounds.handshake)
                } else {
                    format!("idle for {:?} ([limits] idle_timeout_secs)", self.bounds.idle)
                };
                tracing::debug!(listener = self.bounds.name, peer = ?self.tcp.peer_addr().ok(), "closing a connection: {what}");
                Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::TimedOut, what)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.tcp.connect_info()
    }
}

/// The admitted (and, under TLS, handshaken) connections of one listener.
///
/// The accept loop runs in a task of its own and ends when this is dropped
/// (the server stopped), closing the listening socket.
pub(crate) struct Incoming<IO> {
    ready: mpsc::Receiver<IO>,
}

impl Incoming<Conn> {
    /// Plain TCP connections of `listener` within `bounds`.
    pub(crate) fn plain(listener: TcpListener, bounds: Bounds) -> Incoming<Conn> {
        Incoming::start(listener, bounds, |conn| std::future::ready(Some(conn)))
    }
}

impl Incoming<TlsStream<Conn>> {
    /// TLS connections of `listener` within `bounds`, each handshaken with
    /// the config `config` gives when it arrives (a reload changes it for
    /// the next; the handshake bounded by the handshake deadline).
    pub(crate) fn tls(listener: TcpListener, bounds: Bounds, config: LiveConfig) -> Incoming<TlsStream<Conn>> {
        let limit = bounds.handshake;
        Incoming::start(listener, bounds, move |conn: Conn| {
            let acceptor = TlsAcceptor::from(config());
            async move {
                let peer = conn.tcp.peer_addr().ok();
                match tokio::time::timeout(limit, acceptor.accept(conn)).await {
                    Ok(Ok(tls)) => Some(tls),
                    // A plaintext client, a wrong or missing client
                    // certificate: the client sees the refusal; debug only,
                    // as scanners would fill the log.
                    Ok(Err(e)) => {
                        tracing::debug!(?peer, error = %e, "TLS handshake refused");
                        None
                    }
                    Err(_) => {
                        tracing::debug!(?peer, "TLS handshake timed out");
                        None
                    }
                }
            }
        })
    }
}

impl<IO: Send + 'static> Incoming<IO> {
    fn start<F, Fut>(listener: TcpListener, bounds: Bounds, handshake: F) -> Incoming<IO>
    where
        F: Fn(Conn) -> Fut + Send + 'static,
        Fut: Future<Output = Option<IO>> + Send + 'static,
    {
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(accept_loop(listener, Arc::new(bounds), tx, handshake));
        Incoming { ready }
    }

    /// The next connection; `None` once the accept loop ended.
    pub(crate) async fn next(&mut self) -> Option<IO> {
        self.ready.recv().await
    }

    /// The connections as the stream tonic's `serve_with_incoming` takes.
    pub(crate) fn into_stream(self) -> impl tokio_stream::Stream<Item = std::io::Result<IO>> {
        use tokio_stream::StreamExt;
        tokio_stream::wrappers::ReceiverStream::new(self.ready).map(Ok)
    }
}

async fn accept_loop<IO, F, Fut>(listener: TcpListener, bounds: Arc<Bounds>, ready: mpsc::Sender<IO>, handshake: F)
where
    IO: Send + 'static,
    F: Fn(Conn) -> Fut,
    Fut: Future<Output = Option<IO>> + Send + 'static,
{
    loop {
        let tcp = tokio::select! {
            _ = ready.closed() => return,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => tcp,
                Err(e) => {
                    // Out of file descriptors and the like: wait, as axum does.
                    tracing::debug!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some(conn) = bounds.admit(tcp) else { continue };
        let (accepted, ready) = (handshake(conn), ready.clone());
        tokio::spawn(async move {
            if let Some(io) = accepted.await {
                let _ = ready.send(io).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn limits(max: usize, handshake: f64, idle: f64) -> LimitSettings {
        LimitSettings {
            api_max_connections: max,
            handshake_timeout_secs: handshake,
            idle_timeout_secs: idle,
            ..LimitSettings::default()
        }
    }

    async fn listening(limits: &LimitSettings) -> (Incoming<Conn>, SocketAddr, Arc<ListenerStats>) {
        let tcp = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = tcp.local_addr().unwrap();
        let stats = Arc::new(ListenerStats::default());
        (Incoming::plain(tcp, Bounds::api(limits, stats.clone())), addr, stats)
    }

    /// Reads until the server closes the connection; the time it took.
    async fn closed_after(client: &mut TcpStream) -> Duration {
        let started = Instant::now();
        let mut buf = [0u8; 64];
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => return started.elapsed(),
                Ok(_) => {}
            }
        }
    }

    /// Runs what a server does with a connection: reads until it fails.
    fn serve(mut conn: Conn) -> tokio::task::JoinHandle<std::io::Error> {
        tokio::spawn(async move {
            let mut buf = [0u8; 64];
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) => return std::io::Error::other("eof"),
                    Ok(_) => {}
                    Err(e) => return e,
                }
            }
        })
    }

    #[tokio::test]
    async fn a_silent_connection_is_closed_at_the_handshake_deadline_and_a_quiet_one_at_the_idle_one() {
        let (mut incoming, addr, stats) = listening(&limits(8, 0.5, 1.5)).await;
        let started = Instant::now();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let server = serve(incoming.next().await.unwrap());
        closed_after(&mut silent).await;
        let waited = started.elapsed();
        let e = server.await.unwrap();
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(e.to_string().contains("handshake_timeout_secs"), "{e}");
        assert!(waited >= Duration::from_millis(500) && waited < Duration::from_secs(10), "{waited:?}");

        // The preface's worth of bytes, then a word within the idle time,
        // then quiet: the idle deadline counts from the last read.
        let mut talker = TcpStream::connect(addr).await.unwrap();
        let server = serve(incoming.next().await.unwrap());
        talker.write_all(&[b'x'; EARLY_BYTES]).await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        talker.write_all(b"still here").await.unwrap();
        let waited = closed_after(&mut talker).await;
        let e = server.await.unwrap();
        assert!(e.to_string().contains("idle_timeout_secs"), "{e}");
        assert!(waited >= Duration::from_millis(1400) && waited < Duration::from_secs(10), "{waited:?}");
        assert_eq!(stats.timed_out(), 2);
        assert_eq!(stats.open(), 0, "a closed connection no longer counts");
    }

    #[tokio::test]
    async fn one_connection_over_the_limit_is_closed_at_once_and_counted() {
        let (mut incoming, addr, stats) = listening(&limits(2, 60.0, 60.0)).await;
        let _a = TcpStream::connect(addr).await.unwrap();
        let _b = TcpStream::connect(addr).await.unwrap();
        let (a, b) = (incoming.next().await.unwrap(), incoming.next().await.unwrap());
        let mut third = TcpStream::connect(addr).await.unwrap();
        let waited = closed_after(&mut third).await;
        assert!(waited < Duration::from_secs(5), "the third connection was held {waited:?}");
        assert_eq!((stats.open(), stats.refused()), (2, 1));
        drop((a, b));
        // A place freed is taken again.
        let _c = TcpStream::connect(addr).await.unwrap();
        let _c = incoming.next().await.unwrap();
        assert_eq!((stats.open(), stats.refused()), (1, 1));
    }

    #[test]
    fn a_throttle_lets_one_line_through_per_period_with_the_count() {
        let t = Throttle::new(Duration::from_secs(3600));
        assert_eq!(t.due(), Some(1));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        let t = Throttle::new(Duration::ZERO);
        assert_eq!((t.due(), t.due()), (Some(1), Some(1)));
    }
}
