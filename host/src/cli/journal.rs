//! `chitin journal append|read`: the reference journal from the shell.

use std::process::ExitCode;
use std::time::Duration;

use chitin::proto::{self, journal_client::JournalClient};
use clap::Subcommand;

use chitin::security::Plane;

use super::client::{NodeAddr, runtime, signed};

#[derive(Subcommand, Debug)]
pub enum JournalCommand {
    /// Append one entry to a stream; prints its sequence number and epoch.
    Append {
        #[command(flatten)]
        addr: NodeAddr,
        #[arg(long)]
        stream: String,
        /// The entry (UTF-8 text).
        #[arg(long)]
        payload: String,
        /// Makes retries apply once; default: a fresh random id.
        #[arg(long)]
        request_id: Option<String>,
        /// Retries on "not applied" and "outcome unknown", with the same request id.
        #[arg(long, default_value_t = 5)]
        retries: u32,
    },
    /// Print a stream's entries in order.
    Read {
        #[command(flatten)]
        addr: NodeAddr,
        #[arg(long)]
        stream: String,
        /// First sequence number to read.
        #[arg(long, default_value_t = 1)]
        from: u64,
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        /// Print JSON lines instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: JournalCommand) -> anyhow::Result<ExitCode> {
    runtime()?.block_on(async {
        match cmd {
            JournalCommand::Append {
                addr,
                stream,
                payload,
                request_id,
                retries,
            } => {
                let request_id = request_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
                let mut client = JournalClient::new(signed(&addr.node, Plane::Client).await?);
                let request = proto::AppendRequest {
                    stream,
                    request_id: request_id.clone(),
                    payload: payload.into_bytes(),
                    forwarded: false,
                };
                let mut attempt = 0;
                let ack = loop {
                    match client.append(request.clone()).await {
                        Ok(r) => break r.into_inner(),
                        Err(s) if attempt < retries && matches!(s.code(), tonic::Code::Unavailable | tonic::Code::Unknown) => {
                            attempt += 1;
                            eprintln!("retrying ({attempt}/{retries}) after: {}", s.message());
                            tokio::time::sleep(Duration::from_millis(200 * u64::from(attempt))).await;
                        }
                        Err(s) => anyhow::bail!("append failed ({:?}): {}", s.code(), s.message()),
                    }
                };
                println!(
                    "appended sequence={} epoch={} shard={} holder={} request_id={request_id}",
                    ack.sequence, ack.epoch, ack.shard, ack.holder
                );
            }
            JournalCommand::Read {
                addr,
                stream,
                from,
                limit,
                json,
            } => {
                let mut client = JournalClient::new(signed(&addr.node, Plane::Client).await?);
                let answer = client
                    .read(proto::ReadRequest { stream, from, limit })
                    .await
                    .map_err(|s| anyhow::anyhow!("read failed: {}", s.message()))?
                    .into_inner();
                if answer.truncated {
                    // On stderr, so that piped entries stay clean.
                    eprintln!("(the answer reached its byte budget; continue with --from {})", answer.next_from);
                }
                for e in answer.entries {
                    let payload = String::from_utf8_lossy(&e.payload);
                    if json {
                        println!(
                            "{}",
                            serde_json::json!({"sequence": e.sequence, "epoch": e.epoch, "request_id": e.request_id, "payload": payload})
                        );
                    } else {
                        println!("{:>6}  epoch {:<4} {}", e.sequence, e.epoch, payload);
                    }
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}
