//! Request ids and stream names are exact on every dialect: a repeated id
//! with another payload is refused with the stored sequence, never
//! acknowledged; a name with a trailing space, which MySQL and MariaDB
//! would take for the name without it, is refused as invalid. Through a
//! real node, the database read back directly.

use std::time::Duration;

use chitin::api::proto::{self, journal_client::JournalClient};

use crate::support::cluster::*;

fn append(stream: &str, request_id: &str, payload: &[u8]) -> proto::AppendRequest {
    proto::AppendRequest { stream: stream.into(), request_id: request_id.into(), payload: payload.to_vec(), forwarded: false }
}

async fn request_ids_are_exact(dialect: Dialect) {
    let c = Cluster::new(dialect, 1, 4, 1, |_, _| {}).await.unwrap();
    c.wait_all_owned(Duration::from_secs(60)).await.unwrap();
    let mut j = JournalClient::connect(format!("http://{}", c.nodes[0].api)).await.unwrap();

    let first = j.append(append("orders", "r", b"A")).await.unwrap().into_inner();
    let again = j.append(append("orders", "r", b"A")).await.unwrap().into_inner();
    assert_eq!((again.sequence, again.epoch), (first.sequence, first.epoch), "the same id and payload: the same answer");

    let reused = j.append(append("orders", "r", b"B")).await.unwrap_err();
    assert_eq!(reused.code(), tonic::Code::AlreadyExists, "{reused:?}");
    assert!(reused.message().contains(&format!("at sequence {}", first.sequence)), "{reused:?}");
    let attempt = chitin_client::outcome::classify(&reused);
    assert!(matches!(attempt, chitin_client::outcome::Attempt::Refused { .. }), "{attempt:?}");

    for (stream, id) in [("orders", "r "), ("orders ", "r2")] {
        let refused = j.append(append(stream, id, b"B")).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{stream:?} {id:?}: {refused:?}");
        assert!(refused.message().contains("must not end with a space"), "{refused:?}");
    }

    // Only the first payload is stored, once.
    let store = c.store().await;
    let stored = store.read("orders", 1, 10).await.unwrap();
    let payloads: Vec<&[u8]> = stored.iter().map(|e| e.payload.as_slice()).collect();
    assert_eq!(payloads, [b"A".as_slice()], "{stored:?}");
    store.close().await;
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn request_ids_are_exact_on_postgres() {
    request_ids_are_exact(Dialect::Postgres).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn request_ids_are_exact_on_mariadb() {
    request_ids_are_exact(Dialect::MySql).await;
}
