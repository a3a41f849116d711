//! [`OwnershipWatch`]: a node's `WatchOwnership` stream that survives gaps.
//!
//! The stream of one node says what *that* node acquires, drains and loses.
//! When it breaks (the node restarted, or `DATA_LOSS`: this watcher fell
//! behind), events may have been missed, so the watch says so
//! ([`WatchEvent::Gap`]), subscribes again (the first node of the list that
//! answers, so an application beside its node gets that node back) and
//! hands over the node's `Held` shards ([`WatchEvent::Subscribed`]): replace
//! what you knew with it. It subscribes before it asks `Held`, so no change
//! falls between the snapshot and the events.

use std::time::Duration;

use crate::client::Client;
use crate::proto::{self, ownership_client::OwnershipClient, ownership_event::Kind};

/// What a watch yields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchEvent {
    /// (Re)subscribed to `node`: `held` is everything it holds now.
    Subscribed {
        /// The node's address.
        node: String,
        /// Its leases when the watch subscribed.
        held: Vec<proto::ShardLease>,
    },
    /// The node took the shard: claim its fence, warm up (and with an
    /// acknowledging watch answer [`OwnershipWatch::ready`]).
    Acquired {
        /// The shard.
        shard: String,
        /// The new lease's epoch.
        epoch: u64,
    },
    /// Stop taking new work for the shard (the lease is being handed over).
    Draining {
        /// The shard.
        shard: String,
        /// The epoch being handed over.
        epoch: u64,
    },
    /// Stop writing for the shard: the lease is gone.
    Lost {
        /// The shard.
        shard: String,
        /// The epoch that ended.
        epoch: u64,
    },
    /// The stream from `node` ended: events may have been missed. A
    /// `Subscribed` follows once a node answers.
    Gap {
        /// The node whose stream ended.
        node: String,
        /// Why, in words.
        reason: String,
    },
}

/// Longest pause between subscription attempts.
const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The ownership events of a client's nodes, resubscribing after a gap
/// (made by `Client::watch_ownership`); see the module docs.
pub struct OwnershipWatch {
    client: Client,
    stream: Option<(String, tonic::Streaming<proto::OwnershipEvent>)>,
    pause: Duration,
    /// Whether this watch takes part in handoffs ([`OwnershipWatch::released`]).
    acknowledges: bool,
}

impl OwnershipWatch {
    pub(crate) fn new(client: Client, acknowledges: bool) -> OwnershipWatch {
        OwnershipWatch { client, stream: None, pause: Duration::from_millis(50), acknowledges }
    }

    /// Answers a [`WatchEvent::Draining`] of a watch that acknowledges: the
    /// application finished and flushed the shard, the node may hand it
    /// over now. Until then (or the node's `release_timeout_ms`) its writes
    /// to the shard are still served. An error means nothing waits for this
    /// answer any more (the handoff went on, or the node is gone): safe to
    /// ignore.
    pub async fn released(&self, shard: &str, epoch: u64) -> Result<(), tonic::Status> {
        self.acknowledge(proto::acknowledge_request::Ack::Released, shard, epoch).await
    }

    /// Answers a [`WatchEvent::Acquired`] of a watch that acknowledges: the
    /// application claimed its fence for the shard and is ready; the node
    /// serves the shard's writes (forwards included) from now on. Until then
    /// (or the node's `ready_timeout_ms`) they wait. An error means nothing
    /// waits for this answer any more (the timeout passed, or the shard moved
    /// on): safe to ignore.
    pub async fn ready(&self, shard: &str, epoch: u64) -> Result<(), tonic::Status> {
        self.acknowledge(proto::acknowledge_request::Ack::Ready, shard, epoch).await
    }

    async fn acknowledge(&self, ack: proto::acknowledge_request::Ack, shard: &str, epoch: u64) -> Result<(), tonic::Status> {
        let Some((node, _)) = &self.stream else {
            return Err(tonic::Status::unavailable("the watch is not subscribed to a node"));
        };
        let conn = self.client.conn(node).await.map_err(|e| tonic::Status::unavailable(e.to_string()))?;
        let ack = proto::AcknowledgeRequest { ack: ack as i32, shard: shard.to_owned(), epoch };
        OwnershipClient::new(conn).acknowledge(ack).await.map(|_| ())
    }

    /// The next event; waits (resubscribing as needed) until there is one.
    pub async fn next(&mut self) -> WatchEvent {
        loop {
            let Some((node, stream)) = &mut self.stream else {
                match self.subscribe().await {
                    Some(event) => return event,
                    None => {
                        tokio::time::sleep(self.pause).await;
                        self.pause = (self.pause * 2).min(MAX_PAUSE);
                        continue;
                    }
                }
            };
            let reason = match stream.message().await {
                Ok(Some(e)) => match event(e) {
                    Some(event) => return event,
                    None => continue,
                },
                Ok(None) => "the node ended the stream".to_string(),
                Err(s) => crate::outcome::describe(&s),
            };
            let node = node.clone();
            self.stream = None;
            return WatchEvent::Gap { node, reason };
        }
    }

    /// Subscribes at the first node that answers both calls.
    async fn subscribe(&mut self) -> Option<WatchEvent> {
        for node in self.client.nodes().addresses() {
            let Ok(conn) = self.client.conn(node).await else { continue };
            let mut own = OwnershipClient::new(conn);
            let subscribed = match own.watch_ownership(proto::WatchRequest { acknowledges: self.acknowledges }).await {
                Ok(stream) => own.held(proto::HeldRequest {}).await.map(|held| (stream, held)),
                Err(e) => Err(e),
            };
            let Ok((stream, held)) = subscribed else {
                self.client.forget(node);
                continue;
            };
            self.stream = Some((node.clone(), stream.into_inner()));
            self.pause = Duration::from_millis(50);
            return Some(WatchEvent::Subscribed { node: node.clone(), held: held.into_inner().leases });
        }
        None
    }
}

fn event(e: proto::OwnershipEvent) -> Option<WatchEvent> {
    let (shard, epoch) = (e.shard.clone(), e.epoch);
    match e.kind() {
        Kind::Acquired => Some(WatchEvent::Acquired { shard, epoch }),
        Kind::Draining => Some(WatchEvent::Draining { shard, epoch }),
        Kind::Lost => Some(WatchEvent::Lost { shard, epoch }),
        // A kind this client does not know (a newer node): skip it.
        Kind::Unspecified => None,
    }
}
