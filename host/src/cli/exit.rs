//! The exit codes of every `chitin` command, one table (README, "Exit
//! codes"; `chitin --help`): scripts tell a failure from a usage mistake,
//! a refusal and an append whose outcome is unknown without reading stderr.

use std::process::ExitCode;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Exit {
    /// It did what was asked.
    Done = 0,
    /// It failed: an error, a check that found problems, a run that did not
    /// pass, an append certainly not applied.
    Failed = 1,
    /// The command line was wrong (clap's own code for usage errors).
    Usage = 2,
    /// The cluster declined the request (a dispatch to a target another
    /// instance owns); nothing was done.
    Declined = 3,
    /// An append's outcome is unknown: it may have been applied. Retry with
    /// the same `--request-id`, which applies at most once.
    Unknown = 4,
}

impl From<Exit> for ExitCode {
    fn from(e: Exit) -> ExitCode {
        ExitCode::from(e as u8)
    }
}

/// The table, for `chitin --help`.
pub(crate) const TABLE: &str = "Exit codes:
  0  done
  1  failed (an error, a check with problems, a run that did not pass, an append not applied)
  2  usage: the command line was wrong
  3  declined by the cluster (a dispatch to a target another instance owns); nothing was done
  4  an append's outcome is unknown: retry with the same --request-id";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_help_table_lists_every_code_once() {
        for (e, first_words) in [
            (Exit::Done, "0  done"),
            (Exit::Failed, "1  failed"),
            (Exit::Usage, "2  usage"),
            (Exit::Declined, "3  declined"),
            (Exit::Unknown, "4  an append's outcome is unknown"),
        ] {
            assert!(TABLE.contains(&format!("  {first_words}")), "{e:?}");
            assert!(first_words.starts_with(&(e as u8).to_string()));
        }
        assert_eq!(TABLE.lines().count(), 6);
    }
}
