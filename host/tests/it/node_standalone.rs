//! A standalone node: SQLite in its data dir, every shard its own, the
//! journal and status through the real binary.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::*;

fn chitin(args: &[&str]) -> (bool, String) {
    chitin_with_token(args, Some(ADMIN_TOKEN))
}

const ADMIN_TOKEN: &str = "adm1n";

fn chitin_with_token(args: &[&str], token: Option<&str>) -> (bool, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_chitin"));
    cmd.args(args).env_remove("CHITIN_ADMIN_TOKEN");
    if let Some(t) = token {
        cmd.env("CHITIN_ADMIN_TOKEN", t);
    }
    let out = cmd.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_standalone_node_appends_reads_and_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "standalone", |s| {
        s.api.admin_token = Some(ADMIN_TOKEN.into());
        s.metrics.auth_token = Some("s3cret".into());
    })
    .unwrap();
    let (api, metrics) = (node.api.clone(), node.metrics.clone());
    node.wait_ready(Duration::from_secs(60)).await.unwrap();

    for payload in ["one", "two", "three"] {
        let (ok, out) = chitin(&["journal", "append", "--node", &api, "--stream", "orders", "--payload", payload]);
        assert!(ok, "{out}");
        assert!(out.contains("epoch="), "{out}");
    }
    let (ok, out) = chitin(&["journal", "read", "--node", &api, "--stream", "orders", "--json"]);
    assert!(ok, "{out}");
    let payloads: Vec<String> = out
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["payload"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(payloads, ["one", "two", "three"]);

    let (ok, out) = chitin(&["cluster", "status", "--node", &api, "--json"]);
    assert!(ok, "{out}");
    let status: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(status["leases"].as_array().unwrap().len(), 16, "{status}");
    assert!(status["unowned"].as_array().unwrap().is_empty());

    // The admin plane wants its token; the journal does not. A refused
    // drain hands nothing over.
    let (ok, out) = chitin_with_token(&["cluster", "status", "--node", &api], None);
    assert!(!ok && out.contains("CHITIN_ADMIN_TOKEN"), "{out}");
    let (ok, out) = chitin_with_token(&["cluster", "drain", "--node", "standalone", "--via", &api], Some("wrong"));
    assert!(!ok && out.contains("wrong admin token"), "{out}");
    let mut admin = node.admin().await.unwrap();
    let refused = admin.status(chitin::api::proto::StatusRequest {}).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let (ok, out) = chitin(&["cluster", "status", "--node", &api, "--json"]);
    assert!(ok, "{out}");
    let after: serde_json::Value = serde_json::from_str(&out).unwrap();
    let held = |s: &serde_json::Value| -> Vec<String> {
        s["leases"].as_array().unwrap().iter().map(|l| format!("{} {} {}", l["shard"], l["holder_uuid"], l["epoch"])).collect()
    };
    assert_eq!(held(&after), held(&status), "a refused drain changed the leases");
    assert_eq!(after["state"], status["state"]);

    // The token guards /health and /metrics, not /readyz.
    assert_eq!(http_get(&metrics, "/health", None).await.unwrap().0, 401);
    assert_eq!(http_get(&metrics, "/health", Some("wrong")).await.unwrap().0, 401);
    let (code, body) = http_get(&metrics, "/health", Some("s3cret")).await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("\"status\":\"healthy\""), "{body}");
    let (code, body) = http_get(&metrics, "/metrics", Some("s3cret")).await.unwrap();
    assert_eq!(code, 200);
    assert!(body.contains("chitin_leases_held 16"), "{body}");
    assert!(body.contains("chitin_fenced_commits_total 3"), "{body}");

    let exit = node.terminate(Duration::from_secs(30)).unwrap();
    assert!(exit.success(), "{}", node.log_text());

    // The data survives a restart.
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let (ok, out) = chitin(&["journal", "read", "--node", &api, "--stream", "orders"]);
    assert!(ok && out.contains("three"), "{out}");
}

#[test]
fn bad_settings_are_refused_with_the_key_and_the_rule() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("chitin.toml");
    std::fs::write(&settings, "[leases]\nttl_secs = 10\nbogus = 1\n").unwrap();
    let (ok, out) = chitin(&["node", "--settings", settings.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("`leases.bogus`") && out.contains("unknown field `bogus`"), "{out}");

    std::fs::write(&settings, "[leases]\nttl_secs = 10\nrenew_interval_secs = 6\n").unwrap();
    let (ok, out) = chitin(&["node", "--settings", settings.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("leases.renew_interval_secs") && out.contains('6') && out.contains("less than half"), "{out}");

    std::fs::write(&settings, format!("[node]\ndata_dir = {:?}\n\n[policies]\ndeadline_ms = 0\n", dir.path().join("d"))).unwrap();
    let (ok, out) = chitin(&["node", "--settings", settings.to_str().unwrap()]);
    assert!(!ok);
    assert!(out.contains("`policies.deadline_ms` = 0") && out.contains("must be between 1 and 60000"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn policies_reload_on_request_and_a_failed_reload_keeps_the_previous_ones() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("placement.wasm");
    std::fs::write(&plugin, chitin::policy::plugin::EMBEDDED_DEFAULTS).unwrap();
    let mut node = standalone_node(dir.path(), "reload", |s| s.policies.placement = plugin.display().to_string()).unwrap();
    let api = node.api.clone();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();

    let (ok, out) = chitin(&["policy", "reload", "--node", &api]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("placement: {}", plugin.display())), "{out}");

    // A broken component on disk: the reload is refused and says why.
    std::fs::write(&plugin, b"not a component").unwrap();
    let (ok, out) = chitin(&["policy", "reload", "--node", &api]);
    assert!(!ok);
    assert!(out.contains("previous policies stay in use") && out.contains("placement.wasm"), "{out}");
    // SIGHUP does the same and the node keeps serving with the old policies.
    Command::new("kill").args(["-HUP", &node.pid().unwrap().to_string()]).status().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(node.is_running());
    let (ok, out) = chitin(&["journal", "append", "--node", &api, "--stream", "s", "--payload", "p"]);
    assert!(ok, "{out}");
    assert!(node.log_text().contains("policy reload failed"), "{}", node.log_text());

    std::fs::write(&plugin, chitin::policy::plugin::EMBEDDED_DEFAULTS).unwrap();
    let (ok, out) = chitin(&["policy", "reload", "--node", &api]);
    assert!(ok, "{out}");
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success());
}

/// A reload asks the reloaded instance-id policy for the node's name, as a
/// start does; a running node keeps its name, and says that the new one
/// takes effect at its next start.
#[tokio::test(flavor = "multi_thread")]
async fn a_reload_asks_the_new_instance_id_policy() {
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("instance-id.wasm");
    std::fs::write(&plugin, chitin::policy::plugin::EMBEDDED_DEFAULTS).unwrap();
    let mut node = standalone_node(dir.path(), "rename", |s| {
        s.cluster.instance_id = None;
        s.policies.instance_id = plugin.display().to_string();
    })
    .unwrap();
    let api = node.api.clone();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    assert!(!node.log_text().contains("names this node differently"), "{}", node.log_text());

    let leak = PathBuf::from(env!("CHITIN_TEST_GUESTS_DIR")).join("env_leak.wasm");
    std::fs::copy(&leak, &plugin).unwrap();
    let (ok, out) = chitin(&["policy", "reload", "--node", &api]);
    assert!(ok, "{out}");
    let log = node.log_text();
    assert!(log.contains("names this node differently") && log.contains("leak."), "{log}");
    assert!(node.terminate(Duration::from_secs(30)).unwrap().success());
}

/// Under systemd's `Type=notify` (deploy/systemd/chitin.service) the node
/// tells the service manager READY once its listeners answer and STOPPING
/// when SIGTERM starts its drain, on a socket path and on an abstract name.
#[tokio::test(flavor = "multi_thread")]
async fn the_service_manager_hears_ready_and_stopping() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let abstract_name = format!("chitin-notify-{}", std::process::id());
    let sockets = [
        (UnixDatagram::bind(&path).unwrap(), path.display().to_string()),
        (UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(&abstract_name).unwrap()).unwrap(), format!("@{abstract_name}")),
    ];
    for (socket, variable) in sockets {
        socket.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        let ports = free_ports(2).unwrap();
        let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
        let settings = dir.path().join("chitin.toml");
        node_settings::write(&settings, &node_settings::standalone(dir.path().join("data"), &api, &metrics)).unwrap();
        let mut node = NodeProc::new(CHITIN, "standalone", api.clone(), metrics.clone(), settings, dir.path().join("node.log"))
            .with_env("NOTIFY_SOCKET", &variable);
        node.start().unwrap();
        let mut buf = [0u8; 1024];
        let n = socket.recv(&mut buf).expect("READY within 60 s");
        let ready = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(ready.starts_with("READY=1\nSTATUS=serving as ") && ready.contains(&format!(" on {api}\n")), "{ready}");
        assert!(ready.contains(&format!("MAINPID={}", node.pid().unwrap())), "{ready}");
        // READY came once the listeners answer.
        let (status, _) = http_get(&metrics, "/livez", None).await.unwrap();
        assert_eq!(status, 200, "{variable}");
        node.terminate(Duration::from_secs(30)).unwrap();
        let n = socket.recv(&mut buf).expect("STOPPING at SIGTERM");
        let stopping = String::from_utf8_lossy(&buf[..n]).to_string();
        assert!(stopping.starts_with("STOPPING=1\n") && stopping.contains("STATUS=draining"), "{stopping}");
    }
}
