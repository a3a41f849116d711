//! An example sharded key-value service built on chitin.
//!
//! One instance runs beside each chitin node. Its data lives in **its own
//! database** (PostgreSQL or MySQL/MariaDB), not chitin's: every key belongs
//! to one shard of a chitin application, the instance writes a key only
//! while its node holds that shard's lease, and every write is fenced with
//! the lease's token in the service's own database
//! (`chitin_client::fence::table`), so an instance that was paused or cut
//! off and wakes up under a lost lease can never commit.
//!
//! - [`owner`]: which shards this instance serves, from its node's
//!   ownership watch (it takes part in handoffs: it finishes a shard's
//!   writes before answering `RELEASED`, and claims the fence before `READY`);
//! - [`ledger`]: the service's table and its fenced write;
//! - [`http`]: the API (`POST /write`, `GET /health`).
//!
//! The table records each write with the token it was written under, which
//! is what `chitin chaos --service` checks (see the README beside this file).

#![deny(missing_docs)]

mod http;
mod ledger;
mod owner;

use std::net::SocketAddr;
use std::process::ExitCode;

use chitin_client::{Client, Nodes};
use clap::Parser;

/// The command line (every flag also from the environment).
#[derive(Parser, Debug)]
#[command(name = "chitin-example-kv", about = "An example sharded key-value service fenced by chitin's lease tokens")]
struct Args {
    /// Address to serve the HTTP API on.
    #[arg(long, env = "KV_LISTEN", default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// gRPC address of the chitin node beside this instance.
    #[arg(long, env = "KV_NODE", default_value = "127.0.0.1:7400")]
    node: String,
    /// The service's own database, `postgres://…` or `mysql://…` (not the
    /// one chitin uses).
    #[arg(long, env = "KV_DATABASE_URL")]
    database: String,
    /// The chitin application whose shards partition the keys.
    #[arg(long, env = "KV_APPLICATION", default_value = "journal")]
    application: String,
    /// A planted bug for the fault suite: writes skip the fence's check, so
    /// `chitin chaos --service` can show the violation it then catches.
    #[arg(long, hide = true)]
    plant_unfenced: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("chitin-example-kv: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let db = ledger::Db::connect(&args.database).await?;
    db.migrate().await?;
    let nodes = Nodes::one(args.node.as_str()).map_err(|e| format!("--node {}: {e}", args.node))?;
    let client = Client::new(nodes);
    let owner = owner::Owner::default();
    tokio::spawn(owner::follow(client.clone(), owner.clone(), db.clone()));
    let api =
        http::Api { map: client.assignment_map(), owner, db, application: args.application, check_fence: !args.plant_unfenced };
    let listener = tokio::net::TcpListener::bind(args.listen).await.map_err(|e| format!("--listen {}: {e}", args.listen))?;
    eprintln!("chitin-example-kv: serving on {} beside node {}", args.listen, args.node);
    axum::serve(listener, http::router(api)).with_graceful_shutdown(stopped()).await.map_err(|e| format!("serving: {e}"))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn stopped() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("a SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
