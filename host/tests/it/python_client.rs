//! Runs the Python client's own tests (`clients/python`, pytest) against
//! the `chitin` binary under test. They need python3; grpcio, grpcio-tools
//! and pytest come from a virtualenv under target/ (made once, on first
//! run). Without python3 the test prints SKIPPED with the reason.

use std::path::PathBuf;
use std::process::Command;

/// The grpcio-tools the committed stubs were generated with
/// (clients/python/pyproject.toml): `generate.py --check` compares
/// byte for byte, so the test generates with the same one.
/// The drivers are those of the fence tests (`tests/test_fence.py`);
/// build and setuptools make the package (`python -m build`).
const PIP_PACKAGES: &[&str] = &[
    "grpcio>=1.85.1",
    "protobuf>=7.35.1",
    "grpcio-tools==1.85.1",
    "pytest>=7",
    "psycopg[binary]>=3.2",
    "PyMySQL>=1.1",
    "redis>=5",
    "build>=1",
    "opentelemetry-api>=1.20",
    "setuptools>=70.1",
];

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A virtualenv with the test's packages, under target/. The tests of this
/// file run in processes of their own: a lock beside it lets one make it.
fn venv(python3: &str) -> PathBuf {
    let dir = crate::support::repo_root().join("target").join("python-client-venv");
    std::fs::create_dir_all(dir.parent().expect("under target/")).expect("create target/");
    let lock = std::fs::File::create(dir.with_extension("lock")).expect("the venv's lock file");
    lock.lock().expect("lock the venv");
    let python = dir.join("bin").join("python");
    let ready = dir.join(".packages");
    let wanted = PIP_PACKAGES.join(" ");
    if std::fs::read_to_string(&ready).ok().as_deref() != Some(wanted.as_str()) {
        if !python.exists() {
            run(Command::new(python3).args(["-m", "venv"]).arg(&dir), "python3 -m venv");
        }
        run(
            Command::new(&python).args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"]).args(PIP_PACKAGES),
            "pip install",
        );
        std::fs::write(&ready, &wanted).expect("mark the venv ready");
    }
    python
}

#[test]
fn the_python_client_passes_its_tests() {
    let python3 = "python3";
    if Command::new(python3).arg("--version").output().is_err() {
        println!("SKIPPED: python3 is not installed; the Python client (clients/python) was not tested");
        return;
    }
    let python = venv(python3);
    let package = crate::support::repo_root().join("clients").join("python");
    run(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider"])
            .arg(&package)
            .current_dir(&package)
            .env("CHITIN_BIN", env!("CARGO_BIN_EXE_chitin"))
            .env("PYTHONPATH", &package)
            .env("PYTHONDONTWRITEBYTECODE", "1"),
        "pytest clients/python",
    );
}

/// The Python fence runs the Rust crate's statements and scripts, with the
/// placeholders a DB-API driver takes: one definition, checked here.
#[test]
fn the_python_fence_runs_the_rust_statements() {
    use chitin_client::fence::{redis as redis_fence, table};
    if Command::new("python3").arg("--version").output().is_err() {
        println!("SKIPPED: python3 is not installed; the Python fence was not compared");
        return;
    }
    let python = venv("python3");
    let package = crate::support::repo_root().join("clients").join("python");
    let script = "import json\nfrom chitin_client import fence\nprint(json.dumps({'pg': fence.POSTGRES._asdict(), \
                  'my': fence.MYSQL._asdict(), 'claim': fence.CLAIM_SCRIPT, 'write': fence.WRITE_SCRIPT}))";
    let out = Command::new(&python).args(["-c", script]).env("PYTHONPATH", &package).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let dbapi = |sql: &str| {
        let mut text = sql.replace('?', "%s");
        for n in (1..=9).rev() {
            text = text.replace(&format!("${n}"), "%s");
        }
        text
    };
    let want = serde_json::json!({
        "pg": {
            "migration": table::POSTGRES_MIGRATION, "claim": dbapi(table::POSTGRES_CLAIM), "retire": dbapi(table::POSTGRES_RETIRE),
            "read": dbapi(table::POSTGRES_READ), "check": dbapi(table::POSTGRES_CHECK),
        },
        "my": {
            "migration": table::MYSQL_MIGRATION, "claim": dbapi(table::MYSQL_CLAIM), "retire": dbapi(table::MYSQL_RETIRE),
            "read": dbapi(table::MYSQL_READ), "check": dbapi(table::MYSQL_CHECK),
        },
        "claim": redis_fence::CLAIM_SCRIPT,
        "write": redis_fence::WRITE_SCRIPT,
    });
    assert_eq!(got, want);
}

/// A Python application takes part in handoffs through the client's
/// acknowledging watch (`tests/acknowledging_app.py`): each shard of its
/// drained node is released by the application (the node takes the answer)
/// and lost only after that, well before the release timeout would have let
/// the handoff go on without it.
#[tokio::test(flavor = "multi_thread")]
async fn a_python_application_releases_each_draining_shard_before_it_moves() {
    use crate::support::cluster::*;
    use chitin::api::proto;
    use std::io::BufRead;
    if Command::new("python3").arg("--version").output().is_err() {
        println!("SKIPPED: python3 is not installed; the Python watch was not tested against a cluster");
        return;
    }
    let python = venv("python3");
    const RELEASE_TIMEOUT_MS: u64 = 2_800;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, s| {
        s.leases.ttl_secs = Some(9.0);
        s.leases.renew_interval_secs = Some(3.0);
        s.leases.release_timeout_ms = Some(RELEASE_TIMEOUT_MS);
    })
    .await
    .unwrap();
    let status = c.wait_settled(std::time::Duration::from_secs(60)).await.unwrap();
    let w = c.busiest(&status);
    let package = crate::support::repo_root().join("clients").join("python");
    let mut app = Command::new(&python)
        .arg(package.join("tests").join("acknowledging_app.py"))
        .arg(&c.nodes[w].api)
        .env("PYTHONPATH", &package)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, done) = std::sync::mpsc::channel();
    let stdout = app.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let _ = lines.send(serde_json::from_str::<serde_json::Value>(&line).expect("a JSON line"));
        }
    });
    let within = std::time::Duration::from_secs(60);
    let first = done.recv_timeout(within).expect("the application subscribed");
    let held: Vec<String> = serde_json::from_value(first["held"].clone()).unwrap();
    assert!(!held.is_empty(), "{first}");
    c.nodes[w].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap();
    let status = app.wait().unwrap();
    let events: Vec<serde_json::Value> = done.try_iter().collect();
    assert!(status.success(), "the application failed: {events:?}\n{}", c.logs());
    for shard in &held {
        let of = |kind: &str| events.iter().find(|e| e["event"] == kind && e["shard"] == shard.as_str());
        let (released, lost) = (of("released"), of("lost"));
        let (Some(r), Some(l)) = (released, lost) else { panic!("{shard}: released {released:?}, lost {lost:?}") };
        assert_eq!(r["ok"], true, "the node did not take the RELEASED of {shard}: {r}");
        let (r, l) = (r["at"].as_f64().unwrap(), l["at"].as_f64().unwrap());
        assert!(r < l, "{shard} was lost before the application released it");
        assert!(l - r < RELEASE_TIMEOUT_MS as f64 / 1000.0 * 0.7, "{shard}: lost {:.2} s after RELEASED", l - r);
    }
    c.teardown().await.unwrap();
}

/// The package builds as published: an sdist and a wheel (`python -m
/// build`, from a copy so the checkout stays clean), the wheel holding the
/// generated stubs and naming its dependencies and license.
#[test]
fn the_python_package_builds_an_sdist_and_a_wheel() {
    if Command::new("python3").arg("--version").output().is_err() {
        println!("SKIPPED: python3 is not installed; the Python package was not built");
        return;
    }
    let python = venv("python3");
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    run(Command::new("cp").arg("-r").arg(crate::support::repo_root().join("clients/python")).arg(&src), "copy clients/python");
    let dist = work.path().join("dist");
    // No isolation: setuptools comes from the venv, not a download per run.
    run(Command::new(&python).args(["-m", "build", "--no-isolation", "--outdir"]).arg(&dist).arg(&src), "python -m build");
    let names: Vec<String> =
        std::fs::read_dir(&dist).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let wheel = names.iter().find(|n| n.ends_with("-py3-none-any.whl")).unwrap_or_else(|| panic!("no wheel: {names:?}"));
    assert!(names.iter().any(|n| n.ends_with(".tar.gz")), "no sdist: {names:?}");
    let listing = Command::new(&python)
        .args([
            "-c",
            "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); print('\\n'.join(z.namelist())); \
                      print(z.read([n for n in z.namelist() if n.endswith('/METADATA')][0]).decode())",
        ])
        .arg(dist.join(wheel))
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    for want in ["chitin_client/proto/chitin_pb2.py", "chitin_client/fence.py", "Requires-Dist: grpcio>=1.85.1", "Apache-2.0"] {
        assert!(listing.contains(want), "{want} is not in the wheel:\n{listing}");
    }
}
