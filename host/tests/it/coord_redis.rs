//! The coordination library against the real Redis (127.0.0.1:6379 or
//! `CHITIN_TEST_REDIS_URL`). Each test uses its own random namespace and
//! deletes its keys at the end.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::coord::{TestNs, eventually};
use chitin::coord::{
    AffinityError, Claim, DeploymentError, DeploymentState, DeploymentUpdate, HeartbeatOutcome, ListFilter, MonitorError,
    NewDeployment, Progress,
};

const LONG: Duration = Duration::from_secs(60);

fn owned_by(e: &AffinityError) -> &str {
    match e {
        AffinityError::TargetOwnedByOther { owner, .. } => owner,
        other => panic!("expected TargetOwnedByOther, got {other:?}"),
    }
}

/// Whether this process's TCP socket bound to `local` has TCP_NODELAY.
fn nodelay_of_own_socket(local: std::net::SocketAddr) -> Option<bool> {
    use std::os::fd::FromRawFd;
    let fds = std::fs::read_dir("/proc/self/fd").ok()?;
    for fd in fds.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        // SAFETY: the descriptor is only asked for two socket options and
        // never closed (ManuallyDrop); a descriptor that is no socket fails
        // the first question.
        let socket = std::mem::ManuallyDrop::new(unsafe { std::net::TcpStream::from_raw_fd(fd) });
        if socket.local_addr().ok() == Some(local) {
            return socket.nodelay().ok();
        }
    }
    None
}

#[tokio::test]
async fn the_redis_connection_runs_without_nagles_algorithm() {
    let t = TestNs::new();
    let mut c = t.conn().get().await.unwrap();
    // Redis names the connection's client end: this process's socket.
    let info: String = redis::cmd("CLIENT").arg("INFO").query_async(&mut c).await.unwrap();
    let local = info
        .split_whitespace()
        .find_map(|field| field.strip_prefix("addr="))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no client address in {info:?}"));
    let nodelay = nodelay_of_own_socket(local).unwrap_or_else(|| panic!("no socket of this process is bound to {local}"));
    assert!(nodelay, "chitin's Redis connection must set TCP_NODELAY");
}

#[tokio::test]
async fn prefix_rule_n1_never_owns_n10() {
    let t = TestNs::new();
    let n1 = t.affinity("n-1", LONG);
    let n10 = t.affinity("n-10", LONG);

    assert_eq!(n10.claim("target-a").await.unwrap(), Claim::Claimed);
    // What redis-cli shows: the owner id and the delimiter, nothing more.
    assert_eq!(t.get(&format!("{}:affinity:target-a", t.ns)).as_deref(), Some("n-10:"));
    let e = n1.claim("target-a").await.unwrap_err();
    assert_eq!(owned_by(&e), "n-10");
    assert!(!n1.release("target-a").await.unwrap(), "n-1 must not release n-10's claim");
    assert_eq!(n1.owner("target-a").await.unwrap().as_deref(), Some("n-10"));
    assert_eq!(n1.list("n-1").await.unwrap(), Vec::<String>::new());
    assert_eq!(n1.list("n-10").await.unwrap(), vec!["target-a".to_string()]);

    assert_eq!(n1.claim("target-b").await.unwrap(), Claim::Claimed);
    assert_eq!(owned_by(&n10.claim("target-b").await.unwrap_err()), "n-1");
    assert_eq!(n1.claim("target-b").await.unwrap(), Claim::AlreadyOurs);

    // A claim value written by an instance whose id merely starts with ours.
    let _: () = redis::cmd("SET").arg(format!("{}:affinity:target-c", t.ns)).arg("n-1x:").query(&mut t.raw()).unwrap();
    assert_eq!(owned_by(&n1.claim("target-c").await.unwrap_err()), "n-1x");

    // Releasing our own works; the by-instance sets follow.
    assert!(n10.release("target-a").await.unwrap());
    assert_eq!(t.get(&format!("{}:affinity:target-a", t.ns)), None);
    assert_eq!(t.smembers(&format!("{}:affinity:by-instance:n-1", t.ns)), vec!["target-b"]);
    assert_eq!(t.smembers(&format!("{}:affinity:by-instance:n-10", t.ns)), Vec::<String>::new());
}

#[tokio::test]
async fn claim_validates_target_ids() {
    let t = TestNs::new();
    let a = t.affinity("n-1", LONG);
    for bad in ["", "by-instance:n-2", "a b"] {
        assert!(matches!(a.claim(bad).await, Err(AffinityError::InvalidTarget { .. })), "{bad:?}");
    }
    assert!(chitin::coord::Affinity::new(t.conn(), t.keys.clone(), "a:b", LONG).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_claims_exactly_one_wins_1000_rounds() {
    let t = TestNs::new();
    let nodes: Vec<_> = (1..=5).map(|i| t.affinity(&format!("node-{i}"), LONG)).collect();
    let mut wins = vec![0u32; nodes.len()];
    for round in 0..1000 {
        let target = format!("t-{round}");
        let mut handles = Vec::new();
        for n in &nodes {
            let n = n.clone();
            let target = target.clone();
            handles.push(tokio::spawn(async move { n.claim(&target).await }));
        }
        let mut winner = None;
        let mut losers = Vec::new();
        for (i, h) in handles.into_iter().enumerate() {
            match h.await.unwrap() {
                Ok(Claim::Claimed) => {
                    assert!(winner.is_none(), "round {round}: two winners");
                    winner = Some(i);
                }
                Ok(Claim::AlreadyOurs) => panic!("round {round}: AlreadyOurs on a fresh target"),
                Err(e) => losers.push(owned_by(&e).to_string()),
            }
        }
        let w = winner.unwrap_or_else(|| panic!("round {round}: nobody won"));
        wins[w] += 1;
        assert_eq!(losers.len(), nodes.len() - 1);
        let wid = format!("node-{}", w + 1);
        assert!(losers.iter().all(|o| *o == wid), "round {round}: losers saw {losers:?}, winner {wid}");
    }
    // Every claim is in exactly its winner's by-instance set.
    let mut total = 0;
    for (i, n) in nodes.iter().enumerate() {
        let mine = n.my_targets().await.unwrap();
        assert_eq!(mine.len() as u32, wins[i]);
        total += mine.len();
    }
    assert_eq!(total, 1000);
    eprintln!("wins per node: {wins:?}");
}

#[tokio::test]
async fn claim_many_matches_single_claims() {
    let t = TestNs::new();
    let a = t.affinity("node-a", LONG);
    let b = t.affinity("node-b", LONG);
    assert_eq!(b.claim("x-1").await.unwrap(), Claim::Claimed);
    assert_eq!(a.claim("x-2").await.unwrap(), Claim::Claimed);
    let r = a.claim_many(&["x-0", "x-1", "x-2", "x-3"]).await.unwrap();
    assert!(matches!(r[0], Ok(Claim::Claimed)));
    assert_eq!(owned_by(r[1].as_ref().unwrap_err()), "node-b");
    assert!(matches!(r[2], Ok(Claim::AlreadyOurs)));
    assert!(matches!(r[3], Ok(Claim::Claimed)));
    assert_eq!(a.my_targets().await.unwrap(), vec!["x-0", "x-2", "x-3"]);
    assert_eq!(a.owned_count().await.unwrap(), 3);
    // Large batches (more than one SADD chunk in the script).
    let many: Vec<String> = (0..2500).map(|i| format!("m-{i}")).collect();
    let r = a.claim_many(&many).await.unwrap();
    assert!(r.iter().all(|x| matches!(x, Ok(Claim::Claimed))));
    assert_eq!(a.owned_count().await.unwrap(), 2503);
    assert!(a.claim_many::<&str>(&[]).await.unwrap().is_empty());
}

#[tokio::test]
async fn claim_many_gives_each_target_its_own_outcome() {
    let t = TestNs::new();
    let a = t.affinity("node-a", Duration::from_secs(30));
    let b = t.affinity("node-b", LONG);
    assert_eq!(b.claim("y-taken").await.unwrap(), Claim::Claimed);
    let batch = ["y-free", "bad target", "y-taken", "y-free", "", "y-other"];
    let r = a.claim_many(&batch).await.unwrap();
    assert_eq!(r.len(), batch.len());
    assert!(matches!(r[0], Ok(Claim::Claimed)), "{:?}", r[0]);
    // An invalid id fails its own entry only; the rest of the batch ran.
    assert!(matches!(r[1], Err(AffinityError::InvalidTarget { .. })), "{:?}", r[1]);
    assert_eq!(owned_by(r[2].as_ref().unwrap_err()), "node-b");
    match &r[2] {
        Err(AffinityError::TargetOwnedByOther { target, .. }) => assert_eq!(target, "y-taken"),
        other => panic!("{other:?}"),
    }
    // Listed twice: the second sees the first's claim.
    assert!(matches!(r[3], Ok(Claim::AlreadyOurs)), "{:?}", r[3]);
    assert!(matches!(r[4], Err(AffinityError::InvalidTarget { .. })), "{:?}", r[4]);
    assert!(matches!(r[5], Ok(Claim::Claimed)), "{:?}", r[5]);
    // The layout a single claim writes: value, TTL, by-instance set and its TTL.
    assert_eq!(t.get(&t.keys.affinity("y-free")).as_deref(), Some("node-a:"));
    assert_eq!(t.get(&t.keys.affinity("y-taken")).as_deref(), Some("node-b:"));
    assert!((28..=30).contains(&t.ttl(&t.keys.affinity("y-other"))));
    let set = t.keys.affinity_by_instance("node-a");
    assert_eq!(t.smembers(&set), vec!["y-free", "y-other"]);
    assert!((28..=30).contains(&t.ttl(&set)));
    assert_eq!(t.smembers(&t.keys.affinity_by_instance("node-b")), vec!["y-taken"]);
    // A batch of nothing but invalid ids never reaches Redis and fails nothing else.
    let r = a.claim_many(&["", " "]).await.unwrap();
    assert!(r.iter().all(|x| matches!(x, Err(AffinityError::InvalidTarget { .. }))));
}

#[tokio::test]
async fn claim_many_across_script_chunks_keeps_order_and_outcomes() {
    let t = TestNs::new();
    let a = t.affinity("node-a", LONG);
    let b = t.affinity("node-b", LONG);
    let n = chitin::coord::affinity::CLAIM_BATCH_CHUNK * 2 + 500;
    let targets: Vec<String> = (0..n).map(|i| format!("c-{i:05}")).collect();
    // Taken by node-b: one in each chunk, including the last target of a chunk.
    let taken = [7, chitin::coord::affinity::CLAIM_BATCH_CHUNK - 1, chitin::coord::affinity::CLAIM_BATCH_CHUNK * 2 + 3];
    for &i in &taken {
        b.claim(&targets[i]).await.unwrap();
    }
    let r = a.claim_many(&targets).await.unwrap();
    assert_eq!(r.len(), n);
    for (i, x) in r.iter().enumerate() {
        if taken.contains(&i) {
            assert_eq!(owned_by(x.as_ref().unwrap_err()), "node-b", "target {i}");
        } else {
            assert!(matches!(x, Ok(Claim::Claimed)), "target {i}: {x:?}");
        }
    }
    assert_eq!(a.owned_count().await.unwrap(), (n - taken.len()) as u64);
    let again = a.claim_many(&targets).await.unwrap();
    assert_eq!(again.iter().filter(|x| matches!(x, Ok(Claim::AlreadyOurs))).count(), n - taken.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_batches_exactly_one_owner_per_target() {
    let t = TestNs::new();
    let nodes: Vec<_> = (1..=4).map(|i| t.affinity(&format!("node-{i}"), LONG)).collect();
    let targets: Vec<String> = (0..400).map(|i| format!("b-{i}")).collect();
    for round in 0..20 {
        // Each node asks for the same 400 targets in its own order.
        let mut handles = Vec::new();
        for (k, n) in nodes.iter().enumerate() {
            let n = n.clone();
            let mut mine: Vec<String> = targets.iter().map(|x| format!("{round}-{x}")).collect();
            mine.rotate_left(k * 97);
            handles.push(tokio::spawn(async move {
                let r = n.claim_many(&mine).await.unwrap();
                (mine, r)
            }));
        }
        let mut winners: std::collections::BTreeMap<String, Vec<usize>> = Default::default();
        let mut seen_owner: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (k, h) in handles.into_iter().enumerate() {
            let (mine, r) = h.await.unwrap();
            for (target, x) in mine.into_iter().zip(r) {
                match x {
                    Ok(Claim::Claimed) => winners.entry(target).or_default().push(k),
                    Ok(Claim::AlreadyOurs) => panic!("round {round}: AlreadyOurs on a fresh target"),
                    Err(e) => seen_owner.entry(target).or_default().push(owned_by(&e).to_string()),
                }
            }
        }
        assert_eq!(winners.len(), targets.len(), "round {round}: every target has a winner");
        for (target, w) in &winners {
            assert_eq!(w.len(), 1, "round {round}: {target} won by {w:?}");
            let wid = format!("node-{}", w[0] + 1);
            let losers = &seen_owner[target];
            assert_eq!(losers.len(), nodes.len() - 1);
            assert!(losers.iter().all(|o| *o == wid), "round {round}: {target} losers saw {losers:?}, winner {wid}");
        }
    }
    // The by-instance sets partition the targets exactly.
    let mut all = BTreeSet::new();
    let mut total = 0;
    for n in &nodes {
        let mine = n.my_targets().await.unwrap();
        assert_eq!(mine.len() as u64, n.owned_count().await.unwrap(), "no member that is not ours");
        total += mine.len();
        all.extend(mine);
    }
    assert_eq!(total, 20 * targets.len());
    assert_eq!(all.len(), total);
}

#[tokio::test]
async fn claims_carry_liveness_ttl_and_refresh_all_keeps_them() {
    let t = TestNs::new();
    let a = t.affinity("node-a", Duration::from_secs(30));
    a.claim("r-1").await.unwrap();
    a.claim("r-2").await.unwrap();
    let claim_key = format!("{}:affinity:r-1", t.ns);
    let set_key = format!("{}:affinity:by-instance:node-a", t.ns);
    assert!((28..=30).contains(&t.ttl(&claim_key)), "claim TTL {}", t.ttl(&claim_key));
    assert!((28..=30).contains(&t.ttl(&set_key)), "set TTL {}", t.ttl(&set_key));
    let _: () = redis::cmd("EXPIRE").arg(&claim_key).arg(5).query(&mut t.raw()).unwrap();
    // r-2 was taken over behind our back (e.g. after our claim lapsed).
    let _: () = redis::cmd("SET").arg(format!("{}:affinity:r-2", t.ns)).arg("node-b:").query(&mut t.raw()).unwrap();
    assert_eq!(a.refresh_all().await.unwrap(), (1, 1));
    assert!(t.ttl(&claim_key) >= 28);
    assert_eq!(t.smembers(&set_key), vec!["r-1"]);
}

/// An instance holds at most its limit of claims: one past it is refused
/// (nothing kept in Redis), by the single and the batch script alike, and a
/// dispatch declines it instead of failing open; a released claim makes
/// room, and a claim already ours is still refreshed at the limit.
#[tokio::test]
async fn claims_past_the_instance_limit_are_refused_and_keep_nothing() {
    let t = TestNs::new();
    let a = t.affinity("node-a", LONG).with_max_claims(3);
    for target in ["l-1", "l-2", "l-3"] {
        assert_eq!(a.claim(target).await.unwrap(), Claim::Claimed);
    }
    let refused = a.claim("l-4").await.unwrap_err();
    assert!(matches!(refused, AffinityError::TooManyClaims { limit: 3, .. }), "{refused:?}");
    assert!(refused.to_string().contains("cluster.max_claims_per_instance"), "{refused}");
    assert_eq!(a.owner("l-4").await.unwrap(), None, "a refused claim left its key behind");
    assert_eq!(a.claim("l-1").await.unwrap(), Claim::AlreadyOurs);
    let batch = a.claim_many(&["l-2", "l-5"]).await.unwrap();
    assert_eq!(batch[0].as_ref().unwrap(), &Claim::AlreadyOurs);
    assert!(matches!(batch[1], Err(AffinityError::TooManyClaims { .. })), "{:?}", batch[1]);
    assert_eq!(a.owner("l-5").await.unwrap(), None);
    assert!(a.release("l-3").await.unwrap());
    assert_eq!(a.claim("l-4").await.unwrap(), Claim::Claimed);
    assert_eq!(a.owned_count().await.unwrap(), 3);

    let mut config = t.config(LONG);
    config.max_claims = 1;
    let node =
        chitin::coord::Coordinator::new(config, chitin::coord::InstanceInfo::new("node-b", "h", "127.0.0.1:1", "0")).unwrap();
    assert_eq!(node.dispatcher.dispatch("d-1").await.unwrap(), chitin::coord::Dispatch::Claimed);
    let declined = node.dispatcher.dispatch("d-2").await.unwrap_err();
    assert!(matches!(declined, chitin::coord::Declined::TooManyClaims { limit: 1, .. }), "{declined:?}");
    assert_eq!(node.metrics.fail_open_total.load(std::sync::atomic::Ordering::Relaxed), 0, "a full instance failed open");
}

/// `refresh_all` walks a set larger than one slice (a script call each, so
/// other clients run between) and refreshes every claim.
#[tokio::test]
async fn refresh_all_walks_a_large_set_in_slices() {
    let t = TestNs::new();
    let a = t.affinity("node-a", Duration::from_secs(30));
    let targets: Vec<String> = (0..2_500).map(|i| format!("big-{i}")).collect();
    assert!(a.claim_many(&targets).await.unwrap().iter().all(Result::is_ok));
    let lapsing = format!("{}:affinity:big-7", t.ns);
    let _: () = redis::cmd("EXPIRE").arg(&lapsing).arg(5).query(&mut t.raw()).unwrap();
    assert_eq!(a.refresh_all().await.unwrap(), (2_500, 0));
    assert!(t.ttl(&lapsing) >= 28, "a claim of a later slice was not refreshed");
}

/// The child half of `ttl_lapse_after_kill_9_and_reclaim`: a node that
/// registers, claims, heartbeats and waits to be killed. Does nothing when
/// run as an ordinary test.
#[tokio::test]
async fn child_holder() {
    let Ok(ns) = std::env::var("COORD_CHILD_NS") else { return };
    let url = std::env::var("COORD_CHILD_URL").unwrap();
    let mut cfg = chitin::coord::CoordConfig::new(url);
    cfg.namespace = ns;
    cfg.liveness_timeout = Duration::from_secs(3);
    cfg.heartbeat_interval = Duration::from_millis(300);
    cfg.monitor_interval = Duration::from_secs(3600);
    let info = chitin::coord::InstanceInfo::new("victim", "h", "127.0.0.1:1", "0");
    let node = chitin::coord::Coordinator::new(cfg, info).unwrap();
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let _tasks = node.start(rx).await;
    assert_eq!(node.dispatcher.dispatch("pinned").await.unwrap(), chitin::coord::Dispatch::Claimed);
    println!("READY");
    tokio::time::sleep(Duration::from_secs(120)).await;
}

struct KillOnDrop(std::process::Child);
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_lapse_after_kill_9_and_reclaim() {
    let t = TestNs::new();
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            // The child's full name in the one test binary.
            .args(["--exact", "coord_redis::child_holder", "--nocapture", "--test-threads=1"])
            .env("COORD_CHILD_NS", &t.ns)
            .env("COORD_CHILD_URL", &t.url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let ready =
        tokio::task::spawn_blocking(move || BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l.contains("READY")));
    assert!(tokio::time::timeout(Duration::from_secs(60), ready).await.unwrap().unwrap(), "child never got ready");

    let other = t.node("survivor", Duration::from_secs(2));
    // While the holder lives (and heartbeats), its claim outlives the 3 s TTL.
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let e = other.affinity.claim("pinned").await.unwrap_err();
        assert_eq!(owned_by(&e), "victim");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // kill -9: no release, no deregistration.
    let pid = child.0.id();
    assert!(Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap().success());
    let killed = Instant::now();
    let mut reclaimed = false;
    while killed.elapsed() < Duration::from_secs(15) {
        match other.dispatcher.dispatch("pinned").await {
            Ok(chitin::coord::Dispatch::Claimed) => {
                reclaimed = true;
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            Ok(d) => panic!("unexpected {d:?}"),
        }
    }
    assert!(reclaimed, "target was never re-claimed after the holder died");
    eprintln!("re-claimed {:?} after kill -9", killed.elapsed());
    assert_eq!(other.affinity.owner("pinned").await.unwrap().as_deref(), Some("survivor"));
    // The dead holder's registry entry is stale; a sweep removes it.
    assert_eq!(other.monitor.stale_instances().await.unwrap(), vec!["victim"]);
    let report = other.monitor.sweep().await.unwrap();
    assert_eq!(report.removed_instances(), vec!["victim"]);
    assert!(report.instances[0].claims_deleted.is_empty(), "the claim lapsed and was re-taken: not the victim's any more");
}

/// Builds `n` dead instances (registered, with claims and deployments, then
/// their instance key deleted as if its TTL lapsed) and `live` live ones.
async fn dead_and_live(t: &TestNs, n: usize, live: usize) -> (Vec<String>, Vec<String>) {
    let mut dead = Vec::new();
    for i in 0..n {
        let id = format!("dead-{i:02}");
        let reg = t.registry(&id, LONG);
        reg.register().await.unwrap();
        let a = t.affinity(&id, LONG);
        for j in 0..3 {
            a.claim(&format!("{id}-t{j}")).await.unwrap();
        }
        let d = t.deployments(&id);
        d.start(NewDeployment { description: "rolling".into(), ..Default::default() }).await.unwrap();
        let done = d.start(NewDeployment::default()).await.unwrap();
        d.finish(&done.deployment_id, DeploymentState::Succeeded, None).await.unwrap();
        t.del(&t.keys.instance(&id));
        dead.push(id);
    }
    let mut alive = Vec::new();
    for i in 0..live {
        let id = format!("live-{i}");
        t.registry(&id, LONG).register().await.unwrap();
        t.affinity(&id, LONG).claim(&format!("{id}-t")).await.unwrap();
        alive.push(id);
    }
    (dead, alive)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_monitors_sweeping_at_once_split_the_work_exactly() {
    let t = TestNs::new();
    for round in 0..3 {
        let (dead, alive) = dead_and_live(&t, 12, 2).await;
        let (m1, m2) = (t.monitor(), t.monitor());
        let (r1, r2) = tokio::join!(
            tokio::spawn(async move { m1.sweep().await.unwrap() }),
            tokio::spawn(async move { m2.sweep().await.unwrap() })
        );
        let (r1, r2) = (r1.unwrap(), r2.unwrap());
        let s1: BTreeSet<_> = r1.removed_instances().into_iter().collect();
        let s2: BTreeSet<_> = r2.removed_instances().into_iter().collect();
        assert!(s1.is_disjoint(&s2), "round {round}: both removed {:?}", s1.intersection(&s2).collect::<Vec<_>>());
        let union: Vec<_> = s1.union(&s2).cloned().collect();
        assert_eq!(union, dead, "round {round}");
        assert_eq!(r1.claims_deleted() + r2.claims_deleted(), dead.len() * 3, "round {round}");
        assert_eq!(r1.deployments_failed() + r2.deployments_failed(), dead.len(), "round {round}");
        eprintln!("round {round}: monitor 1 removed {}, monitor 2 removed {}", s1.len(), s2.len());
        // Live instances and their claims are untouched; nothing is left to sweep.
        for id in &alive {
            assert!(t.exists(&t.keys.instance(id)));
            assert_eq!(t.get(&t.keys.affinity(&format!("{id}-t"))), Some(format!("{id}:")));
        }
        assert!(t.monitor().stale_instances().await.unwrap().is_empty());
        assert!(t.monitor().sweep().await.unwrap().is_empty());
        for id in &dead {
            assert!(!t.exists(&t.keys.affinity_by_instance(id)));
            assert!(!t.exists(&t.keys.deployments_by_instance(id)));
            for j in 0..3 {
                assert!(!t.exists(&t.keys.affinity(&format!("{id}-t{j}"))));
            }
        }
        assert!(t.smembers(&t.keys.deployments_active()).is_empty());
        let index = t.smembers(&t.keys.instances_index());
        assert_eq!(index, alive);
    }
}

#[tokio::test]
async fn orphaned_deployments_are_failed_with_the_exact_message() {
    let t = TestNs::new();
    let owner = "01a0b519-67f5-88c1-b926-2e2c1f3a20fd";
    let reg = t.registry(owner, LONG);
    reg.register().await.unwrap();
    let d = t.deployments(owner);
    let pending = d
        .start(NewDeployment { state: Some(DeploymentState::Pending), description: "p".into(), ..Default::default() })
        .await
        .unwrap();
    let mut meta = std::collections::BTreeMap::new();
    meta.insert("app".to_string(), "orders".to_string());
    let running = d
        .start(NewDeployment {
            description: "r".into(),
            progress: Some(Progress { completed: 1, total: 4 }),
            metadata: meta.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let done = d.start(NewDeployment::default()).await.unwrap();
    d.finish(&done.deployment_id, DeploymentState::Succeeded, Some("ok".into())).await.unwrap();
    t.affinity(owner, LONG).claim("tgt").await.unwrap();
    assert_eq!(t.smembers(&t.keys.deployments_active()), {
        let mut v = vec![pending.deployment_id.clone(), running.deployment_id.clone()];
        v.sort();
        v
    });

    // Alive: refused.
    let m = t.monitor();
    assert!(matches!(m.cleanup_dead_instance(owner).await, Err(MonitorError::InstanceAlive { .. })));

    t.del(&t.keys.instance(owner)); // its liveness TTL lapses
    let report = m.cleanup_dead_instance(owner).await.unwrap();
    assert!(report.removed_from_index);
    assert_eq!(report.claims_deleted, vec!["tgt"]);
    let mut expect = vec![pending.deployment_id.clone(), running.deployment_id.clone()];
    expect.sort();
    assert_eq!(report.deployments_failed, expect);

    let msg = format!("Deployment orphaned: instance {owner} died");
    for id in [&pending.deployment_id, &running.deployment_id] {
        let doc = d.show(id).await.unwrap().unwrap();
        assert_eq!(doc.state, DeploymentState::Failed);
        assert_eq!(doc.message.as_deref(), Some(msg.as_str()));
        assert_eq!(doc.owner_instance_id, owner);
        assert!(doc.finished_at.is_some());
        let ttl = t.ttl(&t.keys.deployment(id));
        assert!(ttl > 3600 && ttl <= 86400, "terminal TTL {ttl}");
    }
    // The rewrite kept every other field.
    let r = d.show(&running.deployment_id).await.unwrap().unwrap();
    assert_eq!(r.progress, Some(Progress { completed: 1, total: 4 }));
    assert_eq!(r.metadata, meta);
    assert_eq!(r.description, "r");
    assert_eq!(r.created_at, running.created_at);
    let p = d.show(&pending.deployment_id).await.unwrap().unwrap();
    assert_eq!(p.progress, None);
    assert!(p.metadata.is_empty());
    // The succeeded one is left alone.
    let s = d.show(&done.deployment_id).await.unwrap().unwrap();
    assert_eq!(s.state, DeploymentState::Succeeded);
    assert_eq!(s.message.as_deref(), Some("ok"));

    assert!(t.smembers(&t.keys.deployments_active()).is_empty());
    assert!(!t.exists(&t.keys.deployments_by_instance(owner)));
    assert!(!t.exists(&t.keys.affinity_by_instance(owner)));
    assert!(t.smembers(&t.keys.instances_index()).is_empty());
    // Nothing resumes them.
    let e = d.update(&running.deployment_id, DeploymentUpdate::default()).await.unwrap_err();
    assert!(matches!(e, DeploymentError::Terminal { state: DeploymentState::Failed, .. }), "{e:?}");
    // A second cleanup finds nothing to do.
    assert!(m.cleanup_dead_instance(owner).await.unwrap().is_empty());
}

#[tokio::test]
async fn graceful_release_all_and_deregister() {
    let t = TestNs::new();
    let node = t.node("node-a", LONG);
    let other = t.affinity("node-b", LONG);
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let tasks = node.start(rx).await;
    for i in 0..50 {
        assert_eq!(node.dispatcher.dispatch(&format!("g-{i}")).await.unwrap(), chitin::coord::Dispatch::Claimed);
    }
    for i in 0..5 {
        other.claim(&format!("o-{i}")).await.unwrap();
    }
    assert_eq!(node.affinity.owned_count().await.unwrap(), 50);
    let snap = node.metrics_snapshot().await;
    assert_eq!(snap.active_instances, Some(1));
    assert_eq!(snap.owned_targets, Some(50));
    assert_eq!(snap.orphaned_targets, Some(5), "node-b never registered: its claims count as orphaned");

    node.shutdown().await;
    for i in 0..50 {
        assert_eq!(other.owner(&format!("g-{i}")).await.unwrap(), None);
    }
    for i in 0..5 {
        assert_eq!(other.owner(&format!("o-{i}")).await.unwrap().as_deref(), Some("node-b"));
    }
    assert!(!t.exists(&t.keys.affinity_by_instance("node-a")));
    assert!(!t.exists(&t.keys.instance("node-a")));
    assert!(t.smembers(&t.keys.instances_index()).is_empty());
    // Every target is free for another node at once.
    assert_eq!(other.claim("g-0").await.unwrap(), Claim::Claimed);
    drop(_tx);
    tasks.join().await;
}

#[tokio::test]
async fn registry_register_heartbeat_restore_list_deregister() {
    let t = TestNs::new();
    let a = t.registry("inst-a", Duration::from_secs(30));
    let b = t.registry("inst-b", Duration::from_secs(30));
    assert_eq!(a.register().await.unwrap(), HeartbeatOutcome::Restored);
    b.register().await.unwrap();
    assert_eq!(a.heartbeat().await.unwrap(), HeartbeatOutcome::Refreshed);
    let key = t.keys.instance("inst-a");
    assert!((28..=30).contains(&t.ttl(&key)));
    // The JSON has exactly the reference's fields.
    let v: serde_json::Value = serde_json::from_str(&t.get(&key).unwrap()).unwrap();
    let fields: BTreeSet<_> = v.as_object().unwrap().keys().cloned().collect();
    let want: BTreeSet<String> = ["instance_id", "hostname", "grpc_address", "started_at", "last_heartbeat", "version"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(fields, want);
    assert!(v["started_at"].is_u64() && v["last_heartbeat"].is_u64());
    assert_eq!(v["instance_id"], "inst-a");

    t.del(&t.keys.instance("inst-b"));
    let list = a.list_instances().await.unwrap();
    assert_eq!(list.len(), 2);
    assert_eq!((list[0].instance_id.as_str(), list[0].alive), ("inst-a", true));
    assert_eq!(list[0].grpc_address(), Some(a.info().grpc_address.as_str()));
    assert!(list[0].last_heartbeat().is_some());
    assert_eq!((list[1].instance_id.as_str(), list[1].alive), ("inst-b", false));
    assert_eq!(list[1].info, None);

    // A lapsed key is restored by the next heartbeat.
    assert_eq!(b.heartbeat().await.unwrap(), HeartbeatOutcome::Restored);
    assert!(a.list_instances().await.unwrap().iter().all(|s| s.alive));

    a.deregister().await.unwrap();
    assert!(!t.exists(&key));
    assert_eq!(t.smembers(&t.keys.instances_index()), vec!["inst-b"]);
}

#[tokio::test]
async fn heartbeat_task_restores_a_swept_registration() {
    let t = TestNs::new();
    let node = t.node("hb-node", Duration::from_secs(4));
    let (tx, rx) = tokio::sync::watch::channel(false);
    let tasks = node.start(rx).await;
    // Someone deletes our key and index entry (as a peer's monitor does once
    // the key lapsed; this node's own monitor may well do it too, which also
    // deletes its claims: an instance seen dead loses them).
    t.del(&t.keys.instance("hb-node"));
    let _: i64 = redis::cmd("SREM").arg(t.keys.instances_index()).arg("hb-node").query(&mut t.raw()).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || async {
            t.exists(&t.keys.instance("hb-node")) && t.smembers(&t.keys.instances_index()) == ["hb-node"]
        })
        .await
    );
    // Claims keep being refreshed past their TTL while the node lives.
    assert_eq!(node.affinity.claim("hb-t").await.unwrap(), Claim::Claimed);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(node.affinity.owner("hb-t").await.unwrap().as_deref(), Some("hb-node"));
    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), tasks.join()).await.unwrap();
}

#[tokio::test]
async fn deployments_lifecycle_and_terminal_refusal() {
    let t = TestNs::new();
    let d = t.deployments("owner-1");
    let peer = t.deployments("owner-2");
    let dep = d
        .start(NewDeployment { state: Some(DeploymentState::Pending), description: "v2".into(), ..Default::default() })
        .await
        .unwrap();
    let id = dep.deployment_id.clone();
    let key = t.keys.deployment(&id);
    let ttl = t.ttl(&key);
    assert!((3590..=3600).contains(&ttl), "active TTL {ttl}");
    assert_eq!(t.smembers(&t.keys.deployments_active()), vec![id.clone()]);
    assert_eq!(t.smembers(&t.keys.deployments_by_instance("owner-1")), vec![id.clone()]);

    // Another instance updates it: the owner stays.
    let u = peer
        .update(
            &id,
            DeploymentUpdate {
                state: Some(DeploymentState::Running),
                progress: Some(Progress { completed: 1, total: 2 }),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(u.owner_instance_id, "owner-1");
    assert_eq!(u.state, DeploymentState::Running);
    let e = d.update(&id, DeploymentUpdate { state: Some(DeploymentState::Pending), ..Default::default() }).await.unwrap_err();
    assert!(matches!(e, DeploymentError::InvalidTransition { .. }), "{e:?}");
    assert!(matches!(d.finish(&id, DeploymentState::Running, None).await, Err(DeploymentError::NotTerminal { .. })));

    let f = d.finish(&id, DeploymentState::Succeeded, Some("all shards moved".into())).await.unwrap();
    assert_eq!(f.owner_instance_id, "owner-1");
    assert!(t.ttl(&key) > 3600, "terminal TTL {}", t.ttl(&key));
    assert!(t.smembers(&t.keys.deployments_active()).is_empty());

    // Terminal is final, with an error naming the deployment and its state.
    let e = d.update(&id, DeploymentUpdate { message: Some("again".into()), ..Default::default() }).await.unwrap_err();
    let text = e.to_string();
    assert!(matches!(e, DeploymentError::Terminal { state: DeploymentState::Succeeded, .. }));
    assert!(text.contains(&id) && text.contains("succeeded"), "{text}");
    assert!(matches!(d.finish(&id, DeploymentState::Failed, None).await, Err(DeploymentError::Terminal { .. })));
    assert_eq!(d.show(&id).await.unwrap().unwrap().message.as_deref(), Some("all shards moved"));

    // Start refuses terminal states and duplicate ids.
    assert!(matches!(
        d.start(NewDeployment { state: Some(DeploymentState::Failed), ..Default::default() }).await,
        Err(DeploymentError::InvalidStartState { .. })
    ));
    let uuid = uuid::Uuid::parse_str(&id).unwrap();
    assert!(matches!(
        d.start(NewDeployment { deployment_id: Some(uuid), ..Default::default() }).await,
        Err(DeploymentError::AlreadyExists { .. })
    ));
    assert!(matches!(
        d.update(&uuid::Uuid::new_v4().to_string(), DeploymentUpdate::default()).await,
        Err(DeploymentError::NotFound { .. })
    ));
    assert!(matches!(d.show("active").await, Err(DeploymentError::InvalidId { .. })));
    assert_eq!(d.show(&uuid::Uuid::new_v4().to_string()).await.unwrap(), None);

    // Listing.
    let a2 = d.start(NewDeployment::default()).await.unwrap();
    let b1 = peer.start(NewDeployment::default()).await.unwrap();
    let ids = |l: chitin::coord::Listing| {
        assert!(l.unreadable.is_empty(), "{:?}", l.unreadable);
        l.deployments.into_iter().map(|d| d.deployment_id).collect::<BTreeSet<_>>()
    };
    let all = ids(d.list(&ListFilter::default()).await.unwrap());
    assert_eq!(all, [id.clone(), a2.deployment_id.clone(), b1.deployment_id.clone()].into_iter().collect());
    let active = ids(d.list(&ListFilter { active_only: true, instance: None }).await.unwrap());
    assert_eq!(active, [a2.deployment_id.clone(), b1.deployment_id.clone()].into_iter().collect());
    let mine = ids(d.list(&ListFilter { active_only: false, instance: Some("owner-1".into()) }).await.unwrap());
    assert_eq!(mine, [id.clone(), a2.deployment_id.clone()].into_iter().collect());
    let mine_active = ids(d.list(&ListFilter { active_only: true, instance: Some("owner-1".into()) }).await.unwrap());
    assert_eq!(mine_active, [a2.deployment_id.clone()].into_iter().collect());
    assert_eq!(d.active_count().await.unwrap(), 2);

    // An expired record drops out of the sets when listed.
    t.del(&t.keys.deployment(&a2.deployment_id));
    let active = ids(d.list(&ListFilter { active_only: true, instance: Some("owner-1".into()) }).await.unwrap());
    assert!(active.is_empty());
    assert_eq!(t.smembers(&t.keys.deployments_active()), vec![b1.deployment_id.clone()]);

    // A record that is no deployment document is skipped and named, and
    // hides none of the others.
    t.set(&t.keys.deployment(&id), "{not json");
    let listing = d.list(&ListFilter::default()).await.unwrap();
    assert_eq!(listing.unreadable.len(), 1, "{listing:?}");
    assert_eq!(listing.unreadable[0].deployment_id, id);
    assert!(listing.unreadable[0].error.contains("key must be a string"), "{:?}", listing.unreadable);
    let listed: BTreeSet<_> = listing.deployments.into_iter().map(|d| d.deployment_id).collect();
    assert_eq!(listed, [b1.deployment_id.clone()].into_iter().collect());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_updates_never_resurrect_a_terminal_deployment() {
    let t = TestNs::new();
    let d = t.deployments("owner-x");
    for _ in 0..20 {
        let dep = d.start(NewDeployment::default()).await.unwrap();
        let id = dep.deployment_id.clone();
        let mut hs = Vec::new();
        for i in 0..4 {
            let d = t.deployments("owner-x");
            let id = id.clone();
            hs.push(tokio::spawn(async move {
                if i == 0 {
                    d.finish(&id, DeploymentState::Cancelled, None).await.map(|_| ())
                } else {
                    d.update(&id, DeploymentUpdate { message: Some(format!("step {i}")), ..Default::default() }).await.map(|_| ())
                }
            }));
        }
        let mut finished = false;
        for (i, h) in hs.into_iter().enumerate() {
            match h.await.unwrap() {
                Ok(()) => finished |= i == 0,
                Err(DeploymentError::Terminal { .. }) => assert_ne!(i, 0),
                Err(e) => panic!("{e}"),
            }
        }
        assert!(finished);
        assert_eq!(d.show(&id).await.unwrap().unwrap().state, DeploymentState::Cancelled);
    }
}

#[tokio::test]
async fn metrics_count_orphaned_claims_and_deployments() {
    let t = TestNs::new();
    let node = t.node("m-node", LONG);
    node.registry.register().await.unwrap();
    node.affinity.claim("mine").await.unwrap();
    node.deployments.start(NewDeployment::default()).await.unwrap();
    let ghost_reg = t.registry("ghost", LONG);
    ghost_reg.register().await.unwrap();
    let ghost = t.affinity("ghost", LONG);
    ghost.claim("g1").await.unwrap();
    ghost.claim("g2").await.unwrap();
    t.deployments("ghost").start(NewDeployment::default()).await.unwrap();
    assert_eq!(node.affinity.orphaned_count().await.unwrap(), 0);
    t.del(&t.keys.instance("ghost"));
    let s = node.metrics_snapshot().await;
    assert_eq!(s.active_instances, Some(1));
    assert_eq!(s.owned_targets, Some(1));
    assert_eq!(s.orphaned_targets, Some(2));
    assert_eq!(s.deployments_active, Some(2));
    assert_eq!(s.deployments_orphaned_total, 0);
    assert!(s.healthy());
    let r = node.monitor.sweep().await.unwrap();
    assert_eq!(r.removed_instances(), vec!["ghost"]);
    let s = node.metrics_snapshot().await;
    assert_eq!(s.orphaned_targets, Some(0));
    assert_eq!(s.deployments_active, Some(1));
    assert_eq!(s.deployments_orphaned_total, 1);
    let text = s.to_prometheus();
    assert!(text.contains("chitin_deployments_orphaned_total 1"), "{text}");
    assert!(text.contains("chitin_cluster_active_instances 1"), "{text}");
}

/// A Redis that takes connections and never answers (a hung server, a
/// black-holing proxy): twenty callers asking for the first connection at
/// once share the one connect that runs, and are all answered within about
/// a connect timeout, not one timeout after another.
#[tokio::test]
async fn a_first_connect_that_fails_fails_every_waiting_caller_at_once() {
    // The kernel completes handshakes into the backlog; nothing answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("redis://{}", silent.local_addr().unwrap());
    let conn = chitin::coord::RedisConn::open(&url).unwrap();
    let timeout = conn.settings().connection_timeout;
    let started = Instant::now();
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let conn = conn.clone();
            tokio::spawn(async move { (conn.get().await.map(|_| ()), started.elapsed()) })
        })
        .collect();
    for call in calls {
        let (outcome, after) = call.await.unwrap();
        assert!(outcome.is_err(), "a silent server answered");
        // One at a time, the last would wait twenty timeouts.
        assert!(after < timeout * 5, "a caller waited {after:?} (connect timeout {timeout:?})");
    }
    drop(silent);
}
