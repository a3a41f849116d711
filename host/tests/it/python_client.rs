//! Runs the Python client's own tests (`clients/python`, pytest) against
//! the `chitin` binary under test. They need python3; grpcio, grpcio-tools
//! and pytest come from a virtualenv under target/ (made once, on first
//! run). Without python3 the test prints SKIPPED with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The grpcio-tools the committed stubs were generated with
/// (clients/python/pyproject.toml): `generate.py --check` compares
/// byte for byte, so the test generates with the same one.
const PIP_PACKAGES: &[&str] = &["grpcio>=1.85.1", "protobuf>=7.35.1", "grpcio-tools==1.85.1", "pytest>=7"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("host/ has a parent").to_path_buf()
}

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

/// A virtualenv with the test's packages, under target/.
fn venv(python3: &str) -> PathBuf {
    let dir = root().join("target").join("python-client-venv");
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
    let package = root().join("clients").join("python");
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
