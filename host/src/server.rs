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
use std::sync::{Arc, Mutex, RwLock};

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::api;
use crate::node::stored::{self, Provisioned};
use crate::node::{Node, NodeError};
use crate::settings::Settings;
use crate::topology::{self, ClusterConfig};

/// The node, once it exists, and what is needed to create it.
pub struct Control {
    pub settings: Settings,
    node: RwLock<Option<Arc<Node>>>,
    bootstrapping: tokio::sync::Mutex<()>,
    shutdown: watch::Sender<bool>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// Why a bootstrap was refused.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("this node is already provisioned as `{0}`; use UpdateConfig to change its config")]
    AlreadyProvisioned(String),
    #[error("the config is not valid: {}", .0.join("; "))]
    Invalid(Vec<String>),
    #[error("node id `{0}` is not a node of the config")]
    NotInConfig(String),
    #[error(
        "this node's name is set to `{configured}` (by [cluster] instance_id or CHITIN__CLUSTER__INSTANCE_ID) but the \
         bootstrap names `{requested}`: was it sent to the wrong address?"
    )]
    NameMismatch { configured: String, requested: String },
    #[error("a standalone node takes no cluster config; set [cluster] enabled = true")]
    Standalone,
    #[error(transparent)]
    Start(#[from] NodeError),
}

impl Control {
    /// The running node, unless unprovisioned.
    pub fn node(&self) -> Option<Arc<Node>> {
        self.node.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    async fn activate(&self, node: Arc<Node>) {
        let rounds = tokio::spawn(node.clone().run_rounds(self.shutdown.subscribe()));
        let mut tasks = vec![rounds];
        if let Some(coord) = &node.coord {
            let background = coord.start(self.shutdown.subscribe()).await;
            tasks.extend([background.heartbeat, background.monitor]);
        }
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).extend(tasks);
        *self.node.write().unwrap_or_else(|p| p.into_inner()) = Some(node);
    }

    /// Gives an unprovisioned node its id and first config, then starts it.
    pub async fn bootstrap(&self, node_id: &str, config: ClusterConfig) -> Result<Arc<Node>, BootstrapError> {
        let _one_at_a_time = self.bootstrapping.lock().await;
        if !self.settings.cluster.enabled {
            return Err(BootstrapError::Standalone);
        }
        if let Some(node) = self.node() {
            return Err(BootstrapError::AlreadyProvisioned(node.name.clone()));
        }
        let violations = topology::validate(&config);
        if !violations.is_empty() {
            return Err(BootstrapError::Invalid(violations.iter().map(ToString::to_string).collect()));
        }
        if config.node(node_id).is_none() {
            return Err(BootstrapError::NotInConfig(node_id.to_string()));
        }
        if let Some(configured) = &self.settings.cluster.instance_id {
            if configured != node_id {
                return Err(BootstrapError::NameMismatch {
                    configured: configured.clone(),
                    requested: node_id.to_string(),
                });
            }
        }
        stored::save(&self.settings.node.data_dir, &config, Some(node_id)).map_err(NodeError::from)?;
        let provisioned = Provisioned {
            config,
            node_id: Some(node_id.to_string()),
        };
        let node = Node::start(self.settings.clone(), Some(provisioned)).await?;
        self.activate(node.clone()).await;
        tracing::info!(name = %node.name, "bootstrapped");
        Ok(node)
    }
}

/// A started node (or an unprovisioned one) with its listeners bound.
pub struct Running {
    pub control: Arc<Control>,
    pub api_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
}

async fn bind(addr: &str, what: &'static str) -> Result<TcpListener, NodeError> {
    TcpListener::bind(addr).await.map_err(|source| NodeError::Listen {
        addr: addr.to_string(),
        what,
        source,
    })
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
    let bad = |reason: String| NodeError::ClusterConfig {
        path: seed.display().to_string(),
        reason,
    };
    let config = topology::file::load(seed).map_err(|e| bad(e.to_string()))?;
    let violations = topology::validate(&config);
    if !violations.is_empty() {
        return Err(bad(violations.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")));
    }
    stored::save(&settings.node.data_dir, &config, None)?;
    Ok(Some(Provisioned { config, node_id: None }))
}

/// Binds the listeners and starts the node, or waits unprovisioned.
pub async fn start(settings: Settings) -> Result<Running, NodeError> {
    // Bind first: a port in use is reported before anything registers.
    let api_listener = bind(&settings.api.listen, "[api] listen, gRPC").await?;
    let metrics_listener = bind(&settings.metrics.listen, "[metrics] listen, HTTP").await?;
    let api_addr = api_listener.local_addr().expect("bound");
    let metrics_addr = metrics_listener.local_addr().expect("bound");
    let provisioned = provisioned(&settings)?;
    let unprovisioned = settings.cluster.enabled && provisioned.is_none();
    let node = if unprovisioned { None } else { Some(Node::start(settings.clone(), provisioned).await?) };

    let control = Arc::new(Control {
        settings,
        node: RwLock::new(None),
        bootstrapping: tokio::sync::Mutex::new(()),
        shutdown: watch::channel(false).0,
        tasks: Mutex::new(Vec::new()),
    });
    // The node is in place before the first request: a restarting node must
    // never look unprovisioned (and accept a bootstrap) for a moment.
    match node {
        Some(node) => {
            tracing::info!(%api_addr, %metrics_addr, name = %node.name, "node serving");
            control.activate(node).await;
        }
        None => tracing::warn!(
            %api_addr,
            "UNPROVISIONED: no cluster config in the data dir and no [cluster] config_file; serving the admin plane \
             only until `chitin cluster bootstrap-node` gives this node its id and config"
        ),
    }
    let grpc = api::grpc::router(control.clone());
    let mut stop = control.shutdown.subscribe();
    let grpc_task = tokio::spawn(async move {
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
    });
    let http = api::http::router(control.clone());
    let mut stop = control.shutdown.subscribe();
    let http_task = tokio::spawn(async move {
        let result = axum::serve(metrics_listener, http)
            .with_graceful_shutdown(async move {
                let _ = stop.changed().await;
            })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "HTTP server failed");
        }
    });
    control.tasks.lock().unwrap_or_else(|p| p.into_inner()).extend([grpc_task, http_task]);
    Ok(Running {
        control,
        api_addr,
        metrics_addr,
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
        let _ = self.control.shutdown.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.control.tasks.lock().unwrap_or_else(|p| p.into_inner()));
        for task in tasks {
            let _ = task.await;
        }
        if let Some(node) = node {
            node.store.close().await;
            tracing::info!(name = %node.name, "stopped");
        }
    }
}

/// Runs a node until SIGTERM or Ctrl-C, then stops it gracefully. SIGHUP
/// reloads the policy components.
pub async fn run(settings: Settings) -> Result<(), NodeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let running = start(settings).await?;
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut hup = signal(SignalKind::hangup()).expect("SIGHUP handler");
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
            _ = hup.recv() => {
                if let Some(node) = running.control.node() {
                    match tokio::task::spawn_blocking(move || node.reload_policies()).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => tracing::error!(error = %e, "policy reload failed; the previous policies stay in use"),
                        Err(e) => tracing::error!(error = %e, "policy reload task failed"),
                    }
                }
            }
        }
    }
    tracing::info!("stop requested; draining");
    running.stop().await;
    Ok(())
}
