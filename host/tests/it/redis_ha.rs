//! Coordination on Redis beyond one server, each started privately by the
//! test kit: a Redis Cluster of three masters, where a hash-tagged namespace
//! keeps every key of one claim in one slot and the reference's `redis-cli`
//! queries still answer; and a master watched by Redis Sentinel, which the
//! node follows through a forced failover (the old master turns read-only)
//! and through the death of the master.

use std::process::Command;
use std::time::Duration;

use chitin::coord::{
    CoordConfig, CoordError, Coordinator, DeploymentState, InstanceInfo, ListFilter, NewDeployment, RedisSettings,
};
use chitin::testkit::{PrivateRedis, PrivateRedisCluster, PrivateSentinel, free_port, redis_cli};

use crate::support::coord::eventually;

const LONG: Duration = Duration::from_secs(60);

fn node(url: &str, namespace: &str, id: &str) -> Result<Coordinator, CoordError> {
    let mut c = CoordConfig::new(url);
    c.namespace = namespace.to_string();
    c.liveness_timeout = LONG;
    c.heartbeat_interval = LONG / 3;
    c.monitor_interval = LONG / 3;
    c.redis = RedisSettings::new(url);
    Coordinator::new(c, InstanceInfo::new(id, format!("host-{id}"), "127.0.0.1:50051", "0.1.0-test"))
}

/// `redis-cli -c -p {port} --raw {args}` on a cluster node, as an operator
/// types it.
fn cli(on: &PrivateRedis, args: &[&str]) -> String {
    redis_cli(&[&["-c", "-p", &on.port.to_string(), "--raw"], args].concat()).unwrap()
}

/// One of `examples/`, run with `REDIS_CLUSTER=1` against `on`.
fn example(name: &str, namespace: &str, on: &PrivateRedis) -> String {
    let script = crate::support::repo_root().join("examples").join(name);
    let out = Command::new("bash")
        .arg(&script)
        .arg(namespace)
        .env("REDIS_PORT", on.port.to_string())
        .env("REDIS_CLUSTER", "1")
        .output()
        .expect("bash");
    assert!(out.status.success(), "{name}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn tempdir(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(prefix).tempdir().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_redis_cluster_a_hash_tagged_namespace_runs_every_script_and_answers_the_reference_queries() {
    let dir = tempdir("chitin-redis-cluster-");
    let cluster = PrivateRedisCluster::start(dir.path(), 3, 0).unwrap();
    let url = cluster.url();

    // Without a hash tag a claim's two keys would land in two slots.
    match node(&url, "orders", "alive") {
        Err(e @ CoordError::NoHashTag { .. }) => assert!(e.to_string().contains("\"{orders}\""), "{e}"),
        other => panic!("a namespace without a hash tag was taken on a Redis Cluster: {:?}", other.err()),
    }

    let ns = "{orders}";
    let alive = node(&url, ns, "alive").unwrap();
    let dead = node(&url, ns, "dead").unwrap();
    alive.registry.register().await.unwrap();
    dead.registry.register().await.unwrap();
    let targets: Vec<String> = (0..300).map(|i| format!("user-{i}")).collect();
    for (who, range) in [(&alive, 0..200), (&dead, 200..300)] {
        let claims = who.affinity.claim_many(&targets[range]).await.unwrap();
        assert!(claims.iter().all(Result::is_ok), "{:?}", claims.iter().find(|c| c.is_err()));
    }
    assert!(dead.affinity.claim("user-0").await.is_err(), "user-0 is alive's");
    assert_eq!(alive.affinity.refresh_all().await.unwrap().0, 200);
    let running = alive.deployments.start(NewDeployment::default()).await.unwrap();
    let orphan = dead.deployments.start(NewDeployment::default()).await.unwrap();
    let listed = alive.deployments.list(&ListFilter::default()).await.unwrap();
    assert_eq!(listed.deployments.len(), 2, "SCAN on the namespace's master finds both");

    // Every key of the namespace is on the master of its slot, none elsewhere.
    let master = cluster.master_of(ns).unwrap();
    let others: Vec<&PrivateRedis> = cluster.nodes.iter().filter(|n| n.port != master.port).collect();
    let held: usize = master.cli(&["DBSIZE"]).unwrap().parse().unwrap();
    assert!(held > 300, "the slot's master holds {held} keys");
    for o in &others {
        assert_eq!(o.cli(&["DBSIZE"]).unwrap(), "0", "a key of the namespace on :{}", o.port);
    }

    // The reference's operator queries, asked of a node that does not hold
    // the slot: redis-cli -c follows the redirection.
    let asked = others[0];
    assert_eq!(cli(asked, &["GET", "{orders}:affinity:user-0"]), "alive:");
    assert_eq!(cli(asked, &["SMEMBERS", "{orders}:affinity:by-instance:alive"]).lines().count(), 200);
    let ttl: u64 = cli(asked, &["TTL", "{orders}:affinity:user-0"]).parse().unwrap();
    assert!((1..=LONG.as_secs()).contains(&ttl), "{ttl}");
    assert_eq!(cli(asked, &["EXISTS", "{orders}:instances:alive"]), "1");
    let doc = cli(asked, &["GET", &format!("{{orders}}:deployments:{}", running.deployment_id)]);
    assert!(doc.contains("\"running\""), "{doc}");
    assert_eq!(cli(asked, &["SMEMBERS", "{orders}:deployments:active"]).lines().count(), 2);

    // The dead instance's key lapses; the operator loops find and clean it.
    cli(asked, &["DEL", "{orders}:instances:dead"]);
    assert_eq!(example("stale-instances.sh", ns, asked), "Stale: dead\n");
    assert_eq!(example("cleanup-stale-instances.sh", ns, asked), "Removing stale instance: dead\n");
    assert_eq!(cli(asked, &["EXISTS", "{orders}:affinity:user-200"]), "0");
    assert_eq!(cli(asked, &["SMEMBERS", "{orders}:instances:index"]), "alive");
    // The monitor's own sweep (a script over the namespace's keys) fails
    // the orphaned deployment the shell loop leaves.
    let report = alive.monitor.cleanup_dead_instance("dead").await.unwrap();
    assert_eq!(report.deployments_failed, vec![orphan.deployment_id.clone()]);
    let orphaned = alive.deployments.show(&orphan.deployment_id).await.unwrap().unwrap();
    assert_eq!(orphaned.state, DeploymentState::Failed);

    let released = alive.affinity.release_all().await.unwrap();
    assert_eq!(released.released, 200);
    assert_eq!(cli(asked, &["EXISTS", "{orders}:affinity:by-instance:alive"]), "0");
}

/// Claims until one lands on the master on `port` (a claim the old master
/// took just before it turned replica is lost with it; that is Redis'
/// asynchronous replication, not the node).
async fn claims_land_on(node: &Coordinator, port: u16, label: &str) -> bool {
    let mut attempt = 0;
    eventually(Duration::from_secs(30), || {
        attempt += 1;
        let target = format!("{label}-{attempt}");
        async move {
            node.affinity.claim(&target).await.is_ok()
                && redis_cli(&["-p", &port.to_string(), "GET", &format!("chitin:affinity:{target}")]).is_ok_and(|v| v == "n1:")
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_follows_its_master_through_sentinel_failovers() {
    let dir = tempdir("chitin-redis-sentinel-");
    let s = PrivateSentinel::start(dir.path()).unwrap();
    // A Sentinel that is down comes first: the list is walked past it.
    let gone = format!("127.0.0.1:{}", free_port().unwrap());
    let n = node(&s.url(&[&gone]), "chitin", "n1").unwrap();
    n.registry.register().await.unwrap();
    let first = s.master_port().unwrap();
    assert!(claims_land_on(&n, first, "before").await, "no claim reached the first master");

    // A forced failover: the old master keeps answering, as a replica that
    // refuses writes; the node must ask the Sentinel again.
    s.sentinel.cli(&["SENTINEL", "FAILOVER", PrivateSentinel::MASTER]).unwrap();
    let second = s.wait_failed_over(first, Duration::from_secs(30)).unwrap();
    assert!(claims_land_on(&n, second, "switched").await, "the node stayed on the old master after a failover");

    // The master dies: its address refuses, and the Sentinel promotes the
    // old master, by now the replica of the dead one.
    let mut s = s;
    s.wait_for_replica().unwrap();
    s.kill(second);
    let third = s.wait_failed_over(second, Duration::from_secs(30)).unwrap();
    assert_eq!(third, first);
    assert!(claims_land_on(&n, third, "killed").await, "the node did not follow the failover after its master died");
}

/// Node processes on a Redis Cluster: the settings take `redis+cluster://`
/// with a hash-tagged namespace, every node registers, and a dispatch's
/// claim is the reference's key in the namespace's slot, declined on the
/// other node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_on_a_redis_cluster_register_and_claim_in_the_namespace_slot() {
    use crate::support::cluster::{Cluster, Dialect};
    use chitin::api::proto::{self, coordination_client::CoordinationClient};

    let dir = tempdir("chitin-redis-cluster-nodes-");
    let redis = PrivateRedisCluster::start(dir.path(), 3, 0).unwrap();
    let url = redis.url();
    let c = Cluster::new(Dialect::Postgres, 2, 8, 2, |_, s| {
        s.cluster.redis_url = Some(url.clone());
        s.cluster.namespace = "{nodes}".into();
    })
    .await
    .unwrap();
    c.wait_all_owned(Duration::from_secs(60)).await.unwrap();
    let asked = &redis.nodes[0];
    let registered = eventually(Duration::from_secs(30), || async {
        cli(asked, &["SMEMBERS", "{nodes}:instances:index"]).lines().count() == 2
    })
    .await;
    assert!(registered, "both nodes in {{nodes}}:instances:index:\n{}", c.logs());

    let mut first = CoordinationClient::connect(format!("http://{}", c.nodes[0].api)).await.unwrap();
    let mut second = CoordinationClient::connect(format!("http://{}", c.nodes[1].api)).await.unwrap();
    let claimed = first
        .dispatch(proto::DispatchRequest { target_id: "user-1".into(), command: b"go".to_vec() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(claimed.outcome, "claimed");
    assert_eq!(cli(asked, &["GET", "{nodes}:affinity:user-1"]), format!("{}:", claimed.instance_id));
    let declined = second.dispatch(proto::DispatchRequest { target_id: "user-1".into(), command: b"go".to_vec() }).await;
    let declined = declined.expect_err("user-1 is the first node's");
    assert_eq!(declined.code(), tonic::Code::FailedPrecondition, "{declined:?}");
    let owner = format!("TargetOwnedByOther{{owner={}}}", claimed.instance_id);
    assert!(declined.message().starts_with(&owner), "{declined:?} should name {owner}");
    c.teardown().await.unwrap();
}
