//! The published packages build from what they ship: `chitin-proto` and
//! `chitin-client` with `cargo package` (which builds each from its
//! `.crate`, outside this workspace), light by default; the Python client's
//! sdist and wheel are in `python_client`.

use std::process::Command;

/// `cargo` without the outer build's environment; a package's build goes
/// to a directory of its own under the workspace's (kept between CI runs).
fn cargo(args: &[&str]) -> String {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (key, _) in std::env::vars() {
        if key.starts_with("CARGO_") && key != "CARGO_HOME" || key == "RUSTFLAGS" || key == "RUSTC_WRAPPER" {
            cmd.env_remove(&key);
        }
    }
    if args[0] == "package" {
        cmd.env("CARGO_TARGET_DIR", crate::support::build_dir().join("package-check"));
    }
    let out = cmd.args(args).current_dir(crate::support::repo_root()).output().expect("run cargo");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "cargo {args:?} failed ({}):\n{text}", out.status);
    text
}

/// Both crates package (each file they need inside them: the proto file,
/// the README, the license) and build from their packages with the
/// dependencies already on this machine.
#[test]
fn the_client_crates_package_and_build_from_their_packages() {
    // `--allow-dirty`: a developer's uncommitted change is what is packaged.
    let text = cargo(&["package", "-p", "chitin-proto", "-p", "chitin-client", "--offline", "--locked", "--allow-dirty"]);
    for crate_ in ["chitin-proto", "chitin-client"] {
        assert!(text.contains(&format!("Verifying {crate_} v")), "{crate_} was not built from its package:\n{text}");
    }
    let proto = cargo(&["package", "--list", "-p", "chitin-proto", "--offline", "--allow-dirty"]);
    let client = cargo(&["package", "--list", "-p", "chitin-client", "--offline", "--allow-dirty"]);
    for (list, file) in [(&proto, "chitin.proto"), (&proto, "build.rs"), (&proto, "LICENSE"), (&proto, "README.md")]
        .into_iter()
        .chain([(&client, "LICENSE"), (&client, "README.md"), (&client, "src/fence/table.rs")])
    {
        assert!(list.lines().any(|l| l == file), "{file} is not in the package:\n{list}");
    }
}

/// An application that takes the client with its defaults gets the node
/// client alone: no server side of tonic, no database driver.
#[test]
fn the_client_is_light_by_default_and_the_fences_are_features() {
    let tree = |features: &[&str]| {
        let mut args = vec!["tree", "-p", "chitin-client", "-e", "normal", "--prefix", "none", "-f", "{p} {f}", "--offline"];
        args.extend_from_slice(features);
        cargo(&args)
    };
    let light = tree(&[]);
    let tonic = light.lines().find(|l| l.starts_with("tonic v")).unwrap_or_else(|| panic!("no tonic:\n{light}"));
    assert!(!tonic.split([' ', ',']).any(|f| f == "server" || f == "router"), "tonic's server side by default: {tonic}");
    for heavy in ["sqlx v", "redis v", "axum v"] {
        assert!(!light.lines().any(|l| l.starts_with(heavy)), "{heavy} by default:\n{light}");
    }
    let fenced = tree(&["--features", "fence-redis"]);
    for driver in ["sqlx v", "redis v"] {
        assert!(fenced.lines().any(|l| l.starts_with(driver)), "{driver} missing with the fences:\n{fenced}");
    }
}
