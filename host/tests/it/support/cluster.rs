//! Real multi-process clusters for the node tests: a fresh database, a
//! cluster config, and `chitin node` processes on free loopback ports, all
//! from the library's kit (`chitin::testkit`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use chitin::api::proto::{self, admin_client::AdminClient, journal_client::JournalClient};
pub use chitin::lease::Dialect;
pub use chitin::testkit::settings::{self as node_settings, ClusterNode, ClusterShared};
// Each test binary uses a different part of the kit.
pub use super::lease::TestDb;
#[allow(unused_imports)]
pub use chitin::testkit::{NodeProc, free_port, free_ports, http_get};

/// Lease timing of the tests: a 2 s TTL renewed every 0.5 s.
pub const TTL: Duration = Duration::from_secs(2);
pub const RENEW: Duration = Duration::from_millis(500);

/// The `chitin` binary under test.
pub const CHITIN: &str = env!("CARGO_BIN_EXE_chitin");

/// A `chitin node` process of the binary under test, started.
pub fn spawn_node(name: &str, settings: PathBuf, api: String, metrics: String, log: PathBuf) -> Result<NodeProc> {
    Ok(NodeProc::spawn(CHITIN, name, api, metrics, settings, log)?)
}

/// A standalone node in `dir` (settings `chitin.toml`, data in `data`,
/// log `node.log`) with `edit` applied to its settings, started.
pub fn standalone_node(dir: &Path, name: &str, edit: impl FnOnce(&mut chitin::settings::Settings)) -> Result<NodeProc> {
    let ports = free_ports(2)?;
    let (api, metrics) = (format!("127.0.0.1:{}", ports[0]), format!("127.0.0.1:{}", ports[1]));
    let mut s = node_settings::standalone(dir.join("data"), &api, &metrics);
    edit(&mut s);
    let settings = dir.join("chitin.toml");
    node_settings::write(&settings, &s)?;
    spawn_node(name, settings, api, metrics, dir.join("node.log"))
}

/// gRPC clients of a node process.
#[allow(async_fn_in_trait)]
pub trait NodeClients {
    async fn journal(&self) -> Result<JournalClient<tonic::transport::Channel>>;
    async fn admin(&self) -> Result<AdminClient<tonic::transport::Channel>>;
}

impl NodeClients for NodeProc {
    async fn journal(&self) -> Result<JournalClient<tonic::transport::Channel>> {
        Ok(JournalClient::connect(format!("http://{}", self.api)).await?)
    }

    async fn admin(&self) -> Result<AdminClient<tonic::transport::Channel>> {
        Ok(AdminClient::connect(format!("http://{}", self.api)).await?)
    }
}

pub async fn append_via(api: &str, stream: &str, request_id: &str) -> Result<proto::AppendResponse> {
    let mut client = proto::journal_client::JournalClient::connect(format!("http://{api}")).await?;
    let request = proto::AppendRequest {
        stream: stream.into(),
        request_id: request_id.into(),
        payload: request_id.as_bytes().to_vec(),
        forwarded: false,
    };
    Ok(client.append(request).await?.into_inner())
}

/// Appends `request_id` to `stream` through the nodes at `apis` in turn,
/// retrying the same id at once after any error, as a client does; how long
/// it took.
pub async fn append_until_acked(apis: Vec<String>, stream: String, request_id: String, within: Duration) -> Result<Duration> {
    let started = Instant::now();
    let mut errors = Vec::new();
    for api in apis.iter().cycle() {
        match append_via(api, &stream, &request_id).await {
            Ok(_) => return Ok(started.elapsed()),
            Err(e) => errors.push(e.to_string()),
        }
        if started.elapsed() > within {
            bail!("{stream} not writable within {within:?}; errors: {errors:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    unreachable!("cycle never ends")
}

/// Waits until the admin plane of the node at `api` answers.
pub async fn wait_admin(api: &str, within: Duration) -> Result<proto::GetConfigResponse> {
    let deadline = Instant::now() + within;
    loop {
        let r = async {
            let mut a = proto::admin_client::AdminClient::connect(format!("http://{api}")).await?;
            Ok::<_, anyhow::Error>(a.get_config(proto::GetConfigRequest {}).await?.into_inner())
        }
        .await;
        match r {
            Ok(r) => return Ok(r),
            Err(e) if Instant::now() > deadline => bail!("admin plane of {api} not up within {within:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// A stream whose appends land on `shard`: the first `{salt}-{i}` that routes there.
pub fn stream_on(map: &chitin::node::shard_map::ShardMap, shard: &str, salt: &str) -> String {
    (0..200_000).map(|i| format!("{salt}-{i}")).find(|s| map.route_stream(s).unwrap().id == shard).unwrap()
}

/// Every entry of `stream` committed under the epoch that was current at its
/// commit, by the lease history (both times by the database clock); the
/// number of entries.
pub async fn assert_epochs_current(store: &chitin::lease::Store, stream: &str) -> Result<usize> {
    let entries = store.read(stream, 1, 100_000).await?;
    for e in &entries {
        let history = store.history(Some(&e.shard)).await?;
        let granted = history.iter().find(|h| h.epoch == e.epoch);
        anyhow::ensure!(granted.is_some(), "entry {} of {stream} has epoch {} that was never granted", e.seq, e.epoch);
        anyhow::ensure!(granted.unwrap().acquired_at <= e.committed_at, "entry {} committed before its epoch", e.seq);
        if let Some(next) = history.iter().find(|h| h.epoch > e.epoch) {
            anyhow::ensure!(
                e.committed_at <= next.acquired_at,
                "entry {} of {stream} committed at {} under epoch {}, after epoch {} was granted at {}",
                e.seq,
                e.committed_at,
                e.epoch,
                next.epoch,
                next.acquired_at
            );
        }
    }
    Ok(entries.len())
}

/// A cluster config with `nodes` nodes and one `journal` application of
/// `shards` equal shards (a power of two), each with a replica on every node.
/// The application's replication factor stays 3 (the replicas beyond it
/// are extra, as an operator may keep them).
pub fn cluster_config(nodes: &[(String, String)], shards: u32) -> String {
    let mut config: serde_json::Value =
        serde_json::from_str(&chitin::chaos::lab::cluster_config(nodes, shards, nodes.len())).expect("JSON");
    config["applications"][0]["replication_factor"] = 3.into();
    serde_json::to_string_pretty(&config).expect("JSON")
}

/// A test cluster: a fresh database, a config, and node processes.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub db: Option<TestDb>,
    pub config: PathBuf,
    pub nodes: Vec<NodeProc>,
    pub namespace: String,
    /// The private network, of a cluster built by [`Cluster::on_lan`];
    /// dropped after the nodes.
    pub lan: Option<Lan>,
}

/// A private network for a cluster whose nodes can be cut off: each node in
/// its own network namespace on a bridge, and a private Redis and database
/// server listening on the bridge too (the shared servers listen on
/// loopback, which a namespace cannot reach). Needs root and `ip netns`.
pub struct Lan {
    net: chitin::chaos::network::Network,
    redis_url: String,
    /// The database server's admin URL at its bridge address, which this
    /// process reaches as the nodes do.
    db_url: String,
    _redis: chitin::testkit::PrivateRedis,
    _server: chitin::chaos::lab::PrivateServer,
    /// The servers' data; removed last.
    _dir: tempfile::TempDir,
}

impl Lan {
    /// The bridge, a namespace for each of three nodes, and the servers.
    fn start(dialect: Dialect) -> Result<Lan> {
        use chitin::chaos::lab::PrivateServer;
        let dir = tempfile::tempdir()?;
        // Names the bridge and namespaces; distinct for runs side by side.
        let salt = uuid::Uuid::new_v4().as_u64_pair().0 >> 40;
        let net = chitin::chaos::network::Network::create(&format!("{salt:06x}"), 3, salt)?;
        let host = net.host();
        let redis = chitin::testkit::PrivateRedis::start(dir.path(), Some(&host))?;
        let server = match dialect {
            Dialect::Postgres => {
                PrivateServer::Postgres(chitin::testkit::PrivatePostgres::start(dir.path(), Some((&host, &net.subnet())), "")?)
            }
            Dialect::MySql => PrivateServer::Mariadb(chitin::testkit::PrivateMariadb::start(dir.path(), Some(&host))?),
            Dialect::Sqlite => bail!("a cluster shares a database server, not SQLite"),
        };
        let (db_url, _, _) = server.urls(&host);
        Ok(Lan { redis_url: redis.url(&host), db_url, net, _redis: redis, _server: server, _dir: dir })
    }
}

impl Cluster {
    /// Writes settings for `count` nodes (node-01 …) sharing a fresh
    /// database of `dialect`, with `edit` applied to each node's settings;
    /// starts the first `start` of them.
    pub async fn new(
        dialect: Dialect,
        count: usize,
        shards: u32,
        start: usize,
        edit: impl Fn(&str, &mut chitin::settings::Settings),
    ) -> Result<Cluster> {
        Cluster::on(TestDb::create(dialect).await?, count, shards, start, edit).await
    }

    /// [`Cluster::new`] on a given database (of a private server, say).
    pub async fn on(
        db: TestDb,
        count: usize,
        shards: u32,
        start: usize,
        edit: impl Fn(&str, &mut chitin::settings::Settings),
    ) -> Result<Cluster> {
        Cluster::build(db, None, count, shards, start, edit).await
    }

    /// [`Cluster::new`] with every node in its own network namespace (see
    /// [`Lan`]), so that [`Cluster::cut`] can cut one off.
    pub async fn on_lan(
        dialect: Dialect,
        count: usize,
        shards: u32,
        start: usize,
        edit: impl Fn(&str, &mut chitin::settings::Settings),
    ) -> Result<Cluster> {
        let lan = Lan::start(dialect)?;
        let db = TestDb::create_on(dialect, &lan.db_url).await?;
        Cluster::build(db, Some(lan), count, shards, start, edit).await
    }

    async fn build(
        db: TestDb,
        lan: Option<Lan>,
        count: usize,
        shards: u32,
        start: usize,
        edit: impl Fn(&str, &mut chitin::settings::Settings),
    ) -> Result<Cluster> {
        let dir = tempfile::tempdir()?;
        // The config always names three nodes, so that a cluster started
        // with fewer has replicas waiting for the rest.
        let ports = free_ports(2 * count.max(3))?;
        let host = |k: usize| lan.as_ref().map_or("127.0.0.1".to_string(), |l| l.net.node_ip(k));
        let names: Vec<(String, String, String)> = (0..count.max(3))
            .map(|k| {
                let (api, metrics) = (ports[2 * k], ports[2 * k + 1]);
                (format!("node-{:02}", k + 1), format!("{}:{api}", host(k)), format!("{}:{metrics}", host(k)))
            })
            .collect();
        let config = dir.path().join("cluster_config.json");
        let pairs: Vec<(String, String)> = names.iter().map(|(n, a, _)| (n.clone(), a.clone())).collect();
        std::fs::write(&config, cluster_config(&pairs, shards))?;
        let namespace = format!("chitin-test-{}", uuid::Uuid::new_v4().simple());
        let shared = ClusterShared {
            redis_url: lan.as_ref().map_or("redis://127.0.0.1:6379", |l| &l.redis_url),
            namespace: &namespace,
            database_url: &db.url,
            ttl: TTL,
            renew: RENEW,
        };
        let mut nodes = Vec::new();
        for (k, (name, api, metrics)) in names.into_iter().take(count).enumerate() {
            let node = ClusterNode {
                name: &name,
                api: &api,
                metrics: &metrics,
                data_dir: dir.path().join(&name),
                config_file: Some(&config),
            };
            let mut s = node_settings::cluster_node(&node, &shared);
            // Off loopback only on the lan's private bridge.
            s.api.insecure_listen = lan.is_some();
            edit(&name, &mut s);
            let settings = dir.path().join(format!("{name}.toml"));
            node_settings::write(&settings, &s)?;
            let log = dir.path().join(format!("{name}.log"));
            let ns = lan.as_ref().map(|l| l.net.namespace(k).to_string());
            nodes.push(NodeProc::new(CHITIN, name, api, metrics, settings, log).in_namespace(ns));
        }
        let mut cluster = Cluster { dir, db: Some(db), config, nodes, namespace, lan };
        for node in &mut cluster.nodes[..start] {
            node.start()?;
        }
        for node in &mut cluster.nodes[..start] {
            node.wait_ready(Duration::from_secs(60)).await?;
        }
        Ok(cluster)
    }

    /// Cuts node `i` off the network of a [`Cluster::on_lan`]: it reaches
    /// nothing and nothing reaches it, while its process runs on.
    pub fn cut(&self, i: usize) -> Result<()> {
        Ok(self.lan.as_ref().expect("a cluster on a lan").net.cut(i)?)
    }

    /// Undoes [`Cluster::cut`].
    pub fn heal(&self, i: usize) -> Result<()> {
        Ok(self.lan.as_ref().expect("a cluster on a lan").net.heal(i)?)
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
            if let Ok(s) = self.status().await
                && s.unowned.is_empty()
                && !s.leases.is_empty()
            {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("shards still unowned after {within:?}: {:?}\n{}", self.status().await.map(|s| s.unowned), self.logs());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every shard is owned and the holders stay the same for
    /// two seconds, three looks (handoffs to nodes that started later have
    /// finished: a round's capped handoffs can leave two looks a second
    /// apart equal while more are due).
    pub async fn wait_settled(&mut self, within: Duration) -> Result<proto::StatusResponse> {
        let deadline = Instant::now() + within;
        let (mut previous, mut same): (Option<Vec<(String, String)>>, u32) = (None, 0);
        loop {
            let s = self.wait_all_owned(within).await?;
            let holders: Vec<(String, String)> = s.leases.iter().map(|l| (l.shard.clone(), l.holder.clone())).collect();
            same = if previous.as_ref() == Some(&holders) { same + 1 } else { 0 };
            if same == 2 {
                return Ok(s);
            }
            if Instant::now() > deadline {
                bail!("the cluster did not settle within {within:?}: {holders:?}\n{}", self.logs());
            }
            previous = Some(holders);
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Waits until every node runs the config file's version and every
    /// shard of that config has a live holder among its replica nodes there
    /// (the handoffs a rollout's replica moves cause have finished).
    pub async fn wait_serving_config(&self, within: Duration) -> Result<proto::StatusResponse> {
        let deadline = Instant::now() + within;
        let version = chitin::topology::ClusterConfig::from_json(&std::fs::read_to_string(&self.config)?)?.version;
        let map = self.shard_map();
        loop {
            let mut behind = Vec::new();
            for n in &self.nodes {
                match wait_admin(&n.api, Duration::from_secs(5)).await {
                    Ok(r) if r.config_version == version => {}
                    Ok(r) => behind.push(format!("{} at version {}", n.name, r.config_version)),
                    Err(e) => behind.push(format!("{}: {e}", n.name)),
                }
            }
            if let Ok(s) = self.status().await {
                for shard in map.shards() {
                    match s.leases.iter().find(|l| l.shard == shard.id) {
                        Some(l) if shard.replica_nodes.contains(&l.holder) => {}
                        other => behind.push(format!(
                            "{} held by {:?}, replicas {:?}",
                            shard.id,
                            other.map(|l| &l.holder),
                            shard.replica_nodes
                        )),
                    }
                }
                if behind.is_empty() && s.unowned.is_empty() {
                    return Ok(s);
                }
            }
            if Instant::now() > deadline {
                bail!("the nodes do not serve version {version} within {within:?}: {behind:?}\n{}", self.logs());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
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

    /// The shard map of the cluster's config file.
    pub fn shard_map(&self) -> chitin::node::shard_map::ShardMap {
        let config = chitin::topology::ClusterConfig::from_json(&std::fs::read_to_string(&self.config).unwrap()).unwrap();
        chitin::node::shard_map::ShardMap::from_config(&config)
    }

    /// A store on the cluster's database, to check it directly.
    pub async fn store(&self) -> chitin::lease::Store {
        let options = chitin::lease::StoreOptions { lease_ttl: TTL, liveness_timeout: TTL, ..Default::default() };
        chitin::lease::Store::connect_with(&self.db.as_ref().unwrap().url, options).await.unwrap()
    }

    pub fn config_path(&self) -> &Path {
        &self.config
    }
}
