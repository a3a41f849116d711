//! The chitin-client crate (`clients/rust`) and the CLI's `--node a,b,c`
//! against real node processes: failover past a dead node, the same request
//! id applied once across a kill (checked in the database), a not-applied
//! answer that names the holder, fenced transactions, and an ownership watch
//! that resubscribes after its node restarts.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use crate::support::cluster::*;
use chitin_client::fence::{self, FenceError, LeaseToken};
use chitin_client::{AppendOutcome, Client, Nodes, Options, WatchEvent};

/// An address nothing listens on.
fn dead_address() -> String {
    format!("127.0.0.1:{}", free_port().unwrap())
}

fn options(route: bool, attempts: u32) -> Options {
    Options {
        attempts,
        attempt_timeout: Duration::from_secs(10),
        backoff: Duration::from_millis(50),
        route,
        ..Options::default()
    }
}

fn client(nodes: &[&str], options: Options) -> Client {
    Client::builder(Nodes::new(nodes.iter().copied()).unwrap()).options(options).build().unwrap()
}

async fn rows_of(url: &str, request_id: &str) -> i64 {
    let pool = sqlx::PgPool::connect(url).await.unwrap();
    sqlx::query_scalar("SELECT count(*) FROM chitin_journal WHERE request_id = $1")
        .bind(request_id)
        .fetch_one(&pool)
        .await
        .unwrap()
}

fn squash(sql: &str) -> String {
    sql.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[tokio::test(flavor = "multi_thread")]
// case: failover
// case: applies-once
// case: routes-to-holder
// case: not-applied-names-holder
async fn fails_over_applies_once_and_names_the_holder() {
    let mut cluster = Cluster::new(Dialect::Postgres, 2, 4, 2, |_, _| {}).await.unwrap();
    cluster.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    let url = cluster.db.as_ref().unwrap().url.clone();
    let (n1, n2) = (cluster.nodes[0].api.clone(), cluster.nodes[1].api.clone());
    let dead = dead_address();
    let stream = "rc-orders";

    // A dead node first: the append fails over to the live one.
    let failover = client(&[&dead, &n1, &n2], options(false, 6));
    let applied = failover.append(stream, b"one").await.unwrap().applied().unwrap();
    assert_eq!((applied.attempts, applied.node.as_str()), (2, n1.as_str()), "{applied:?}");

    // Routed by key: the first attempt goes to the shard's holder.
    let lease = failover.route_stream(stream).await.unwrap();
    assert_eq!(lease.shard, applied.shard);
    let routed = client(&[&dead, &n1, &n2], options(true, 6)).append(stream, b"two").await.unwrap().applied().unwrap();
    assert_eq!((routed.attempts, routed.node.as_str()), (1, lease.holder_address.as_str()), "{routed:?}");

    // Certainly not applied (the only attempt never left), with the holder
    // to go to, as the cluster names it; nothing stored.
    match client(&[&dead, &n1], options(false, 1)).append_with_id(stream, "rc-never", b"x").await.unwrap() {
        AppendOutcome::NotApplied { go_to: Some(h), reason, .. } => {
            assert_eq!((h.name.as_str(), h.address.as_str()), (lease.holder.as_str(), lease.holder_address.as_str()));
            assert!(reason.contains("not sent"), "{reason}");
        }
        other => panic!("expected not applied with the holder, got {other:?}"),
    }
    assert_eq!(rows_of(&url, "rc-never").await, 0);

    // The application's fence passes for the current token, inside a transaction.
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let token = LeaseToken::from_lease(&lease).unwrap();
    fence::begin_postgres(&pool, &token).await.unwrap().commit().await.unwrap();
    let stale = LeaseToken { epoch: token.epoch - 1, ..token.clone() };
    assert!(matches!(fence::begin_postgres(&pool, &stale).await, Err(FenceError::Lost { .. })));

    // Kill the holder, then send the first append again under its request
    // id: another node answers with the same sequence, and one row exists.
    cluster.node(&applied.holder).kill9().unwrap();
    let again = failover.append_with_id(stream, &applied.request_id, b"one").await.unwrap().applied().unwrap();
    assert_eq!((again.sequence, again.shard.as_str()), (applied.sequence, applied.shard.as_str()), "{again:?}");
    assert_ne!(again.node, lease.holder_address);
    assert_eq!(rows_of(&url, &applied.request_id).await, 1);

    // The dead holder's token fails the fence now; the new holder's passes.
    assert!(matches!(fence::begin_postgres(&pool, &token).await, Err(FenceError::Lost { .. })));
    let now = LeaseToken::from_lease(&failover.route_stream(stream).await.unwrap()).unwrap();
    assert!(now.epoch > token.epoch, "{now:?} after {token:?}");
    fence::begin_postgres(&pool, &now).await.unwrap().rollback().await.unwrap();
    pool.close().await;
    cluster.teardown().await.unwrap();
}

/// The helper's statements are the node's own (`Dialect::fence_sql`).
#[test]
fn the_fence_is_the_nodes_fence() {
    assert_eq!(squash(fence::POSTGRES), squash(Dialect::Postgres.fence_sql()));
    assert_eq!(squash(fence::MYSQL), squash(Dialect::MySql.fence_sql()));
}

fn cli(args: &[&str], env: &[(&str, &str)]) -> (bool, String) {
    let mut cmd = Command::new(CHITIN);
    cmd.args(args).env_remove("CHITIN_NODE").env_remove("CHITIN_NODES");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread")]
// case: watch-snapshot
async fn the_watch_resubscribes_and_the_cli_fails_over() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "standalone", |_| {}).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let api = node.api.clone();
    let dead = dead_address();

    // The CLI: a dead node first, by flag and by either variable.
    let list = format!("{dead},{api}");
    let append = ["journal", "append", "--stream", "cli", "--payload", "p"];
    let (ok, out) = cli(&[&append[..], &["--node", &list]].concat(), &[]);
    assert!(ok && out.contains("appended sequence=1"), "{out}");
    let (ok, out) = cli(&append, &[("CHITIN_NODES", &list)]);
    assert!(ok && out.contains("appended sequence=2"), "{out}");
    let (ok, out) = cli(&append, &[("CHITIN_NODE", &api)]);
    assert!(ok && out.contains("appended sequence=3"), "{out}");
    let (ok, out) = cli(&["cluster", "status", "--node", &list], &[]);
    assert!(ok && out.contains("shards held"), "{out}");
    // Bad lists and a list where one node is meant say so.
    let (ok, out) = cli(&["cluster", "status", "--node", &format!("{api},,{dead}")], &[]);
    assert!(!ok && out.contains("node address #2 is empty"), "{out}");
    let (ok, out) = cli(&["cluster", "status", "--node", "localhost"], &[]);
    assert!(!ok && out.contains("`localhost` is not a node address: it has no port"), "{out}");
    let (ok, out) = cli(&["policy", "reload", "--node", &list], &[]);
    assert!(!ok && out.contains("reloads one node; give one address, not 2"), "{out}");
    let (ok, out) = cli(&["cluster", "status", "--node", &dead], &[]);
    assert!(!ok && out.contains(&format!("cannot reach the node at {dead}")), "{out}");

    // The watch: a snapshot, a gap when the node stops, a new snapshot (and
    // the shards back) once it is up again.
    let watcher = client(&[&api], Options::default());
    let mut watch = watcher.watch_ownership();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next()).await.unwrap();
    assert!(matches!(&first, WatchEvent::Subscribed { node, .. } if *node == api), "{first:?}");
    let WatchEvent::Subscribed { held: leases, .. } = first else { unreachable!() };
    let mut held = leases.into_iter().map(|l| l.shard).collect();
    assert!(!until_all_held(&mut watch, &mut held).await, "no gap while the node runs");
    // A clean stop (a crashed standalone node's name stays taken for the
    // liveness timeout): its shards are lost, then the stream ends.
    node.terminate(Duration::from_secs(20)).unwrap();
    let gap = loop {
        match tokio::time::timeout(Duration::from_secs(10), watch.next()).await.unwrap() {
            WatchEvent::Draining { .. } | WatchEvent::Lost { .. } => continue,
            other => break other,
        }
    };
    assert!(matches!(&gap, WatchEvent::Gap { node, .. } if *node == api), "{gap:?}");
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let mut held = BTreeSet::new();
    assert!(until_all_held(&mut watch, &mut held).await, "the watch resubscribed");
}

/// Follows the watch until `held` has every one of the 16 shards; whether
/// it (re)subscribed on the way. Anything but ownership events fails.
async fn until_all_held(watch: &mut chitin_client::OwnershipWatch, held: &mut BTreeSet<String>) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut resubscribed = false;
    while held.len() < 16 {
        let event = tokio::time::timeout_at(deadline, watch.next()).await.expect("the watch reports every shard held");
        match event {
            WatchEvent::Subscribed { held: leases, .. } => {
                resubscribed = true;
                *held = leases.into_iter().map(|l| l.shard).collect();
            }
            WatchEvent::Acquired { shard, .. } => {
                held.insert(shard);
            }
            WatchEvent::Lost { shard, .. } => {
                held.remove(&shard);
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    resubscribed
}

/// The map against the lease table, read directly: every shard's live
/// holder and epoch, as `(shard, holder uuid or "", epoch)`.
async fn table(store: &chitin::lease::Store) -> BTreeSet<(String, String, u64)> {
    let rows = store.holders().await.unwrap();
    rows.into_iter()
        .map(|r| (r.shard, r.holder.filter(|_| r.live).map(|h| h.to_string()).unwrap_or_default(), r.epoch as u64))
        .collect()
}

fn mapped(map: &chitin_client::Assignments) -> BTreeSet<(String, String, u64)> {
    map.shards().map(|a| (a.shard.clone(), a.holder_uuid.clone(), a.epoch)).collect()
}

/// Waits until the map says what the lease table says, and no lease is
/// moving (two equal looks of both); the map's copy at that point.
async fn until_map_is_table(
    map: &chitin_client::AssignmentMap,
    store: &chitin::lease::Store,
    what: &str,
) -> std::sync::Arc<chitin_client::Assignments> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let mut equal_looks = 0;
    loop {
        let (rows, copy) = (table(store).await, map.current());
        let all_held = rows.iter().all(|(_, holder, _)| !holder.is_empty());
        equal_looks = if rows == mapped(&copy) && all_held && copy.connected { equal_looks + 1 } else { 0 };
        if equal_looks == 2 {
            return copy;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: the map never matched the lease table\nmap:   {:?}\ntable: {rows:?}",
            mapped(&copy)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Appends to 64 streams; how many of them the answering node forwarded
/// (the committing holder is not the node the client sent to).
async fn forwarded_of_64(client: &Client, names_by_api: &std::collections::HashMap<String, String>, salt: &str) -> usize {
    let mut forwarded = 0;
    for i in 0..64 {
        match client.append(&format!("{salt}-{i}"), b"p").await.unwrap() {
            AppendOutcome::Applied(a) => forwarded += usize::from(names_by_api[&a.node] != a.holder),
            other => panic!("append {i}: {other:?}"),
        }
    }
    forwarded
}

#[tokio::test(flavor = "multi_thread")]
// case: map-routes
async fn the_assignment_map_follows_every_holder_and_routes_appends_to_them() {
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, _| {}).await.unwrap();
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let store = c.store().await;
    let names_by_api: std::collections::HashMap<String, String> =
        c.nodes.iter().map(|n| (n.api.clone(), n.name.clone())).collect();
    let (first, third) = (c.nodes[0].api.clone(), c.nodes[2].api.clone());

    // Control: without the map (and without Route) every append goes to the
    // first node, which forwards what it does not hold.
    let plain = client(&[&first], options(false, 3));
    let forwarded_plain = forwarded_of_64(&plain, &names_by_api, "plain").await;
    assert!(forwarded_plain > 0, "node-01 holds every shard? {:?}", c.status().await.unwrap());

    // With the map: a snapshot equal to the lease table, every append sent
    // to its holder.
    let routed = client(&[&first, &third], options(false, 3));
    let map = routed.assignment_map();
    assert!(map.ready(Duration::from_secs(10)).await, "no snapshot within 10 s");
    let copy = until_map_is_table(&map, &store, "at start").await;
    assert_eq!(copy.node, "node-01", "subscribed at the first node of the list");
    assert_eq!(copy.shards().count(), 8);
    for a in copy.shards() {
        assert_eq!(names_by_api.get(&a.holder_address), Some(&a.holder), "{a:?}: the holder's address is its node's");
        assert!(a.routable && a.state == "active", "{a:?}");
    }
    let forwarded_map = forwarded_of_64(&routed, &names_by_api, "mapped").await;
    assert_eq!(forwarded_map, 0, "routed by the map, none forwarded (without it: {forwarded_plain} of 64)");

    // A holder killed: its shards move, and the map says where, by deltas
    // (a higher version of the same stream).
    let victim = c.nodes[1].name.clone();
    let before = copy.version;
    c.node(&victim).kill9().unwrap();
    let copy = until_map_is_table(&map, &store, "after the kill").await;
    assert_eq!(copy.node, "node-01", "the same stream");
    assert!(copy.version > before, "a delta came ({before} → {})", copy.version);
    assert!(copy.shards().all(|a| a.holder != victim), "{copy:?}");
    assert_eq!(forwarded_of_64(&routed, &names_by_api, "after-kill").await, 0);

    // The streaming node stops: the map subscribes at the next and takes
    // its snapshot.
    c.node("node-01").terminate(Duration::from_secs(30)).unwrap();
    let copy = until_map_is_table(&map, &store, "after the streaming node stopped").await;
    assert_eq!(copy.node, "node-03", "resubscribed at the next node of the list");
    assert!(copy.shards().all(|a| a.holder == "node-03"), "the last node holds everything: {copy:?}");
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
// case: load-report
// case: refused
async fn reported_load_counts_with_the_appends_and_a_bad_report_counts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "standalone", |_| {}).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let c = client(&[&node.api], Options::default());
    let sample = |key: u32, ops: f64| chitin_client::proto::LoadSample {
        application: "journal".into(),
        key,
        ops,
        bytes: 1000.0,
        ..Default::default()
    };
    let load_of = |shard: &str| {
        let (ok, out) = cli(&["cluster", "load", "--node", &node.api, "--shard", shard, "--json"], &[]);
        assert!(ok, "{out}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v.as_array().unwrap().first().cloned()
    };

    // An append no retry helps is refused with the node's message, in one attempt.
    match c.append("", b"p").await {
        Err(chitin_client::Error::Refused { code, message }) => {
            assert_eq!(code, tonic::Code::InvalidArgument);
            assert!(message.contains("stream must be 1..=255 bytes"), "{message}");
        }
        other => panic!("an empty stream name must be refused: {other:?}"),
    }

    // A bad sample refuses the report, naming it; nothing of it counts.
    let key = 0xdead_beef;
    let shard = c.route("journal", key).await.unwrap().shard;
    let bad = chitin_client::proto::LoadSample { ops: f64::NAN, ..sample(1, 0.0) };
    match c.report_load(vec![sample(key, 500.0), bad]).await {
        Err(chitin_client::Error::Refused { code, message }) => {
            assert_eq!(code, tonic::Code::InvalidArgument);
            assert!(message.contains("counts nothing: sample #1: ops = NaN"), "{message}");
        }
        other => panic!("a NaN sample must be refused: {other:?}"),
    }
    assert_eq!(load_of(&shard), None, "the refused report counted nothing");

    // 500 ops on one key: the shard's load, in that key's sub-range, beside
    // an append's.
    assert_eq!(c.report_load(vec![sample(key, 500.0)]).await.unwrap(), 1);
    let l = load_of(&shard).expect("the shard has load now");
    let ops = l["ops_per_sec"].as_f64().unwrap();
    // A decayed count of 500 with a 60 s half-life reads as 500·ln2/60 ≈ 5.8/s.
    assert!((5.0..6.5).contains(&ops), "{l}");
    let busy: Vec<&serde_json::Value> =
        l["ranges"].as_array().unwrap().iter().filter(|r| r["ops_per_sec"].as_f64().unwrap() > 0.0).collect();
    assert_eq!(busy.len(), 1, "one sub-range: {l}");
    let (lower, upper) = (busy[0]["lower"].as_str().unwrap(), busy[0]["upper"].as_str().unwrap());
    let within = u32::from_str_radix(lower, 16).unwrap() <= key && key <= u32::from_str_radix(upper, 16).unwrap();
    assert!(within, "the key's sub-range: {l}");
    let (ok, table) = cli(&["cluster", "load", "--node", &node.api], &[]);
    assert!(ok && table.contains("OPS/S") && table.contains(&shard), "{table}");
    node.terminate(Duration::from_secs(20)).unwrap();
}

/// A Journal that fails every append without an outcome trailer: what a
/// node that crashed mid-append looks like to a client (it may have
/// committed).
struct Failing;

#[tonic::async_trait]
impl chitin::proto::journal_server::Journal for Failing {
    async fn append(
        &self,
        _: tonic::Request<chitin::proto::AppendRequest>,
    ) -> Result<tonic::Response<chitin::proto::AppendResponse>, tonic::Status> {
        Err(tonic::Status::internal("the node broke mid-append"))
    }

    async fn read(
        &self,
        _: tonic::Request<chitin::proto::ReadRequest>,
    ) -> Result<tonic::Response<chitin::proto::ReadResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("not in this test"))
    }
}

/// The CLI's exit codes tell the endings apart (README, "Exit codes"): an
/// append certainly not applied exits 1, one whose outcome is unknown 4, a
/// usage mistake 2.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_exit_codes_tell_unknown_from_not_applied_from_usage() {
    let failing = dead_address();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(chitin::proto::journal_server::JournalServer::new(Failing))
            .serve(failing.parse().unwrap()),
    );
    while tokio::net::TcpStream::connect(&failing).await.is_err() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let code = |args: &[&str]| {
        let out = Command::new(CHITIN).args(args).env_remove("CHITIN_NODE").env_remove("CHITIN_NODES").output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).to_string())
    };
    let append = |node: &str| {
        let node = node.to_string();
        move || code(&["journal", "append", "--node", &node, "--stream", "s", "--payload", "p", "--retries", "0"])
    };
    let (unknown, stderr) = tokio::task::spawn_blocking(append(&failing)).await.unwrap();
    assert_eq!(unknown, Some(4), "{stderr}");
    assert!(stderr.contains("outcome unknown") && stderr.contains("--request-id"), "{stderr}");
    let (not_applied, stderr) = tokio::task::spawn_blocking(append(&dead_address())).await.unwrap();
    assert_eq!(not_applied, Some(1), "{stderr}");
    assert!(stderr.contains("not applied"), "{stderr}");
    let (usage, stderr) = code(&["journal", "append", "--no-such-flag"]);
    assert_eq!(usage, Some(2), "{stderr}");
    let (_, help) = {
        let out = Command::new(CHITIN).arg("--help").output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).to_string())
    };
    assert!(help.contains("Exit codes:") && help.contains("4  an append's outcome is unknown"), "{help}");
}
