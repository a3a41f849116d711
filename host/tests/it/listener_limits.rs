//! The listeners' bounds (`[limits]`) and the authentication that comes
//! before everything else, against a real node process: a flood of idle
//! and slow connections costs bounded descriptors and is closed by the
//! deadlines while an established client keeps appending; a quiet client
//! that answers the server's pings is not taken for an idle one; a
//! connection carries no more calls at once than its stream limit; a call
//! that outlasts the request timeout ends; an unauthenticated call is
//! refused before the protocol check and leaves no log line per call.

use std::time::{Duration, Instant};

use chitin::api::proto::{self, journal_client::JournalClient, ownership_client::OwnershipClient, peer_client::PeerClient};
use chitin::testkit::http_get;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::support::cluster::*;

/// The node process' open sockets: its listeners and connections (a
/// standalone node's SQLite files, whose count moves with its pool, are
/// not sockets).
fn open_sockets(pid: u32) -> usize {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).expect("the node's /proc entry");
    fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.to_string_lossy().starts_with("socket:"))
        .count()
}

/// The value of the sample `name` (with its labels, as printed) in a
/// Prometheus text.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample `{name}` in:\n{text}"))
}

async fn append(journal: &mut JournalClient<tonic::transport::Channel>, request_id: &str) {
    let req = proto::AppendRequest {
        stream: "flood".into(),
        payload: request_id.as_bytes().to_vec(),
        request_id: request_id.into(),
        ..Default::default()
    };
    journal.append(req).await.unwrap_or_else(|e| panic!("append {request_id}: {e}"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_flood_of_idle_and_slow_connections_costs_bounded_descriptors_and_appends_go_on() {
    let (api_max, metrics_max) = (64, 32);
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "flooded", |s| {
        s.limits.api_max_connections = api_max;
        s.limits.metrics_max_connections = metrics_max;
        s.limits.handshake_timeout_secs = 2.0;
        s.limits.idle_timeout_secs = 120.0;
    })
    .unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let pid = node.pid().unwrap();
    // Connected before the flood, as an application's client would be.
    let mut journal = node.journal().await.unwrap();
    append(&mut journal, "before").await;
    let baseline = open_sockets(pid);

    // HTTP/1.1 requests whose headers never end, one byte every 300 ms so
    // that no idle deadline ever closes them: only the header-read timeout.
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut tcp = TcpStream::connect(&node.metrics).await.unwrap();
        tcp.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ").await.unwrap();
        slow.push(tcp);
    }
    let trickle = tokio::spawn(async move {
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(40) {
            for tcp in &mut slow {
                let _ = tcp.write_all(b"a").await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    // Connections that never say a word: 400 to gRPC (no HTTP/2 preface),
    // 100 to HTTP.
    let mut silent = Vec::new();
    for addr in std::iter::repeat_n(&node.api, 400).chain(std::iter::repeat_n(&node.metrics, 100)) {
        silent.push(TcpStream::connect(addr).await.unwrap());
    }

    // While they are open: the node holds at most its limits, and the
    // client connected before keeps appending.
    let bound = baseline + api_max + metrics_max + 8;
    for i in 0..10 {
        let held = open_sockets(pid);
        assert!(held <= bound, "{held} sockets open during the flood (baseline {baseline}, limits {api_max} + {metrics_max})");
        append(&mut journal, &format!("during-{i}")).await;
    }

    // The deadlines close every one of them (the silent ones at the
    // handshake deadline, the slow ones at the header-read timeout).
    let deadline = Instant::now() + Duration::from_secs(30);
    while open_sockets(pid) > baseline + 2 {
        assert!(Instant::now() < deadline, "{} sockets still open 30 s after the flood (baseline {baseline})", open_sockets(pid));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    trickle.abort();
    drop(silent);

    let (code, text) = http_get(&node.metrics, "/metrics", None).await.unwrap();
    assert_eq!(code, 200, "{text}");
    for listener in ["api", "metrics"] {
        let refused = sample(&text, &format!("chitin_connections_refused_total{{listener=\"{listener}\"}}"));
        let timed_out = sample(&text, &format!("chitin_connections_timed_out_total{{listener=\"{listener}\"}}"));
        assert!(refused > 0.0 && timed_out > 0.0, "{listener}: refused {refused}, timed out {timed_out}");
    }
    assert!(node.log_text().contains("connections refused: the listener is at its limit"), "{}", node.log_tail(20));
    // A client that comes after the flood is served.
    append_via(&node.api, "flood", "after").await.unwrap();
    append(&mut journal, "after-2").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_quiet_client_that_answers_pings_is_not_closed_as_idle() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "quiet", |s| s.limits.idle_timeout_secs = 3.0).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let mut journal = node.journal().await.unwrap();
    append(&mut journal, "first").await;
    // Three idle timeouts without a call: the server's pings (every third
    // of it) are answered by the client's HTTP/2 stack.
    tokio::time::sleep(Duration::from_secs(10)).await;
    append(&mut journal, "second").await;
    let (_, text) = http_get(&node.metrics, "/metrics", None).await.unwrap();
    let timed_out = sample(&text, "chitin_connections_timed_out_total{listener=\"api\"}");
    assert_eq!(timed_out, 0.0, "the quiet client's connection was closed as idle");
}

/// `[limits] max_streams_per_connection`: with two watches open on a
/// connection limited to two streams, a third call on it waits until one
/// ends (without the limit it is answered at once), while a call on another
/// connection is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_carries_no_more_calls_at_once_than_its_stream_limit() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "streams", |s| s.limits.max_streams_per_connection = 2).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.api)).unwrap().connect().await.unwrap();
    let mut ownership = OwnershipClient::new(channel.clone());
    let first = ownership.watch_ownership(proto::WatchRequest::default()).await.unwrap().into_inner();
    let _second = ownership.watch_ownership(proto::WatchRequest::default()).await.unwrap().into_inner();

    let third = tokio::spawn(async move { ownership.held(proto::HeldRequest {}).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!third.is_finished(), "a third call was answered beside two open streams: {:?}", third.await);
    let mut elsewhere = OwnershipClient::connect(format!("http://{}", node.api)).await.unwrap();
    elsewhere.held(proto::HeldRequest {}).await.expect("a call on another connection");

    drop(first);
    let answered =
        tokio::time::timeout(Duration::from_secs(30), third).await.expect("the third call still waits after a stream ended");
    answered.unwrap().expect("the third call, once a stream ended");
}

/// `[limits] request_timeout_secs`: an append that waits behind another
/// process' write lock on the node's database (which it would wait out for
/// the database's 30 s busy timeout) ends after the request timeout with
/// DEADLINE_EXCEEDED naming the setting, and the next append is served.
#[tokio::test(flavor = "multi_thread")]
async fn a_call_longer_than_the_request_timeout_ends_with_deadline_exceeded() {
    use sqlx::Connection;
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "timed", |s| s.limits.request_timeout_secs = 1.0).unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let mut journal = node.journal().await.unwrap();
    append(&mut journal, "before").await;

    let url = format!("sqlite://{}", dir.path().join("data/chitin.db").display());
    let mut lock = sqlx::SqliteConnection::connect(&url).await.unwrap();
    sqlx::query("BEGIN EXCLUSIVE").execute(&mut lock).await.unwrap();
    let started = Instant::now();
    let req = proto::AppendRequest {
        stream: "flood".into(),
        payload: b"late".to_vec(),
        request_id: "late".into(),
        ..Default::default()
    };
    let status = journal.append(req).await.unwrap_err();
    let took = started.elapsed();
    sqlx::query("ROLLBACK").execute(&mut lock).await.unwrap();
    assert_eq!(status.code(), tonic::Code::DeadlineExceeded, "{status:?}");
    assert!(status.message().contains("request_timeout_secs"), "{status:?}");
    assert!(status.message().contains("send it again with the same request id"), "{status:?}");
    assert!(took < Duration::from_secs(15), "the call ended after {took:?}");
    append(&mut journal, "after").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unauthenticated_call_is_refused_before_any_other_check_and_logs_no_line_per_call() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = standalone_node(dir.path(), "guarded", |s| {
        s.api.admin_token = Some("admin-secret-1".into());
        s.api.client_token = Some("client-secret-1".into());
    })
    .unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", node.api)).unwrap().connect().await.unwrap();
    let log_before = node.log_text().len();

    // Malformed protocol metadata and no token: the protocol check would say
    // INVALID_ARGUMENT; authentication comes first.
    let mut journal = JournalClient::new(channel.clone());
    let mut req = tonic::Request::new(proto::AppendRequest { stream: "s".into(), payload: b"x".to_vec(), ..Default::default() });
    req.metadata_mut().insert("chitin-protocol", "not-a-number".parse().unwrap());
    let status = journal.append(req).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("CHITIN_CLIENT_TOKEN"), "{status:?}");

    // A standalone node's Peer plane is closed to everyone; 200 calls with
    // a 1 MiB node name each are refused without a log line each.
    let mut peer = PeerClient::new(channel).max_encoding_message_size(4 << 20);
    let huge = "n".repeat(1 << 20);
    for _ in 0..200 {
        let status = peer.node_down(proto::NodeDownNotice { node: huge.clone(), ..Default::default() }).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
        assert!(status.message().contains("Peer plane is closed"), "{status:?}");
    }
    let grown = node.log_text().len() - log_before;
    assert!(grown < 4096, "the log grew by {grown} bytes for 201 refused calls:\n{}", node.log_tail(10));
    assert!(node.log_text().contains("gRPC calls refused for a missing or wrong credential"), "{}", node.log_tail(10));
    let (_, text) = http_get(&node.metrics, "/metrics", None).await.unwrap();
    assert_eq!(sample(&text, "chitin_unauthenticated_calls_total"), 201.0);
}
