//! `chitin chaos --service`: the run drives an application's own service
//! through its own API and judges the service's own table ([`super::ledger`]).
//!
//! The run starts one instance of the service beside each node:
//! `<program> --listen 127.0.0.1:<port> --node <node's gRPC address>
//! --database <a fresh database of the run's server> [--service-arg …]`.
//! Its writers send `POST /write?key=K&request_id=R`, each request with its
//! own id, sent again with that id until one instance answers `200`: a `421`
//! names the gRPC address of the node holding the key's shard (the writer
//! goes to the instance beside it), anything else sends it to the next
//! instance. `examples/kv-service` is such a service; README there says how
//! to make one's own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use sqlx::Row;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use super::ledger::LedgerRow;
use super::{ChaosError, io_error};
use crate::testkit::{self, FreshDb};

/// The service a run drives.
#[derive(Clone, Debug)]
pub struct ServiceOptions {
    /// The service's program, started once beside each node.
    pub program: PathBuf,
    /// Arguments added to every instance's command line.
    pub args: Vec<String>,
    /// The table the service records its writes in.
    pub table: String,
    /// Concurrent writers.
    pub writers: usize,
    /// Keys the writers spread their writes over.
    pub keys: u32,
}

impl ServiceOptions {
    /// Why these options cannot be run, if they cannot.
    pub(super) fn problem(&self) -> Option<String> {
        let name_ok = self.table.len() <= 63
            && self.table.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && self.table.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !name_ok {
            return Some(format!(
                "--service-table must be a plain table name (letters, digits and _, at most 63, not starting with a digit); got {:?}",
                self.table
            ));
        }
        if self.writers == 0 || self.keys == 0 {
            return Some("--service-writers and --service-keys must be at least 1".into());
        }
        None
    }
}

/// One running instance: the node it is beside and its HTTP address.
struct Instance {
    node: String,
    address: String,
    child: std::process::Child,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The service's instances and its database.
pub struct Service {
    instances: Vec<Instance>,
    database: FreshDb,
}

/// How long the instances may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl Service {
    /// Makes the service's database in the run's server (beside, not in,
    /// chitin's) and starts an instance beside each of `nodes` (their gRPC
    /// addresses); returns once every instance listens.
    pub async fn start(
        opts: &ServiceOptions,
        nodes: &[String],
        server_url: &str,
        dir: &Path,
        run_id: &str,
    ) -> Result<Service, ChaosError> {
        let database = FreshDb::create_named(server_url, &format!("chitin_service_{run_id}")).await?;
        let ports = testkit::free_ports(nodes.len())?;
        let mut instances = Vec::new();
        for (k, (node, port)) in nodes.iter().zip(ports).enumerate() {
            let address = format!("127.0.0.1:{port}");
            let log_path = dir.join(format!("service-{:02}.log", k + 1));
            let log = std::fs::File::create(&log_path).map_err(io_error(format!("create {}", log_path.display())))?;
            let err = log.try_clone().map_err(io_error(format!("open {}", log_path.display())))?;
            let child = std::process::Command::new(&opts.program)
                .args(["--listen", &address, "--node", node, "--database", &database.url])
                .args(&opts.args)
                .stdout(log)
                .stderr(err)
                .spawn()
                .map_err(io_error(format!("start the service {} (--service)", opts.program.display())))?;
            instances.push(Instance { node: node.clone(), address, child });
        }
        let mut service = Service { instances, database };
        service.wait_listening(dir).await?;
        Ok(service)
    }

    async fn wait_listening(&mut self, dir: &Path) -> Result<(), ChaosError> {
        let deadline = Instant::now() + START_TIMEOUT;
        for k in 0..self.instances.len() {
            while tokio::net::TcpStream::connect(&self.instances[k].address).await.is_err() {
                let exited = self.instances[k].child.try_wait().ok().flatten();
                if exited.is_some() || Instant::now() > deadline {
                    let log = dir.join(format!("service-{:02}.log", k + 1));
                    let tail = std::fs::read_to_string(&log).unwrap_or_default();
                    return Err(ChaosError::Options(format!(
                        "the service beside {} did not listen on {} ({}); its log {}:\n{tail}",
                        self.instances[k].node,
                        self.instances[k].address,
                        exited.map_or("still starting after a minute".to_string(), |s| format!("it exited: {s}")),
                        log.display(),
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(())
    }

    /// The instances as writers address them: (node, HTTP address).
    pub fn instances(&self) -> Arc<Vec<(String, String)>> {
        Arc::new(self.instances.iter().map(|i| (i.node.clone(), i.address.clone())).collect())
    }

    /// Stops the instances and reads the service's table; then drops its
    /// database if `drop_database` (the run made it in a server that
    /// outlives the run), whether the read succeeded or not.
    pub async fn finish(self, table: &str, drop_database: bool) -> Result<Vec<LedgerRow>, ChaosError> {
        let Service { instances, database } = self;
        drop(instances);
        let rows = read_table(&database.url, table).await;
        if drop_database && let Err(e) = database.drop_db().await {
            tracing::warn!(error = %e, "could not drop the service's database {}", database.name);
        }
        rows
    }
}

/// Every row of the service's `table` (see [`super::ledger`] for its columns).
async fn read_table(url: &str, table: &str) -> Result<Vec<LedgerRow>, ChaosError> {
    let sql = format!("SELECT seq, request_id, item_key, shard, epoch FROM {table}");
    let failed = |source| ChaosError::Sql { what: format!("reading the service's table {table}"), source };
    let pg = url.starts_with("postgres");
    macro_rules! rows {
        ($pool:ty) => {{
            let pool = <$pool>::connect(url).await.map_err(failed)?;
            // The table's name passed `ServiceOptions::problem`: a plain identifier.
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone())).fetch_all(&pool).await.map_err(failed)?;
            pool.close().await;
            rows.iter()
                .map(|r| {
                    Ok(LedgerRow {
                        seq: r.try_get("seq")?,
                        request_id: r.try_get("request_id")?,
                        key: r.try_get("item_key")?,
                        shard: r.try_get("shard")?,
                        epoch: r.try_get("epoch")?,
                    })
                })
                .collect::<Result<Vec<_>, sqlx::Error>>()
                .map_err(failed)
        }};
    }
    if pg { rows!(sqlx::PgPool) } else { rows!(sqlx::MySqlPool) }
}

/// What a writer does.
pub(super) struct WriterPlan {
    pub id: usize,
    /// (node, HTTP address) of every instance.
    pub instances: Arc<Vec<(String, String)>>,
    pub keys: u32,
    pub interval: Duration,
    /// Longest one request may take (an instance whose node is paused may
    /// hold it).
    pub attempt_timeout: Duration,
    /// How long a write may keep trying after the run says stop.
    pub grace: Duration,
}

/// What the writers were told.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ServiceLog {
    /// Acknowledged writes: request id → key.
    pub acked: BTreeMap<String, String>,
    /// Writes still unacknowledged when the run stopped (stored or not,
    /// neither is a violation).
    pub unacknowledged: usize,
    /// Attempts an instance sent elsewhere with a `421`.
    pub redirected: u64,
    /// Attempts answered otherwise (not now, or no answer).
    pub refused: u64,
    /// The last of those: the first thing to read when a service stores
    /// nothing.
    pub last_refusal: Option<Refusal>,
}

/// One attempt that an instance refused, or that got no answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// When it ended, in milliseconds since the Unix epoch: the last of
    /// all writers' is the latest, whichever writer saw it.
    pub at_ms: u64,
    /// What the instance said, or why there was no answer.
    pub said: String,
}

impl ServiceLog {
    pub(super) fn merge(logs: Vec<ServiceLog>) -> ServiceLog {
        let mut all = ServiceLog::default();
        for log in logs {
            all.acked.extend(log.acked);
            all.unacknowledged += log.unacknowledged;
            all.redirected += log.redirected;
            all.refused += log.refused;
            all.last_refusal = [all.last_refusal, log.last_refusal].into_iter().flatten().max_by_key(|r| r.at_ms);
        }
        all
    }
}

/// How an instance answered one attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// `200`: stored.
    Stored,
    /// `421`: the node at this address holds the key's shard.
    Elsewhere(String),
    /// Any other answer (its status and body), or none (why).
    NotNow(String),
}

/// The instance to try after `answer` from instance `at`, and whether to
/// pause first: follow a `421` to the instance beside the holder it names
/// (at once, unless it names the instance just asked or none the run
/// knows); otherwise the next instance, after a pause.
pub fn next_instance(answer: &Answer, instances: &[(String, String)], at: usize) -> (usize, bool) {
    let next = (at + 1) % instances.len();
    match answer {
        Answer::Elsewhere(node) => match instances.iter().position(|(n, _)| n == node) {
            Some(k) if k != at => (k, false),
            _ => (next, true),
        },
        _ => (next, true),
    }
}

/// Pause after an attempt that did not store.
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Writes until `stop` turns true, then finishes (or gives up on) the write
/// in flight within the grace period.
pub(super) async fn run_writer(plan: WriterPlan, stop: watch::Receiver<bool>) -> ServiceLog {
    let mut log = ServiceLog::default();
    let mut n = 0u64;
    while !*stop.borrow() {
        // Writers spread over the keys, each key written by several writers.
        let key = format!("key-{}", (plan.id as u64 * 7919 + n * 31) % u64::from(plan.keys));
        let request_id = format!("w{}-{n}", plan.id);
        let mut at = (plan.id + n as usize) % plan.instances.len();
        n += 1;
        let mut stopped_at: Option<Instant> = None;
        loop {
            if *stop.borrow() && stopped_at.get_or_insert_with(Instant::now).elapsed() > plan.grace {
                log.unacknowledged += 1;
                break;
            }
            let path = format!("/write?key={key}&request_id={request_id}&value={n}");
            let answer = post(&plan.instances[at].1, &path, plan.attempt_timeout).await;
            if answer == Answer::Stored {
                log.acked.insert(request_id.clone(), key.clone());
                break;
            }
            match &answer {
                Answer::Elsewhere(_) => log.redirected += 1,
                Answer::NotNow(why) => {
                    log.refused += 1;
                    let at_ms =
                        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
                    log.last_refusal = Some(Refusal { at_ms, said: why.clone() });
                }
                Answer::Stored => {}
            }
            let pause;
            (at, pause) = next_instance(&answer, &plan.instances, at);
            if pause {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
        tokio::time::sleep(plan.interval).await;
    }
    log
}

/// One `POST` over a fresh connection (the service's API is plain HTTP/1.1;
/// the run needs no client library for it).
pub async fn post(address: &str, path: &str, timeout: Duration) -> Answer {
    let exchange = async {
        let mut conn = tokio::net::TcpStream::connect(address).await?;
        let request = format!("POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        conn.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        conn.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(String::from_utf8_lossy(&response).into_owned())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Ok(Ok(response)) => answer(&response),
        Ok(Err(e)) => Answer::NotNow(format!("no answer from {address}: {e}")),
        Err(_) => Answer::NotNow(format!("no answer from {address} within {timeout:?}")),
    }
}

/// A `421` without a body: the instance does not serve the key and says
/// nowhere else to send it.
const NO_HOLDER: &str = "421 without a holder's address: a 421's body must name the node holding the key's shard";

/// Reads an HTTP response's status and, for a `421`, its body.
fn answer(response: &str) -> Answer {
    let status = response.split(' ').nth(1).unwrap_or_default();
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b).trim();
    match status {
        "200" => Answer::Stored,
        "421" if !body.is_empty() => Answer::Elsewhere(body.to_owned()),
        "421" => Answer::NotNow(NO_HOLDER.into()),
        "" => Answer::NotNow("an empty or malformed response".into()),
        _ => Answer::NotNow(format!("{status} {body}").trim_end().to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_read_from_its_status_line_and_a_421_from_its_body() {
        let cases = [
            ("HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\ns1 4", Answer::Stored),
            ("HTTP/1.1 421 Misdirected Request\r\n\r\n10.0.0.2:7400", Answer::Elsewhere("10.0.0.2:7400".into())),
            ("HTTP/1.1 421 Misdirected Request\r\n\r\n", Answer::NotNow(NO_HOLDER.into())),
            ("HTTP/1.1 503 Service Unavailable\r\n\r\nlease lost", Answer::NotNow("503 lease lost".into())),
            ("", Answer::NotNow("an empty or malformed response".into())),
        ];
        for (response, want) in cases {
            assert_eq!(answer(response), want, "{response:?}");
        }
    }

    /// The writers' logs add up, and the last refusal is the latest of
    /// any writer's, not the last writer's.
    #[test]
    fn merged_logs_add_up_and_keep_the_latest_refusal() {
        let refused = |at_ms, said: &str| ServiceLog {
            refused: 1,
            last_refusal: Some(Refusal { at_ms, said: said.into() }),
            ..ServiceLog::default()
        };
        let quiet = ServiceLog { acked: [("w0-1".into(), "key-1".into())].into(), redirected: 2, ..ServiceLog::default() };
        let all = ServiceLog::merge(vec![refused(30, "latest"), quiet, refused(10, "earlier")]);
        assert_eq!((all.acked.len(), all.redirected, all.refused), (1, 2, 2));
        assert_eq!(all.last_refusal.map(|r| r.said).as_deref(), Some("latest"));
    }

    #[test]
    fn a_writer_follows_a_421_to_the_holders_instance_and_otherwise_moves_on_after_a_pause() {
        let instances: Vec<(String, String)> =
            (1..=3).map(|k| (format!("10.0.0.{k}:7400"), format!("127.0.0.1:900{k}"))).collect();
        let elsewhere = |node: &str| Answer::Elsewhere(node.into());
        let cases = [
            (elsewhere("10.0.0.3:7400"), 0, (2, false)),
            (elsewhere("10.0.0.1:7400"), 0, (1, true)),
            (elsewhere("10.9.9.9:7400"), 2, (0, true)),
            (Answer::NotNow("503".into()), 2, (0, true)),
            (Answer::NotNow("503".into()), 0, (1, true)),
        ];
        for (answer, at, want) in cases {
            assert_eq!(next_instance(&answer, &instances, at), want, "{answer:?} from {at}");
        }
    }
}
