//! `chitin config …`: build, check, compare and show `cluster_config.json`.
//!
//! Exit status: 0 when the command succeeded (for `validate` and
//! `validate-transition`: when the config or transition is valid), 1 when it
//! found violations or could not read a file, 2 for a usage error.
//! Commands that write (`init`, `add-node`, `add-application`) validate the
//! result — and the transition to it — and refuse to write anything invalid.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use chitin::topology::diff::diff;
use chitin::topology::file;
use chitin::topology::model::{ClusterConfig, LoadError, Metadata};
use chitin::topology::ops::{self, NewApplication, OpsError};
use chitin::topology::summary::summarize;
use chitin::topology::transition::{TransitionReport, validate_transition};
use chitin::topology::{Router, Violation, bounds, validate};

use super::output::OutputArg;

const DEFAULT_FILE: &str = "cluster_config.json";

#[derive(clap::Subcommand, Debug)]
pub enum ConfigCommand {
    /// Create a new config: version 1, the given nodes (at least 3), no applications.
    Init {
        /// A node id; repeat, paired in order with --node-address.
        #[arg(long = "node-id", required = true, value_name = "ID")]
        node_ids: Vec<String>,
        /// The node's gRPC address (host:port); repeat, one per --node-id.
        #[arg(long = "node-address", required = true, value_name = "ADDR")]
        node_addresses: Vec<String>,
        /// Where to write the config.
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        file: PathBuf,
        /// The older spelling of `--file`, refused with that hint.
        #[arg(long = "output", hide = true, value_name = "FILE", value_parser = super::output::moved_to_file)]
        moved: Option<PathBuf>,
        /// Overwrite an existing file.
        #[arg(long)]
        force: bool,
    },
    /// Add a node (the version increases by one).
    AddNode {
        /// The config file to change.
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The new node's id.
        #[arg(long, value_name = "ID")]
        node_id: String,
        /// The new node's gRPC address (host:port).
        #[arg(long, value_name = "ADDR")]
        node_address: String,
        /// Node metadata as KEY=VALUE, repeatable (`zone=us-west-2a` reaches the policies as the zone).
        #[arg(long = "metadata", value_name = "KEY=VALUE", value_parser = parse_metadata)]
        metadata: Vec<Metadata>,
    },
    /// Add an application with N equal shards placed by the placement policy (the version increases by one).
    AddApplication {
        /// The config file to change.
        #[arg(long, default_value = DEFAULT_FILE, value_name = "FILE")]
        config: PathBuf,
        /// The application's name (its shards are named after it).
        #[arg(long)]
        name: String,
        /// Defaults to the name.
        #[arg(long)]
        implementation: Option<String>,
        /// A power of two; shard i of N covers [i·2³²/N, (i+1)·2³²/N − 1].
        #[arg(long, default_value_t = ops::DEFAULT_SHARDS, value_name = "N")]
        shards_count: u32,
        /// Replicas of each shard, on distinct nodes.
        #[arg(long, default_value_t = 3, value_name = "N")]
        replication_factor: u32,
        #[command(flatten)]
        policies: super::policy::PolicyArgs,
    },
    /// Check one config against every single-config rule.
    Validate {
        /// The config file.
        file: PathBuf,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Check that going from one config to another is safe (both must be valid too).
    ValidateTransition {
        /// The config served now.
        #[arg(long, value_name = "OLD")]
        from: PathBuf,
        /// The config to move to.
        #[arg(long, value_name = "NEW")]
        to: PathBuf,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show what changed between two configs.
    Diff {
        /// The earlier config file.
        old: PathBuf,
        /// The later config file.
        new: PathBuf,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Show a config: nodes with their replicas, applications with shards by state.
    Show {
        /// The config file.
        file: PathBuf,
        #[command(flatten)]
        output: OutputArg,
        /// List every shard (by default only shards in a split are listed).
        #[arg(long)]
        shards: bool,
    },
    /// Which shard serves a key.
    Route {
        /// The config file.
        file: PathBuf,
        /// The application whose shards the key falls in.
        #[arg(long)]
        application: String,
        /// The key in hex: 8 digits, or a shorter even-length prefix padded with 00.
        #[arg(long)]
        key: String,
        #[command(flatten)]
        output: OutputArg,
    },
}

fn parse_metadata(s: &str) -> Result<Metadata, String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok(Metadata::new(k, v)),
        _ => Err(format!("`{s}` is not KEY=VALUE")),
    }
}

pub fn run(cmd: ConfigCommand) -> anyhow::Result<ExitCode> {
    match cmd {
        ConfigCommand::Init { node_ids, node_addresses, file, force, .. } => init(node_ids, node_addresses, &file, force),
        ConfigCommand::AddNode { config, node_id, node_address, metadata } => {
            let Some(old) = load_or_report(&config, OutputArg::TABLE) else { return Ok(ExitCode::FAILURE) };
            let what = format!("node `{node_id}` ({node_address})");
            write_result(&config, &old, ops::add_node(&old, &node_id, &node_address, metadata), &what)
        }
        ConfigCommand::AddApplication { config, name, implementation, shards_count, replication_factor, policies } => {
            add_application(&config, name, implementation, shards_count, replication_factor, policies)
        }
        ConfigCommand::Validate { file, output } => Ok(validate_one(&file, output)),
        ConfigCommand::ValidateTransition { from, to, output } => Ok(validate_pair(&from, &to, output)),
        ConfigCommand::Diff { old, new, output } => Ok(diff_pair(&old, &new, output)),
        ConfigCommand::Show { file, output, shards } => Ok(show(&file, output, shards)),
        ConfigCommand::Route { file, application, key, output } => route(&file, &application, &key, output),
    }
}

/// `config add-application`: the shards placed by the placement policy of the settings.
fn add_application(
    config: &Path,
    name: String,
    implementation: Option<String>,
    shards_count: u32,
    replication_factor: u32,
    policies: super::policy::PolicyArgs,
) -> anyhow::Result<ExitCode> {
    let Some(old) = load_or_report(config, OutputArg::TABLE) else { return Ok(ExitCode::FAILURE) };
    let (policies, _) = policies.load()?;
    let spec = NewApplication {
        implementation: implementation.unwrap_or_else(|| name.clone()),
        name: name.clone(),
        shards_count,
        replication_factor,
        metadata: vec![],
    };
    let result = ops::add_application(&old, spec, |req| policies.place_replicas(req));
    let what = format!("application `{name}` with {shards_count} shard(s), replication factor {replication_factor}");
    write_result(config, &old, result, &what)
}

/// `config diff`: what changed, and whether the change is a valid transition.
fn diff_pair(old: &Path, new: &Path, output: OutputArg) -> ExitCode {
    let (Some(a), Some(b)) = (load_or_report(old, OutputArg::TABLE), load_or_report(new, OutputArg::TABLE)) else {
        return ExitCode::FAILURE;
    };
    let d = diff(&a, &b);
    let report = validate_transition(&a, &b);
    if !output.is_table() {
        let v = serde_json::json!({ "diff": d, "transition_valid": report.is_valid(), "violations": report_json(&report) });
        output.print_data(&v);
    } else {
        print!("{d}");
        if report.is_valid() {
            println!("transition: valid");
        } else {
            println!(
                "transition: INVALID, {} violation(s); run `chitin config validate-transition --from {} --to {}`",
                report.len(),
                old.display(),
                new.display()
            );
        }
    }
    ExitCode::SUCCESS
}

/// `config show`: the summary, and a warning when the config breaks a rule.
fn show(file: &Path, output: OutputArg, shards: bool) -> ExitCode {
    let Some(c) = load_or_report(file, OutputArg::TABLE) else { return ExitCode::FAILURE };
    let s = summarize(&c, shards);
    if !output.is_table() {
        output.print_data(&s);
    } else {
        print!("{}", s.render());
    }
    let v = validate(&c);
    if !v.is_empty() {
        eprintln!("warning: this config breaks {} rule(s); run `chitin config validate {}`", v.len(), file.display());
    }
    ExitCode::SUCCESS
}

/// `config route`: the shard that serves a key, and its nodes.
fn route(file: &Path, application: &str, key: &str, output: OutputArg) -> anyhow::Result<ExitCode> {
    let Some(c) = load_or_report(file, OutputArg::TABLE) else { return Ok(ExitCode::FAILURE) };
    let k = bounds::parse_key(key).map_err(|e| anyhow::anyhow!("--key `{key}`: {e}"))?;
    if c.application(application).is_none() {
        eprintln!("error: no application `{application}` in `{}`", file.display());
        return Ok(ExitCode::FAILURE);
    }
    match Router::new(&c).shard(&c, application, k) {
        Some(s) => {
            let nodes: Vec<&str> = s.replicas.iter().map(|r| r.node_id.as_str()).collect();
            if output.is_table() {
                println!("{} {}  {}  nodes {}", s.id, s.range_string(), s.state, nodes.join(","));
            } else {
                output.print_data(&serde_json::json!({
                    "key": format!("{k:08x}"), "shard": s.id, "range": s.range_string(),
                    "state": s.state.to_string(), "nodes": nodes,
                }));
            }
            Ok(ExitCode::SUCCESS)
        }
        None => {
            eprintln!("error: no active or splitting shard of `{application}` covers key {k:08x}");
            Ok(ExitCode::FAILURE)
        }
    }
}

/// Loads a config; on failure prints the error (with its code) and returns None.
fn load_or_report(path: &Path, output: OutputArg) -> Option<ClusterConfig> {
    match file::load(path) {
        Ok(c) => Some(c),
        Err(e) => {
            report_load_error(path, &e, output);
            None
        }
    }
}

fn report_load_error(path: &Path, e: &LoadError, output: OutputArg) {
    if !output.is_table() {
        let v = serde_json::json!({
            "file": path.display().to_string(),
            "valid": false,
            "error": { "code": e.code(), "message": e.to_string() },
        });
        output.print_data(&v);
        return;
    }
    match e {
        LoadError::Bounds(errors) => {
            for b in errors {
                eprintln!("error[{}]: {}: {b}", e.code(), path.display());
            }
        }
        _ => eprintln!("error[{}]: {}: {e}", e.code(), path.display()),
    }
}

fn print_violations<'a>(items: impl Iterator<Item = (Option<&'static str>, &'a Violation)>) {
    for (scope, v) in items {
        match scope {
            Some(s) => println!("  error[{}] ({s}): {}", v.code, v.message),
            None => println!("  error[{}]: {}", v.code, v.message),
        }
    }
}

fn report_json(r: &TransitionReport) -> serde_json::Value {
    serde_json::Value::Array(
        r.all().map(|(scope, v)| serde_json::json!({ "scope": scope, "code": v.code, "message": v.message })).collect(),
    )
}

fn validate_one(path: &Path, output: OutputArg) -> ExitCode {
    let Some(c) = load_or_report(path, output) else { return ExitCode::FAILURE };
    let v = validate(&c);
    if !output.is_table() {
        let out = serde_json::json!({ "file": path.display().to_string(), "valid": v.is_empty(), "violations": v });
        output.print_data(&out);
    } else if v.is_empty() {
        println!(
            "{}: valid (version {}: {} node(s), {} application(s), {} shard(s), {} replica(s))",
            path.display(),
            c.version,
            c.nodes.len(),
            c.applications.len(),
            c.shard_count(),
            c.replica_count()
        );
    } else {
        println!("{}: INVALID, {} violation(s):", path.display(), v.len());
        print_violations(v.iter().map(|v| (None, v)));
    }
    if v.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn validate_pair(from: &Path, to: &Path, output: OutputArg) -> ExitCode {
    let a = load_or_report(from, output);
    let b = load_or_report(to, output);
    let (Some(a), Some(b)) = (a, b) else { return ExitCode::FAILURE };
    let report = validate_transition(&a, &b);
    if !output.is_table() {
        let out = serde_json::json!({
            "from": from.display().to_string(),
            "to": to.display().to_string(),
            "valid": report.is_valid(),
            "violations": report_json(&report),
        });
        output.print_data(&out);
    } else if report.is_valid() {
        println!("{} (version {}) → {} (version {}): valid transition", from.display(), a.version, to.display(), b.version);
    } else {
        println!(
            "{} (version {}) → {} (version {}): INVALID, {} violation(s):",
            from.display(),
            a.version,
            to.display(),
            b.version,
            report.len()
        );
        print_violations(report.all().map(|(s, v)| (Some(s.as_str()), v)));
    }
    if report.is_valid() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

fn init(ids: Vec<String>, addresses: Vec<String>, path: &Path, force: bool) -> anyhow::Result<ExitCode> {
    if ids.len() != addresses.len() {
        eprintln!(
            "error: {} --node-id but {} --node-address; give one address per node, in the same order",
            ids.len(),
            addresses.len()
        );
        return Ok(super::Exit::Usage.into());
    }
    if path.exists() && !force {
        eprintln!("error: `{}` already exists; pass --force to overwrite it", path.display());
        return Ok(ExitCode::FAILURE);
    }
    let nodes: Vec<(String, String)> = ids.into_iter().zip(addresses).collect();
    match ops::init(&nodes) {
        Ok(c) => {
            file::save(path, &c)?;
            println!("wrote {}: version 1 with {} node(s)", path.display(), c.nodes.len());
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(refuse(path, e)),
    }
}

fn refuse(path: &Path, e: OpsError) -> ExitCode {
    match e {
        OpsError::Invalid(report) => {
            println!("refusing to write {}: the result would be invalid, {} violation(s):", path.display(), report.len());
            let scoped = report.old.len() + report.transition.len() > 0;
            print_violations(report.all().map(|(s, v)| (scoped.then_some(s.as_str()), v)));
        }
        other => eprintln!("error: {other}; nothing written to {}", path.display()),
    }
    ExitCode::FAILURE
}

fn write_result(
    path: &Path,
    old: &ClusterConfig,
    result: Result<ClusterConfig, OpsError>,
    what: &str,
) -> anyhow::Result<ExitCode> {
    match result {
        Ok(c) => {
            file::save(path, &c)?;
            println!("wrote {}: version {} → {}, added {what}", path.display(), old.version, c.version);
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Ok(refuse(path, e)),
    }
}
