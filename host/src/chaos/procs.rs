//! The nodes of a chaos run: real `chitin node` processes on loopback, or
//! each in its own network namespace on a private bridge when the run can
//! cut the network (root and `ip netns` available).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A private bridge `chb<run>` at `10.<a>.<b>.1/24` with one namespace per
/// node; node `k` is `10.<a>.<b>.<10+k>`. Nodes reach each other over the
/// bridge (no forwarding needed) and the run's Redis and PostgreSQL at the
/// bridge address. Removed when dropped.
pub struct Network {
    run: String,
    prefix: String,
    namespaces: Vec<String>,
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip").args(args).output().context("cannot run `ip` (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Network {
    /// Builds the bridge and `nodes` namespaces; an error says why the
    /// machine does not allow it (the run then skips network cuts).
    pub fn create(run: &str, nodes: usize, salt: u64) -> Result<Network> {
        let prefix = format!("10.{}.{}", 100 + salt % 100, (salt >> 8) % 250 + 1);
        let mut net = Network { run: run.to_string(), prefix, namespaces: Vec::new() };
        let bridge = net.bridge();
        ip(&["link", "add", &bridge, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", net.host()), "dev", &bridge])?;
        ip(&["link", "set", &bridge, "up"])?;
        for k in 0..nodes {
            let ns = format!("chitin-{run}-{k}");
            ip(&["netns", "add", &ns])?;
            net.namespaces.push(ns.clone());
            let (outer, inner) = (net.veth(k), format!("cvi{run}{k}"));
            ip(&["link", "add", &outer, "type", "veth", "peer", "name", &inner])?;
            ip(&["link", "set", &inner, "netns", &ns])?;
            ip(&["link", "set", &outer, "master", &bridge])?;
            ip(&["link", "set", &outer, "up"])?;
            ip(&["-n", &ns, "addr", "add", &format!("{}/24", net.node_ip(k)), "dev", &inner])?;
            ip(&["-n", &ns, "link", "set", &inner, "up"])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        }
        Ok(net)
    }

    fn bridge(&self) -> String {
        format!("chb{}", self.run)
    }

    fn veth(&self, k: usize) -> String {
        format!("cvo{}{k}", self.run)
    }

    /// The servers' address on the bridge.
    pub fn host(&self) -> String {
        format!("{}.1", self.prefix)
    }

    pub fn subnet(&self) -> String {
        format!("{}.0/24", self.prefix)
    }

    pub fn node_ip(&self, k: usize) -> String {
        format!("{}.{}", self.prefix, 10 + k)
    }

    pub fn namespace(&self, k: usize) -> &str {
        &self.namespaces[k]
    }

    /// Cuts node `k` off: its link to the bridge goes down, so it reaches
    /// nothing and nothing reaches it.
    pub fn cut(&self, k: usize) -> Result<()> {
        ip(&["link", "set", &self.veth(k), "down"])
    }

    pub fn heal(&self, k: usize) -> Result<()> {
        ip(&["link", "set", &self.veth(k), "up"])
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = ip(&["netns", "del", ns]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

/// One `chitin node` process of the run.
pub struct NodeProc {
    pub name: String,
    /// gRPC address (host:port).
    pub api: String,
    /// HTTP address of /readyz and /metrics.
    pub http: String,
    pub settings: PathBuf,
    pub log: PathBuf,
    /// Run inside this network namespace.
    pub namespace: Option<String>,
    child: Option<Child>,
}

impl NodeProc {
    pub fn new(name: String, api: String, http: String, dir: &Path, namespace: Option<String>) -> NodeProc {
        NodeProc {
            settings: dir.join(format!("{name}.toml")),
            log: dir.join(format!("{name}.log")),
            name,
            api,
            http,
            namespace,
            child: None,
        }
    }

    pub fn start(&mut self, exe: &Path) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let mut cmd = match &self.namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(exe);
                c
            }
            None => Command::new(exe),
        };
        let child = cmd
            .args(["node", "--settings"])
            .arg(&self.settings)
            .env("RUST_LOG", "info,sqlx=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", exe.display()))?;
        self.child = Some(child);
        Ok(())
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    fn signal(&self, sig: &str) -> Result<()> {
        let pid = self.child.as_ref().context("node not running")?.id();
        let status = Command::new("kill").args([sig, &pid.to_string()]).status()?;
        if !status.success() {
            bail!("kill {sig} {pid} ({}) failed", self.name);
        }
        Ok(())
    }

    pub fn kill9(&mut self) -> Result<()> {
        self.signal("-KILL")?;
        if let Some(mut c) = self.child.take() {
            c.wait()?;
        }
        Ok(())
    }

    pub fn pause(&self) -> Result<()> {
        self.signal("-STOP")
    }

    pub fn resume(&self) -> Result<()> {
        self.signal("-CONT")
    }

    /// SIGTERM (drain, deregister, exit) and wait; SIGKILL after `within`.
    pub fn terminate(&mut self, within: Duration) -> Result<bool> {
        self.signal("-TERM")?;
        let mut child = self.child.take().context("node not running")?;
        let deadline = Instant::now() + within;
        loop {
            if child.try_wait()?.is_some() {
                return Ok(true);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Ok(false);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
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

/// `GET path` over HTTP/1.0: the status code (0 when unreachable).
pub async fn http_status(addr: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await.ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf).split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(2), fetch).await.ok().flatten().unwrap_or(0)
}

/// A node's settings: cluster mode, the run's lease timing and servers.
pub struct NodeSettings<'a> {
    pub data_dir: &'a Path,
    pub config_file: &'a Path,
    pub redis_url: &'a str,
    pub namespace: &'a str,
    pub database_url: &'a str,
    pub ttl: Duration,
    pub renew: Duration,
}

impl NodeSettings<'_> {
    pub fn write(&self, node: &NodeProc) -> Result<()> {
        let text = format!(
            "[node]\ndata_dir = {data:?}\n\n\
             [cluster]\nenabled = true\ninstance_id = {name:?}\nconfig_file = {config:?}\n\
             redis_url = {redis:?}\nnamespace = {ns:?}\nheartbeat_interval_secs = 1\nliveness_timeout_secs = 3\n\n\
             [database]\nurl = {db:?}\n\n\
             [leases]\nttl_secs = {ttl}\nrenew_interval_secs = {renew}\n\n\
             [api]\nlisten = {api:?}\n\n[metrics]\nlisten = {http:?}\n",
            data = self.data_dir.join(&node.name),
            name = node.name,
            config = self.config_file,
            redis = self.redis_url,
            ns = self.namespace,
            db = self.database_url,
            ttl = self.ttl.as_secs_f64(),
            renew = self.renew.as_secs_f64(),
            api = node.api,
            http = node.http,
        );
        std::fs::write(&node.settings, text)?;
        Ok(())
    }
}
