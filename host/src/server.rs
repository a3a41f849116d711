//! Running a node: listeners, provisioning, the round loop, and the
//! graceful stop.
//!
//! The listeners come up first. A cluster-mode node whose data dir holds no
//! cluster config and whose settings name none is UNPROVISIONED: it serves
//! only the admin plane until `Bootstrap` gives it its id and first config.
//!
//! Shutdown follows mini-redis: one `watch` signal tells every task to
//! stop, and `stop` returns only once each has finished. SIGTERM or Ctrl-C:
//! the node turns `leaving` (`/readyz` fails, new appends are refused as not
//! applied), hands its shards over, deregisters; then the listeners stop and
//! in-flight requests complete.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::api;
use crate::node::control::Control;
use crate::node::stored::{self, Provisioned};
use crate::node::{Node, NodeError};
use crate::security::listen::{Bounds, Incoming};
use crate::settings::Settings;
use crate::topology;

/// A started node (or an unprovisioned one) with its listeners bound.
pub struct Running {
    pub control: Arc<Control>,
    pub api_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
}

async fn bind(addr: &str, what: &'static str) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr).await.map_err(|source| NodeError::Listen { addr: addr.to_string(), what, source })
}

/// The config a cluster-mode node starts with: its stored copy, else the
/// seed named by `[cluster] config_file` (stored from then on), else none.
fn provisioned(settings: &Settings) -> Result<Option<Provisioned>, NodeError> {
    if !settings.cluster.enabled {
        return Ok(None);
    }
    if let Some(p) = stored::load(&settings.node.data_dir)? {
        return Ok(Some(p));
    }
    let Some(seed) = &settings.cluster.config_file else {
        return Ok(None);
    };
    let bad = |reason: String| NodeError::ClusterConfig { path: seed.display().to_string(), reason };
    let config = topology::file::load(seed).map_err(|e| bad(e.to_string()))?;
    let violations = topology::validate(&config);
    if !violations.is_empty() {
        return Err(bad(violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")));
    }
    stored::save(&settings.node.data_dir, &config, None)?;
    Ok(Some(Provisioned { config, node_id: None }))
}

/// Reads the token files, registers every secret with the redaction, and
/// warns of a listener `api.insecure_listen` leaves unguarded.
fn secure(mut settings: Settings) -> Result<Settings, NodeError> {
    crate::security::auth::read_token_files(&mut settings)?;
    for url in [&settings.database.url, &settings.cluster.redis_url].into_iter().flatten() {
        crate::security::redact::register_url_password(url);
    }
    // Logged as given: the log writer masks the passwords (security::redact),
    // which the cluster's secrets test proves on this very line.
    tracing::info!(
        database = %settings.database_url(),
        redis = settings.cluster.redis_url.as_deref().unwrap_or("(none: standalone)"),
        "stores"
    );
    for open in crate::security::exposure::unguarded(&settings).iter().filter(|_| settings.api.insecure_listen) {
        tracing::warn!(
            key = open.key,
            listen = %open.listen,
            missing = %open.missing.join(", "),
            "INSECURE: api.insecure_listen = true lets other hosts reach this listener without a token; \
             anyone who can connect can use these planes (docs/security.md)"
        );
    }
    Ok(settings)
}

/// Binds the listeners and starts the node, or waits unprovisioned.
pub async fn start(settings: Settings) -> Result<Running, NodeError> {
    let settings = secure(settings)?;
    // Read before anything binds or connects: a bad certificate file is a
    // settings mistake, reported as one.
    let tls = crate::security::tls::NodeTls::load(&settings.tls)?;
    // Bind first: a port in use is reported before anything registers.
    let api_listener = bind(&settings.api.listen, "[api] listen, gRPC").await?;
    let metrics_listener = bind(&settings.metrics.listen, "[metrics] listen, HTTP").await?;
    let api_addr = api_listener.local_addr().expect("bound");
    let metrics_addr = metrics_listener.local_addr().expect("bound");
    let provisioned = provisioned(&settings)?;
    let unprovisioned = settings.cluster.enabled && provisioned.is_none();
    let node = if unprovisioned { None } else { Some(Node::start(settings.clone(), provisioned).await?) };

    let control = Control::new(settings, tls.clone());
    // The node is in place before the first request: a restarting node must
    // never look unprovisioned (and accept a bootstrap) for a moment.
    match node {
        Some(node) => {
            let t = &control.settings.tls;
            tracing::info!(
                %api_addr,
                %metrics_addr,
                name = %node.name,
                tls = t.enabled(),
                client_certificates = t.requires_client_certificates(),
                "node serving"
            );
            control.activate(node).await;
        }
        None => tracing::warn!(
            %api_addr,
            "UNPROVISIONED: no cluster config in the data dir and no [cluster] config_file; serving the admin plane \
             only until `chitin cluster bootstrap-node` gives this node its id and config"
        ),
    }
    let grpc = api::grpc::router(control.clone());
    let http = api::http::router(control.clone());
    let limits = &control.settings.limits;
    let (api_bounds, metrics_bounds) =
        (Bounds::api(limits, control.counts.api.clone()), Bounds::metrics(limits, control.counts.metrics.clone()));
    let grpc_task = match &tls {
        Some(t) => serve_grpc(grpc, Incoming::tls(api_listener, api_bounds, t.grpc()).into_stream(), &control),
        None => serve_grpc(grpc, Incoming::plain(api_listener, api_bounds).into_stream(), &control),
    };
    let http_task = match &tls {
        Some(t) => serve_http(http, Incoming::tls(metrics_listener, metrics_bounds, t.http()), &control),
        None => serve_http(http, Incoming::plain(metrics_listener, metrics_bounds), &control),
    };
    control.keep(grpc_task);
    control.keep(http_task);
    Ok(Running { control, api_addr, metrics_addr })
}

/// The gRPC server on `incoming` (plain or TLS connections) until the stop,
/// with the per-connection and per-call limits of `[limits]`.
fn serve_grpc<S, IO>(routes: tonic::service::Routes, incoming: S, control: &Control) -> tokio::task::JoinHandle<()>
where
    S: tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
{
    let limits = &control.settings.limits;
    // Pings at a third of the idle time: a live client answers before the
    // idle deadline, and a dead one is noticed by the ping's own timeout.
    let ping = limits.idle_timeout() / 3;
    let mut server = tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_streams_per_connection)
        .http2_keepalive_interval(Some(ping))
        .http2_keepalive_timeout(Some(ping.min(Duration::from_secs(20))));
    let mut stop = control.shutdown_signal();
    tokio::spawn(async move {
        let result = server
            .add_routes(routes)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop.changed().await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "gRPC server failed");
        }
    })
}

/// The HTTP/1.1 server on `incoming` (plain or TLS connections) until the
/// stop, then until every open connection has finished its request. A
/// request's headers must arrive within the handshake deadline (the request
/// timeout is the router's: [`api::http::router`]).
fn serve_http<IO>(router: axum::Router, mut incoming: Incoming<IO>, control: &Control) -> tokio::task::JoinHandle<()>
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let limits = &control.settings.limits;
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(limits.handshake_timeout());
    let service = hyper_util::service::TowerToHyperService::new(router);
    let mut stop = control.shutdown_signal();
    tokio::spawn(async move {
        let graceful = hyper_util::server::graceful::GracefulShutdown::new();
        loop {
            let io = tokio::select! {
                _ = stop.changed() => break,
                io = incoming.next() => match io {
                    Some(io) => io,
                    None => break,
                },
            };
            let conn = graceful.watch(http.serve_connection(hyper_util::rt::TokioIo::new(io), service.clone()));
            tokio::spawn(async move {
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "HTTP connection ended with an error");
                }
            });
        }
        drop(incoming);
        graceful.shutdown().await;
    })
}

impl Running {
    /// Graceful stop: drain and deregister, then stop the listeners and wait
    /// for every task.
    pub async fn stop(self) {
        let node = self.control.node();
        if let Some(node) = &node {
            node.stop().await;
        }
        self.control.shutdown();
        for task in self.control.take_tasks() {
            let _ = task.await;
        }
        if let Some(node) = node {
            node.close_store().await;
            tracing::info!(name = %node.name, "stopped");
        }
    }
}

/// Tells the service manager how the process stands, when it asked to be
/// told (`Type=notify`: `$NOTIFY_SOCKET`, a datagram socket's path or, with
/// a leading `@`, its abstract name). Without the variable it does nothing;
/// a failed send is logged and costs nothing else.
fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let sent = (|| -> std::io::Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let sender = std::os::unix::net::UnixDatagram::unbound()?;
        match socket.as_bytes().strip_prefix(b"@") {
            Some(name) => {
                use std::os::linux::net::SocketAddrExt;
                let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                sender.send_to_addr(state.as_bytes(), &address)?
            }
            None => sender.send_to(state.as_bytes(), &socket)?,
        };
        Ok(())
    })();
    if let Err(e) = sent {
        tracing::warn!(error = %e, socket = ?socket, "cannot tell the service manager {state:?}");
    }
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it gracefully. SIGHUP
/// reads the token files and the certificate again and reloads the policy
/// components. Under `Type=notify` the service manager
/// hears READY once both listeners answer, RELOADING around a reload and
/// STOPPING when the drain starts.
pub async fn run(settings: Settings) -> Result<(), NodeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let running = start(settings).await?;
    let serving = match running.control.node() {
        Some(node) => format!("serving as {} on {}", node.name, running.api_addr),
        None => format!("UNPROVISIONED on {}: waiting for bootstrap", running.api_addr),
    };
    notify(&format!("READY=1\nSTATUS={serving}\nMAINPID={}", std::process::id()));
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    let control = running.control.clone();
    let fatal = async move {
        // An unprovisioned node gets its node at bootstrap.
        loop {
            if let Some(node) = control.node() {
                return node.fatal().await;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    };
    tokio::pin!(fatal);
    loop {
        tokio::select! {
            e = &mut fatal => {
                tracing::error!(error = %e, "stopping");
                notify(&format!("STOPPING=1\nSTATUS=stopping: {e}"));
                running.stop().await;
                return Err(e);
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hup.recv() => {
                notify("RELOADING=1\nSTATUS=reloading the token files, the certificate and the policy components");
                match running.control.reload_credentials() {
                    Ok(counts) => tracing::info!(accepted = %counts, "token files read again"),
                    Err(e) => tracing::error!(error = %e, "token reload failed; the previous tokens stay in use"),
                }
                match running.control.reload_certificate() {
                    Ok(true) => tracing::info!("certificate and key read again, with the CA bundles; new connections get them"),
                    Ok(false) => {}
                    Err(e) => tracing::error!(error = %e, "certificate reload failed; the previous certificate stays in use"),
                }
                if let Some(node) = running.control.node()
                    && let Err(e) = node.reload(false).await {
                        tracing::error!(error = %e, "policy reload failed; the previous policies stay in use");
                    }
                notify(&format!("READY=1\nSTATUS={serving}"));
            }
        }
    }
    tracing::info!("stop requested; draining");
    notify("STOPPING=1\nSTATUS=draining: handing every shard over, then deregistering");
    running.stop().await;
    Ok(())
}
