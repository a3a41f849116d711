//! Nodes as real processes sharing one real database: fencing of a paused
//! holder, drain and graceful stop under load, a write parked after its
//! COMMIT that must hold no handover back, a drain meeting its own rounds'
//! handovers, `examples/stale-instances.sh` against the cluster's Redis
//! registry, and a config push stored off the async threads.
//! Lease timing: a 2 s TTL renewed every 0.5 s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::Result;
use chitin::api::proto;

/// Cluster tests run one at a time: each starts three processes with a 2 s
/// lease TTL, and on two cores several at once would starve each other.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn append(node: &NodeProc, stream: &str, request_id: &str) -> Result<proto::AppendResponse, tonic::Status> {
    let mut client = node.journal().await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    client
        .append(proto::AppendRequest {
            stream: stream.into(),
            request_id: request_id.into(),
            payload: request_id.as_bytes().to_vec(),
            forwarded: false,
        })
        .await
        .map(|r| r.into_inner())
}

/// Three nodes on PostgreSQL with `shards` shards, each node started with
/// the failpoints of `spec` armed, all ready.
async fn armed_cluster(shards: u32, spec: &str) -> Cluster {
    let mut c = Cluster::new(Dialect::Postgres, 3, shards, 0, |_, _| {}).await.unwrap();
    for n in &mut c.nodes {
        n.set_env(chitin::failpoint::ENV, spec);
        n.start().unwrap();
    }
    for n in &mut c.nodes {
        n.wait_ready(Duration::from_secs(60)).await.unwrap();
    }
    c
}

/// A holder paused with an append that has passed its own lease check but
/// not yet the database (a failpoint parks every append there for 3 s):
/// when it resumes, the shard has moved on, and only the
/// database fence stops that append from committing under the old epoch.
/// (`chitin chaos --plant fence` turns the fence off; this test then fails.)
#[tokio::test(flavor = "multi_thread")]
async fn a_paused_holder_commits_nothing_under_its_stale_epoch() {
    let _serial = SERIAL.lock().await;
    let mut c = armed_cluster(8, "append.before_fence=1:3000").await;
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    let p = c.busiest(&status);
    let paused = c.nodes[p].name.clone();
    let other = (p + 1) % c.nodes.len();
    let lease = status.leases.iter().find(|l| l.holder == paused).unwrap().clone();
    let stream = stream_on(&c.shard_map(), &lease.shard, "s");
    let first = append(&c.nodes[p], &stream, "before").await.unwrap();
    assert_eq!(first.epoch, lease.epoch);

    // An append parked after node-01's own check, then node-01 paused past its TTL.
    let parked = {
        let (api, stream) = (c.nodes[p].api.clone(), stream.clone());
        tokio::spawn(async move {
            let mut j = proto::journal_client::JournalClient::connect(format!("http://{api}")).await.unwrap();
            j.append(proto::AppendRequest { stream, request_id: "parked".into(), payload: b"x".to_vec(), forwarded: false }).await
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.nodes[p].pause().unwrap();
    tokio::time::sleep(TTL + RENEW * 2).await;
    // Meanwhile the shard moved on: a write through another node lands under a new epoch.
    let during = append(&c.nodes[other], &stream, "during").await.unwrap();
    assert!(during.epoch > lease.epoch, "{during:?}");
    assert_ne!(during.holder, paused);
    c.nodes[p].resume().unwrap();

    // The parked append reaches the database under the old epoch: refused
    // there, it goes to the current holder (or fails, certainly not applied).
    if let Ok(ack) = parked.await.unwrap() {
        assert!(ack.get_ref().epoch >= during.epoch, "the parked append committed under a stale epoch: {ack:?}");
    }
    let store = c.store().await;
    let n = assert_epochs_current(&store, &stream).await.unwrap();
    assert!(n >= 2);
    let stale: Vec<_> = store
        .read(&stream, 1, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.request_id == "parked" && e.epoch <= lease.epoch as i64)
        .collect();
    assert!(stale.is_empty(), "the parked append committed under the stale epoch: {stale:?}\n{}", c.logs());
    store.close().await;
    c.teardown().await.unwrap();
}

/// A write parked after its COMMIT (a failpoint holds every append there
/// for 20 s, as a slow network holds an answer) holds no handover back: the
/// holder's drain hands the write's shard over while the write has not
/// answered yet. (A write that kept its shard's gate until it answered held
/// the handover, and every acquisition a round ranked after it, as long.)
#[tokio::test(flavor = "multi_thread")]
async fn a_write_parked_after_its_commit_holds_no_handover_back() {
    let _serial = SERIAL.lock().await;
    let mut c = armed_cluster(8, "append.after_commit=1:20000").await;
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    let p = c.busiest(&status);
    let holder = c.nodes[p].name.clone();
    let lease = status.leases.iter().find(|l| l.holder == holder).unwrap().clone();
    let stream = stream_on(&c.shard_map(), &lease.shard, "parked");
    let parked = {
        let (api, stream) = (c.nodes[p].api.clone(), stream.clone());
        tokio::spawn(async move { append_via(&api, &stream, "parked").await })
    };
    let store = c.store().await;
    let committed = Instant::now();
    while store.read(&stream, 1, 10).await.unwrap().is_empty() {
        assert!(committed.elapsed() < Duration::from_secs(15), "the append never committed\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let drained = c.nodes[p].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap().into_inner();
    assert!(!parked.is_finished(), "the drain waited for the parked write to answer: {drained:?}");
    let s = c.status().await.unwrap();
    let now = s.leases.iter().find(|l| l.shard == lease.shard).unwrap();
    assert_ne!(now.holder, holder, "the drain kept the parked write's shard: {drained:?}\n{}", c.logs());
    let ack = parked.await.unwrap().unwrap();
    assert_eq!((ack.sequence, ack.epoch), (1, lease.epoch), "the parked write is acknowledged as committed");
    store.close().await;
    c.teardown().await.unwrap();
}

/// A drain whose handoffs meet the node's own rounds handing the same
/// shards over (a leaving node's rounds hand over too, and a failpoint holds
/// every handover open for 0.6 s, under the 1 s bound on an idle
/// transaction, so the two overlap) keeps none of them: it
/// waits for the round's handover, counts a shard gone as handed over, and
/// takes up and hands over a shard its table dropped on a late renewal.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_meeting_its_own_rounds_handovers_keeps_nothing() {
    let _serial = SERIAL.lock().await;
    let mut c = armed_cluster(16, "handover.before_commit=1:600").await;
    let status = c.wait_settled(Duration::from_secs(90)).await.unwrap();
    let d = c.busiest(&status);
    let name = c.nodes[d].name.clone();
    let held = status.leases.iter().filter(|l| l.holder == name).count();
    assert!(held >= 2, "too few shards to overlap: {held}");

    let drained = c.nodes[d].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap().into_inner();
    assert!(drained.kept.is_empty(), "the drain kept shards: {drained:?}\n{}", c.logs());
    assert_eq!(drained.handed_over as usize, held, "{drained:?}");
    let s = c.status().await.unwrap();
    assert!(s.leases.iter().all(|l| l.holder != name), "{name} still holds shards after its drain: {:?}", s.leases);
    c.teardown().await.unwrap();
}

/// Appends continuously through the given nodes until told to stop, as a
/// real client: on "not applied" or "outcome unknown" it retries the same
/// request id on the next node. Returns the acknowledged (stream, request id,
/// sequence) and the longest time one append took.
async fn client(
    nodes: Vec<(String, String)>,
    streams: Vec<String>,
    stop: Arc<AtomicBool>,
) -> (Vec<(String, String, u64)>, Duration) {
    let mut acked = Vec::new();
    let mut longest = Duration::ZERO;
    let mut next = 0usize;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let stream = &streams[i as usize % streams.len()];
        let request_id = format!("r-{i}");
        let started = Instant::now();
        loop {
            let (_, api) = &nodes[next % nodes.len()];
            let result = async {
                let mut j = proto::journal_client::JournalClient::connect(format!("http://{api}"))
                    .await
                    .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                j.append(proto::AppendRequest {
                    stream: stream.clone(),
                    request_id: request_id.clone(),
                    payload: b"x".to_vec(),
                    forwarded: false,
                })
                .await
            }
            .await;
            match result {
                Ok(ack) => {
                    acked.push((stream.clone(), request_id.clone(), ack.into_inner().sequence));
                    break;
                }
                Err(_) if started.elapsed() < Duration::from_secs(30) => {
                    next += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("append {request_id} failed for 30 s: {e}"),
            }
        }
        longest = longest.max(started.elapsed());
    }
    (acked, longest)
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_and_graceful_stop_lose_no_acknowledged_append() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    // The busiest node drains; the client talks to the other two, one of
    // which then stops gracefully.
    let d = c.busiest(&status);
    let (stopping, staying) = ((d + 1) % 3, (d + 2) % 3);
    let drained_name = c.nodes[d].name.clone();
    let streams: Vec<String> = (0..16).map(|i| format!("load-{i}")).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let targets: Vec<(String, String)> =
        [stopping, staying].iter().map(|&i| (c.nodes[i].name.clone(), c.nodes[i].api.clone())).collect();
    let load = tokio::spawn(client(targets, streams.clone(), stop.clone()));
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut admin = c.nodes[d].admin().await.unwrap();
    let drained = admin.drain(proto::DrainRequest {}).await.unwrap().into_inner();
    assert!(drained.handed_over > 0, "{drained:?}");
    let s = c.status().await.unwrap();
    assert!(
        s.leases.iter().all(|l| l.holder != drained_name),
        "{drained_name} still holds shards after its drain: {:?}",
        s.leases
    );
    let (code, _) = http_get(&c.nodes[d].metrics, "/readyz", None).await.unwrap();
    assert_eq!(code, 503, "a drained node is not ready");
    tokio::time::sleep(Duration::from_secs(1)).await;

    let exit = c.nodes[stopping].terminate(Duration::from_secs(30)).unwrap();
    assert!(exit.success(), "graceful stop exit status {exit:?}\n{}", c.logs());
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (acked, longest) = load.await.unwrap();
    assert!(acked.len() > 20, "too few appends to prove anything: {}", acked.len());

    let store = c.store().await;
    let mut seen: HashMap<String, HashSet<String>> = HashMap::new();
    for stream in &streams {
        let entries = store.read(stream, 1, 100_000).await.unwrap();
        let ids: Vec<&str> = entries.iter().map(|e| e.request_id.as_str()).collect();
        let unique: HashSet<&str> = ids.iter().copied().collect();
        assert_eq!(ids.len(), unique.len(), "a request id applied twice in {stream}");
        seen.insert(stream.clone(), unique.into_iter().map(str::to_string).collect());
        assert_epochs_current(&store, stream).await.unwrap();
    }
    for (stream, id, seq) in &acked {
        assert!(seen[stream].contains(id), "acknowledged append {id} (seq {seq}) of {stream} is missing");
    }
    // A handoff, not a takeover: no append waited for a lease to expire.
    assert!(longest < TTL * 3, "an append took {longest:?}");
    store.close().await;
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_joining_node_receives_at_most_four_shards_per_round_across_the_database() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 32, 2, |_, _| {}).await.unwrap();
    c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    let store = c.store().await;
    let joined_at = store.now().await.unwrap();
    c.node("node-03").start().unwrap();
    c.node("node-03").wait_ready(Duration::from_secs(60)).await.unwrap();
    // Wait until the handoffs settle: node-03 holds what it is preferred for.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let held = c.status().await.unwrap().leases.iter().filter(|l| l.holder == "node-03").count();
        if held == last && held > 0 {
            break;
        }
        last = held;
        assert!(Instant::now() < deadline, "handoffs to node-03 did not settle\n{}", c.logs());
    }
    let history = store.history(None).await.unwrap();
    // Each handover to node-03, with the holder it came from (the previous epoch's).
    let mut from_holder: HashMap<String, Vec<chrono::DateTime<chrono::Utc>>> = HashMap::new();
    for h in history
        .iter()
        .filter(|h| h.via == chitin::lease::Via::Handover && h.holder_name == "node-03" && h.acquired_at > joined_at)
    {
        let previous = history.iter().filter(|p| p.shard == h.shard && p.epoch < h.epoch).max_by_key(|p| p.epoch).unwrap();
        from_holder.entry(previous.holder_name.clone()).or_default().push(h.acquired_at);
    }
    // node-03 took up each lease handed to it in its next round: none lapsed
    // unserved and had to be acquired again under the next epoch.
    for h in history
        .iter()
        .filter(|h| h.via == chitin::lease::Via::Handover && h.holder_name == "node-03" && h.acquired_at > joined_at)
    {
        let lapsed = history.iter().any(|n| {
            n.shard == h.shard && n.epoch == h.epoch + 1 && n.via == chitin::lease::Via::Acquire && n.holder_name == "node-03"
        });
        assert!(!lapsed, "{} was handed to node-03 at epoch {} but lapsed unserved\n{}", h.shard, h.epoch, c.logs());
    }
    let total: usize = from_holder.values().map(Vec::len).sum();
    assert!(total >= 5, "too few handoffs to node-03 to test the cap: {from_holder:?}");
    assert!(from_holder.len() > 1, "one giver only: the cap across holders is not tested: {from_holder:?}");
    // Rounds are 0.5 s apart: no window shorter than a round holds more
    // than 4, whichever holders gave them (each plans up to 4 on its own).
    let mut times: Vec<_> = from_holder.into_values().flatten().collect();
    times.sort();
    for (i, t) in times.iter().enumerate() {
        let in_window = times[i..].iter().take_while(|u| (**u - *t).to_std().unwrap() < Duration::from_millis(350)).count();
        assert!(in_window <= 4, "{in_window} shards handed over within one round across the database: {times:?}");
    }
    store.close().await;
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watcher_sees_draining_then_lost_for_every_shard_handed_away() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, _| {}).await.unwrap();
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    let w = c.busiest(&status);
    let mut ownership = proto::ownership_client::OwnershipClient::connect(format!("http://{}", c.nodes[w].api)).await.unwrap();
    let mut watch = ownership.watch_ownership(proto::WatchRequest::default()).await.unwrap().into_inner();
    // What the node holds once the watch is in place: every one of these
    // must be reported draining, then lost, whoever hands it over.
    let mine: HashMap<String, u64> = ownership
        .held(proto::HeldRequest {})
        .await
        .unwrap()
        .into_inner()
        .leases
        .into_iter()
        .map(|l| (l.shard, l.epoch))
        .collect();
    assert!(!mine.is_empty());
    c.nodes[w].admin().await.unwrap().drain(proto::DrainRequest {}).await.unwrap();
    let mut events: Vec<proto::OwnershipEvent> = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(2), watch.message()).await.map(|m| m.unwrap()) {
        events.push(e);
    }
    use proto::ownership_event::Kind;
    let store = c.store().await;
    for (shard, epoch) in &mine {
        let kinds: Vec<i32> = events.iter().filter(|e| &e.shard == shard && e.epoch == *epoch).map(|e| e.kind).collect();
        assert_eq!(kinds, vec![Kind::Draining as i32, Kind::Lost as i32], "events of {shard}: {events:?}");
        let newest = store.history(Some(shard)).await.unwrap().into_iter().map(|h| h.epoch).max().unwrap();
        assert!(newest as u64 > *epoch, "{shard} was not handed over with a new epoch");
    }
    store.close().await;
    c.teardown().await.unwrap();
}

/// An application that takes part in handoffs (a watch with
/// `acknowledges`) finishes its work on a draining shard: its writes are
/// still served under the old epoch after DRAINING, and the shard moves only
/// after its RELEASED. Without the mechanism the writes after DRAINING are
/// refused or land under the new holder, and LOST comes first.
#[tokio::test(flavor = "multi_thread")]
async fn an_acknowledging_application_writes_until_it_releases_and_only_then_the_shard_moves() {
    let _serial = SERIAL.lock().await;
    // A timeout well above the answer's delay: the answer, not the timeout, must let the handoff go on.
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, s| {
        s.leases.ttl_secs = Some(9.0);
        s.leases.renew_interval_secs = Some(3.0);
        s.leases.release_timeout_ms = Some(2_800);
    })
    .await
    .unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let w = c.busiest(&status);
    let (api, name) = (c.nodes[w].api.clone(), c.nodes[w].name.clone());
    let map = c.shard_map();
    let client = chitin_client::Client::builder(api.parse().unwrap()).build().unwrap();
    let mut watch = client.watch_ownership_acknowledging();
    let held: HashMap<String, u64> = match watch.next().await {
        chitin_client::WatchEvent::Subscribed { held, .. } => held.into_iter().map(|l| (l.shard, l.epoch)).collect(),
        other => panic!("first event {other:?}"),
    };
    assert!(!held.is_empty());
    let mut admin = c.nodes[w].admin().await.unwrap();
    let drain = tokio::spawn(async move { admin.drain(proto::DrainRequest {}).await });

    let (mut released, mut lost) = (HashMap::new(), HashMap::new());
    let deadline = Instant::now() + Duration::from_secs(60);
    while lost.len() < held.len() {
        let event = tokio::time::timeout_at(deadline.into(), watch.next()).await.expect("every held shard lost within 60 s");
        match event {
            chitin_client::WatchEvent::Draining { shard, epoch } => {
                // The application's last write, after DRAINING: served here, under the old epoch.
                let stream = stream_on(&map, &shard, "flush");
                let flushed = append_via(&api, &stream, &format!("flush-{shard}")).await.unwrap();
                assert_eq!(
                    (flushed.shard.as_str(), flushed.epoch, flushed.holder.as_str()),
                    (shard.as_str(), epoch, name.as_str())
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
                released.insert(shard.clone(), Instant::now());
                watch.released(&shard, epoch).await.unwrap();
            }
            chitin_client::WatchEvent::Lost { shard, .. } => {
                lost.insert(shard, Instant::now());
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    drain.await.unwrap().unwrap();
    for shard in held.keys() {
        let (r, l) = (released.get(shard), lost.get(shard));
        assert!(r.is_some_and(|r| l.is_some_and(|l| r < l)), "{shard}: released {r:?}, lost {l:?}");
    }
    // An answer nobody waits for any more is refused, saying why.
    let (shard, epoch) = held.iter().next().unwrap();
    let late = watch.released(shard, *epoch).await.unwrap_err();
    assert_eq!(late.code(), tonic::Code::FailedPrecondition, "{late:?}");
    c.teardown().await.unwrap();
}

/// A handoff that does not happen after the application released the shard
/// (here its handover waits out the lock bound behind the lease row, locked
/// from outside) is followed by ACQUIRED at the same epoch: the node keeps
/// the shard, so the application serves it again. Without it the
/// application stays given up while its node serves the shard, until some
/// later handoff: its writes to that shard go nowhere meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_handoff_that_did_not_happen_is_announced_as_acquired_again() {
    use sqlx::Connection;
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, s| {
        s.leases.ttl_secs = Some(4.0);
        s.leases.renew_interval_secs = Some(1.0);
    })
    .await
    .unwrap();
    let status = c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let w = c.busiest(&status);
    let api = c.nodes[w].api.clone();
    let url = c.db.as_ref().unwrap().url.clone();
    let client = chitin_client::Client::builder(api.parse().unwrap()).build().unwrap();
    let mut watch = client.watch_ownership_acknowledging();
    match watch.next().await {
        chitin_client::WatchEvent::Subscribed { held, .. } => assert!(!held.is_empty()),
        other => panic!("first event {other:?}"),
    }
    let mut admin = c.nodes[w].admin().await.unwrap();
    let drain = tokio::spawn(async move { admin.drain(proto::DrainRequest {}).await });

    // The first shard to drain: its row locked before the RELEASED.
    let mut locked: Option<(String, u64, sqlx::PgConnection)> = None;
    let deadline = Instant::now() + Duration::from_secs(60);
    let again = loop {
        match tokio::time::timeout_at(deadline.into(), watch.next()).await.expect("an event within 60 s") {
            chitin_client::WatchEvent::Draining { shard, epoch } => {
                if locked.is_none() {
                    let mut s = sqlx::PgConnection::connect(&url).await.unwrap();
                    sqlx::query("BEGIN").execute(&mut s).await.unwrap();
                    sqlx::query("SELECT 1 FROM chitin_shard_leases WHERE shard_id = $1 FOR UPDATE")
                        .bind(&shard)
                        .execute(&mut s)
                        .await
                        .unwrap();
                    locked = Some((shard.clone(), epoch, s));
                }
                watch.released(&shard, epoch).await.unwrap();
            }
            chitin_client::WatchEvent::Acquired { shard, epoch } => break (shard, epoch),
            chitin_client::WatchEvent::Lost { .. } => {}
            other => panic!("unexpected event {other:?}"),
        }
    };
    let (shard, epoch, mut s) = locked.expect("a DRAINING came first");
    assert_eq!(again, (shard.clone(), epoch), "the shard whose handover failed is announced again at its epoch");
    sqlx::query("ROLLBACK").execute(&mut s).await.unwrap();
    // The drain itself ends, keeping the shard or handing it over later.
    drain.await.unwrap().unwrap();
    c.teardown().await.unwrap();
}

/// An application that readies the shards its node takes (a watch with
/// `acknowledges` answering ACQUIRED with READY once it claimed its fence):
/// writes to a shard its node just took, forwarded by another node or sent
/// to it directly, are served only after READY. Without the mechanism they
/// commit during the application's 200 ms of getting ready.
#[tokio::test(flavor = "multi_thread")]
// case: answer-nobody-waits-for
async fn writes_to_a_shard_just_taken_wait_for_the_applications_ready() {
    let _serial = SERIAL.lock().await;
    // Two nodes of three: node-01's drain hands every shard to node-02. A
    // ready timeout far above the answer's delay (the largest TTL / 2
    // allows, 790 ms of margin for the event's delivery and the answer's
    // connection on a loaded machine): the answer, not the timeout, must
    // let the writes go on.
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 2, |_, s| s.leases.ready_timeout_ms = Some(990)).await.unwrap();
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let to = c.nodes[1].api.clone();
    let map = c.shard_map();
    let store = c.store().await;
    let first = store.nodes().await.unwrap().into_iter().find(|n| n.name == "node-01" && n.live).unwrap().id;
    let moving: Vec<(String, i64)> = store.leases_of(first).await.unwrap().into_iter().map(|r| (r.shard, r.epoch)).collect();
    assert!(!moving.is_empty(), "node-01 holds nothing to hand over");

    let client = chitin_client::Client::builder(to.parse().unwrap()).build().unwrap();
    let mut watch = client.watch_ownership_acknowledging();
    assert!(matches!(watch.next().await, chitin_client::WatchEvent::Subscribed { .. }));

    // One writer per moving shard, through node-02 (which forwards to
    // node-01 until it holds the shard): (issued, answered, epoch).
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = moving
        .iter()
        .map(|(shard, _)| {
            let (stream, api, stop, shard) = (stream_on(&map, shard, "ready"), to.clone(), stop.clone(), shard.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                for i in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let issued = Instant::now();
                    if let Ok(r) = append_via(&api, &stream, &format!("ready-{shard}-{i}")).await {
                        done.push((issued, Instant::now(), r.epoch as i64));
                    }
                }
                (shard, done)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut admin = c.nodes[0].admin().await.unwrap();
    let drain = tokio::spawn(async move { admin.drain(proto::DrainRequest {}).await });
    // Each shard readied on its own, as an application would.
    let mut readying = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while readying.len() < moving.len() {
        match tokio::time::timeout_at(deadline.into(), watch.next()).await.expect("every shard acquired within 60 s") {
            chitin_client::WatchEvent::Acquired { shard, epoch } => {
                let api = to.clone();
                readying.push(tokio::spawn(async move {
                    // Claiming the fence, warming up.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    let ready_at = Instant::now();
                    let ack = proto::AcknowledgeRequest {
                        ack: proto::acknowledge_request::Ack::Ready as i32,
                        shard: shard.clone(),
                        epoch,
                    };
                    let mut own = proto::ownership_client::OwnershipClient::connect(format!("http://{api}")).await.unwrap();
                    own.acknowledge(ack).await.unwrap();
                    (shard, (epoch as i64, ready_at))
                }));
            }
            other => panic!("unexpected event {other:?}"),
        }
    }
    let mut readied: HashMap<String, (i64, Instant)> = HashMap::new();
    for r in readying {
        let (shard, at) = r.await.expect("READY accepted: the writes waited for it, not for the timeout");
        readied.insert(shard, at);
    }
    drain.await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        let (shard, done) = writer.await.unwrap();
        let (epoch, ready_at) = readied[&shard];
        let after: Vec<_> = done.iter().filter(|(_, _, e)| *e == epoch).collect();
        assert!(!after.is_empty(), "{shard}: no write under the new epoch {epoch}");
        assert!(
            after.iter().all(|(_, answered, _)| *answered > ready_at),
            "{shard}: a write at epoch {epoch} was served before READY"
        );
        assert!(
            after.iter().any(|(issued, _, _)| *issued < ready_at),
            "{shard}: no write arrived while the application got ready, so none had to wait"
        );
    }
    // An answer nobody waits for any more is refused, saying why.
    let (shard, (epoch, _)) = readied.iter().next().unwrap();
    let late = watch.ready(shard, *epoch as u64).await.unwrap_err();
    assert_eq!(late.code(), tonic::Code::FailedPrecondition, "{late:?}");
    assert!(late.message().contains("not readying"), "{late:?}");
    c.teardown().await.unwrap();
}

/// Runs `examples/<name>` against the shared Redis for namespace `ns`.
fn run_example(name: &str, ns: &str) -> String {
    let script = crate::support::repo_root().join("examples").join(name);
    let out = std::process::Command::new("bash")
        .arg(&script)
        .arg(ns)
        .env("REDIS_HOST", "127.0.0.1")
        .env("REDIS_PORT", "6379")
        .output()
        .expect("bash");
    assert!(out.status.success(), "{name} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Deletes every key of the cluster's namespace, also after a failed assertion.
struct RedisNs {
    ns: String,
    conn: redis::Connection,
}

impl RedisNs {
    fn new(ns: &str) -> RedisNs {
        let conn = redis::Client::open("redis://127.0.0.1:6379").unwrap().get_connection().unwrap();
        RedisNs { ns: ns.to_string(), conn }
    }

    fn pttl(&mut self, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(&mut self.conn).unwrap()
    }

    fn index(&mut self) -> Vec<String> {
        redis::cmd("SMEMBERS").arg(format!("{}:instances:index", self.ns)).query(&mut self.conn).unwrap()
    }

    /// Instance UUID → the JSON stored at `{ns}:instances:{id}`, for every
    /// index entry whose instance key exists.
    fn instances(&mut self) -> HashMap<String, serde_json::Value> {
        self.index()
            .into_iter()
            .filter_map(|id| {
                let raw: Option<String> =
                    redis::cmd("GET").arg(format!("{}:instances:{id}", self.ns)).query(&mut self.conn).unwrap();
                raw.map(|r| (id, serde_json::from_str(&r).unwrap()))
            })
            .collect()
    }
}

impl Drop for RedisNs {
    fn drop(&mut self) {
        let keys: Vec<String> = redis::cmd("KEYS").arg(format!("{}:*", self.ns)).query(&mut self.conn).unwrap_or_default();
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(keys).query(&mut self.conn);
        }
    }
}

/// `examples/stale-instances.sh` against three real nodes: nothing while
/// all heartbeat, exactly the killed node's UUID once its instance key has
/// expired. The survivors' health monitors sweep a dead entry within a
/// heartbeat (1 s) of its expiry, so they are paused (SIGSTOP) from just
/// before the expiry until the scripts have run; their own keys have well
/// over a second left then, checked before they resume.
#[tokio::test(flavor = "multi_thread")]
async fn stale_instances_script_names_exactly_the_killed_node() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 8, 3, |_, _| {}).await.unwrap();
    let mut redis = RedisNs::new(&c.namespace);
    let ns = c.namespace.clone();
    let status = c.wait_settled(Duration::from_secs(30)).await.unwrap();

    // Each node's instance UUID, by its gRPC address in the registry, and
    // the same as the status API reports.
    let deadline = Instant::now() + Duration::from_secs(30);
    let registered = loop {
        let r = redis.instances();
        if r.len() == 3 {
            break r;
        }
        assert!(Instant::now() < deadline, "three instances not registered in Redis: {r:?}\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let uuid_of = |api: &str| -> String {
        let (id, _) = registered
            .iter()
            .find(|(_, info)| info["grpc_address"] == api)
            .unwrap_or_else(|| panic!("no instance at {api}: {registered:?}"));
        id.clone()
    };
    let uuids: Vec<String> = c.nodes.iter().map(|n| uuid_of(&n.api)).collect();
    for (n, id) in c.nodes.iter().zip(&uuids) {
        assert_ne!(id, &n.name, "instance keys use the UUID, not the name");
        uuid::Uuid::parse_str(id).unwrap();
        assert!(!registered[id]["hostname"].as_str().unwrap_or_default().is_empty());
        let reported = status.nodes.iter().find(|s| s.name == n.name).unwrap();
        assert_eq!(&reported.uuid, id, "status API and registry disagree on {}", n.name);
    }
    assert_eq!(run_example("stale-instances.sh", &ns), "", "all three alive");

    let v = 1;
    let victim = uuids[v].clone();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != v).collect();
    let key = |id: &str| format!("{ns}:instances:{id}");
    c.nodes[v].kill9().unwrap();

    // Wait for the victim's key to be about to expire with the survivors'
    // keys fresh, then pause the survivors.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = redis.pttl(&key(&victim));
        let fresh = survivors.iter().all(|&i| redis.pttl(&key(&uuids[i])) >= left.max(0) + 1200);
        if left <= 500 && fresh {
            break;
        }
        assert!(Instant::now() < deadline, "{victim}'s key did not near its expiry (PTTL {left} ms)\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for &i in &survivors {
        c.nodes[i].pause().unwrap();
    }
    // Poll the script until it reports something (the victim's key expires
    // within 0.5 s; the bound is wide).
    let deadline = Instant::now() + Duration::from_secs(30);
    let stale = loop {
        let out = run_example("stale-instances.sh", &ns);
        if !out.is_empty() || Instant::now() > deadline {
            break out;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let cleaned = run_example("cleanup-stale-instances.sh", &ns);
    let after = run_example("stale-instances.sh", &ns);
    let left: Vec<i64> = survivors.iter().map(|&i| redis.pttl(&key(&uuids[i]))).collect();
    for &i in &survivors {
        c.nodes[i].resume().unwrap();
    }
    assert_eq!(stale, format!("Stale: {victim}\n"), "survivors {:?}", survivors.iter().map(|&i| &uuids[i]).collect::<Vec<_>>());
    assert!(left.iter().all(|&l| l > 0), "a survivor's key lapsed while paused: {left:?}");
    assert_eq!(cleaned, format!("Removing stale instance: {victim}\n"));
    assert_eq!(after, "", "nothing stale after the cleanup");

    // The survivors heartbeat on (a heartbeat stamped after they resumed);
    // the index holds exactly them.
    let resumed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = redis.instances();
        let beat = |id: &String| r.get(id).and_then(|i| i["last_heartbeat"].as_u64()).is_some_and(|t| t > resumed);
        if survivors.iter().all(|&i| beat(&uuids[i])) {
            break;
        }
        assert!(Instant::now() < deadline, "the survivors did not heartbeat after resuming: {r:?}\n{}", c.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut live = redis.index();
    live.sort();
    let mut want: Vec<String> = survivors.iter().map(|&i| uuids[i].clone()).collect();
    want.sort();
    assert_eq!(live, want);
    assert_eq!(run_example("stale-instances.sh", &ns), "");
    drop(redis);
    c.teardown().await.unwrap();
}

/// No load, 16 shards on 3 nodes: the default placement balances leadership
/// to 6 / 5 / 5 within a minute of start (the rendezvous rank alone left it
/// as uneven as 9 / 5 / 2), and it stays so.
#[tokio::test(flavor = "multi_thread")]
async fn sixteen_shards_on_three_nodes_settle_at_six_five_five() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 16, 3, |_, _| {}).await.unwrap();
    let per_node = |s: &proto::StatusResponse| {
        let mut by_holder: HashMap<&str, usize> = HashMap::new();
        for l in &s.leases {
            *by_holder.entry(l.holder.as_str()).or_default() += 1;
        }
        let mut counts: Vec<usize> = by_holder.into_values().collect();
        counts.sort();
        counts
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = c.wait_all_owned(Duration::from_secs(60)).await.unwrap();
        if per_node(&s) == [5, 5, 6] {
            break;
        }
        assert!(Instant::now() < deadline, "leases per node {:?} a minute after start:\n{}", per_node(&s), c.logs());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let settled = c.wait_settled(Duration::from_secs(30)).await.unwrap();
    assert_eq!(per_node(&settled), [5, 5, 6], "the balance did not hold");
    c.teardown().await.unwrap();
}

/// `chitin cluster drain` without `--node` drains the node at its first
/// `--via` address, as the Kubernetes preStop hook runs it (no name to
/// expand): that node holds nothing after it, the other everything.
#[tokio::test(flavor = "multi_thread")]
async fn a_drain_without_a_name_drains_the_node_it_asks() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 2, 8, 2, |_, _| {}).await.unwrap();
    c.wait_settled(Duration::from_secs(60)).await.unwrap();
    let (asked, other) = (c.nodes[1].api.clone(), c.nodes[0].name.clone());
    let out = std::process::Command::new(CHITIN).args(["cluster", "drain", "--via", &asked]).output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{printed}");
    let drained = c.nodes[1].name.clone();
    assert!(printed.contains(&format!("drained {drained}:")), "{printed}");
    let s = c.wait_all_owned(Duration::from_secs(30)).await.unwrap();
    assert!(s.leases.iter().all(|l| l.holder == other), "{drained} still holds shards: {:?}", s.leases);
    c.teardown().await.unwrap();
}

/// The lease timing is the cluster's: a node that sets neither key takes
/// the recorded one (so a cluster created at other defaults keeps its timing
/// through an upgrade), and serves; a node that sets another timing is
/// refused at start, naming the cluster's value and how to take it.
#[tokio::test(flavor = "multi_thread")]
async fn a_node_without_lease_timing_takes_the_clusters_and_one_with_another_is_refused() {
    let _serial = SERIAL.lock().await;
    let mut c = Cluster::new(Dialect::Postgres, 3, 4, 1, |name, s| {
        (s.leases.ttl_secs, s.leases.renew_interval_secs) = match name {
            "node-01" => (Some(15.0), Some(5.0)),
            "node-02" => (None, None),
            _ => (Some(3.0), Some(1.0)),
        };
    })
    .await
    .unwrap();
    c.nodes[1].start().unwrap();
    c.nodes[1].wait_ready(Duration::from_secs(60)).await.unwrap_or_else(|e| panic!("{e}\n{}", c.nodes[1].log_tail(30)));
    let log = c.nodes[1].log_text();
    assert!(log.contains("lease timing: the cluster's") && log.contains("15s"), "{}", c.nodes[1].log_tail(30));

    c.nodes[2].start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.nodes[2].is_running() {
        assert!(Instant::now() < deadline, "a node with another lease timing kept running:\n{}", c.nodes[2].log_tail(30));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = c.nodes[2].log_text();
    for needle in ["leases.ttl_secs", "15", "leave leases.ttl_secs and leases.renew_interval_secs both unset"] {
        assert!(log.contains(needle), "no `{needle}` in:\n{}", c.nodes[2].log_tail(30));
    }
    c.teardown().await.unwrap();
}

/// A pushed config is stored off the node's async threads and its
/// directory is synced after the rename. The node runs on one worker
/// thread and strace slows each fsync of the config's temporary file and of
/// its directory to 3 s: the trace shows the directory's fsync after the
/// rename, and `/livez` answers all along (stored on the worker thread, the
/// node would answer nothing for the 6 s).
#[tokio::test(flavor = "multi_thread")]
async fn a_pushed_config_is_stored_off_the_async_threads_and_its_directory_synced() {
    use std::io::{BufRead, BufReader};
    if !crate::support::tool("strace") {
        return;
    }
    // One node of three started: a config push needs no quorum.
    let mut c = Cluster::new(Dialect::Postgres, 3, 4, 0, |_, _| {}).await.unwrap();
    let node = &mut c.nodes[0];
    node.set_env("TOKIO_WORKER_THREADS", "1");
    node.start().unwrap();
    node.wait_ready(Duration::from_secs(60)).await.unwrap();
    let settings = chitin::settings::Settings::load(Some(&node.settings), std::iter::empty::<(String, String)>()).unwrap();
    let data = std::fs::canonicalize(&settings.node.data_dir).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let trace = scratch.path().join("strace.out");
    let pid = node.pid().unwrap();
    let mut strace = std::process::Command::new("strace")
        .args(["-f", "-y", "-e", "trace=fsync,rename,renameat,renameat2", "-e", "inject=fsync:delay_enter=3s", "-o"])
        .arg(&trace)
        .arg("-P")
        .arg(&data)
        .arg("-P")
        .arg(data.join(format!(".cluster_config.json.tmp-{pid}")))
        .args(["-p", &pid.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // strace may warn before it says it attached. `said` keeps its stderr
    // open to the end: a closed pipe would end strace at its next line.
    let mut said = BufReader::new(strace.stderr.take().unwrap()).lines();
    let mut before = Vec::new();
    let attached = loop {
        match said.next() {
            Some(Ok(line)) if line.contains("attached") => break true,
            Some(Ok(line)) => before.push(line),
            _ => break false,
        }
    };
    assert!(attached, "strace did not attach: {before:?}");

    let mut admin = node.admin().await.unwrap();
    let served = admin.get_config(proto::GetConfigRequest {}).await.unwrap().into_inner().config_json;
    let mut newer: serde_json::Value = serde_json::from_str(&served).unwrap();
    newer["version"] = (newer["version"].as_u64().unwrap() + 1).into();

    let metrics = node.metrics.clone();
    let (done, mut stop) = tokio::sync::oneshot::channel::<()>();
    let probe = tokio::spawn(async move {
        let (mut last, mut longest) = (Instant::now(), Duration::ZERO);
        while stop.try_recv().is_err() {
            // A probe that gets no answer (the client gives up after 3 s)
            // leaves the gap growing.
            if let Ok((200, _)) = chitin::testkit::http_get(&metrics, "/livez", None).await {
                longest = longest.max(last.elapsed());
                last = Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        longest.max(last.elapsed())
    });
    let request = proto::UpdateConfigRequest { config_json: newer.to_string() };
    admin.update_config(request).await.unwrap();
    done.send(()).unwrap();
    let longest = probe.await.unwrap();
    std::process::Command::new("kill").args(["-INT", &strace.id().to_string()]).status().unwrap();
    strace.wait().unwrap();

    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let renamed = lines.iter().position(|l| l.contains("rename") && l.contains("cluster_config.json\""));
    let dir_fd = format!("<{}>)", data.display());
    let synced = lines.iter().rposition(|l| l.contains(" fsync(") && l.contains(&dir_fd));
    assert!(
        matches!((renamed, synced), (Some(r), Some(s)) if r < s),
        "no fsync of the data dir after the config's rename:\n{text}"
    );
    assert!(longest < Duration::from_millis(2500), "/livez went unanswered for {longest:?} during the push");
    c.teardown().await.unwrap();
}
