//! Group commit: concurrent appends to one shard share one fenced
//! transaction. An append that finds nothing in flight for its lease runs
//! its own statement, in its caller's task (no hand-off to another task on
//! the path of the most common append). Appends that arrive while a
//! statement of their lease is in flight queue; when it ends, a leader task
//! takes everything queued (at most [`MAX_BATCH`]), commits it with
//! [`Store::append_batch`] — one fence, one COMMIT — and hands each append
//! its own outcome; appends that queued meanwhile form the next batch.
//! Nothing waits on a timer: a batch is what arrived while the previous one
//! committed, so a lone writer pays nothing and many writers pay one commit
//! per batch.
//!
//! The queue passes to the leader task when the lone caller's statement
//! ends or when that caller goes away mid-statement (a cancelled request),
//! so no caller can strand the appends queued behind it.

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
        // Queued behind a statement in flight, or alone (the entry back).
        let queued = {
            let mut queues = self.lock();
            let queue = queues.entry(token.clone()).or_default();
            if std::mem::replace(&mut queue.leading, true) {
                let (reply, answer) = oneshot::channel();
                queue.waiting.push((entry, reply));
                Ok(answer)
            } else {
                Err(entry)
            }
        };
        let answer = match queued {
            Ok(answer) => answer,
            Err(entry) => {
                // Alone: this caller commits its batch of one itself.
                let _pass_on = PassOn { group: self.clone(), store: store.clone(), token: token.clone() };
                return store.append_fenced(token, &entry.stream, &entry.request_id, &entry.payload).await;
            }
        };
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

/// Held by a caller committing its lone append: when it is done, or
/// dropped mid-statement, the appends that queued behind it go to a leader
/// task, or the lease's queue is closed when none did.
struct PassOn {
    group: Arc<GroupCommit>,
    store: Store,
    token: LeaseToken,
}

impl Drop for PassOn {
    fn drop(&mut self) {
        let mut queues = self.group.lock();
        let Some(queue) = queues.get_mut(&self.token) else { return };
        if queue.waiting.is_empty() {
            queues.remove(&self.token);
            return;
        }
        drop(queues);
        // A drop outside a runtime happens only as the runtime itself goes
        // away, and the waiting callers with it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(self.group.clone().lead(self.store.clone(), self.token.clone()));
        }
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
