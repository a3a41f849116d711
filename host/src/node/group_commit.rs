//! Group commit: concurrent appends to one shard share one fenced
//! transaction. The first append to find no batch in flight for its lease
//! leads: it takes everything queued for that lease (at most
//! [`MAX_BATCH`]), commits it with [`Store::append_batch`] — one fence, one
//! COMMIT — and hands each append its own outcome; appends that queued
//! meanwhile form the next batch. Nothing waits on a timer: a batch is what
//! arrived while the previous one committed, so a lone writer pays nothing
//! (its batch of one is the single-statement append) and many writers pay
//! one commit per batch.
//!
//! The leader runs as a task of its own, so a caller that goes away (a
//! cancelled request) cannot strand the appends queued behind it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::lease::{Appended, LeaseError, LeaseToken, NewEntry, Store};

/// Most appends in one transaction: bounds a batch's lock time and size.
pub const MAX_BATCH: usize = 64;

type Reply = oneshot::Sender<Result<Appended, LeaseError>>;

#[derive(Default)]
struct Queue {
    waiting: Vec<(NewEntry, Reply)>,
    /// A leader is committing a batch of this lease.
    leading: bool,
}

/// The append queues of this node, one per lease (shard and epoch).
#[derive(Default)]
pub struct GroupCommit {
    queues: Mutex<HashMap<LeaseToken, Queue>>,
}

impl GroupCommit {
    /// Appends `entry` under `token`, in the next batch of that lease.
    pub async fn append(self: &Arc<Self>, store: &Store, token: &LeaseToken, entry: NewEntry) -> Result<Appended, LeaseError> {
        let (reply, answer) = oneshot::channel();
        let lead = {
            let mut queues = self.lock();
            let queue = queues.entry(token.clone()).or_default();
            queue.waiting.push((entry, reply));
            !std::mem::replace(&mut queue.leading, true)
        };
        if lead {
            tokio::spawn(self.clone().lead(store.clone(), token.clone()));
        }
        answer.await.unwrap_or_else(|_| Err(unknown("the batch's leader stopped before it answered")))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseToken, Queue>> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commits batches of `token` until its queue is empty.
    async fn lead(self: Arc<Self>, store: Store, token: LeaseToken) {
        loop {
            let batch: Vec<(NewEntry, Reply)> = {
                let mut queues = self.lock();
                let Some(queue) = queues.get_mut(&token) else { return };
                if queue.waiting.is_empty() {
                    queues.remove(&token);
                    return;
                }
                let take = queue.waiting.len().min(MAX_BATCH);
                queue.waiting.drain(..take).collect()
            };
            let (entries, replies): (Vec<NewEntry>, Vec<Reply>) = batch.into_iter().unzip();
            match entries.as_slice() {
                [one] => {
                    let outcome = store.append_fenced(&token, &one.stream, &one.request_id, &one.payload).await;
                    answer(replies, vec![outcome]);
                }
                many if store.batches_appends() => {
                    let outcomes = match store.append_batch(&token, many).await {
                        Ok(done) => done.into_iter().map(Ok).collect(),
                        Err(e) => many.iter().map(|_| Err(shared(&e))).collect(),
                    };
                    answer(replies, outcomes);
                }
                _ => answer(replies, Self::each_alone(&store, &token, entries).await),
            }
        }
    }

    /// The batch as concurrent single appends, each its own round trip and
    /// transaction, for a database whose batch would cost more round trips
    /// than the appends it groups (see [`Store::batches_appends`]); the
    /// server's own group commit then shares their log flushes.
    async fn each_alone(store: &Store, token: &LeaseToken, entries: Vec<NewEntry>) -> Vec<Result<Appended, LeaseError>> {
        let tasks: Vec<_> = entries
            .into_iter()
            .map(|e| {
                let (store, token) = (store.clone(), token.clone());
                tokio::spawn(async move { store.append_fenced(&token, &e.stream, &e.request_id, &e.payload).await })
            })
            .collect();
        let mut outcomes = Vec::with_capacity(tasks.len());
        for task in tasks {
            outcomes.push(task.await.unwrap_or_else(|_| Err(unknown("the append's task stopped before it answered"))));
        }
        outcomes
    }
}

fn answer(replies: Vec<Reply>, outcomes: Vec<Result<Appended, LeaseError>>) {
    for (reply, outcome) in replies.into_iter().zip(outcomes) {
        let _ = reply.send(outcome);
    }
}

/// The batch's error for each of its appends: a lost lease as itself (none
/// of them was written); anything else as a database error, whose outcome
/// the caller reports as unknown.
fn shared(e: &LeaseError) -> LeaseError {
    match e {
        LeaseError::LeaseLost { shard, holder, epoch, reason } => {
            LeaseError::LeaseLost { shard: shard.clone(), holder: *holder, epoch: *epoch, reason: reason.clone() }
        }
        other => unknown(&other.to_string()),
    }
}

fn unknown(why: &str) -> LeaseError {
    LeaseError::BatchOutcomeUnknown(why.to_string())
}
