//! Fail-open against a private `redis-server` that the test starts, kills
//! and restarts on the same loopback port: dispatch never stops, the
//! fail-open counter counts, the log line is rate-limited, and the node's
//! registration comes back by itself.

use std::io::Write;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::coord::{TestNs, eventually};
use chitin::coord::{Claim, Dispatch, FAIL_OPEN_MESSAGE};
use chitin::testkit::PrivateRedis;

/// Collects formatted log output.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&self.0.lock().unwrap()).matches(needle).count()
    }
}

#[tokio::test]
async fn dispatch_fails_open_while_redis_is_down_and_the_node_recovers() {
    let logs = Capture::default();
    let writer = logs.clone();
    tracing_subscriber::fmt().with_writer(move || writer.clone()).with_ansi(false).with_max_level(tracing::Level::INFO).init();

    let dir = tempfile::tempdir().unwrap();
    let mut server = PrivateRedis::stopped(dir.path(), None).unwrap();
    let t = TestNs::with_url(server.url("127.0.0.1"));
    let node = t.node("fo-node", Duration::from_secs(3));
    let fail_open = || node.metrics.fail_open_total.load(std::sync::atomic::Ordering::Relaxed);

    // 1. Redis is down when the node starts: it starts anyway and fails open.
    let (tx, rx) = tokio::sync::watch::channel(false);
    let tasks = node.start(rx).await;
    let t0 = Instant::now();
    assert_eq!(node.dispatcher.dispatch("t-1").await.unwrap(), Dispatch::FailedOpen);
    assert!(t0.elapsed() < Duration::from_secs(5), "fail-open took {:?}", t0.elapsed());
    assert_eq!(fail_open(), 1);

    // 2. Redis comes up: the heartbeat registers, dispatch claims.
    server.up().expect("redis-server must be installed");
    assert!(
        eventually(Duration::from_secs(10), || async { is_registered(&server, &t) }).await,
        "the node never registered once Redis came up"
    );
    assert_eq!(node.dispatcher.dispatch("t-1").await.unwrap(), Dispatch::Claimed);
    assert_eq!(node.dispatcher.dispatch("t-1").await.unwrap(), Dispatch::AlreadyOurs);

    // 2b. Redis hangs (SIGSTOP: connections stay open, nothing answers):
    // the response timeout bounds each attempt, so dispatch still returns.
    let pid = server.pid().unwrap().to_string();
    assert!(Command::new("kill").args(["-STOP", &pid]).status().unwrap().success());
    let t2 = Instant::now();
    let d = node.dispatcher.dispatch("t-1").await.unwrap();
    let hung = t2.elapsed();
    assert!(Command::new("kill").args(["-CONT", &pid]).status().unwrap().success());
    assert_eq!(d, Dispatch::FailedOpen);
    assert!(hung < Duration::from_secs(6), "a dispatch against a hung Redis took {hung:?}");
    eprintln!("dispatch against a hung Redis failed open after {hung:?}");
    assert_eq!(fail_open(), 2);
    assert!(
        eventually(Duration::from_secs(10), || async { node.dispatcher.dispatch("t-1").await == Ok(Dispatch::AlreadyOurs) })
            .await,
        "dispatch never recovered after Redis resumed"
    );

    // 3. Redis dies: every dispatch still returns, failing open, and is counted.
    server.down();
    let mut n = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) || n < 5 {
        let t1 = Instant::now();
        assert_eq!(node.dispatcher.dispatch(&format!("t-{n}")).await.unwrap(), Dispatch::FailedOpen);
        assert!(t1.elapsed() < Duration::from_secs(5), "a dispatch took {:?}", t1.elapsed());
        n += 1;
    }
    assert_eq!(fail_open(), 2 + n);
    eprintln!("{n} dispatches failed open in {:?}", started.elapsed());
    // Each answer carries the outage's window: one start, the end the last
    // fail-open plus the claim TTL (3 s here).
    let outage = node.dispatcher.fail_open_window().expect("an open fail-open window");
    let (d, w) = node.dispatcher.dispatch_with_window("t-w").await.unwrap();
    assert_eq!(d, Dispatch::FailedOpen);
    let w = w.expect("a fail-open answer carries its window");
    assert_eq!(w.start_unix_ms, outage.start_unix_ms);
    assert!(
        w.end_unix_ms >= outage.end_unix_ms && w.end_unix_ms <= chitin::coord::fail_open_window::unix_now_ms() + 3_000,
        "{w:?}"
    );

    // 4. Redis restarts empty on the same port: the registration and claims come back.
    server.up().expect("redis-server must be installed");
    assert!(!is_registered(&server, &t), "a fresh server starts empty");
    assert!(
        eventually(Duration::from_secs(10), || async { is_registered(&server, &t) }).await,
        "the node never re-registered after Redis restarted"
    );
    let ok =
        eventually(Duration::from_secs(5), || async { node.dispatcher.dispatch("t-1").await == Ok(Dispatch::Claimed) }).await;
    assert!(ok, "dispatch never claimed after Redis returned");
    assert_eq!(node.dispatcher.fail_open_window(), None, "a claim that reached Redis closes the window");
    assert_eq!(node.affinity.owner("t-1").await.unwrap().as_deref(), Some("fo-node"));
    let before = fail_open();
    assert_eq!(node.dispatcher.dispatch("t-2").await.unwrap(), Dispatch::Claimed);
    assert_eq!(fail_open(), before);

    // 5. The log line is there, and rate-limited (once per hour in this config).
    assert_eq!(logs.count(FAIL_OPEN_MESSAGE), 1, "log:\n{}", String::from_utf8_lossy(&logs.0.lock().unwrap()));
    let snap = node.metrics_snapshot().await;
    assert_eq!(snap.fail_open_total, fail_open());
    assert!(snap.to_prometheus().contains(&format!("chitin_affinity_fail_open_total {}", fail_open())));

    tx.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(5), tasks.join()).await.unwrap();
}

/// Claims are sent as `EVALSHA` only: after `SCRIPT FLUSH` (or on a server
/// that never saw the scripts) the first call must load them and still
/// succeed, for the single claim and for a pipelined batch alike. A private
/// server, because flushing the shared one's scripts would disturb others.
#[tokio::test]
async fn claims_survive_a_script_flush() {
    let dir = tempfile::tempdir().unwrap();
    let server = PrivateRedis::start(dir.path(), None).unwrap();
    let url = server.url("127.0.0.1");
    let t = TestNs::with_url(url.clone());
    let a = t.affinity("sf-node", Duration::from_secs(30));
    let flush = || {
        let mut c = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut c).unwrap();
        let loaded: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(redis::Script::new(chitin::coord::Affinity::claim_script()).get_hash())
            .arg(redis::Script::new(chitin::coord::Affinity::claim_many_script()).get_hash())
            .query(&mut c)
            .unwrap();
        assert_eq!(loaded, vec![false, false]);
    };
    flush();
    assert_eq!(a.claim("s-1").await.unwrap(), Claim::Claimed);
    flush();
    assert_eq!(a.claim("s-1").await.unwrap(), Claim::AlreadyOurs);
    flush();
    let many: Vec<String> = (0..2500).map(|i| format!("m-{i}")).collect();
    let r = a.claim_many(&many).await.unwrap();
    assert!(r.iter().all(|x| matches!(x, Ok(Claim::Claimed))), "{:?}", r.iter().find(|x| !matches!(x, Ok(Claim::Claimed))));
    flush();
    assert_eq!(a.refresh_all().await.unwrap(), (2501, 0));
    flush();
    assert!(a.release("s-1").await.unwrap());
    flush();
    assert_eq!(a.release_all().await.unwrap().released, 2500);
}

fn is_registered(server: &PrivateRedis, t: &TestNs) -> bool {
    let Ok(client) = redis::Client::open(server.url("127.0.0.1")) else { return false };
    let Ok(mut c) = client.get_connection_with_timeout(Duration::from_millis(200)) else { return false };
    let exists: bool = redis::cmd("EXISTS").arg(t.keys.instance("fo-node")).query(&mut c).unwrap_or(false);
    let member: bool = redis::cmd("SISMEMBER").arg(t.keys.instances_index()).arg("fo-node").query(&mut c).unwrap_or(false);
    exists && member
}
