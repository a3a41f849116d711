//! `-o/--output table|json|yaml`: how every command that prints data prints
//! it. The data is built once, as a serde value; `table` is the command's own
//! rendering for people, `json` and `yaml` the same value for tools.

use serde::Serialize;

/// The output format of a command that prints data.
#[derive(clap::Args, Clone, Copy, Debug)]
pub(crate) struct OutputArg {
    /// Output format: table (for people), json or yaml (for tools; the same
    /// fields in both).
    #[arg(short = 'o', long = "output", value_name = "FORMAT", default_value = "table", value_parser = parse_format)]
    format: Format,
    /// The older spelling of `-o json`.
    #[arg(long, hide = true)]
    json: bool,
}

/// A format `-o` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Table,
    Json,
    Yaml,
}

impl OutputArg {
    /// `-o table`, for the paths that print for people whatever was asked.
    pub(crate) const TABLE: OutputArg = OutputArg { format: Format::Table, json: false };

    pub(crate) fn format(self) -> Format {
        if self.json { Format::Json } else { self.format }
    }

    /// Whether the command prints its table (`-o table`, the default).
    pub(crate) fn is_table(self) -> bool {
        self.format() == Format::Table
    }

    /// Prints `value` as one JSON or YAML document (JSON for `-o table` of
    /// data that has no table).
    pub(crate) fn print_data(self, value: &impl Serialize) {
        match self.format() {
            Format::Yaml => emit(serde_norway::to_string(value).map_err(|e| e.to_string())),
            Format::Table | Format::Json => {
                emit(serde_json::to_string_pretty(value).map(|t| t + "\n").map_err(|e| e.to_string()))
            }
        }
    }

    /// Prints `value` as one record of a stream: a JSON line, or a YAML
    /// document of its own (`---` first), so that a reader can start on
    /// the first before the last is printed.
    pub(crate) fn print_record(self, value: &impl Serialize) {
        match self.format() {
            Format::Yaml => emit(serde_norway::to_string(value).map(|t| format!("---\n{t}")).map_err(|e| e.to_string())),
            Format::Table | Format::Json => emit(serde_json::to_string(value).map(|t| t + "\n").map_err(|e| e.to_string())),
        }
    }
}

/// Prints serialized data; a value that cannot be serialized (no command's
/// can) is said on stderr rather than printed half.
fn emit(text: Result<String, String>) {
    match text {
        Ok(t) => print!("{t}"),
        Err(e) => eprintln!("cannot print the data: {e}"),
    }
}

/// `-o`'s value. A path (the meaning `--output` had on file-writing
/// commands, now `--file`) is refused with that hint.
fn parse_format(s: &str) -> Result<Format, String> {
    match s {
        "table" => Ok(Format::Table),
        "json" => Ok(Format::Json),
        "yaml" => Ok(Format::Yaml),
        _ if s.contains(['/', '.']) => Err(format!(
            "`{s}` is not an output format (table, json, yaml): `-o/--output` chooses how data is printed; \
             to write a file, use `--file {s}`"
        )),
        _ => Err(format!("`{s}` is not an output format; use table, json or yaml")),
    }
}

/// The value parser of a file-writing command's hidden `--output`: the
/// flag that once named its file is refused, pointing at `--file`.
pub(crate) fn moved_to_file(s: &str) -> Result<std::path::PathBuf, String> {
    Err(format!("`--output` no longer names the file to write; write the file with `--file {s}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The commands that print data, each with `-o`; no other takes it,
    /// and no command shows a `--json` of its own (the old spelling is
    /// hidden; `policy fixture --json` names the fixtures' file format).
    #[test]
    fn every_command_that_prints_data_takes_dash_o() {
        fn walk(cmd: &clap::Command, path: &str, with: &mut Vec<String>, json: &mut Vec<String>) {
            let args: Vec<&clap::Arg> = cmd.get_arguments().collect();
            if args.iter().any(|a| a.get_long() == Some("output") && a.get_short() == Some('o')) {
                with.push(path.to_string());
            }
            if args.iter().any(|a| a.get_long() == Some("json") && !a.is_hide_set()) {
                json.push(path.to_string());
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), with, json);
            }
        }
        let (mut with, mut json) = (Vec::new(), Vec::new());
        walk(&crate::cli::Cli::command(), "chitin", &mut with, &mut json);
        let want = [
            "chitin journal append",
            "chitin journal read",
            "chitin cluster status",
            "chitin cluster load",
            "chitin cluster instances",
            "chitin cluster upgrade-status",
            "chitin cluster get-config",
            "chitin affinity owner",
            "chitin affinity list",
            "chitin deployments start",
            "chitin deployments update",
            "chitin deployments finish",
            "chitin deployments show",
            "chitin deployments list",
            "chitin config validate",
            "chitin config validate-transition",
            "chitin config diff",
            "chitin config show",
            "chitin config route",
            "chitin policy inspect",
            "chitin policy diff",
        ];
        let mut want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
        want.sort();
        with.sort();
        assert_eq!(with, want);
        assert_eq!(json, ["chitin policy fixture"]);
    }

    #[test]
    fn formats_are_named_and_a_path_gets_the_file_hint() {
        let cases: [(&str, Result<Format, &str>); 6] = [
            ("table", Ok(Format::Table)),
            ("json", Ok(Format::Json)),
            ("yaml", Ok(Format::Yaml)),
            ("xml", Err("use table, json or yaml")),
            ("cluster_config.json", Err("use `--file cluster_config.json`")),
            ("out/c", Err("use `--file out/c`")),
        ];
        for (input, want) in cases {
            match (parse_format(input), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{input}"),
                (Err(e), Err(part)) => assert!(e.contains(part), "{input}: {e}"),
                (got, want) => panic!("{input}: {got:?}, wanted {want:?}"),
            }
        }
    }
}
