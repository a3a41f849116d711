//! `chitin settings check FILE`: everything a node would refuse at start
//! about its settings, found without starting one: the keys and rules, the
//! token files, the TLS files, the seed cluster config, the policy
//! components. The stores are not contacted.

use std::path::PathBuf;
use std::process::ExitCode;

use chitin::settings::Settings;

#[derive(clap::Subcommand, Debug)]
pub enum SettingsCommand {
    /// Check a settings file (with the CHITIN__… environment over it, as a
    /// node reads it) and report every problem; exit 1 if there is one.
    Check {
        /// The settings file (chitin.toml).
        file: PathBuf,
    },
}

pub fn run(command: SettingsCommand) -> anyhow::Result<ExitCode> {
    let SettingsCommand::Check { file } = command;
    // The keys and rules: every problem of the file at once.
    let mut settings = match Settings::load_from_process(Some(&file)) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("{e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let mut problems = Vec::new();
    if let Err(e) = chitin::security::auth::read_token_files(&mut settings) {
        problems.push(e.to_string());
    }
    if let Err(e) = chitin::security::tls::NodeTls::load(&settings.tls) {
        problems.push(e.to_string());
    }
    if let Some(seed) = &settings.cluster.config_file {
        match chitin::topology::file::load(seed) {
            Err(e) => problems.push(format!("[cluster] config_file {}: {e}", seed.display())),
            Ok(config) => problems.extend(
                chitin::topology::validate(&config).iter().map(|v| format!("[cluster] config_file {}: {v}", seed.display())),
            ),
        }
    }
    if let Err(e) = chitin::policy::Policies::load(&settings.policies, None) {
        problems.push(format!("[policies]: {e}"));
    }
    if problems.is_empty() {
        let mode = if settings.cluster.enabled { "cluster" } else { "standalone" };
        println!("{}: ok ({mode} node; the database and Redis were not contacted)", file.display());
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("{}: {} problem(s):", file.display(), problems.len());
    for p in &problems {
        eprintln!("  - {p}");
    }
    Ok(ExitCode::FAILURE)
}
