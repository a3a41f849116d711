//! The servers a chaos run owns: a private `redis-server` and, when asked, a
//! private PostgreSQL cluster, both on free ports so that the nemesis can
//! stop and restart them without touching anyone else's; or a fresh
//! database inside the configured server, which the run never restarts.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A free TCP port on loopback (the listener is dropped, so a race with
/// another process is possible but harmless: the server then fails to bind
/// and the run says so).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(addr: &str, within: Duration) -> Result<()> {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        if Instant::now() > deadline {
            bail!("nothing listens on {addr} after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A private `redis-server` that keeps nothing on disk.
pub struct PrivateRedis {
    pub port: u16,
    binds: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

impl PrivateRedis {
    /// Starts on a free port, listening on loopback and on `extra_bind`.
    pub fn start(dir: &Path, extra_bind: Option<&str>) -> Result<PrivateRedis> {
        let mut binds = vec!["127.0.0.1".to_string()];
        binds.extend(extra_bind.map(str::to_string));
        let mut redis = PrivateRedis {
            port: free_port()?,
            binds,
            log: dir.join("redis.log"),
            child: None,
        };
        redis.up()?;
        Ok(redis)
    }

    pub fn url(&self, host: &str) -> String {
        format!("redis://{host}:{}", self.port)
    }

    /// Starts the server again on the same port (empty: it kept nothing).
    pub fn up(&mut self) -> Result<()> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log)?;
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind"])
            .args(&self.binds)
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("cannot start redis-server (is it installed and on PATH?)")?;
        self.child = Some(child);
        wait_for_port(&format!("127.0.0.1:{}", self.port), Duration::from_secs(10))
            .with_context(|| format!("redis-server did not start; its log is {}", self.log.display()))
    }

    /// Kills the server (SIGKILL: what a crashed Redis looks like).
    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.down();
    }
}

/// Runs a PostgreSQL tool, as user `postgres` when we are root (initdb and
/// postgres refuse to run as root).
fn pg_tool(bin: &Path, tool: &str, args: &[&str]) -> Result<()> {
    let exe = bin.join(tool);
    let root = nix_is_root();
    let out = if root {
        Command::new("runuser").args(["-u", "postgres", "--"]).arg(&exe).args(args).output()
    } else {
        Command::new(&exe).args(args).output()
    }
    .with_context(|| format!("cannot run {}", exe.display()))?;
    if !out.status.success() {
        bail!(
            "{tool} {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn nix_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// The newest PostgreSQL server binaries: `$PG_BIN`, else the highest
/// version under /usr/lib/postgresql.
fn pg_bin() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .context("no /usr/lib/postgresql: set PG_BIN to the directory holding initdb and pg_ctl")?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, p): &(u32, PathBuf)| p.join("initdb").exists())
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, p)| p).context("no initdb under /usr/lib/postgresql/*/bin: set PG_BIN")
}

/// A private PostgreSQL cluster that the nemesis restarts (and the start
/// checks' tests put in bad states); its files live under the given
/// directory.
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
    pub fn start(dir: &Path, extra: Option<(&str, &str)>, extra_conf: &str) -> Result<PrivatePostgres> {
        let bin = pg_bin()?;
        let base = dir.join("postgres");
        std::fs::create_dir_all(&base)?;
        // initdb runs as `postgres`; let it write here.
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let data = base.join("data");
        let data_s = data.to_str().context("non-UTF-8 path")?;
        pg_tool(&bin, "initdb", &["-D", data_s, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8"]).with_context(|| {
            format!("initdb in {} (as root it runs as `postgres`, which must be able to reach that directory)", base.display())
        })?;
        let port = free_port()?;
        let listen = match extra {
            Some((addr, _)) => format!("127.0.0.1,{addr}"),
            None => "127.0.0.1".into(),
        };
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '{listen}'\nunix_socket_directories = '{}'\n\
             shared_buffers = 32MB\nmax_connections = 100\n{extra_conf}\n",
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

    pub fn url(&self, host: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres", self.port)
    }

    /// The cluster's data directory (for `standby.signal` and the like).
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    pub fn up(&mut self) -> Result<()> {
        let log = self.data.parent().unwrap().join("server.log");
        let data = self.data.to_str().unwrap();
        pg_tool(&self.bin, "pg_ctl", &["-D", data, "-l", log.to_str().unwrap(), "-w", "-t", "60", "start"])?;
        self.running = true;
        Ok(())
    }

    /// Stops at once, without a checkpoint: what a crash looks like to the
    /// nodes; what was committed must survive it.
    pub fn down(&mut self) -> Result<()> {
        if self.running {
            pg_tool(&self.bin, "pg_ctl", &["-D", self.data.to_str().unwrap(), "-m", "immediate", "-w", "stop"])?;
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

fn append(path: &Path, text: &str) -> Result<()> {
    let mut t = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    t.push_str(text);
    std::fs::write(path, t)?;
    Ok(())
}

/// `url` with its database name replaced by `db`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, query) = url.split_once('?').map_or((url, None), |(b, q)| (b, Some(q)));
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let path_start = base[after_scheme..].find('/').map(|i| after_scheme + i);
    let root = path_start.map_or(base, |i| &base[..i]);
    match query {
        Some(q) => format!("{root}/{db}?{q}"),
        None => format!("{root}/{db}"),
    }
}

/// Creates database `db` on the server of `admin_url` (PostgreSQL or MySQL).
pub async fn create_database(admin_url: &str, db: &str) -> Result<()> {
    run_admin(admin_url, &format!("CREATE DATABASE {db}")).await
}

/// Drops database `db` (connections to it must be closed).
pub async fn drop_database(admin_url: &str, db: &str) -> Result<()> {
    let sql = if admin_url.starts_with("postgres") {
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    } else {
        format!("DROP DATABASE IF EXISTS {db}")
    };
    run_admin(admin_url, &sql).await
}

async fn run_admin(admin_url: &str, sql: &str) -> Result<()> {
    use sqlx::Connection;
    if admin_url.starts_with("postgres") {
        let mut c = sqlx::PgConnection::connect(admin_url).await.with_context(|| format!("connect to {admin_url}"))?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut c).await.with_context(|| sql.to_string())?;
    } else if admin_url.starts_with("mysql") || admin_url.starts_with("mariadb") {
        let mut c = sqlx::MySqlConnection::connect(admin_url).await.with_context(|| format!("connect to {admin_url}"))?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string())).execute(&mut c).await.with_context(|| sql.to_string())?;
    } else {
        bail!("--database-url must be postgres://… or mysql://… (got {admin_url}); SQLite cannot be shared by node processes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn database_name_is_replaced() {
        assert_eq!(with_database("postgres://u@h:5432/postgres", "x"), "postgres://u@h:5432/x");
        assert_eq!(with_database("mysql://root@h:3306", "x"), "mysql://root@h:3306/x");
        assert_eq!(with_database("postgres://h/db?sslmode=disable", "x"), "postgres://h/x?sslmode=disable");
    }
}
