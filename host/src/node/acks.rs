//! The application's part in a handoff. A watcher that opens its
//! `WatchOwnership` with `acknowledges = true` is a participant while its
//! stream is open. While there is one, a handoff that sent DRAINING waits
//! for `Acknowledge(RELEASED)` of that shard and epoch (the application
//! finished and flushed; its writes are still accepted meanwhile) or for
//! `[leases] release_timeout_ms`, then goes on as without one; and a shard
//! this node takes waits, after ACQUIRED, for `Acknowledge(READY)` (the
//! application claimed its fence and warmed up) or `[leases]
//! ready_timeout_ms` before its writes are served (the wait itself is the
//! held shard's, in `leases`). Lease safety never depends on an answer:
//! the node holds and renews the lease while it waits, and the fence
//! refuses every write once the lease moved.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// How a handoff's wait for the application ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// No watcher takes part: nothing was waited for.
    NoParticipant,
    /// The application answered RELEASED after this long.
    Released(Duration),
    /// No answer within the timeout; the handoff went on.
    TimedOut,
}

impl Release {
    /// The label of the outcome in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Release::NoParticipant => "no-participant",
            Release::Released(_) => "released",
            Release::TimedOut => "timed-out",
        }
    }
}

/// How the wait for the application's READY of a shard just taken ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ready {
    /// The application answered READY.
    Answered,
    /// No answer within the ready timeout; writes went on without it.
    TimedOut,
}

impl Ready {
    /// The label of the outcome in metrics.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Ready::Answered => "ready",
            Ready::TimedOut => "timed-out",
        }
    }
}

/// The participants and their answers.
#[derive(Debug)]
pub struct Acks {
    participants: AtomicUsize,
    /// RELEASED answers not yet taken by their handoff, by (shard, epoch).
    released: Mutex<HashSet<(String, i64)>>,
    /// Bumped on every answer.
    answered: watch::Sender<u64>,
    /// How long a handoff waits for RELEASED.
    timeout: Duration,
    /// How long writes to a shard just taken wait for READY.
    ready_timeout: Duration,
}

/// A participating watch: counts while it lives.
#[derive(Debug)]
pub struct Participant(Arc<Acks>);

impl Drop for Participant {
    fn drop(&mut self) {
        self.0.participants.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Acks {
    /// RELEASED is waited for at most `timeout` per handoff, READY at most
    /// `ready_timeout` per shard taken.
    pub fn new(timeout: Duration, ready_timeout: Duration) -> Arc<Acks> {
        Arc::new(Acks {
            participants: AtomicUsize::new(0),
            released: Mutex::new(HashSet::new()),
            answered: watch::channel(0).0,
            timeout,
            ready_timeout,
        })
    }

    /// Whether a watch that takes part is open.
    pub fn participating(&self) -> bool {
        self.participants.load(Ordering::Acquire) > 0
    }

    /// How long writes to a shard just taken wait for READY.
    pub fn ready_timeout(&self) -> Duration {
        self.ready_timeout
    }

    /// A watch that takes part, until the returned guard is dropped.
    pub fn participate(self: &Arc<Acks>) -> Participant {
        self.participants.fetch_add(1, Ordering::AcqRel);
        Participant(self.clone())
    }

    /// Records RELEASED for `shard` at `epoch` (the caller checked that a
    /// handoff of it is under way, so the set stays as small as those).
    pub fn release(&self, shard: &str, epoch: i64) {
        self.released.lock().unwrap_or_else(|p| p.into_inner()).insert((shard.to_owned(), epoch));
        self.answered.send_modify(|n| *n += 1);
    }

    /// Waits for RELEASED of `shard` at `epoch` while anyone takes part, at
    /// most the timeout; consumes the answer.
    pub async fn wait_released(&self, shard: &str, epoch: i64) -> Release {
        if !self.participating() {
            return Release::NoParticipant;
        }
        let started = Instant::now();
        let mut answered = self.answered.subscribe();
        let key = (shard.to_owned(), epoch);
        let wait = async {
            loop {
                if self.released.lock().unwrap_or_else(|p| p.into_inner()).remove(&key) {
                    return;
                }
                if answered.changed().await.is_err() {
                    return std::future::pending().await;
                }
            }
        };
        match tokio::time::timeout(self.timeout, wait).await {
            Ok(()) => Release::Released(started.elapsed()),
            Err(_) => {
                // A late answer must not stay behind.
                self.released.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
                Release::TimedOut
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_handoff_waits_only_while_someone_takes_part_and_only_for_its_own_answer() {
        let acks = Acks::new(Duration::from_millis(300), Duration::from_millis(300));
        assert_eq!(acks.wait_released("s", 1).await, Release::NoParticipant);

        let watcher = acks.participate();
        // Another shard's, or another epoch's, answer does not count.
        acks.release("s", 0);
        acks.release("t", 1);
        assert_eq!(acks.wait_released("s", 1).await, Release::TimedOut);

        let answering = {
            let acks = acks.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                acks.release("s", 1);
            })
        };
        assert!(matches!(acks.wait_released("s", 1).await, Release::Released(_)));
        answering.await.unwrap();

        // An answer given before the wait is taken at once, and only once.
        acks.release("s", 2);
        assert!(matches!(acks.wait_released("s", 2).await, Release::Released(_)));
        assert_eq!(acks.wait_released("s", 2).await, Release::TimedOut);

        drop(watcher);
        assert_eq!(acks.wait_released("s", 3).await, Release::NoParticipant);
    }
}
