//! Real multi-process clusters for the node tests: a fresh database, a
//! cluster config, and `chitin node` processes on free loopback ports.
#![allow(dead_code)]

#[path = "../lease_common/mod.rs"]
pub mod lease_common;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chitin::api::proto::{self, admin_client::AdminClient, journal_client::JournalClient};
pub use chitin::lease::Dialect;
pub use lease_common::TestDb;

/// Lease timing of the tests: a 2 s TTL renewed every 0.5 s.
pub const TTL: Duration = Duration::from_secs(2);
pub const RENEW: Duration = Duration::from_millis(500);

pub fn free_port() -> u16 {
    free_ports(1)[0]
}

/// `n` distinct free loopback ports: every listener stays bound until all
/// are chosen, so the kernel cannot hand the same port out twice.
pub fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<TcpListener> = (0..n).map(|_| TcpListener::bind("127.0.0.1:0").unwrap()).collect();
    listeners.iter().map(|l| l.local_addr().unwrap().port()).collect()
}

/// One `chitin node` process.
pub struct NodeProc {
    pub name: String,
    pub api: String,
    pub metrics: String,
    pub settings: PathBuf,
    pub log: PathBuf,
    child: Option<Child>,
}

impl NodeProc {
    pub fn spawn(name: &str, settings: PathBuf, api: String, metrics: String, log: PathBuf) -> Result<NodeProc> {
        let mut node = NodeProc {
            name: name.into(),
            api,
            metrics,
            settings,
            log,
            child: None,
        };
        node.start()?;
        Ok(node)
    }

    /// (Re)starts the process with the same settings.
    pub fn start(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_chitin"))
            .args(["node", "--settings"])
            .arg(&self.settings)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("spawn chitin node")?;
        self.child = Some(child);
        Ok(())
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    fn signal(&self, sig: &str) {
        let status = Command::new("kill").args([sig, &self.pid().to_string()]).status().unwrap();
        assert!(status.success(), "kill {sig} failed");
    }

    pub fn kill9(&mut self) {
        self.signal("-KILL");
        let _ = self.child.take().unwrap().wait();
    }

    pub fn pause(&self) {
        self.signal("-STOP");
    }

    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGTERM and wait for the exit status.
    pub fn terminate(&mut self, within: Duration) -> Result<std::process::ExitStatus> {
        self.signal("-TERM");
        let mut child = self.child.take().unwrap();
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("{} did not exit within {within:?} after SIGTERM; log:\n{}", self.name, self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    pub async fn journal(&self) -> Result<JournalClient<tonic::transport::Channel>> {
        Ok(JournalClient::connect(format!("http://{}", self.api)).await?)
    }

    pub async fn admin(&self) -> Result<AdminClient<tonic::transport::Channel>> {
        Ok(AdminClient::connect(format!("http://{}", self.api)).await?)
    }

    /// Waits until `/readyz` answers 200.
    pub async fn wait_ready(&mut self, within: Duration) -> Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if !self.is_running() {
                bail!("{} exited during start; log:\n{}", self.name, self.log_text());
            }
            if http_get(&self.metrics, "/readyz").await.is_ok_and(|(code, _)| code == 200) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} not ready within {within:?}; log:\n{}", self.name, self.log_text());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").args(["-CONT", &c.id().to_string()]).status();
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A minimal HTTP/1.0 GET, enough for the node's own endpoints.
pub async fn http_get(addr: &str, path: &str) -> Result<(u16, String)> {
    http_request(addr, path, None).await
}

pub async fn http_request(addr: &str, path: &str, bearer: Option<&str>) -> Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr)).await??;
    let auth = bearer.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").as_bytes()).await?;
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await??;
    let code = out.split_whitespace().nth(1).and_then(|c| c.parse().ok()).context("no status line")?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((code, body))
}

/// A cluster config with `nodes` nodes and one `journal` application of
/// `shards` equal shards (a power of two), each with a replica on every node.
pub fn cluster_config(nodes: &[(String, String)], shards: u32) -> String {
    chitin::chaos::lab::cluster_config(nodes, shards, 3)
}

/// A test cluster: a fresh database, a config, and node processes.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub db: Option<TestDb>,
    pub config: PathBuf,
    pub nodes: Vec<NodeProc>,
    pub namespace: String,
}

impl Cluster {
    /// Writes settings for `count` nodes (node-01 …) sharing a fresh
    /// database of `dialect`; starts the first `start` of them.
    pub async fn new(dialect: Dialect, count: usize, shards: u32, start: usize, extra: &str) -> Result<Cluster> {
        let dir = tempfile::tempdir()?;
        let db = TestDb::create(dialect).await?;
        let ports = free_ports(2 * count.max(3));
        let names: Vec<(String, String, String)> = (1..=count.max(3))
            .map(|i| {
                let (api, metrics) = (ports[2 * i - 2], ports[2 * i - 1]);
                (format!("node-{i:02}"), format!("127.0.0.1:{api}"), format!("127.0.0.1:{metrics}"))
            })
            .collect();
        let config = dir.path().join("cluster_config.json");
        let pairs: Vec<(String, String)> = names.iter().map(|(n, a, _)| (n.clone(), a.clone())).collect();
        std::fs::write(&config, cluster_config(&pairs, shards))?;
        let namespace = format!("chitin-test-{}", uuid::Uuid::new_v4().simple());
        let mut nodes = Vec::new();
        for (name, api, metrics) in names.into_iter().take(count) {
            let data = dir.path().join(&name);
            let settings = dir.path().join(format!("{name}.toml"));
            std::fs::write(
                &settings,
                format!(
                    "[node]\ndata_dir = {data:?}\n\n[cluster]\nenabled = true\ninstance_id = {name:?}\nconfig_file = {config:?}\n\
                     redis_url = \"redis://127.0.0.1:6379\"\nnamespace = {namespace:?}\nheartbeat_interval_secs = 1\nliveness_timeout_secs = 3\n\n\
                     [database]\nurl = {url:?}\n\n[leases]\nttl_secs = {ttl}\nrenew_interval_secs = {renew}\n\n\
                     [api]\nlisten = {api:?}\n\n[metrics]\nlisten = {metrics:?}\n{extra}\n",
                    url = db.url,
                    ttl = TTL.as_secs_f64(),
                    renew = RENEW.as_secs_f64(),
                ),
            )?;
            let log = dir.path().join(format!("{name}.log"));
            let node = NodeProc {
                name,
                api,
                metrics,
                settings,
                log,
                child: None,
            };
            nodes.push(node);
        }
        let mut cluster = Cluster {
            dir,
            db: Some(db),
            config,
            nodes,
            namespace,
        };
        for i in 0..start {
            cluster.nodes[i].start()?;
        }
        for i in 0..start {
            cluster.nodes[i].wait_ready(Duration::from_secs(60)).await?;
        }
        Ok(cluster)
    }

    pub fn node(&mut self, name: &str) -> &mut NodeProc {
        self.nodes.iter_mut().find(|n| n.name == name).expect("a node of the cluster")
    }

    /// The status as any running node reports it.
    pub async fn status(&self) -> Result<proto::StatusResponse> {
        let mut last = None;
        for n in &self.nodes {
            match n.admin().await {
                Ok(mut a) => match a.status(proto::StatusRequest {}).await {
                    Ok(s) => return Ok(s.into_inner()),
                    Err(e) => last = Some(anyhow::anyhow!(e)),
                },
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no node")))
    }

    /// Waits until every shard has a live holder.
    pub async fn wait_all_owned(&self, within: Duration) -> Result<proto::StatusResponse> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(s) = self.status().await {
                if s.unowned.is_empty() && !s.leases.is_empty() {
                    return Ok(s);
                }
            }
            if Instant::now() > deadline {
                bail!("shards still unowned after {within:?}: {:?}\n{}", self.status().await.map(|s| s.unowned), self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every shard is owned and the holders stay the same for a
    /// second (handoffs to nodes that started later have finished).
    pub async fn wait_settled(&mut self, within: Duration) -> Result<proto::StatusResponse> {
        let deadline = Instant::now() + within;
        let mut previous: Option<Vec<(String, String)>> = None;
        loop {
            let s = self.wait_all_owned(within).await?;
            let holders: Vec<(String, String)> = s.leases.iter().map(|l| (l.shard.clone(), l.holder.clone())).collect();
            if previous.as_ref() == Some(&holders) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("the cluster did not settle within {within:?}: {holders:?}\n{}", self.logs());
            }
            previous = Some(holders);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The index of the node holding the most shards in `status`.
    pub fn busiest(&self, status: &proto::StatusResponse) -> usize {
        (0..self.nodes.len())
            .max_by_key(|&i| status.leases.iter().filter(|l| l.holder == self.nodes[i].name).count())
            .expect("nodes")
    }

    pub fn logs(&self) -> String {
        self.nodes.iter().map(|n| format!("---- {}\n{}", n.name, n.log_text())).collect()
    }

    /// Stops every process and drops the database.
    pub async fn teardown(mut self) -> Result<()> {
        self.nodes.clear();
        if let Some(db) = self.db.take() {
            db.drop_db().await?;
        }
        Ok(())
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }
}
