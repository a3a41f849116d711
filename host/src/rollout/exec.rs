//! The executor: rolls planned versions out over the admin plane.
//!
//! For each step it pushes the step's config to every node of that config
//! (`Admin.UpdateConfig`; `Admin.Bootstrap` for a node that reports
//! `UNPROVISIONED`, such as a node just added), then polls `Admin.GetConfig`
//! until every node reports the step's version. A node that lags more than
//! one version (it was down, or a resumed sequence) is caught up through the
//! planned versions in order, never skipped ahead. When every node has the
//! version, the config file is rewritten to it and the checkpoint records
//! the step; then the next step follows, after the bake time if it removes
//! replicas or completes a split. A step that does not converge within the
//! timeout stops the sequence with a report of which nodes lag and what they
//! report; running the same command again resumes it.
//!
//! [`prepare`] is synchronous (it may call the policies); [`execute`] is the
//! async part.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tonic::service::interceptor::InterceptedService;
use tonic::{Code, Status};

use super::checkpoint::{Checkpoint, CheckpointError, Decision, Unfinished, decide, path_for};
use super::plan::{Plan, PlanError, Sequence};
use crate::proto::{self, admin_client::AdminClient};
use crate::topology::file::{self, SaveError};
use crate::topology::model::{ClusterConfig, LoadError, Node};

/// How the executor behaves.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long one step (push and convergence) may take.
    pub timeout: Duration,
    /// The pause after a step converged before a step that removes replicas
    /// or completes a split.
    pub bake: Duration,
    /// How often nodes are polled while waiting.
    pub poll: Duration,
    /// The admin plane's bearer token.
    pub token: Option<String>,
    /// TLS to the nodes (the CLI's `--ca`, `--cert`, `--key`).
    pub tls: Option<crate::security::tls::ClientTls>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            timeout: Duration::from_secs(60),
            bake: Duration::from_secs(5),
            poll: Duration::from_millis(200),
            token: token_from_env(),
            tls: None,
        }
    }
}

/// `CHITIN_ADMIN_TOKEN`, when set and not empty.
pub fn token_from_env() -> Option<String> {
    crate::security::auth::token_from_env(crate::security::Plane::Admin)
}

/// Why a sequence (or a bootstrap) stopped.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Save(#[from] SaveError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("refusing to start `{requested}`: {unfinished} (checkpoint `{}`)", .checkpoint.display())]
    Unfinished { requested: String, unfinished: Unfinished, checkpoint: PathBuf },
    #[error(
        "the config file `{}` is version {file_version}, but its checkpoint `{}` expects version {expected}; restore the file to version {expected} (`chitin cluster get-config` fetches it from a node) and run the command again",
        .config.display(), .checkpoint.display()
    )]
    FileMismatch { config: PathBuf, checkpoint: PathBuf, file_version: u64, expected: u64 },
    #[error("node `{node}` has an unusable address `{address}`: {message}")]
    BadAddress { node: String, address: String, message: String },
    #[error(
        "the nodes do not all run the config file's version {expected}: {}; the file is stale or another rollout is unfinished — fetch the live config with `chitin cluster get-config --node-address ADDR`, and never run two sequences at once",
        .nodes.join("; ")
    )]
    NodesDisagree { expected: u64, nodes: Vec<String> },
    #[error(
        "cannot start: {} unreachable for {timeout:?}: {}; start them (or fix their addresses in the config) and run the command again",
        if .nodes.len() == 1 { "a node stayed" } else { "nodes stayed" }, .nodes.join("; ")
    )]
    Unreachable { nodes: Vec<String>, timeout: Duration },
    #[error("node `{node}` ({address}) refused version {version}: {message}{hint}")]
    Refused { node: String, address: String, version: u64, message: String, hint: &'static str },
    #[error(
        "node `{node}` ({address}) runs version {found}, which this sequence did not plan (it goes from {base} to {last}); check it with `chitin cluster get-config --node-address {address}`"
    )]
    OffPlan { node: String, address: String, found: u64, base: u64, last: u64 },
    #[error(
        "step {step}/{total}: version {version} did not converge within {timeout:?}; lagging: {}. Nothing is lost: once the nodes are back, run the same command again to resume",
        .lagging.join("; ")
    )]
    NotConverged { step: usize, total: usize, version: u64, timeout: Duration, lagging: Vec<String> },
    #[error(
        "node `{node}` ({address}) is already provisioned with version {found}, not the file's version {version}; leave it (a running cluster changes through control sequences) or fetch its config with `chitin cluster get-config --node-address {address}`"
    )]
    AlreadyProvisioned { node: String, address: String, found: u64, version: u64 },
    #[error("no node `{node}` in `{}` (nodes: {known})", .config.display())]
    UnknownNode { node: String, config: PathBuf, known: String },
    #[error("cannot reach the node at {address} within {timeout:?}: {message}; is `chitin node` running there?")]
    NodeUnreachable { address: String, timeout: Duration, message: String },
}

// ---------------------------------------------------------------- client

pub use crate::upgrade::wire::BearerAuth;

/// An admin-plane client of one node.
pub type Admin = AdminClient<InterceptedService<crate::security::tls::NodeChannel, BearerAuth>>;

/// A lazily connecting admin client of the node at `address` (`host:port`
/// or a URL, over TLS with `tls`); each call times out after `rpc_timeout`.
pub fn admin_client(
    address: &str,
    token: Option<&str>,
    tls: Option<&crate::security::tls::ClientTls>,
    rpc_timeout: Duration,
) -> Result<Admin, String> {
    let channel =
        crate::security::tls::endpoint(address, tls)?.connect_timeout(Duration::from_secs(3)).timeout(rpc_timeout).connect_lazy();
    Ok(AdminClient::with_interceptor(crate::security::tls::NodeChannel::new(channel, tls), BearerAuth::new(token)))
}

/// What a node reports about its config.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    Unreachable(String),
    Unprovisioned,
    At { version: u64, state: String },
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Report::Unreachable(e) => write!(f, "unreachable ({e})"),
            Report::Unprovisioned => write!(f, "UNPROVISIONED"),
            Report::At { version, state } => write!(f, "version {version} ({state})"),
        }
    }
}

fn is_unprovisioned(r: &proto::GetConfigResponse) -> bool {
    r.state.eq_ignore_ascii_case("unprovisioned") || r.config_json.is_empty()
}

/// Whether a call's failure is worth retrying (the node may be restarting).
fn transient(s: &Status) -> bool {
    matches!(
        s.code(),
        Code::Unavailable | Code::DeadlineExceeded | Code::Unknown | Code::Cancelled | Code::Aborted | Code::ResourceExhausted
    )
}

fn status_text(s: &Status) -> String {
    let msg = s.message();
    if msg.is_empty() { format!("{:?}", s.code()) } else { msg.to_owned() }
}

fn hint(s: &Status) -> &'static str {
    match s.code() {
        Code::Unauthenticated | Code::PermissionDenied => "; set CHITIN_ADMIN_TOKEN to the node's admin token",
        Code::Unimplemented => "; the node's chitin has no admin plane — upgrade it",
        _ => "",
    }
}

/// One node of the rollout.
struct Target {
    id: String,
    address: String,
    client: Admin,
}

impl Target {
    fn new(n: &Node, opts: &Options) -> Result<Target, ExecError> {
        let rpc = opts.timeout.min(Duration::from_secs(30)).max(Duration::from_secs(1));
        let client = admin_client(&n.grpc_address, opts.token.as_deref(), opts.tls.as_ref(), rpc)
            .map_err(|message| ExecError::BadAddress { node: n.id.clone(), address: n.grpc_address.clone(), message })?;
        Ok(Target { id: n.id.clone(), address: n.grpc_address.clone(), client })
    }

    fn label(&self) -> String {
        format!("{} ({})", self.id, self.address)
    }

    async fn report(&mut self) -> Report {
        match self.client.get_config(proto::GetConfigRequest {}).await {
            Ok(r) => {
                let r = r.into_inner();
                if is_unprovisioned(&r) {
                    Report::Unprovisioned
                } else {
                    Report::At { version: r.config_version, state: r.state }
                }
            }
            Err(s) => Report::Unreachable(status_text(&s)),
        }
    }

    fn refused(&self, version: u64, s: &Status) -> ExecError {
        ExecError::Refused {
            node: self.id.clone(),
            address: self.address.clone(),
            version,
            message: status_text(s),
            hint: hint(s),
        }
    }

    /// `Ok(false)`: a transient failure, try again later.
    async fn update(&mut self, config: &ClusterConfig) -> Result<bool, ExecError> {
        let req = proto::UpdateConfigRequest { config_json: config.to_json() };
        match self.client.update_config(req).await {
            Ok(_) => Ok(true),
            Err(s) if transient(&s) => Ok(false),
            Err(s) => Err(self.refused(config.version, &s)),
        }
    }

    async fn bootstrap(&mut self, config: &ClusterConfig) -> Result<Option<proto::BootstrapResponse>, ExecError> {
        let req = proto::BootstrapRequest { node_id: self.id.clone(), config_json: config.to_json() };
        match self.client.bootstrap(req).await {
            Ok(r) => Ok(Some(r.into_inner())),
            // ALREADY_EXISTS: it was provisioned meanwhile (a restarting node
            // reports UNPROVISIONED until it has loaded its stored config).
            Err(s) if transient(&s) || s.code() == Code::AlreadyExists => Ok(None),
            Err(s) => Err(self.refused(config.version, &s)),
        }
    }
}

/// How long a node must keep reporting UNPROVISIONED before a sequence
/// bootstraps it: a node restarting with a stored config reports it briefly
/// while it starts.
pub const UNPROVISIONED_GRACE: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------- sequences

/// What [`prepare`] found.
#[derive(Debug)]
pub enum Prepared {
    /// Run `checkpoint`'s steps from `from` (0-based).
    Run { checkpoint: Box<Checkpoint>, from: usize, resumed: bool },
    /// The same request finished already; the file holds its result.
    AlreadyDone { version: u64 },
    /// The plan has no step (e.g. a balanced cluster).
    NothingToDo { version: u64 },
}

/// Decides whether `sequence` starts, resumes or is refused, and plans it
/// (with `plan`, which may call the policies) when it starts. Nothing is
/// written and no node is called.
pub fn prepare(
    config_path: &Path,
    sequence: Sequence,
    plan: impl FnOnce(&ClusterConfig) -> Result<Plan, PlanError>,
) -> Result<Prepared, ExecError> {
    let file_config = file::load(config_path)?;
    let existing = Checkpoint::load(config_path)?;
    match decide(existing.as_ref(), &sequence, file_config.version) {
        Decision::Fresh => {
            let p = plan(&file_config)?;
            if p.steps.is_empty() {
                return Ok(Prepared::NothingToDo { version: file_config.version });
            }
            Ok(Prepared::Run { checkpoint: Box::new(Checkpoint::new(sequence, &p)), from: 0, resumed: false })
        }
        Decision::Resume { from } => {
            Ok(Prepared::Run { checkpoint: Box::new(existing.expect("resume has a checkpoint")), from, resumed: true })
        }
        Decision::AlreadyDone { version } => Ok(Prepared::AlreadyDone { version }),
        Decision::Refuse(unfinished) => {
            Err(ExecError::Unfinished { requested: sequence.to_string(), unfinished, checkpoint: path_for(config_path) })
        }
        Decision::FileMismatch { file_version, expected } => Err(ExecError::FileMismatch {
            config: config_path.to_owned(),
            checkpoint: path_for(config_path),
            file_version,
            expected,
        }),
    }
}

/// How a sequence ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub steps_run: usize,
    pub total: usize,
    pub version: u64,
    pub nodes: usize,
}

/// Runs the steps of a [`Prepared::Run`] from `from`, printing progress
/// lines through `out`.
pub async fn execute(
    config_path: &Path,
    mut checkpoint: Checkpoint,
    from: usize,
    resumed: bool,
    opts: &Options,
    out: &mut dyn FnMut(&str),
) -> Result<Outcome, ExecError> {
    let plan = checkpoint.plan()?;
    let total = plan.steps.len();
    let mut targets: HashMap<String, Target> = HashMap::new();
    for n in &plan.last().nodes {
        targets.insert(n.id.clone(), Target::new(n, opts)?);
    }
    if resumed {
        out(&format!(
            "resuming `{}` at step {}/{total} (version {} done; checkpoint {})",
            checkpoint.command,
            from + 1,
            checkpoint.done_version(),
            path_for(config_path).display()
        ));
    } else {
        preflight(&plan.base, &mut targets, opts).await?;
        checkpoint.save(config_path)?;
        out(&format!(
            "`{}`: {total} step(s), version {} → {} (checkpoint {})",
            checkpoint.command,
            plan.base.version,
            plan.last().version,
            path_for(config_path).display()
        ));
    }
    let chain: Vec<&ClusterConfig> = plan.configs().collect();
    for k in from..total {
        let step = &plan.steps[k];
        if step.bake_before && !opts.bake.is_zero() {
            out(&format!("step {}/{total}: baking {:?} before: {}", k + 1, opts.bake, step.description));
            tokio::time::sleep(opts.bake).await;
        }
        let started = Instant::now();
        let pushed = converge(&chain, k + 1, &mut targets, opts, total).await?;
        file::save(config_path, &step.config)?;
        checkpoint.done = k + 1;
        checkpoint.save(config_path)?;
        out(&format!(
            "step {}/{total}: version {}: {}: pushed to {pushed} node(s), converged on {} node(s) in {:.1} s",
            k + 1,
            step.config.version,
            step.description,
            step.config.nodes.len(),
            started.elapsed().as_secs_f64()
        ));
    }
    Ok(Outcome { steps_run: total - from, total, version: plan.last().version, nodes: plan.last().nodes.len() })
}

/// Before a fresh sequence: every node of the base runs the base version
/// (an unprovisioned node is bootstrapped by the first step).
async fn preflight(base: &ClusterConfig, targets: &mut HashMap<String, Target>, opts: &Options) -> Result<(), ExecError> {
    let deadline = Instant::now() + opts.timeout;
    loop {
        let mut unreachable = Vec::new();
        let mut disagree = Vec::new();
        for n in &base.nodes {
            let t = targets.get_mut(&n.id).expect("every node has a target");
            match t.report().await {
                Report::At { version, .. } if version == base.version => {}
                Report::Unprovisioned => {}
                Report::At { version, state } => disagree.push(format!("{} runs version {version} ({state})", t.label())),
                Report::Unreachable(e) => unreachable.push(format!("{}: {e}", t.label())),
            }
        }
        if !disagree.is_empty() {
            return Err(ExecError::NodesDisagree { expected: base.version, nodes: disagree });
        }
        if unreachable.is_empty() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ExecError::Unreachable { nodes: unreachable, timeout: opts.timeout });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

/// Brings every node of `chain[k]` to its version; returns how many nodes
/// were sent a config (the others had it already).
async fn converge(
    chain: &[&ClusterConfig],
    k: usize,
    targets: &mut HashMap<String, Target>,
    opts: &Options,
    total: usize,
) -> Result<usize, ExecError> {
    let config = chain[k];
    let version = config.version;
    let deadline = Instant::now() + opts.timeout;
    let mut pushed = std::collections::HashSet::new();
    let mut unprovisioned_since: HashMap<String, Instant> = HashMap::new();
    loop {
        let mut lagging = Vec::new();
        for n in &config.nodes {
            let t = targets.get_mut(&n.id).expect("every node has a target");
            let report = t.report().await;
            if report != Report::Unprovisioned {
                unprovisioned_since.remove(&n.id);
            }
            match &report {
                Report::At { version: v, .. } if *v >= version => continue,
                Report::Unreachable(_) => {}
                Report::Unprovisioned => {
                    let since = *unprovisioned_since.entry(n.id.clone()).or_insert_with(Instant::now);
                    if since.elapsed() >= UNPROVISIONED_GRACE.min(opts.timeout / 2) && t.bootstrap(config).await?.is_some() {
                        pushed.insert(n.id.clone());
                    }
                }
                Report::At { version: v, .. } => {
                    // Catch up through the planned versions, one at a time.
                    let Some(j) = chain.iter().position(|c| c.version == *v) else {
                        return Err(ExecError::OffPlan {
                            node: t.id.clone(),
                            address: t.address.clone(),
                            found: *v,
                            base: chain[0].version,
                            last: chain[chain.len() - 1].version,
                        });
                    };
                    for c in &chain[j + 1..=k] {
                        if !t.update(c).await? {
                            break;
                        }
                        pushed.insert(n.id.clone());
                    }
                }
            }
            lagging.push((t.label(), report));
        }
        if lagging.is_empty() {
            return Ok(pushed.len());
        }
        if Instant::now() >= deadline {
            // One last look, so the report says what the nodes say now.
            let mut still = Vec::new();
            for (label, before) in lagging {
                let id = label.split(' ').next().unwrap_or_default().to_owned();
                let now = match targets.get_mut(&id) {
                    Some(t) => t.report().await,
                    None => before,
                };
                if !matches!(now, Report::At { version: v, .. } if v >= version) {
                    still.push(format!("{label} reports {now}"));
                }
            }
            if still.is_empty() {
                return Ok(pushed.len());
            }
            return Err(ExecError::NotConverged { step: k, total, version, timeout: opts.timeout, lagging: still });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

// ---------------------------------------------------------------- bootstrap and get-config

/// What bootstrapping one node did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Bootstrapped {
    Now { state: String, version: u64 },
    Already { version: u64 },
}

/// Bootstraps node `id` of `config` at its address with its own id,
/// retrying while it is unreachable (up to `opts.timeout`). A node that
/// already runs the same version is left alone.
pub async fn bootstrap_node(config: &ClusterConfig, id: &str, opts: &Options) -> Result<Bootstrapped, ExecError> {
    let n = config.node(id).expect("the caller checked the node id");
    let mut t = Target::new(n, opts)?;
    let deadline = Instant::now() + opts.timeout;
    loop {
        let report = t.report().await;
        match &report {
            Report::Unprovisioned => {
                if let Some(r) = t.bootstrap(config).await? {
                    return Ok(Bootstrapped::Now { state: r.state, version: r.config_version });
                }
            }
            Report::At { version, .. } if *version == config.version => {
                return Ok(Bootstrapped::Already { version: *version });
            }
            Report::At { version, .. } => {
                return Err(ExecError::AlreadyProvisioned {
                    node: t.id.clone(),
                    address: t.address.clone(),
                    found: *version,
                    version: config.version,
                });
            }
            Report::Unreachable(_) => {}
        }
        if Instant::now() >= deadline {
            return Err(ExecError::NodeUnreachable {
                address: t.address.clone(),
                timeout: opts.timeout,
                message: format!("node `{}` reports {report}", t.id),
            });
        }
        tokio::time::sleep(opts.poll).await;
    }
}

/// The live config of the node at `address`.
pub async fn get_config(address: &str, opts: &Options) -> Result<proto::GetConfigResponse, ExecError> {
    let rpc = opts.timeout.min(Duration::from_secs(30)).max(Duration::from_secs(1));
    let mut client = admin_client(address, opts.token.as_deref(), opts.tls.as_ref(), rpc)
        .map_err(|message| ExecError::BadAddress { node: "?".into(), address: address.to_owned(), message })?;
    match client.get_config(proto::GetConfigRequest {}).await {
        Ok(r) => Ok(r.into_inner()),
        Err(s) => Err(ExecError::NodeUnreachable {
            address: address.to_owned(),
            timeout: rpc,
            message: format!("{}{}", status_text(&s), hint(&s)),
        }),
    }
}

/// The append load every node at `addresses` counted (of `shard`, or of
/// every shard), summed per shard, and the nodes that did not answer (a
/// node that held a shard for part of the window counted that part).
pub async fn cluster_load(
    addresses: &[String],
    shard: Option<&str>,
    opts: &Options,
) -> (Vec<crate::node::load::ShardLoad>, Vec<String>) {
    let mut reports = Vec::new();
    let mut silent = Vec::new();
    for address in addresses {
        let answer = match admin_client(address, opts.token.as_deref(), opts.tls.as_ref(), Duration::from_secs(5)) {
            Ok(mut client) => client
                .load(proto::LoadRequest { shard: shard.unwrap_or_default().to_string() })
                .await
                .map_err(|s| status_text(&s)),
            Err(e) => Err(e),
        };
        match answer {
            Ok(r) => reports.extend(r.into_inner().shards.into_iter().map(Into::into)),
            Err(why) => silent.push(format!("{address}: {why}")),
        }
    }
    (crate::node::load::merge(reports), silent)
}
