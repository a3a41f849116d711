//! Private servers on free ports, so that a run can stop and restart them
//! without touching anyone else's: a `redis-server` that keeps nothing on
//! disk, a PostgreSQL cluster and a MariaDB server under a directory of the
//! caller's; Redis and PostgreSQL can speak TLS only, with a certificate the
//! caller made.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::KitError;
use super::ports::{free_port, wait_for_port};

/// A private `redis-server` that keeps nothing on disk.
pub struct PrivateRedis {
    pub port: u16,
    binds: Vec<String>,
    log: PathBuf,
    /// Arguments after the defaults (a cluster node's, a replica's), or a
    /// Sentinel's configuration file.
    role: Role,
    /// The certificate and key files of a TLS-only server.
    tls: Option<(PathBuf, PathBuf)>,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts on a free port, listening on loopback and on `extra_bind`;
    /// its output goes to `dir/redis.log`.
    pub fn start(dir: &Path, extra_bind: Option<&str>) -> Result<PrivateRedis, KitError> {
        let mut redis = PrivateRedis::stopped(dir, extra_bind)?;
        redis.up()?;
        Ok(redis)
    }

    /// The same, on a port chosen now but not started until [`PrivateRedis::up`]:
    /// for clients that must start while their Redis is down.
    pub fn stopped(dir: &Path, extra_bind: Option<&str>) -> Result<PrivateRedis, KitError> {
        let mut binds = vec!["127.0.0.1".to_string()];
        binds.extend(extra_bind.map(str::to_string));
        Ok(PrivateRedis { port: free_port()?, binds, log: dir.join("redis.log"), role: Role::Plain, tls: None, child: None })
    }

    /// Starts on a free port on loopback, speaking TLS only with the
    /// certificate chain and key of these PEM files (clients need no
    /// certificate of their own).
    pub fn start_tls(dir: &Path, cert: &Path, key: &Path) -> Result<PrivateRedis, KitError> {
        let mut redis = PrivateRedis::stopped(dir, None)?;
        redis.tls = Some((cert.to_owned(), key.to_owned()));
        redis.up()?;
        Ok(redis)
    }

    /// `redis://host:port`, or `rediss://` for a TLS server.
    pub fn url(&self, host: &str) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://{host}:{}", self.port)
    }

    /// Starts the server again on the same port (empty: it kept nothing).
    pub fn up(&mut self) -> Result<(), KitError> {
        let (log, err_log) = log_files(&self.log)?;
        let mut cmd = Command::new("redis-server");
        // Out of the terminal's process group, like the nodes (see NodeProc::start).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        if let Role::Sentinel(conf) = &self.role {
            // A Sentinel's configuration file comes first (it rewrites it).
            cmd.arg(conf).arg("--sentinel");
        }
        let port = self.port.to_string();
        match &self.tls {
            Some((cert, key)) => cmd
                .args(["--port", "0", "--tls-port", &port, "--tls-auth-clients", "no", "--tls-cert-file"])
                .arg(cert)
                .arg("--tls-key-file")
                .arg(key),
            None => cmd.args(["--port", &port]),
        };
        // Its own working directory: a replica writes the master's
        // snapshot there, and a server loads one it finds there at start.
        let data = self.log.with_extension("data");
        std::fs::create_dir_all(&data).map_err(KitError::io(format!("create {}", data.display())))?;
        let child = cmd
            .arg("--dir")
            .arg(&data)
            .arg("--bind")
            .args(&self.binds)
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .args(match &self.role {
                Role::Node(args) => args.as_slice(),
                _ => &[],
            })
            .stdout(log)
            .stderr(err_log)
            .spawn()
            .map_err(|source| KitError::Spawn {
                program: "redis-server".into(),
                hint: " (is it installed and on PATH?)",
                source,
            })?;
        self.child = Some(child);
        wait_for_port(
            &format!("127.0.0.1:{}", self.port),
            Duration::from_secs(10),
            &format!("; its log is {}", self.log.display()),
        )
    }

    /// SIGKILL: what a crashed Redis looks like.
    pub fn down(&mut self) {
        kill(&mut self.child);
    }

    /// The process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.down();
    }
}

/// What a [`PrivateRedis`] runs as.
enum Role {
    Plain,
    /// A data node with these extra arguments.
    Node(Vec<String>),
    /// A Sentinel with this configuration file.
    Sentinel(PathBuf),
}

impl PrivateRedis {
    /// A data node named `name` (its log `dir/{name}.log`) with `args`
    /// after the defaults.
    fn node(dir: &Path, name: &str, args: Vec<String>) -> Result<PrivateRedis, KitError> {
        let mut redis = PrivateRedis::stopped(dir, None)?;
        redis.log = dir.join(format!("{name}.log"));
        redis.role = Role::Node(args);
        redis.up()?;
        Ok(redis)
    }

    /// `redis-cli -p {port} {args}`, its output trimmed; fails on an error
    /// reply.
    pub fn cli(&self, args: &[&str]) -> Result<String, KitError> {
        redis_cli(&[&["-p", &self.port.to_string()], args].concat())
    }
}

/// Runs `redis-cli`; its output, or the tool's failure.
pub fn redis_cli(args: &[&str]) -> Result<String, KitError> {
    let out = Command::new("redis-cli").args(args).output().map_err(|source| KitError::Spawn {
        program: "redis-cli".into(),
        hint: " (is it installed and on PATH?)",
        source,
    })?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.starts_with("ERR") || text.starts_with("(error)") {
        return Err(KitError::Tool {
            command: format!("redis-cli {}", args.join(" ")),
            output: format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(text)
}

/// Polls `ready` every 100 ms for up to `within`; [`KitError::NotReady`]
/// naming `what` and the last answer otherwise.
fn wait_until(what: &str, within: Duration, mut ready: impl FnMut() -> Result<bool, String>) -> Result<(), KitError> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let last = match ready() {
            Ok(true) => return Ok(()),
            Ok(false) => String::new(),
            Err(e) => e,
        };
        if std::time::Instant::now() >= deadline {
            return Err(KitError::NotReady { name: what.to_string(), within, log_tail: last });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A private Redis Cluster: `masters` masters (the slots split evenly),
/// each with `replicas` replicas, made by `redis-cli --cluster create`.
pub struct PrivateRedisCluster {
    /// Every node, masters first as `--cluster create` paired them.
    pub nodes: Vec<PrivateRedis>,
}

impl PrivateRedisCluster {
    pub fn start(dir: &Path, masters: usize, replicas: usize) -> Result<PrivateRedisCluster, KitError> {
        let mut nodes = Vec::new();
        for i in 0..masters * (1 + replicas) {
            let conf = dir.join(format!("cluster-node-{i}.conf"));
            // The bus port is its own free port: the default (the port +
            // 10,000) lands in the kernel's ephemeral range, where an
            // outgoing connection may hold it (see super::ports).
            let bus = free_port()?.to_string();
            let args = ["--cluster-enabled", "yes", "--cluster-node-timeout", "1000", "--cluster-port", &bus];
            let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
            args.extend(["--cluster-config-file".to_string(), conf.display().to_string()]);
            nodes.push(PrivateRedis::node(dir, &format!("cluster-node-{i}"), args)?);
        }
        let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let replicas = replicas.to_string();
        let mut create = vec!["--cluster", "create"];
        create.extend(addrs.iter().map(String::as_str));
        create.extend(["--cluster-replicas", &replicas, "--cluster-yes"]);
        redis_cli(&create)?;
        let cluster = PrivateRedisCluster { nodes };
        for n in &cluster.nodes {
            wait_until(&format!("Redis Cluster node :{}", n.port), Duration::from_secs(30), || {
                let info = n.cli(&["CLUSTER", "INFO"]).map_err(|e| e.to_string())?;
                Ok(info.contains("cluster_state:ok"))
            })?;
        }
        Ok(cluster)
    }

    /// `redis+cluster://127.0.0.1:p,…` naming every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// The master that holds `key`'s hash slot.
    pub fn master_of(&self, key: &str) -> Result<&PrivateRedis, KitError> {
        let slot: u16 = self.nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", key])?
            .parse()
            .map_err(|_| KitError::Tool { command: "CLUSTER KEYSLOT".into(), output: "not a number".into() })?;
        for n in &self.nodes {
            if n.cli(&["ROLE"])?.starts_with("master") && owns(&n.cli(&["CLUSTER", "NODES"])?, n.port, slot) {
                return Ok(n);
            }
        }
        Err(KitError::Tool { command: format!("find the master of slot {slot}"), output: "no node owns it".into() })
    }
}

/// Whether the `myself` line of `CLUSTER NODES` (node on `port`) lists `slot`.
fn owns(nodes: &str, port: u16, slot: u16) -> bool {
    let mine = nodes.lines().find(|l| l.contains("myself") && l.contains(&format!(":{port}@")));
    mine.is_some_and(|line| {
        line.split_whitespace().skip(8).any(|range| {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            matches!((a.parse::<u16>(), b.parse::<u16>()), (Ok(a), Ok(b)) if (a..=b).contains(&slot))
        })
    })
}

/// A master, its replica and one Sentinel watching them as `mymaster`
/// (down after 1 s of silence, so a failover takes a few seconds).
pub struct PrivateSentinel {
    pub master: PrivateRedis,
    pub replica: PrivateRedis,
    pub sentinel: PrivateRedis,
}

impl PrivateSentinel {
    /// The name the Sentinel monitors the master under.
    pub const MASTER: &str = "mymaster";

    pub fn start(dir: &Path) -> Result<PrivateSentinel, KitError> {
        let master = PrivateRedis::node(dir, "sentinel-master", Vec::new())?;
        let replicaof = vec!["--replicaof".to_string(), "127.0.0.1".to_string(), master.port.to_string()];
        let replica = PrivateRedis::node(dir, "sentinel-replica", replicaof)?;
        wait_until("the replica's link to its master", Duration::from_secs(20), || {
            Ok(replica.cli(&["INFO", "replication"]).map_err(|e| e.to_string())?.contains("master_link_status:up"))
        })?;
        let conf = dir.join("sentinel.conf");
        let text = format!(
            "sentinel monitor {m} 127.0.0.1 {port} 1\n\
             sentinel down-after-milliseconds {m} 1000\n\
             sentinel failover-timeout {m} 3000\n",
            m = Self::MASTER,
            port = master.port
        );
        std::fs::write(&conf, text).map_err(KitError::io(format!("write {}", conf.display())))?;
        let mut sentinel = PrivateRedis::stopped(dir, None)?;
        sentinel.log = dir.join("sentinel.log");
        sentinel.role = Role::Sentinel(conf);
        sentinel.up()?;
        let s = PrivateSentinel { master, replica, sentinel };
        s.wait_for_replica()?;
        Ok(s)
    }

    /// `redis+sentinel://127.0.0.1:{sentinel}/mymaster`, with `before`
    /// (`host:port` of Sentinels to list first) in front.
    pub fn url(&self, before: &[&str]) -> String {
        let mut hosts: Vec<String> = before.iter().map(|h| h.to_string()).collect();
        hosts.push(format!("127.0.0.1:{}", self.sentinel.port));
        format!("redis+sentinel://{}/{}", hosts.join(","), Self::MASTER)
    }

    /// The port the Sentinel names as the master's now.
    pub fn master_port(&self) -> Result<u16, KitError> {
        let addr = self.sentinel.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", Self::MASTER])?;
        addr.lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
            .ok_or(KitError::Tool { command: "SENTINEL GET-MASTER-ADDR-BY-NAME".into(), output: addr })
    }

    /// Until the Sentinel knows a connected replica of the current master
    /// that it could promote (after a failover, the old master rejoins as
    /// one).
    pub fn wait_for_replica(&self) -> Result<(), KitError> {
        wait_until("a replica the Sentinel could promote", Duration::from_secs(30), || {
            let master = self.master_port().map_err(|e| e.to_string())?;
            let replica = [&self.master, &self.replica].into_iter().find(|r| r.port != master).expect("two servers");
            let info = replica.cli(&["INFO", "replication"]).map_err(|e| e.to_string())?;
            let linked = info.contains(&format!("master_port:{master}")) && info.contains("master_link_status:up");
            let replicas = self.sentinel.cli(&["SENTINEL", "REPLICAS", Self::MASTER]).map_err(|e| e.to_string())?;
            Ok(linked && replicas.contains(&replica.port.to_string()) && !replicas.contains("disconnected"))
        })
    }

    /// SIGKILL the server on `port` (the master or the replica).
    pub fn kill(&mut self, port: u16) {
        for r in [&mut self.master, &mut self.replica] {
            if r.port == port {
                r.down();
            }
        }
    }

    /// Waits until the Sentinel names a master other than `old_port` and
    /// that master answers as one.
    pub fn wait_failed_over(&self, old_port: u16, within: Duration) -> Result<u16, KitError> {
        let mut new = old_port;
        wait_until("a Sentinel failover", within, || {
            new = self.master_port().map_err(|e| e.to_string())?;
            Ok(new != old_port && redis_cli(&["-p", &new.to_string(), "ROLE"]).is_ok_and(|r| r.starts_with("master")))
        })?;
        Ok(new)
    }
}

/// Runs a PostgreSQL tool, as user `postgres` when we are root (initdb and
/// postgres refuse to run as root).
/// Runs a PostgreSQL tool (as `postgres` when this is root); its stdout.
fn pg_tool(bin: &Path, tool: &str, args: &[&str]) -> Result<String, KitError> {
    let exe = bin.join(tool);
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    // The server pg_ctl starts stays out of the terminal's process group.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let out =
        cmd.args(args).output().map_err(|source| KitError::Spawn { program: exe.display().to_string(), hint: "", source })?;
    if !out.status.success() {
        return Err(KitError::Tool {
            command: format!("{tool} {args:?}"),
            output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

/// The newest PostgreSQL server binaries: `$PG_BIN`, else the highest
/// version under /usr/lib/postgresql.
fn pg_bin() -> Result<PathBuf, KitError> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let entries = std::fs::read_dir("/usr/lib/postgresql").map_err(|e| {
        KitError::NoPostgres(format!("no /usr/lib/postgresql ({e}): set PG_BIN to the directory holding initdb and pg_ctl"))
    })?;
    let mut dirs: Vec<(u32, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p): &(u32, PathBuf)| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, p)| p).ok_or_else(|| KitError::NoPostgres("no initdb under /usr/lib/postgresql/*/bin: set PG_BIN".into()))
}

fn utf8(path: &Path) -> Result<&str, KitError> {
    path.to_str().ok_or_else(|| KitError::Io {
        what: format!("use {}", path.display()),
        source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is not UTF-8"),
    })
}

/// The `application_name` of [`PrivatePostgres::start_standby`]'s
/// standby, which the primary names as its synchronous one.
const STANDBY: &str = "standby";

/// A private PostgreSQL cluster that a run restarts (and the start checks'
/// tests put in bad states); its files live under the given directory.
pub struct PrivatePostgres {
    bin: PathBuf,
    data: PathBuf,
    pub port: u16,
    running: bool,
}

impl PrivatePostgres {
    /// initdb + start on a free port under `dir`, listening on loopback and,
    /// with `extra = (address, cidr)`, on `address`, trusting `cidr`;
    /// `extra_conf` is appended to postgresql.conf.
    pub fn start(dir: &Path, extra: Option<(&str, &str)>, extra_conf: &str) -> Result<PrivatePostgres, KitError> {
        PrivatePostgres::start_with(dir, extra, extra_conf, None)
    }

    /// [`PrivatePostgres::start`] on loopback with TLS on (`ssl = on`),
    /// serving the certificate chain and key of these PEM files.
    pub fn start_tls(dir: &Path, cert: &Path, key: &Path) -> Result<PrivatePostgres, KitError> {
        PrivatePostgres::start_with(dir, None, "", Some((cert, key)))
    }

    /// Where [`PrivatePostgres::start`] keeps a server started under `dir`.
    pub fn base(dir: &Path) -> PathBuf {
        dir.join("postgres")
    }

    fn start_with(
        dir: &Path,
        extra: Option<(&str, &str)>,
        extra_conf: &str,
        tls: Option<(&Path, &Path)>,
    ) -> Result<PrivatePostgres, KitError> {
        let bin = pg_bin()?;
        let base = PrivatePostgres::make_base(dir)?;
        let data = base.join("data");
        pg_tool(&bin, "initdb", &["-D", utf8(&data)?, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]).map_err(
            |e| KitError::Tool {
                command: format!(
                    "initdb in {} (as root it runs as `postgres`, which must be able to reach that directory)",
                    base.display()
                ),
                output: e.to_string(),
            },
        )?;
        let port = free_port()?;
        let tls_conf = match tls {
            Some((cert, key)) => {
                // The server reads them as its own user, and refuses a key
                // that others may read.
                let owner = std::fs::metadata(&data).map_err(KitError::io(format!("stat {}", data.display())))?;
                for (from, name, mode) in [(cert, "server.crt", 0o644), (key, "server.key", 0o600)] {
                    let to = data.join(name);
                    std::fs::copy(from, &to).map_err(KitError::io(format!("copy {} to {}", from.display(), to.display())))?;
                    use std::os::unix::fs::MetadataExt;
                    std::os::unix::fs::chown(&to, Some(owner.uid()), Some(owner.gid()))
                        .map_err(KitError::io(format!("chown {}", to.display())))?;
                    std::fs::set_permissions(&to, std::os::unix::fs::PermissionsExt::from_mode(mode))
                        .map_err(KitError::io(format!("chmod {}", to.display())))?;
                }
                "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
            }
            None => "",
        };
        let listen = match extra {
            Some((addr, _)) => format!("127.0.0.1,{addr}"),
            None => "127.0.0.1".into(),
        };
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '{listen}'\nunix_socket_directories = '{}'\n\
             shared_buffers = 32MB\nmax_connections = 100\n{tls_conf}{extra_conf}\n",
            base.display()
        );
        append(&data.join("postgresql.conf"), &conf)?;
        if let Some((_, net)) = extra {
            append(&data.join("pg_hba.conf"), &format!("\nhost all all {net} trust\n"))?;
        }
        let mut pg = PrivatePostgres { bin, data, port, running: false };
        pg.up()?;
        Ok(pg)
    }

    /// [`PrivatePostgres::base`], made and opened to `postgres`, which
    /// initdb and pg_basebackup run as.
    fn make_base(dir: &Path) -> Result<PathBuf, KitError> {
        let base = PrivatePostgres::base(dir);
        std::fs::create_dir_all(&base).map_err(KitError::io(format!("create {}", base.display())))?;
        for d in [dir, base.as_path()] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .map_err(KitError::io(format!("open up {}", d.display())))?;
        }
        Ok(base)
    }

    /// A primary that acknowledges a commit only once its synchronous
    /// standby ([`PrivatePostgres::start_standby`]) has it.
    pub fn start_primary(dir: &Path) -> Result<PrivatePostgres, KitError> {
        PrivatePostgres::start(
            dir,
            None,
            &format!(
                "wal_level = replica\nmax_wal_senders = 4\nsynchronous_commit = on\nsynchronous_standby_names = '{STANDBY}'\n"
            ),
        )
    }

    /// A synchronous streaming standby of `primary` under `dir`, as a
    /// failover manager keeps one: a base backup, streaming as
    /// `application_name = standby`, on a free port; returned once the
    /// primary reports it `sync`. It waits for no standby of its own once
    /// promoted (its `synchronous_standby_names` is empty), as a failover
    /// manager reconfigures a promoted node until a new standby joins.
    pub fn start_standby(dir: &Path, primary: &PrivatePostgres) -> Result<PrivatePostgres, KitError> {
        let bin = pg_bin()?;
        let base = PrivatePostgres::make_base(dir)?;
        let data = base.join("data");
        let from = primary.port.to_string();
        pg_tool(&bin, "pg_basebackup", &["-h", "127.0.0.1", "-p", &from, "-U", "postgres", "-D", utf8(&data)?, "-X", "stream"])?;
        let port = free_port()?;
        append(
            &data.join("postgresql.conf"),
            &format!(
                "\nport = {port}\nunix_socket_directories = '{}'\nsynchronous_standby_names = ''\n\
                 primary_conninfo = 'host=127.0.0.1 port={from} user=postgres application_name={STANDBY}'\n",
                base.display()
            ),
        )?;
        let signal = data.join("standby.signal");
        std::fs::write(&signal, "").map_err(KitError::io(format!("write {}", signal.display())))?;
        let mut standby = PrivatePostgres { bin, data, port, running: false };
        standby.up()?;
        let query = format!("SELECT sync_state FROM pg_stat_replication WHERE application_name = '{STANDBY}'");
        wait_until("the standby, confirmed synchronous by the primary", Duration::from_secs(60), || {
            primary.psql(&query).map(|state| state.trim() == "sync").map_err(|e| e.to_string())
        })?;
        Ok(standby)
    }

    /// Promotes this standby (`pg_ctl promote`), waiting until it takes writes.
    pub fn promote(&self) -> Result<(), KitError> {
        pg_tool(&self.bin, "pg_ctl", &["-D", utf8(&self.data)?, "-w", "-t", "60", "promote"]).map(drop)
    }

    /// The unaligned, tuples-only output of `sql` run by `psql` as `postgres`.
    pub fn psql(&self, sql: &str) -> Result<String, KitError> {
        pg_tool(&self.bin, "psql", &["-h", "127.0.0.1", "-p", &self.port.to_string(), "-U", "postgres", "-tAc", sql])
    }

    /// `postgres://postgres@host:port/postgres`.
    pub fn url(&self, host: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres", self.port)
    }

    /// The cluster's data directory (for `standby.signal` and the like).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// Starts the server (again), waiting until it accepts connections.
    pub fn up(&mut self) -> Result<(), KitError> {
        let log = self.data.parent().unwrap_or(&self.data).join("server.log");
        pg_tool(&self.bin, "pg_ctl", &["-D", utf8(&self.data)?, "-l", utf8(&log)?, "-w", "-t", "60", "start"])?;
        self.running = true;
        Ok(())
    }

    /// Stops the server and every backend (SIGSTOP) for `how_long`, then
    /// lets them go on: a database stall (a slow disk, a frozen VM) as its
    /// clients meet it: every statement in flight or sent meanwhile waits.
    pub fn stall(&self, how_long: Duration) -> Result<(), KitError> {
        let pid_file = self.data.join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).map_err(KitError::io(format!("read {}", pid_file.display())))?;
        let postmaster = text.lines().next().unwrap_or_default().trim().to_owned();
        // A signal that reached nothing would make the stall a no-op and its
        // test pass for nothing: every step must succeed (the postmaster
        // always has children: checkpointer, writer, the clients' backends).
        let run = |program: &str, args: &[&str]| {
            let status = Command::new(program).args(args).status().map_err(KitError::io(format!("{program} {args:?}")))?;
            if status.success() {
                Ok(())
            } else {
                Err(KitError::Tool { command: format!("{program} {}", args.join(" ")), output: status.to_string() })
            }
        };
        run("pkill", &["-STOP", "-P", &postmaster])?;
        run("kill", &["-STOP", &postmaster])?;
        std::thread::sleep(how_long);
        run("kill", &["-CONT", &postmaster])?;
        run("pkill", &["-CONT", "-P", &postmaster])
    }

    /// Stops at once, without a checkpoint: what a crash looks like to the
    /// nodes; what was committed must survive it.
    pub fn down(&mut self) -> Result<(), KitError> {
        if self.running {
            pg_tool(&self.bin, "pg_ctl", &["-D", utf8(&self.data)?, "-m", "immediate", "-w", "stop"])?;
            self.running = false;
        }
        Ok(())
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.down();
    }
}

/// A private MariaDB server under a directory of the caller's, which a run
/// crashes and restarts, with an empty database `chitin`. `root` may connect
/// from anywhere without a password, so that nodes in network namespaces
/// reach it.
pub struct PrivateMariadb {
    data: PathBuf,
    base: PathBuf,
    pub port: u16,
    binds: String,
    child: Option<Child>,
}

impl PrivateMariadb {
    /// Where [`PrivateMariadb::start`] keeps a server started under `dir`.
    pub fn base(dir: &Path) -> PathBuf {
        dir.join("mariadb")
    }

    /// `mariadb-install-db` + start on a free port under `dir/mariadb`,
    /// listening on loopback and on `extra_bind`; its log is
    /// `dir/mariadb/server.log`.
    pub fn start(dir: &Path, extra_bind: Option<&str>) -> Result<PrivateMariadb, KitError> {
        let base = PrivateMariadb::base(dir);
        let data = base.join("data");
        std::fs::create_dir_all(&base).map_err(KitError::io(format!("create {}", base.display())))?;
        let mut install = Command::new("mariadb-install-db");
        install
            .args(["--no-defaults", "--auth-root-authentication-method=normal", "--skip-test-db"])
            .arg(format!("--datadir={}", utf8(&data)?));
        if is_root() {
            install.arg("--user=root");
        }
        let out = install.output().map_err(|source| KitError::Spawn {
            program: "mariadb-install-db".into(),
            hint: " (is MariaDB's server package installed?)",
            source,
        })?;
        if !out.status.success() {
            return Err(KitError::Tool {
                command: format!("mariadb-install-db in {}", base.display()),
                output: format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
            });
        }
        // Run at every start: what it makes lives in the data, so it is idempotent.
        let init = "CREATE USER IF NOT EXISTS 'root'@'%';\nGRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;\n\
                    CREATE DATABASE IF NOT EXISTS chitin;\n";
        std::fs::write(base.join("init.sql"), init)
            .map_err(KitError::io(format!("write {}", base.join("init.sql").display())))?;
        let binds = match extra_bind {
            Some(addr) => format!("127.0.0.1,{addr}"),
            None => "127.0.0.1".into(),
        };
        let mut db = PrivateMariadb { data, base, port: free_port()?, binds, child: None };
        db.up()?;
        Ok(db)
    }

    /// `mysql://root@host:port/chitin` (the database is made at start).
    pub fn url(&self, host: &str) -> String {
        format!("mysql://root@{host}:{}/chitin", self.port)
    }

    /// Starts the server (again), waiting until it accepts connections;
    /// after a [`PrivateMariadb::down`] it recovers what was committed.
    pub fn up(&mut self) -> Result<(), KitError> {
        let log = self.base.join("server.log");
        let mut cmd = Command::new("mariadbd");
        // Out of the terminal's process group, like the nodes (see NodeProc::start).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", utf8(&self.data)?))
            .arg(format!("--port={}", self.port))
            .arg(format!("--bind-address={}", self.binds))
            .arg(format!("--socket={}", utf8(&self.base.join("mysqld.sock"))?))
            .arg(format!("--pid-file={}", utf8(&self.base.join("mysqld.pid"))?))
            .arg(format!("--init-file={}", utf8(&self.base.join("init.sql"))?))
            .arg(format!("--log-error={}", utf8(&log)?))
            // Every commit durable, without a binary log to keep in step.
            .args(["--skip-log-bin", "--innodb-flush-log-at-trx-commit=1", "--innodb-buffer-pool-size=64M"])
            // A client's address is not looked up: no resolver answers here,
            // and a lookup would stall every connection from a namespace.
            .arg("--skip-name-resolve");
        if is_root() {
            cmd.arg("--user=root");
        }
        // What it prints before it opens its log goes there as well.
        let (out, err) = log_files(&log)?;
        let child = cmd.stdout(out).stderr(err).spawn().map_err(|source| KitError::Spawn {
            program: "mariadbd".into(),
            hint: " (is MariaDB's server package installed?)",
            source,
        })?;
        self.child = Some(child);
        wait_for_port(&format!("127.0.0.1:{}", self.port), Duration::from_secs(60), &format!("; its log is {}", log.display()))
    }

    /// SIGKILL: what a crashed server looks like to the nodes; what was
    /// committed must survive it.
    pub fn down(&mut self) {
        kill(&mut self.child);
    }
}

impl Drop for PrivateMariadb {
    fn drop(&mut self) {
        self.down();
    }
}

/// `path` opened for appending, twice: a server's stdout and stderr.
fn log_files(path: &Path) -> Result<(std::fs::File, std::fs::File), KitError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(KitError::io(format!("open {}", path.display())))?;
    let err = out.try_clone().map_err(KitError::io("duplicate the log handle"))?;
    Ok((out, err))
}

/// SIGKILL and reap the server, if it runs.
fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn append(path: &Path, text: &str) -> Result<(), KitError> {
    let mut t = std::fs::read_to_string(path).map_err(KitError::io(format!("read {}", path.display())))?;
    t.push_str(text);
    std::fs::write(path, t).map_err(KitError::io(format!("write {}", path.display())))
}

/// A private PgBouncer in front of a PostgreSQL server on loopback: every
/// database name is passed through to the server. It takes the connection
/// options chitin sends (the `options` startup parameter) and drops them, as
/// PgBouncer must be told to (it refuses a parameter it does not know).
pub struct PrivatePgBouncer {
    /// The loopback port clients connect to.
    pub port: u16,
    child: Option<Child>,
}

impl PrivatePgBouncer {
    /// Starts `pgbouncer` under `dir` for the server on `server_port` in
    /// `pool_mode` (`session`, `transaction`), as `postgres` when this is
    /// root (PgBouncer refuses to run as root); its log is
    /// `dir/pgbouncer/pgbouncer.log`.
    pub fn start(dir: &Path, server_port: u16, pool_mode: &str) -> Result<PrivatePgBouncer, KitError> {
        let base = dir.join("pgbouncer");
        std::fs::create_dir_all(&base).map_err(KitError::io(format!("create {}", base.display())))?;
        for d in [dir, base.as_path()] {
            std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o777))
                .map_err(KitError::io(format!("open up {}", d.display())))?;
        }
        let port = free_port()?;
        let log = base.join("pgbouncer.log");
        let ini = base.join("pgbouncer.ini");
        let users = base.join("users.txt");
        std::fs::write(&users, "\"postgres\" \"\"\n").map_err(KitError::io(format!("write {}", users.display())))?;
        std::fs::write(
            &ini,
            format!(
                "[databases]\n* = host=127.0.0.1 port={server_port}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
                 listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {}\npool_mode = {pool_mode}\n\
                 max_client_conn = 500\ndefault_pool_size = 80\nlogfile = {}\n\
                 ignore_startup_parameters = extra_float_digits,options\nadmin_users = postgres\n",
                utf8(&users)?,
                utf8(&log)?
            ),
        )
        .map_err(KitError::io(format!("write {}", ini.display())))?;
        let mut cmd = if is_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--", "pgbouncer"]);
            c
        } else {
            Command::new("pgbouncer")
        };
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd.arg(&ini).spawn().map_err(|source| KitError::Spawn {
            program: "pgbouncer".into(),
            hint: " (scripts/ops-tools pgbouncer installs it)",
            source,
        })?;
        let bouncer = PrivatePgBouncer { port, child: Some(child) };
        wait_for_port(&format!("127.0.0.1:{port}"), Duration::from_secs(30), &format!("; its log is {}", log.display()))?;
        Ok(bouncer)
    }
}

impl PrivatePgBouncer {
    /// `RECONNECT` on the admin console: each server connection is closed
    /// once released, so new ones take settings changed on the server
    /// (`ALTER DATABASE … SET`) since they were opened.
    pub fn reconnect(&self) -> Result<(), KitError> {
        let port = self.port.to_string();
        pg_tool(&pg_bin()?, "psql", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-c", "RECONNECT", "pgbouncer"]).map(drop)
    }
}

impl Drop for PrivatePgBouncer {
    fn drop(&mut self) {
        // Its whole process group: `runuser` does not pass a SIGKILL on.
        if let Some(c) = &self.child {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", c.id())]).status();
        }
        kill(&mut self.child);
    }
}

#[cfg(test)]
mod tests {
    use super::owns;

    /// (port, slot) → whether the `myself` line lists the slot: single
    /// slots and ranges, after the eighth field only, and only for the node
    /// on that port.
    #[test]
    fn the_myself_line_says_which_slots_a_node_owns() {
        let nodes = "\
3a1f 127.0.0.1:7002@17002 master - 0 1700 2 connected 0-99
07c3 127.0.0.1:7001@17001 myself,master - 0 0 9 connected 100-200 7000
9b2e 127.0.0.1:7003@17003 slave 3a1f 0 1700 3 connected";
        for (port, slot, want) in [
            (7001, 100, true),
            (7001, 150, true),
            (7001, 200, true),
            (7001, 201, false),
            (7001, 7000, true),
            // The config epoch (9) and the ping times come before the slots.
            (7001, 9, false),
            (7001, 0, false),
            // Another node's slots, and a port with no `myself` line.
            (7001, 50, false),
            (7002, 50, false),
        ] {
            assert_eq!(owns(nodes, port, slot), want, "port {port}, slot {slot}");
        }
    }
}
