//! `chitin completions SHELL` and `chitin manpages DIR`: what a package
//! installs beside the binary, generated from the one command definition.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::CommandFactory;

use super::Cli;

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell to complete for (install the output where it loads
    /// completions, e.g. `chitin completions bash > /etc/bash_completion.d/chitin`).
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct ManpagesArgs {
    /// Directory to write `chitin.1` and one `chitin-<command>.1` per
    /// command into (created if missing), e.g. `/usr/local/share/man/man1`.
    pub dir: PathBuf,
}

/// Prints the completion script of `args.shell`.
pub fn completions(args: CompletionsArgs) -> anyhow::Result<ExitCode> {
    clap_complete::generate(args.shell, &mut Cli::command(), "chitin", &mut std::io::stdout());
    Ok(ExitCode::SUCCESS)
}

/// Writes one man page per command into `args.dir`; prints each path.
pub fn manpages(args: ManpagesArgs) -> anyhow::Result<ExitCode> {
    std::fs::create_dir_all(&args.dir)
        .map_err(|e| anyhow::anyhow!("cannot create the man page directory {}: {e}", args.dir.display()))?;
    clap_mangen::generate_to(Cli::command(), &args.dir)
        .map_err(|e| anyhow::anyhow!("cannot write man pages into {}: {e}", args.dir.display()))?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(&args.dir)?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.extension().is_some_and(|e| e == "1") && p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("chitin"))
        })
        .collect();
    pages.sort();
    for page in pages {
        println!("{}", page.display());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command says what it does and every flag and argument what it
    /// takes: `--help`, the completions and the man pages are made of these.
    #[test]
    fn every_command_and_every_flag_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            if cmd.get_about().is_none() && path != "chitin" {
                missing.push(format!("`{path}`: no description"));
            }
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_hide_set() {
                    continue;
                }
                if arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("`{path}` {}: no help", arg.get_long().map_or(id.to_string(), |l| format!("--{l}"))));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "chitin", &mut missing);
        assert!(missing.is_empty(), "{} without help:\n{}", missing.len(), missing.join("\n"));
    }

    #[test]
    fn completions_and_man_pages_cover_every_command() {
        let mut bash = Vec::new();
        clap_complete::generate(clap_complete::Shell::Bash, &mut Cli::command(), "chitin", &mut bash);
        let bash = String::from_utf8(bash).unwrap();
        let dir = tempfile::tempdir().unwrap();
        clap_mangen::generate_to(Cli::command(), dir.path()).unwrap();
        for sub in Cli::command().get_subcommands() {
            let name = sub.get_name();
            assert!(bash.contains(name), "no `{name}` in the bash completions");
            assert!(dir.path().join(format!("chitin-{name}.1")).exists(), "no man page of `chitin {name}`");
        }
        assert!(dir.path().join("chitin.1").exists());
    }
}
