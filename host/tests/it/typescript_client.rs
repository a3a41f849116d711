//! Runs the TypeScript client's own tests (`clients/typescript`, `node
//! --test`) against the `chitin` binary under test, the shared PostgreSQL,
//! MariaDB and Redis: its packages come from npm (`npm ci`, from the
//! committed lock file) into the package's `node_modules`, once per lock
//! file; then `npm run build` (tsc) and the tests.

use std::path::{Path, PathBuf};
use std::process::Command;

fn package() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("clients").join("typescript")
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let text = format!("{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{what} failed ({}):\n{text}", out.status);
    text
}

/// The package installed and built, once at a time across this file's
/// test processes (a lock beside it); `None` (with the reason printed) when
/// Node.js is not installed.
fn built() -> Option<(PathBuf, std::fs::File)> {
    if Command::new("node").arg("--version").output().is_err() || Command::new("npm").arg("--version").output().is_err() {
        println!("SKIPPED: node and npm are not installed; the TypeScript client (clients/typescript) was not tested");
        return None;
    }
    let dir = package();
    let lock = std::fs::File::create(dir.join(".build.lock")).expect("the build's lock file");
    lock.lock().expect("lock the build");
    let wanted = std::fs::read_to_string(dir.join("package-lock.json")).expect("clients/typescript/package-lock.json");
    let installed = dir.join("node_modules").join(".chitin-lock");
    if std::fs::read_to_string(&installed).ok().as_deref() != Some(wanted.as_str()) {
        run(Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(&dir), "npm ci");
        std::fs::write(&installed, &wanted).expect("mark node_modules installed");
    }
    run(Command::new("npm").args(["run", "build"]).current_dir(&dir), "npm run build");
    Some((dir, lock))
}

#[test]
fn the_typescript_client_passes_its_tests() {
    let Some((dir, _lock)) = built() else { return };
    let out = run(
        Command::new("npm").args(["test"]).current_dir(&dir).env("CHITIN_BIN", env!("CARGO_BIN_EXE_chitin")),
        "npm test (clients/typescript)",
    );
    // The runner's own count, so a run that found no test is no pass.
    assert!(out.contains("# fail 0") && !out.contains("# pass 0"), "{out}");
}

/// The TypeScript fence runs the Rust crate's statements and scripts,
/// verbatim (`pg` takes `$n`, `mysql2` takes `?`): one definition, checked here.
#[test]
fn the_typescript_fence_runs_the_rust_statements() {
    use chitin_client::fence::{redis as redis_fence, table};
    let Some((dir, _lock)) = built() else { return };
    let script = "const f = require('./dist/src/fence'); const d = (x) => ({ migration: x.migration, claim: x.claim, \
                  retire: x.retire, read: x.read, check: x.check }); console.log(JSON.stringify({ pg: d(f.POSTGRES), \
                  my: d(f.MYSQL), claim: f.CLAIM_SCRIPT, write: f.WRITE_SCRIPT }))";
    let out = Command::new("node").args(["-e", script]).current_dir(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let want = serde_json::json!({
        "pg": {
            "migration": table::POSTGRES_MIGRATION, "claim": table::POSTGRES_CLAIM, "retire": table::POSTGRES_RETIRE,
            "read": table::POSTGRES_READ, "check": table::POSTGRES_CHECK,
        },
        "my": {
            "migration": table::MYSQL_MIGRATION, "claim": table::MYSQL_CLAIM, "retire": table::MYSQL_RETIRE,
            "read": table::MYSQL_READ, "check": table::MYSQL_CHECK,
        },
        "claim": redis_fence::CLAIM_SCRIPT,
        "write": redis_fence::WRITE_SCRIPT,
    });
    assert_eq!(got, want);
}
