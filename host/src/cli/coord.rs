//! `chitin dispatch`, `chitin affinity …`, `chitin deployments …`, and the
//! registry verbs of `chitin cluster` (`instances`, `cleanup-stale`): all
//! through a node's `Coordination` service.

use std::collections::HashMap;
use std::process::ExitCode;

use chitin::proto::{self, coordination_client::CoordinationClient};
use chitin::security::Plane;
use clap::Subcommand;

use super::client::{NodeAddr, Signed, runtime, signed};
use super::output::OutputArg;

/// `chitin dispatch`.
#[derive(clap::Args, Debug)]
pub struct DispatchArgs {
    #[command(flatten)]
    addr: NodeAddr,
    /// The target to dispatch a command to.
    #[arg(long)]
    target: String,
    /// The command (opaque to chitin).
    #[arg(long, default_value = "")]
    command: String,
}

#[derive(Subcommand, Debug)]
pub enum AffinityCommand {
    /// The instance that owns a target.
    Owner {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// The target id.
        target: String,
    },
    /// The targets an instance owns (default: the node's own).
    List {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// The instance id (a node's registration UUID).
        #[arg(long)]
        instance: Option<String>,
    },
    /// Release the node's claim on a target.
    Release {
        #[command(flatten)]
        addr: NodeAddr,
        /// The target id.
        target: String,
    },
}

#[derive(Subcommand, Debug)]
pub enum DeploymentsCommand {
    /// Start a deployment owned by the node; prints it as JSON.
    Start {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// What is being deployed, for people reading the state.
        #[arg(long, default_value = "")]
        description: String,
        /// pending (default) or running.
        #[arg(long, default_value = "")]
        state: String,
        /// key=value, repeatable.
        #[arg(long = "meta", value_parser = key_value)]
        metadata: Vec<(String, String)>,
    },
    /// Update a deployment (state, message, progress).
    Update {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// The deployment's id (as `start` printed it).
        id: String,
        /// The new state: pending, running (empty: unchanged).
        #[arg(long, default_value = "")]
        state: String,
        /// A progress message (empty: unchanged).
        #[arg(long, default_value = "")]
        message: String,
        /// Steps done.
        #[arg(long, default_value_t = 0)]
        completed: u64,
        /// Steps in all.
        #[arg(long, default_value_t = 0)]
        total: u64,
    },
    /// Finish a deployment: succeeded, failed or cancelled.
    Finish {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// The deployment's id (as `start` printed it).
        id: String,
        /// How it ended: succeeded, failed or cancelled.
        #[arg(long, default_value = "succeeded")]
        state: String,
        /// A closing message.
        #[arg(long, default_value = "")]
        message: String,
    },
    /// One deployment, as JSON.
    Show {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// The deployment's id.
        id: String,
    },
    /// Deployments, as JSON: every one, the unfinished ones, or one instance's.
    List {
        #[command(flatten)]
        addr: NodeAddr,
        #[command(flatten)]
        output: OutputArg,
        /// Only deployments that are not finished.
        #[arg(long)]
        active: bool,
        /// Only those owned by this instance id.
        #[arg(long)]
        instance: Option<String>,
    },
}

fn key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).ok_or_else(|| format!("expected key=value, got {s:?}"))
}

async fn client(addr: &NodeAddr) -> anyhow::Result<CoordinationClient<Signed>> {
    Ok(CoordinationClient::new(signed(&addr.node, Plane::Client).await?))
}

fn status(s: tonic::Status) -> anyhow::Error {
    anyhow::anyhow!("{}", s.message())
}

pub fn dispatch(args: DispatchArgs) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let r = client(&args.addr)
            .await?
            .dispatch(proto::DispatchRequest { target_id: args.target.clone(), command: args.command.into_bytes() })
            .await;
        match r {
            Ok(r) => {
                let r = r.into_inner();
                println!("dispatched to {}: {} (instance {})", args.target, r.outcome, r.instance_id);
                Ok(ExitCode::SUCCESS)
            }
            Err(s) if s.code() == tonic::Code::FailedPrecondition => {
                eprintln!("declined: {}", s.message());
                Ok(super::Exit::Declined.into())
            }
            Err(s) => Err(status(s)),
        }
    })
}

pub fn affinity(cmd: AffinityCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        match cmd {
            AffinityCommand::Owner { addr, output, target } => {
                let r = client(&addr)
                    .await?
                    .affinity_owner(proto::TargetRequest { target_id: target.clone() })
                    .await
                    .map_err(status)?;
                let owner = r.into_inner().owner;
                if !output.is_table() {
                    // No owner is null, not an empty string.
                    let owner = (!owner.is_empty()).then_some(owner);
                    output.print_data(&serde_json::json!({ "target": target, "owner": owner }));
                } else if owner.is_empty() {
                    println!("{target}: unclaimed");
                } else {
                    println!("{target}: {owner}");
                }
            }
            AffinityCommand::List { addr, output, instance } => {
                let r = client(&addr)
                    .await?
                    .affinity_list(proto::InstanceRequest { instance_id: instance.unwrap_or_default() })
                    .await
                    .map_err(status)?;
                let targets = r.into_inner().targets;
                if !output.is_table() {
                    output.print_data(&targets);
                }
                for t in targets.iter().filter(|_| output.is_table()) {
                    println!("{t}");
                }
            }
            AffinityCommand::Release { addr, target } => {
                let r = client(&addr)
                    .await?
                    .affinity_release(proto::TargetRequest { target_id: target.clone() })
                    .await
                    .map_err(status)?;
                if r.into_inner().released {
                    println!("released {target}");
                } else {
                    println!("{target} was not claimed by this node; nothing released");
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

pub fn deployments(cmd: DeploymentsCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let (output, json) = match cmd {
            DeploymentsCommand::Start { addr, output, description, state, metadata } => (
                output,
                client(&addr)
                    .await?
                    .deployment_start(proto::DeploymentStartRequest {
                        description,
                        state,
                        message: String::new(),
                        metadata: metadata.into_iter().collect::<HashMap<_, _>>(),
                    })
                    .await,
            ),
            DeploymentsCommand::Update { addr, output, id, state, message, completed, total } => (
                output,
                client(&addr)
                    .await?
                    .deployment_update(proto::DeploymentUpdateRequest {
                        deployment_id: id,
                        state,
                        message,
                        metadata: HashMap::new(),
                        completed,
                        total,
                    })
                    .await,
            ),
            DeploymentsCommand::Finish { addr, output, id, state, message } => (
                output,
                client(&addr)
                    .await?
                    .deployment_finish(proto::DeploymentFinishRequest { deployment_id: id, state, message })
                    .await,
            ),
            DeploymentsCommand::Show { addr, output, id } => {
                (output, client(&addr).await?.deployment_show(proto::DeploymentShowRequest { deployment_id: id }).await)
            }
            DeploymentsCommand::List { addr, output, active, instance } => (
                output,
                client(&addr)
                    .await?
                    .deployment_list(proto::DeploymentListRequest {
                        active_only: active,
                        instance_id: instance.unwrap_or_default(),
                    })
                    .await,
            ),
        };
        let json = json.map_err(status)?;
        if let Some(ids) = json.metadata().get(chitin::api::coordination::UNREADABLE_DEPLOYMENTS).and_then(|v| v.to_str().ok()) {
            eprintln!(
                "chitin: skipped deployment records that are no deployment document: {} (the node's log gives each \
                 parse error; a record written by hand or damaged can be deleted from Redis, one written by a newer \
                 chitin is read by that version)",
                ids.replace(',', ", ")
            );
        }
        let json = json.into_inner().json;
        if output.is_table() {
            // The node's own JSON, as it sent it: a deployment has no table.
            println!("{json}");
        } else {
            output.print_data(&serde_json::from_str::<serde_json::Value>(&json)?);
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `chitin cluster instances`: every registry entry, alive or stale.
pub fn instances(addr: NodeAddr, output: OutputArg) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let json = client(&addr).await?.instances(proto::Empty {}).await.map_err(status)?.into_inner().json;
        let list: Vec<serde_json::Value> = serde_json::from_str(&json)?;
        if !output.is_table() {
            output.print_data(&list);
            return Ok(ExitCode::SUCCESS);
        }
        println!("{:<36} {:<6} {:<22} LAST HEARTBEAT", "INSTANCE", "STATE", "ADDRESS");
        for i in list {
            let info = &i["info"];
            println!(
                "{:<36} {:<6} {:<22} {}",
                i["instance_id"].as_str().unwrap_or_default(),
                if i["alive"].as_bool().unwrap_or(false) { "alive" } else { "stale" },
                info["grpc_address"].as_str().unwrap_or("-"),
                info["last_heartbeat"].as_u64().map(|t| t.to_string()).unwrap_or_else(|| "-".into()),
            );
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `chitin cluster cleanup-stale`: one monitor sweep; prints what it removed.
pub fn cleanup_stale(addr: NodeAddr) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        let json = client(&addr).await?.cleanup_stale(proto::Empty {}).await.map_err(status)?.into_inner().json;
        println!("{json}");
        Ok(ExitCode::SUCCESS)
    })
}
