//! `chitin config …` end to end: every case under `tests/fixtures/topology/`
//! through the real binary, plus the writing verbs on a scratch directory.
//!
//! A fixture case is a directory holding either `config.json` (checked with
//! `chitin config validate`) or `old.json` and `new.json` (checked with
//! `chitin config validate-transition --from old.json --to new.json`), and an
//! `expect.toml`:
//!
//! ```toml
//! description = "optional"
//! verdict = "valid"            # or "invalid": the exit status
//! codes = ["keyspace-gap"]     # exactly the rule codes reported (error[code])
//! output_contains = ["…"]      # optional substrings of stdout + stderr
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_chitin");

fn fixtures_dir() -> PathBuf {
    crate::support::repo_root().join("tests/fixtures/topology")
}

fn chitin(args: &[&str]) -> Output {
    Command::new(BIN).args(args).output().expect("run chitin")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The codes of every `error[code]` in the output.
fn reported_codes(out: &str) -> BTreeSet<String> {
    out.split("error[").skip(1).filter_map(|s| s.split_once(']').map(|(c, _)| c.to_owned())).collect()
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    #[allow(dead_code)]
    description: Option<String>,
    verdict: String,
    codes: Vec<String>,
    #[serde(default)]
    output_contains: Vec<String>,
}

fn run_case(dir: &Path) -> Result<(), String> {
    let expect: Expect =
        toml::from_str(&std::fs::read_to_string(dir.join("expect.toml")).map_err(|e| format!("expect.toml: {e}"))?)
            .map_err(|e| format!("expect.toml: {e}"))?;
    let single = dir.join("config.json");
    let output = if single.exists() {
        chitin(&["config", "validate", single.to_str().unwrap()])
    } else {
        let (old, new) = (dir.join("old.json"), dir.join("new.json"));
        chitin(&["config", "validate-transition", "--from", old.to_str().unwrap(), "--to", new.to_str().unwrap()])
    };
    let out = text(&output);
    let valid = match expect.verdict.as_str() {
        "valid" => true,
        "invalid" => false,
        v => return Err(format!("verdict `{v}` is neither valid nor invalid")),
    };
    if output.status.success() != valid {
        return Err(format!("expected {}, exit status {:?}:\n{out}", expect.verdict, output.status.code()));
    }
    if !valid && output.status.code() != Some(1) {
        return Err(format!("an invalid case exits with 1, got {:?}:\n{out}", output.status.code()));
    }
    let want: BTreeSet<String> = expect.codes.iter().cloned().collect();
    let got = reported_codes(&out);
    if got != want {
        return Err(format!("expected codes {want:?}, reported {got:?}:\n{out}"));
    }
    for needle in &expect.output_contains {
        if !out.contains(needle.as_str()) {
            return Err(format!("output lacks `{needle}`:\n{out}"));
        }
    }
    Ok(())
}

#[test]
fn fixtures() {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(fixtures_dir())
        .expect("tests/fixtures/topology")
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    assert!(dirs.len() >= 60, "only {} fixture cases", dirs.len());
    let failures: Vec<String> = dirs
        .iter()
        .filter_map(|d| run_case(d).err().map(|e| format!("--- {}: {e}", d.file_name().unwrap().to_string_lossy())))
        .collect();
    assert!(failures.is_empty(), "{} of {} cases failed:\n{}", failures.len(), dirs.len(), failures.join("\n"));
}

#[test]
fn every_rule_code_has_an_invalid_fixture() {
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(fixtures_dir()).unwrap() {
        let p = e.unwrap().path().join("expect.toml");
        if let Ok(t) = std::fs::read_to_string(&p) {
            let x: Expect = toml::from_str(&t).unwrap();
            seen.extend(x.codes);
        }
    }
    for code in chitin::topology::RuleCode::ALL {
        assert!(seen.contains(code.as_str()), "no fixture reports {code}");
    }
}

struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("chitin-topology-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
    fn path(&self, f: &str) -> String {
        self.0.join(f).to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ok(o: Output) -> String {
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    t
}

#[test]
fn the_reference_walkthrough() {
    let s = Scratch::new("walk");
    let cfg = s.path("cluster_config.json");
    ok(chitin(&[
        "config",
        "init",
        "--node-id=node-01",
        "--node-address=ip-10-0-10-14.us-west-2.compute.internal:7000",
        "--node-id=node-02",
        "--node-address=ip-10-0-10-63.us-west-2.compute.internal:7000",
        "--node-id=node-03",
        "--node-address=ip-10-0-10-78.us-west-2.compute.internal:7000",
        &format!("--file={cfg}"),
    ]));
    let v1 = std::fs::read_to_string(&cfg).unwrap();
    assert!(v1.contains("\"version\": 1"), "{v1}");
    // init refuses to overwrite.
    let again = chitin(&[
        "config",
        "init",
        "--node-id=a",
        "--node-address=a:1",
        "--node-id=b",
        "--node-address=b:1",
        "--node-id=c",
        "--node-address=c:1",
        &format!("--file={cfg}"),
    ]);
    assert!(!again.status.success());
    std::fs::copy(&cfg, s.path("v1.json")).unwrap();

    ok(chitin(&[
        "config",
        "add-application",
        &format!("--config={cfg}"),
        "--name=MyFirstApplication",
        "--implementation=MyFirstApplication",
        "--shards-count=16",
    ]));
    let v2 = std::fs::read_to_string(&cfg).unwrap();
    assert!(v2.contains("\"id\": \"MyFirstApplication_00_0f\""), "{v2}");
    assert!(v2.contains("\"id\": \"MyFirstApplication_f0_ff\""), "{v2}");
    assert!(v2.contains("\"version\": 2"));
    std::fs::copy(&cfg, s.path("v2.json")).unwrap();

    // Reproducible: the same command on the same config writes the same file.
    std::fs::copy(s.path("v1.json"), s.path("again.json")).unwrap();
    ok(chitin(&[
        "config",
        "add-application",
        "--config",
        &s.path("again.json"),
        "--name",
        "MyFirstApplication",
        "--implementation",
        "MyFirstApplication",
        "--shards-count",
        "16",
    ]));
    assert_eq!(std::fs::read_to_string(s.path("again.json")).unwrap(), v2);

    ok(chitin(&[
        "config",
        "add-application",
        "--config",
        &cfg,
        "--name",
        "MySecondApplication",
        "--implementation",
        "MySecondApplication",
        "--shards-count",
        "32",
    ]));
    ok(chitin(&[
        "config",
        "add-node",
        "--config",
        &cfg,
        "--node-id",
        "node-04",
        "--node-address",
        "ip-10-0-10-90.us-west-2.compute.internal:7000",
        "--metadata",
        "zone=us-west-2b",
    ]));
    let v4 = std::fs::read_to_string(&cfg).unwrap();
    assert!(v4.contains("\"version\": 4") && v4.contains("\"zone\""), "{v4}");

    let t = ok(chitin(&["config", "validate", &cfg]));
    assert!(t.contains("valid (version 4: 4 node(s), 2 application(s), 48 shard(s), 144 replica(s))"), "{t}");
    let t = ok(chitin(&["config", "validate-transition", "--from", &s.path("v1.json"), "--to", &cfg]));
    assert!(t.contains("valid transition"), "{t}");
    let t = ok(chitin(&["config", "diff", &s.path("v2.json"), &cfg]));
    assert!(
        t.contains("version 2 → 4") && t.contains("+ node        node-04") && t.contains("+ application MySecondApplication"),
        "{t}"
    );
    assert!(t.contains("transition: valid"), "{t}");

    let t = ok(chitin(&["config", "show", &cfg]));
    assert!(
        t.contains("NODE") && t.contains("APPLICATION") && t.contains("MySecondApplication  MySecondApplication  3   32"),
        "{t}"
    );
    let t = ok(chitin(&["config", "show", "--json", &cfg]));
    let v: serde_json::Value = serde_json::from_str(&t).unwrap();
    assert_eq!(v["version"], 4);
    assert_eq!(v["applications"][1]["shards"]["active"], 32);
    let t = ok(chitin(&["config", "route", &cfg, "--application", "MyFirstApplication", "--key", "0800abcd"]));
    assert!(t.starts_with("MyFirstApplication_00_0f [00000000, 0fffffff]  active"), "{t}");
}

#[test]
fn writing_verbs_refuse_invalid_results() {
    let s = Scratch::new("refuse");
    let cfg = s.path("c.json");
    // Two nodes: invalid, nothing written.
    let o = chitin(&[
        "config",
        "init",
        "--node-id",
        "a",
        "--node-address",
        "a:1",
        "--node-id",
        "b",
        "--node-address",
        "b:1",
        "--file",
        &cfg,
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("error[too-few-nodes]"));
    assert!(!Path::new(&cfg).exists());
    // Unpaired flags are a usage error.
    let o = chitin(&["config", "init", "--node-id", "a", "--node-id", "b", "--node-address", "b:1", "--file", &cfg]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    ok(chitin(&[
        "config",
        "init",
        "--node-id",
        "a",
        "--node-address",
        "a:1",
        "--node-id",
        "b",
        "--node-address",
        "b:1",
        "--node-id",
        "c",
        "--node-address",
        "c:1",
        "--file",
        &cfg,
    ]));
    let before = std::fs::read_to_string(&cfg).unwrap();
    // Duplicate address.
    let o = chitin(&["config", "add-node", "--config", &cfg, "--node-id", "d", "--node-address", "a:1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o).contains("error[node-address-duplicate]"), "{}", text(&o));
    // Not a power of two; replication factor above the node count.
    assert!(!chitin(&["config", "add-application", "--config", &cfg, "--name", "X", "--shards-count", "12"]).status.success());
    let o = chitin(&["config", "add-application", "--config", &cfg, "--name", "X", "--replication-factor", "4"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("insufficient nodes") || text(&o).contains("error["), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&cfg).unwrap(), before, "a refused command wrote the file");
}

#[test]
fn malformed_json_is_reported_with_line_and_column() {
    let s = Scratch::new("malformed");
    let f = s.path("bad.json");
    std::fs::write(&f, "{\n  \"nodes\": [\n    { \"id\": \"a\" \"grpc_address\": \"x\" }\n  ],\n  \"version\": 1\n}\n").unwrap();
    for args in [vec!["config", "validate", &f], vec!["config", "show", &f], vec!["config", "diff", &f, &f]] {
        let o = chitin(&args);
        assert_eq!(o.status.code(), Some(1));
        let t = text(&o);
        assert!(t.contains("error[malformed-json]") && t.contains("line 3, column 17"), "{t}");
    }
    let o = chitin(&["config", "validate", "--json", &f]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["error"]["code"], "malformed-json");
    let o = chitin(&["config", "validate", &s.path("missing.json")]);
    assert!(text(&o).contains("error[unreadable-file]"));
}

#[test]
fn json_output_of_validation() {
    let dir = fixtures_dir().join("invalid-many-violations");
    let o = chitin(&["config", "validate", "--json", dir.join("config.json").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["valid"], false);
    assert!(v["violations"].as_array().unwrap().len() >= 5);
    let dir = fixtures_dir().join("transition-invalid-replica-moved");
    let o = chitin(&[
        "config",
        "validate-transition",
        "--json",
        "--from",
        dir.join("old.json").to_str().unwrap(),
        "--to",
        dir.join("new.json").to_str().unwrap(),
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["violations"][0]["scope"], "transition");
    assert_eq!(v["violations"][0]["code"], "replica-node-changed");
}

/// `-o json` and `-o yaml` print the same data (the older `--json` is
/// `-o json`); a path given to `-o`, or to a file-writing command's old
/// `--output`, is refused with the `--file` hint and writes nothing.
#[test]
fn every_output_format_prints_the_same_data_and_an_old_output_path_gets_a_hint() {
    let invalid = fixtures_dir().join("invalid-many-violations/config.json");
    let valid = fixtures_dir().join("valid-reference-layout/config.json");
    for args in [
        vec!["config", "validate", invalid.to_str().unwrap()],
        vec!["config", "show", valid.to_str().unwrap()],
        vec!["config", "route", valid.to_str().unwrap(), "--application", "GrackleLocks", "--key", "80"],
    ] {
        let with = |extra: &[&str]| chitin(&[&args[..], extra].concat());
        let json: serde_json::Value = serde_json::from_slice(&with(&["-o", "json"]).stdout).unwrap();
        let yaml: serde_json::Value = serde_norway::from_slice(&with(&["--output", "yaml"]).stdout).unwrap();
        let old: serde_json::Value = serde_json::from_slice(&with(&["--json"]).stdout).unwrap();
        assert!(json.is_object(), "{args:?}: {json}");
        assert_eq!(yaml, json, "{args:?}");
        assert_eq!(old, json, "{args:?}");
        let table = text(&with(&[]));
        assert!(serde_json::from_str::<serde_json::Value>(&table).is_err(), "{args:?}: the table is JSON:\n{table}");
    }
    let s = Scratch::new("output-formats");
    let cfg = s.path("c.json");
    let init = ["config", "init", "--node-id", "a", "--node-address", "a:1", "--node-id", "b", "--node-address", "b:1"];
    let xml = ["config", "validate", valid.to_str().unwrap(), "-o", "xml"];
    for (args, hint) in [
        (
            [&init[..], &["--node-id", "c", "--node-address", "c:1", "--output", &cfg]].concat(),
            format!("write the file with `--file {cfg}`"),
        ),
        (xml.to_vec(), "use table, json or yaml".to_string()),
    ] {
        let o = chitin(&args);
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(&hint), "{hint}: {}", text(&o));
        assert!(!Path::new(&cfg).exists());
    }
    let o = chitin(&["cluster", "get-config", "--node-address", "127.0.0.1:9", "--output", "cluster_config.json"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("use `--file cluster_config.json`"), "{}", text(&o));
}

/// A reader that went away (`chitin … | head`) ends the command quietly
/// with the shell's SIGPIPE status, not with a panic on the next print.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let config = fixtures_dir().join("valid-reference-layout/config.json");
    assert!(config.exists(), "fixture {} is missing", config.display());
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out =
        Command::new(BIN).args(["config", "validate", config.to_str().unwrap()]).stdout(writer).output().expect("run chitin");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(141), "{:?} {stderr}", out.status);
}

/// An error names each cause once: the I/O error a message quotes is not
/// appended to it again.
#[test]
fn an_error_prints_its_cause_once() {
    let out = chitin(&["config", "validate", "/nonexistent/cluster.json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
}
