//! The control block of a running process: the node once it exists, what
//! is needed to create it (settings), the shutdown signal and the
//! background tasks. The API serves through it; `server` creates it.
//!
//! A cluster-mode process with no cluster config holds no node
//! (UNPROVISIONED) until [`Control::bootstrap`] gives it its id and config.

use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::watch;

use super::stored::{self, Provisioned};
use super::{Node, NodeError};
use crate::settings::Settings;
use crate::topology::{self, ClusterConfig};

/// The node, once it exists, and what is needed to create it.
pub struct Control {
    pub settings: Settings,
    /// The tokens checked and sent now (the token files are read again on
    /// SIGHUP: [`Control::reload_credentials`]).
    pub credentials: crate::security::Credentials,
    /// `[tls]` loaded, whose certificate SIGHUP reads again
    /// ([`Control::reload_certificate`]).
    tls: Option<crate::security::tls::NodeTls>,
    /// What the listeners and the authentication counted, for `/metrics`.
    pub counts: crate::security::listen::Counts,
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

    /// Starts the node's background work (rounds, coordination) and puts
    /// it in place.
    pub async fn activate(&self, node: Arc<Node>) {
        // A reload before a bootstrap is not in the node's settings.
        node.peers.set_token(self.credentials.current().peer.as_deref());
        let rounds = tokio::spawn(node.clone().run_rounds(self.shutdown.subscribe()));
        let assignments = tokio::spawn(node.clone().publish_assignments(self.shutdown.subscribe()));
        let mut tasks = vec![rounds, assignments];
        if let Some(session) = node.take_session() {
            tasks.push(tokio::spawn(node.clone().run_liveness(session, self.shutdown.subscribe())));
        }
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
        if let Some(configured) = &self.settings.cluster.instance_id
            && configured != node_id
        {
            return Err(BootstrapError::NameMismatch { configured: configured.clone(), requested: node_id.to_string() });
        }
        stored::save(&self.settings.node.data_dir, &config, Some(node_id)).map_err(NodeError::from)?;
        let provisioned = Provisioned { config, node_id: Some(node_id.to_string()) };
        let node = Node::start(self.settings.clone(), Some(provisioned)).await?;
        self.activate(node.clone()).await;
        tracing::info!(name = %node.name, "bootstrapped");
        Ok(node)
    }
}

impl Control {
    /// Reads the token files again and makes their tokens the ones checked
    /// and sent; a file that is wrong keeps the previous tokens (the error
    /// says why). Returns how many tokens each plane accepts now.
    pub fn reload_credentials(&self) -> Result<String, crate::security::auth::TokenFileError> {
        let counts = self.credentials.reload()?;
        if let Some(node) = self.node() {
            node.peers.set_token(self.credentials.current().peer.as_deref());
        }
        Ok(counts)
    }

    /// Reads the node's certificate and key and the CA bundles again: the
    /// listeners serve them from the next handshake on, and the node's
    /// next connection to each peer presents and trusts them; false without
    /// TLS. A file that cannot be used keeps everything current (the error
    /// says why).
    pub fn reload_certificate(&self) -> Result<bool, crate::security::tls::TlsError> {
        let Some(tls) = &self.tls else { return Ok(false) };
        let peers = crate::security::tls::ClientTls::for_peers(&self.settings.tls)?;
        tls.reload()?;
        if let Some(node) = self.node() {
            node.peers.set_tls(peers);
        }
        Ok(true)
    }

    /// A control block for `settings` and their loaded `tls`, holding no
    /// node yet; a caller with a certificate of the cluster CA is a peer.
    pub fn new(settings: Settings, tls: Option<crate::security::tls::NodeTls>) -> Arc<Control> {
        Arc::new(Control {
            credentials: crate::security::Credentials::new(&settings, tls.as_ref().and_then(|t| t.peer_ca())),
            tls,
            settings,
            counts: Default::default(),
            node: RwLock::new(None),
            bootstrapping: tokio::sync::Mutex::new(()),
            shutdown: watch::channel(false).0,
            tasks: Mutex::new(Vec::new()),
        })
    }

    /// Tells every task to stop.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// A receiver that fires when [`Control::shutdown`] is called.
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// Keeps `task` to be awaited at stop.
    pub fn keep(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks.lock().unwrap_or_else(|p| p.into_inner()).push(task);
    }

    /// The tasks kept so far, removed from the block.
    pub fn take_tasks(&self) -> Vec<tokio::task::JoinHandle<()>> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|p| p.into_inner()))
    }
}
