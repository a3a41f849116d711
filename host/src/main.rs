//! The `chitin` binary: argument parsing and dispatch only; each command
//! group lives in `cli/`.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::init_logging(args.log_format);
    match cli::run(args.command) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", chitin::security::redact(&format!("error: {e:#}")));
            ExitCode::FAILURE
        }
    }
}
