//! The service refuses a database it cannot use with a message that says
//! what to pass instead. (This test also makes `cargo test` build the
//! binary, which the host's fault-suite tests run.)

use std::process::Command;

fn service(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_chitin-example-kv")).args(args).output().expect("run the service");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn a_database_of_another_kind_is_refused_by_name() {
    let (ok, stderr) = service(&["--database", "redis://127.0.0.1:6379"]);
    assert!(!ok);
    assert!(stderr.contains("--database must be a postgres:// or mysql:// URL") && stderr.contains("\"redis\""), "{stderr}");
}

#[test]
fn a_database_that_does_not_answer_is_named_as_such() {
    // Port 1 on loopback: nothing listens there.
    let (ok, stderr) = service(&["--database", "postgres://nobody@127.0.0.1:1/none"]);
    assert!(!ok);
    assert!(stderr.contains("--database: cannot connect"), "{stderr}");
}
