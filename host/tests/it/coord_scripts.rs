//! The operator scripts in `examples/` against chitin's keys on the real
//! Redis: what `redis-cli` loops find must match what the library wrote.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::coord::TestNs;

const LONG: Duration = Duration::from_secs(60);

fn script(name: &str) -> PathBuf {
    let dir = std::env::var_os("CHITIN_EXAMPLES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::support::repo_root().join("examples"));
    let p = dir.join(name);
    assert!(p.exists(), "{} not found", p.display());
    p
}

fn run(t: &TestNs, name: &str) -> String {
    let url = url_host_port(&t.url);
    let out = Command::new("bash")
        .arg(script(name))
        .arg(&t.ns)
        .env("REDIS_HOST", &url.0)
        .env("REDIS_PORT", url.1.to_string())
        .output()
        .expect("bash");
    assert!(out.status.success(), "{name} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn url_host_port(url: &str) -> (String, u16) {
    let rest = url.trim_start_matches("redis://");
    let rest = rest.rsplit('@').next().unwrap();
    let hostport = rest.split('/').next().unwrap();
    match hostport.rsplit_once(':') {
        Some((h, p)) => (h.to_string(), p.parse().unwrap()),
        None => (hostport.to_string(), 6379),
    }
}

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[tokio::test]
async fn stale_instances_script_prints_exactly_the_dead_ids() {
    let t = TestNs::new();
    assert_eq!(run(&t, "stale-instances.sh"), "", "empty registry");
    let ids = [
        "01a0b519-67f5-88c1-b926-2e2c1f3a20fd",
        "019b9450-0b91-8c10-86c3-5c2c3f6b9f04",
        "019b9450-1c22-8f31-9d44-6e7f8a0b1c2d",
        "n-1",
        "n-10",
    ];
    for id in ids {
        t.registry(id, LONG).register().await.unwrap();
    }
    assert_eq!(run(&t, "stale-instances.sh"), "", "all alive");
    // Two die: one by a real TTL lapse, one as if its key expired.
    let short = t.registry(ids[1], Duration::from_secs(1));
    short.register().await.unwrap();
    t.del(&t.keys.instance("n-1"));
    tokio::time::sleep(Duration::from_millis(2300)).await;
    let dead = [ids[1], "n-1"];
    let mut want: Vec<String> = dead.iter().map(|id| format!("Stale: {id}")).collect();
    want.sort();
    assert_eq!(sorted_lines(&run(&t, "stale-instances.sh")), want);
    // The library agrees.
    assert_eq!(t.monitor().stale_instances().await.unwrap(), {
        let mut d: Vec<String> = dead.iter().map(|s| s.to_string()).collect();
        d.sort();
        d
    });
}

#[tokio::test]
async fn cleanup_script_removes_dead_entries_and_only_their_own_claims() {
    let t = TestNs::new();
    for id in ["alive", "dead"] {
        t.registry(id, LONG).register().await.unwrap();
    }
    let dead = t.affinity("dead", LONG);
    dead.claim("d-1").await.unwrap();
    dead.claim("d-2").await.unwrap();
    t.affinity("alive", LONG).claim("a-1").await.unwrap();
    t.del(&t.keys.instance("dead"));
    // d-2's claim lapsed and a peer took it; the dead set still lists it.
    t.del(&t.keys.affinity("d-2"));
    let peer = t.affinity("dead-peer", LONG);
    peer.claim("d-2").await.unwrap();

    assert_eq!(run(&t, "cleanup-stale-instances.sh"), "Removing stale instance: dead\n");
    assert_eq!(t.smembers(&t.keys.instances_index()), vec!["alive"]);
    assert_eq!(t.get(&t.keys.affinity("d-1")), None);
    assert_eq!(t.get(&t.keys.affinity("d-2")).as_deref(), Some("dead-peer:"));
    assert_eq!(t.get(&t.keys.affinity("a-1")).as_deref(), Some("alive:"));
    assert!(!t.exists(&t.keys.affinity_by_instance("dead")));
    assert_eq!(run(&t, "stale-instances.sh"), "");
}

#[tokio::test]
async fn reference_redis_cli_queries_work_on_chitin_keys() {
    let t = TestNs::new();
    let (h, p) = url_host_port(&t.url);
    let cli = |args: &[&str]| {
        let out = Command::new("redis-cli").args(["-h", &h, "-p", &p.to_string(), "--raw"]).args(args).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let owner = "01a0b519-67f5-88c1-b926-2e2c1f3a20fd";
    let a = t.affinity(owner, LONG);
    a.claim("019b9450-0b91-8c10-86c3-5c2c3f6b9f04").await.unwrap();
    a.claim("019b9450-1c22-8f31-9d44-6e7f8a0b1c2d").await.unwrap();
    let d = t.deployments(owner).start(Default::default()).await.unwrap();
    assert_eq!(cli(&["GET", &format!("{}:affinity:019b9450-0b91-8c10-86c3-5c2c3f6b9f04", t.ns)]), format!("{owner}:\n"));
    assert_eq!(
        sorted_lines(&cli(&["SMEMBERS", &format!("{}:affinity:by-instance:{owner}", t.ns)])),
        vec!["019b9450-0b91-8c10-86c3-5c2c3f6b9f04", "019b9450-1c22-8f31-9d44-6e7f8a0b1c2d"]
    );
    assert_eq!(cli(&["SMEMBERS", &format!("{}:deployments:active", t.ns)]), format!("{}\n", d.deployment_id));
    assert_eq!(cli(&["SMEMBERS", &format!("{}:deployments:by-instance:{owner}", t.ns)]), format!("{}\n", d.deployment_id));
    let doc: serde_json::Value =
        serde_json::from_str(&cli(&["GET", &format!("{}:deployments:{}", t.ns, d.deployment_id)])).unwrap();
    assert_eq!(doc["owner_instance_id"], owner);
    assert_eq!(doc["state"], "running");
    assert_eq!(cli(&["TYPE", &format!("{}:deployments:{}", t.ns, d.deployment_id)]), "string\n");
}
