//! The `chitin` binary: argument parsing and dispatch only; each command
//! group lives in `cli/`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    cli::quiet_on_closed_stdout();
    let args = cli::Cli::parse();
    cli::init_logging(args.log_format, &args.command);
    // Before anything builds a TLS config (sqlx and redis use the default).
    chitin::security::tls::install_crypto_provider();
    match cli::client::configure_tls(&args.tls).and_then(|()| cli::run(args.command, args.log_format)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", chitin::security::redact(&format!("error: {}", cli::error_text(&e))));
            ExitCode::FAILURE
        }
    }
}
