//! `chitin journal append|read`: the reference journal from the shell.

use std::process::ExitCode;

use chitin_client::{AppendOutcome, Error, Options};
use clap::Subcommand;

use super::Exit;
use super::client::{NodeAddr, journal, runtime};
use super::output::OutputArg;

#[derive(Subcommand, Debug)]
pub enum JournalCommand {
    /// Append one entry to a stream; prints its sequence number and epoch.
    /// Exits 1 when it was certainly not applied, 4 when its outcome is
    /// unknown (retry with the printed --request-id, which applies at most once).
    Append {
        #[command(flatten)]
        addr: NodeAddr,
        /// The stream (any name of at most 255 bytes, no NUL, no trailing space).
        #[arg(long)]
        stream: String,
        /// The entry (UTF-8 text).
        #[arg(long)]
        payload: String,
        /// Makes retries apply once; default: a fresh random id.
        #[arg(long)]
        request_id: Option<String>,
        /// Retries on "not applied" and "outcome unknown", with the same request
        /// id, at the holder a node names or the next of `--node`.
        #[arg(long, default_value_t = 5)]
        retries: u32,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Print a stream's entries in order.
    Read {
        #[command(flatten)]
        addr: NodeAddr,
        /// The stream (any name of at most 255 bytes, no NUL, no trailing space).
        #[arg(long)]
        stream: String,
        /// First sequence number to read.
        #[arg(long, default_value_t = 1)]
        from: u64,
        /// At most this many entries (a node answers at most 10,000 and about 2 MiB).
        #[arg(long, default_value_t = 1000)]
        limit: u32,
        #[command(flatten)]
        output: OutputArg,
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
                output,
            } => {
                let request_id = request_id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
                let client = journal(&addr.node, Options { attempts: retries.saturating_add(1), ..Options::default() })?;
                let outcome = client.append_with_id(&stream, &request_id, payload.as_bytes()).await?;
                let ack = match outcome {
                    AppendOutcome::Applied(ack) => ack,
                    other => {
                        let exit = if matches!(other, AppendOutcome::Unknown { .. }) { Exit::Unknown } else { Exit::Failed };
                        eprintln!("append failed: {}", Error::NotConfirmed(other));
                        return Ok(exit.into());
                    }
                };
                if output.is_table() {
                    println!(
                        "appended sequence={} epoch={} shard={} holder={} request_id={request_id}",
                        ack.sequence, ack.epoch, ack.shard, ack.holder
                    );
                } else {
                    output.print_data(&serde_json::json!({
                        "sequence": ack.sequence, "epoch": ack.epoch, "shard": ack.shard,
                        "holder": ack.holder, "request_id": request_id,
                    }));
                }
            }
            JournalCommand::Read {
                addr,
                stream,
                from,
                limit,
                output,
            } => {
                let answer = journal(&addr.node, Options::default())?
                    .read(&stream, from, limit)
                    .await
                    .map_err(|e| anyhow::anyhow!("read failed: {e}"))?;
                if answer.truncated {
                    // On stderr, so that piped entries stay clean.
                    eprintln!("(the answer reached its byte budget; continue with --from {})", answer.next_from);
                }
                for e in answer.entries {
                    let payload = String::from_utf8_lossy(&e.payload);
                    if !output.is_table() {
                        output.print_record(
                            &serde_json::json!({"sequence": e.sequence, "epoch": e.epoch, "request_id": e.request_id, "payload": payload}),
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
