//! The container image as an operator gets it: `scripts/image` builds it
//! here from the binary under test (podman, nothing pulled), and a node runs
//! from it as the non-root user: ready, serving appends, healthy by the
//! image's own health check (`chitin probe`).

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use chitin::testkit::{free_ports, http_status, settings as node_settings};

use crate::support::cluster::*;

/// podman's options for this machine's sandbox, harmless elsewhere: runc
/// and cgroupfs (crun refuses the hybrid cgroup layout here).
const PODMAN: &[&str] = &["--runtime", "runc", "--cgroup-manager", "cgroupfs"];

fn podman(args: &[&str]) -> Output {
    Command::new("podman").args(PODMAN).args(args).output().expect("podman runs (scripts/image installs it)")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The hard limit of open files of this process: a container may not raise
/// it without CAP_SYS_RESOURCE, which this sandbox lacks.
fn nofile_limit() -> String {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
    line.split_whitespace().nth(4).unwrap().to_owned()
}

/// Removes the container and the image, whatever the test's outcome.
struct Cleanup {
    container: String,
    image: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        podman(&["rm", "-f", &self.container]);
        podman(&["rmi", "-f", &self.image]);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_image_builds_here_and_a_node_from_it_serves_as_a_non_root_user() {
    let id = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (image, container) = (format!("localhost/chitin-test:{id}"), format!("chitin-test-{id}"));
    let _cleanup = Cleanup { container: container.clone(), image: image.clone() };
    let built = Command::new(crate::support::repo_root().join("scripts/image"))
        .args(["--binary", CHITIN, "--tag", &image])
        .output()
        .unwrap();
    assert!(built.status.success(), "scripts/image failed:\n{}", text(&built));
    let user = podman(&["image", "inspect", "--format", "{{.Config.User}}", &image]);
    assert_eq!(String::from_utf8_lossy(&user.stdout).trim(), "65532:65532", "{}", text(&user));

    // Standalone settings on free ports, the data dir in the image's own.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ports = free_ports(2).unwrap();
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let settings = node_settings::standalone(PathBuf::from("/var/lib/chitin/data"), &api, &metrics);
    node_settings::write(&dir.path().join("chitin.toml"), &settings).unwrap();
    std::fs::set_permissions(dir.path().join("chitin.toml"), std::fs::Permissions::from_mode(0o644)).unwrap();

    let mount = format!("{}:/etc/chitin:ro", dir.path().display());
    let nofile = format!("nofile={0}:{0}", nofile_limit());
    let run = podman(&[
        "run",
        "-d",
        "--name",
        &container,
        "--network",
        "host",
        "--ulimit",
        &nofile,
        "--ulimit",
        "nproc=4096:4096",
        "-v",
        &mount,
        &image,
        "node",
        "--settings",
        "/etc/chitin/chitin.toml",
    ]);
    assert!(run.status.success(), "podman run failed:\n{}", text(&run));

    let deadline = Instant::now() + Duration::from_secs(60);
    while http_status(&metrics, "/readyz").await != 200 {
        assert!(
            Instant::now() < deadline,
            "the node in the container is not ready after 60 s:\n{}",
            text(&podman(&["logs", &container]))
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let applied = append_via(&api, "from-the-image", "r1").await.unwrap();
    assert_eq!(applied.sequence, 1);

    // The image's health check, run as the engine runs it.
    let probe = podman(&["exec", &container, "chitin", "probe", "--via", &api]);
    assert!(probe.status.success() && text(&probe).contains("SERVING"), "{}", text(&probe));
    let stop = podman(&["stop", "--time", "30", &container]);
    assert!(stop.status.success(), "{}", text(&stop));
    let logs = text(&podman(&["logs", &container]));
    assert!(logs.contains("stopped"), "SIGTERM did not stop the node gracefully:\n{logs}");
}
