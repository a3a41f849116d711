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

use tokio::net::TcpListener;

use crate::api;
use crate::node::control::Control;
use crate::node::stored::{self, Provisioned};
use crate::node::{Node, NodeError};
use crate::security::tls::TlsListener;
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

    let control = Control::new(settings);
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
    let grpc = api::grpc::router(control.clone(), tls.as_ref().and_then(|t| t.peer_ca()));
    let http = api::http::router(control.clone());
    let grpc_task = match &tls {
        Some(t) => {
            serve_grpc(grpc, TlsListener::new(api_listener, t.grpc()).map_err(listen_error(api_addr))?.into_stream(), &control)
        }
        None => serve_grpc(grpc, nodelay_incoming(api_listener), &control),
    };
    let http_task = match &tls {
        Some(t) => serve_http(http, TlsListener::new(metrics_listener, t.http()).map_err(listen_error(metrics_addr))?, &control),
        None => {
            use axum::serve::ListenerExt;
            let listener = metrics_listener.tap_io(|tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!(error = %e, "cannot set TCP_NODELAY");
                }
            });
            serve_http(http, listener, &control)
        }
    };
    control.keep(grpc_task);
    control.keep(http_task);
    Ok(Running { control, api_addr, metrics_addr })
}

fn listen_error(addr: SocketAddr) -> impl FnOnce(std::io::Error) -> NodeError {
    move |source| NodeError::Listen { addr: addr.to_string(), what: "TLS listener", source }
}

/// The gRPC server on `incoming` (plain or TLS connections) until the stop.
fn serve_grpc<S, IO>(routes: tonic::service::Routes, incoming: S, control: &Control) -> tokio::task::JoinHandle<()>
where
    S: tokio_stream::Stream<Item = std::io::Result<IO>> + Send + 'static,
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + tonic::transport::server::Connected + Unpin + Send + 'static,
{
    let mut stop = control.shutdown_signal();
    tokio::spawn(async move {
        let result = tonic::transport::Server::builder()
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

/// The HTTP server on `listener` (plain or TLS) until the stop.
fn serve_http<L>(router: axum::Router, listener: L, control: &Control) -> tokio::task::JoinHandle<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let mut stop = control.shutdown_signal();
    tokio::spawn(async move {
        let result = axum::serve(listener, router)
            .with_graceful_shutdown(async move {
                let _ = stop.changed().await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "HTTP server failed");
        }
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
            node.store.close().await;
            tracing::info!(name = %node.name, "stopped");
        }
    }
}

/// The accepted connections of `listener`, each with TCP_NODELAY set.
///
/// tonic applies its own `tcp_nodelay` only to sockets it binds itself; an
/// accepted socket left with Nagle's algorithm holds a small response back
/// until the client's delayed ACK, about 40 ms, on every other call.
pub fn nodelay_incoming(listener: TcpListener) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|accepted| {
        let stream = accepted?;
        stream.set_nodelay(true)?;
        Ok(stream)
    })
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it gracefully. SIGHUP
/// reloads the policy components.
pub async fn run(settings: Settings) -> Result<(), NodeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let running = start(settings).await?;
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
                running.stop().await;
                return Err(e);
            }
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hup.recv() => {
                if let Some(node) = running.control.node()
                    && let Err(e) = node.reload(false).await {
                        tracing::error!(error = %e, "policy reload failed; the previous policies stay in use");
                    }
            }
        }
    }
    tracing::info!("stop requested; draining");
    running.stop().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn accepted_sockets_have_nodelay() {
        use tokio_stream::StreamExt;
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut incoming = Box::pin(nodelay_incoming(listener));
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let accepted = incoming.next().await.unwrap().unwrap();
        assert!(accepted.nodelay().unwrap(), "an accepted socket must not run Nagle's algorithm");
    }
}
