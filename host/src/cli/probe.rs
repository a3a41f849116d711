//! `chitin probe`: asks a node's standard gRPC health service whether it
//! serves, for container health checks and scripts that have no other
//! client (the image has no shell and no curl).

use std::process::ExitCode;

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::client;

#[derive(clap::Args, Debug)]
pub struct ProbeArgs {
    /// The node's gRPC address (host:port, or an http:// or https:// URL).
    #[arg(long, env = "CHITIN_NODE", default_value = client::DEFAULT_NODE)]
    via: String,
    /// The service to ask about (`chitin.v1.Journal`, …); empty: the node as a whole.
    #[arg(long, default_value = "")]
    service: String,
}

/// Exit 0 when the node answers SERVING, 1 when it answers anything else or
/// cannot be reached (with why on stderr).
pub fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    client::runtime()?.block_on(async {
        let channel = client::connect(&args.via).await?;
        let answer = HealthClient::new(channel).check(HealthCheckRequest { service: args.service.clone() }).await;
        let status = match answer {
            Ok(a) => ServingStatus::try_from(a.into_inner().status).unwrap_or(ServingStatus::Unknown),
            Err(s) => anyhow::bail!("the node at {} did not answer its health check: {}", args.via, s.message()),
        };
        if status == ServingStatus::Serving {
            println!("SERVING");
            Ok(ExitCode::SUCCESS)
        } else {
            eprintln!(
                "{}: {} (the node runs but does not serve yet or any more: its HTTP /readyz on the metrics \
                 listener says why, and `chitin cluster status` what it holds)",
                args.via,
                status.as_str_name()
            );
            Ok(ExitCode::FAILURE)
        }
    })
}
