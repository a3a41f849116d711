//! Running a node: listeners, the round loop, and the graceful stop.
//!
//! Shutdown follows mini-redis: one `watch` signal tells every task to
//! stop, and the function returns only once each has finished. SIGTERM or
//! Ctrl-C: the node turns `leaving` (`/readyz` fails, new appends are
//! refused as not applied), hands its shards over, deregisters; then the
//! listeners stop and in-flight requests complete.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api;
use crate::node::{Node, NodeError};
use crate::settings::Settings;

/// A started node with its listeners bound.
pub struct Running {
    pub node: Arc<Node>,
    pub api_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

async fn bind(addr: &str, what: &'static str) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr).await.map_err(|source| NodeError::Listen {
        addr: addr.to_string(),
        what,
        source,
    })
}

/// Starts the node: checks, registration, listeners, rounds.
pub async fn start(settings: Settings) -> Result<Running, NodeError> {
    // Bind first: a port in use is reported before anything registers.
    let api_listener = bind(&settings.api.listen, "[api] listen, gRPC").await?;
    let metrics_listener = bind(&settings.metrics.listen, "[metrics] listen, HTTP").await?;
    let node = Node::start(settings).await?;
    let (shutdown, _) = watch::channel(false);
    let api_addr = api_listener.local_addr().expect("bound");
    let metrics_addr = metrics_listener.local_addr().expect("bound");

    let mut tasks = Vec::new();
    let grpc = api::grpc::router(node.clone());
    let mut stop = shutdown.subscribe();
    tasks.push(tokio::spawn(async move {
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(api_listener);
        let result = tonic::transport::Server::builder()
            .add_routes(grpc)
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop.changed().await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "gRPC server failed");
        }
    }));
    let http = api::http::router(node.clone());
    let mut stop = shutdown.subscribe();
    tasks.push(tokio::spawn(async move {
        let result = axum::serve(metrics_listener, http)
            .with_graceful_shutdown(async move {
                let _ = stop.changed().await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "HTTP server failed");
        }
    }));
    let rounds = node.clone().run_rounds(shutdown.subscribe());
    tasks.push(tokio::spawn(rounds));
    tracing::info!(%api_addr, %metrics_addr, name = %node.name, "node serving");
    Ok(Running {
        node,
        api_addr,
        metrics_addr,
        shutdown,
        tasks,
    })
}

impl Running {
    /// Graceful stop: drain and deregister, then stop the listeners and wait
    /// for every task.
    pub async fn stop(self) {
        // Rounds must not re-acquire while the node drains.
        self.node.stop().await;
        let _ = self.shutdown.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
        self.node.store.close().await;
        tracing::info!(name = %self.node.name, "stopped");
    }
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it gracefully.
pub async fn run(settings: Settings) -> Result<(), NodeError> {
    let running = start(settings).await?;
    wait_for_signal().await;
    tracing::info!("stop requested; draining");
    running.stop().await;
    Ok(())
}

async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
