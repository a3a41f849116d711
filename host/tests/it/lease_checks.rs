//! Start checks: the decision as a table over `ServerFacts`, the facts of the
//! shared servers, and private servers started in a bad state (PostgreSQL
//! from /usr/lib/postgresql/*/bin, MariaDB from mariadb-install-db/mariadbd),
//! each on a free loopback port in a temporary directory, stopped at the end.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chitin::lease::checks::{self, Check, ServerFacts, ServerKind, StartCheckError};
use chitin::lease::{Dialect, Store};
use chitin::testkit::{PrivatePostgres, free_port};

// ---- the decision ---------------------------------------------------------------

fn pg_good() -> ServerFacts {
    ServerFacts {
        version: Some("15.20 (Debian 15.20-0+deb12u1)".into()),
        version_num: Some("150020".into()),
        in_recovery: Some(false),
        fsync: Some("on".into()),
        synchronous_commit: Some("on".into()),
        lock_timeout: Some("1s".into()),
        idle_in_transaction_session_timeout: Some("1s".into()),
        ..ServerFacts::unknown(ServerKind::Postgres)
    }
}

fn mysql_good() -> ServerFacts {
    ServerFacts {
        version: Some("8.0.36".into()),
        read_only: Some("OFF".into()),
        super_read_only: Some("OFF".into()),
        replica_configured: Some(false),
        innodb_flush_log_at_trx_commit: Some("1".into()),
        sync_binlog: Some("1".into()),
        log_bin: Some("ON".into()),
        gtid_mode: Some("ON".into()),
        ..ServerFacts::unknown(ServerKind::MySql)
    }
}

fn mariadb_good() -> ServerFacts {
    ServerFacts {
        version: Some("10.11.19-MariaDB-0+deb12u1".into()),
        read_only: Some("OFF".into()),
        replica_configured: Some(false),
        innodb_flush_log_at_trx_commit: Some("1".into()),
        sync_binlog: Some("1".into()),
        log_bin: Some("ON".into()),
        gtid_domain_id: Some("0".into()),
        ..ServerFacts::unknown(ServerKind::MariaDb)
    }
}

fn checks_of(f: &ServerFacts, cluster: bool) -> Vec<Check> {
    checks::evaluate(f, cluster).into_iter().map(|r| r.check).collect()
}

#[test]
fn decision_table() {
    use Check::*;
    let cases: Vec<(&str, ServerFacts, bool, Vec<Check>)> = vec![
        ("pg good", pg_good(), true, vec![]),
        ("pg 14 good", ServerFacts { version_num: Some("140000".into()), ..pg_good() }, true, vec![]),
        ("pg 13", ServerFacts { version_num: Some("130012".into()), ..pg_good() }, true, vec![Version]),
        ("pg version unknown", ServerFacts { version_num: None, ..pg_good() }, true, vec![Version]),
        ("pg replica", ServerFacts { in_recovery: Some(true), ..pg_good() }, true, vec![Replica]),
        ("pg recovery unknown", ServerFacts { in_recovery: None, ..pg_good() }, true, vec![ReplicationMode]),
        ("pg fsync off", ServerFacts { fsync: Some("off".into()), ..pg_good() }, true, vec![Durability]),
        ("pg fsync unknown", ServerFacts { fsync: None, ..pg_good() }, true, vec![Durability]),
        ("pg sync commit off", ServerFacts { synchronous_commit: Some("off".into()), ..pg_good() }, true, vec![Durability]),
        ("pg sync commit local", ServerFacts { synchronous_commit: Some("local".into()), ..pg_good() }, true, vec![]),
        (
            "pg sync commit remote_apply",
            ServerFacts { synchronous_commit: Some("remote_apply".into()), ..pg_good() },
            true,
            vec![],
        ),
        (
            "pg everything wrong",
            ServerFacts {
                version_num: Some("120000".into()),
                in_recovery: Some(true),
                fsync: Some("off".into()),
                synchronous_commit: Some("off".into()),
                ..pg_good()
            },
            true,
            vec![Version, Replica, Durability, Durability],
        ),
        ("pg lock_timeout off", ServerFacts { lock_timeout: Some("0".into()), ..pg_good() }, true, vec![LockBounds]),
        (
            "pg idle bound off",
            ServerFacts { idle_in_transaction_session_timeout: Some("0".into()), ..pg_good() },
            true,
            vec![LockBounds],
        ),
        // Not asked (the idle-bound plant): nothing to judge.
        (
            "pg bounds not read",
            ServerFacts { lock_timeout: None, idle_in_transaction_session_timeout: None, ..pg_good() },
            true,
            vec![],
        ),
        (
            "pg behind a transaction pooler",
            ServerFacts {
                unreadable: Some("error returned from database: prepared statement \"sqlx_s_3\" does not exist".into()),
                synchronous_commit: None,
                ..pg_good()
            },
            true,
            vec![Pooler, Durability],
        ),
        (
            "pg another unreadable fact",
            ServerFacts { unreadable: Some("permission denied for function current_setting".into()), ..pg_good() },
            true,
            vec![],
        ),
        ("pg standalone same rules", ServerFacts { fsync: Some("off".into()), ..pg_good() }, false, vec![Durability]),
        ("mysql good", mysql_good(), true, vec![]),
        ("mysql 5.7", ServerFacts { version: Some("5.7.44-log".into()), ..mysql_good() }, true, vec![Version]),
        ("mysql 8.4", ServerFacts { version: Some("8.4.2".into()), ..mysql_good() }, true, vec![]),
        ("mysql version unknown", ServerFacts { version: None, ..mysql_good() }, true, vec![Version]),
        ("mysql read_only", ServerFacts { read_only: Some("ON".into()), ..mysql_good() }, true, vec![Replica]),
        ("mysql super_read_only", ServerFacts { super_read_only: Some("1".into()), ..mysql_good() }, true, vec![Replica]),
        ("mysql replicating", ServerFacts { replica_configured: Some(true), ..mysql_good() }, true, vec![Replica]),
        ("mysql replica status unreadable", ServerFacts { replica_configured: None, ..mysql_good() }, true, vec![]),
        ("mysql read_only unknown", ServerFacts { read_only: None, ..mysql_good() }, true, vec![ReplicationMode]),
        (
            "mysql flush 2",
            ServerFacts { innodb_flush_log_at_trx_commit: Some("2".into()), ..mysql_good() },
            true,
            vec![Durability],
        ),
        (
            "mysql flush 0",
            ServerFacts { innodb_flush_log_at_trx_commit: Some("0".into()), ..mysql_good() },
            true,
            vec![Durability],
        ),
        ("mysql sync_binlog 0", ServerFacts { sync_binlog: Some("0".into()), ..mysql_good() }, true, vec![Durability]),
        ("mysql sync_binlog 100", ServerFacts { sync_binlog: Some("100".into()), ..mysql_good() }, true, vec![Durability]),
        ("mysql sync_binlog unknown", ServerFacts { sync_binlog: None, ..mysql_good() }, true, vec![Durability]),
        ("mysql gtid off", ServerFacts { gtid_mode: Some("OFF".into()), ..mysql_good() }, true, vec![Gtid]),
        ("mysql gtid on_permissive", ServerFacts { gtid_mode: Some("ON_PERMISSIVE".into()), ..mysql_good() }, true, vec![Gtid]),
        ("mysql gtid unknown", ServerFacts { gtid_mode: None, ..mysql_good() }, true, vec![ReplicationMode]),
        ("mariadb good", mariadb_good(), true, vec![]),
        ("mariadb 10.6", ServerFacts { version: Some("10.6.0-MariaDB".into()), ..mariadb_good() }, true, vec![]),
        ("mariadb 10.5", ServerFacts { version: Some("10.5.23-MariaDB".into()), ..mariadb_good() }, true, vec![Version]),
        ("mariadb 11", ServerFacts { version: Some("11.4.2-MariaDB".into()), ..mariadb_good() }, true, vec![]),
        ("mariadb no gtid", ServerFacts { gtid_domain_id: None, ..mariadb_good() }, true, vec![Gtid]),
        ("mariadb needs no gtid_mode", ServerFacts { gtid_mode: None, ..mariadb_good() }, true, vec![]),
        ("mariadb sync_binlog 0", ServerFacts { sync_binlog: Some("0".into()), ..mariadb_good() }, true, vec![Durability]),
        (
            "mariadb without a binary log needs no sync_binlog",
            ServerFacts { sync_binlog: Some("0".into()), log_bin: Some("OFF".into()), ..mariadb_good() },
            true,
            vec![],
        ),
        (
            "mariadb whose binary log is unknown needs sync_binlog",
            ServerFacts { sync_binlog: Some("0".into()), log_bin: None, ..mariadb_good() },
            true,
            vec![Durability],
        ),
        ("mariadb read_only", ServerFacts { read_only: Some("ON".into()), ..mariadb_good() }, true, vec![Replica]),
        ("sqlite cluster", ServerFacts::unknown(ServerKind::Sqlite), true, vec![SqliteInCluster]),
        ("sqlite standalone", ServerFacts::unknown(ServerKind::Sqlite), false, vec![]),
    ];
    let mut failures = Vec::new();
    for (name, facts, cluster, want) in cases {
        let got = checks_of(&facts, cluster);
        if got != want {
            failures.push(format!("{name}: got {got:?}, want {want:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn refusals_name_reason_and_fix() {
    let f = ServerFacts { sync_binlog: Some("0".into()), ..mariadb_good() };
    let r = checks::evaluate(&f, true);
    assert_eq!(r.len(), 1);
    assert!(r[0].reason.contains("sync_binlog = 0"), "{}", r[0].reason);
    assert!(r[0].fix.contains("SET GLOBAL sync_binlog = 1"), "{}", r[0].fix);
    let text = StartCheckError::Refused(r).to_string();
    assert!(text.contains("[durability]") && text.contains("Fix:"), "{text}");

    let f = ServerFacts { fsync: Some("off".into()), ..pg_good() };
    let r = checks::evaluate(&f, true);
    assert!(r[0].reason.contains("fsync = off") && r[0].fix.contains("fsync = on"), "{r:?}");

    let f = ServerFacts { version_num: Some("130000".into()), version: Some("13.0".into()), ..pg_good() };
    let r = checks::evaluate(&f, true);
    assert!(r[0].reason.contains("PostgreSQL 13.0 is older than 14"), "{r:?}");

    // The fix is the statement to run: the node's role, quoted, and the bound it asks for.
    let f = ServerFacts {
        lock_timeout: Some("0".into()),
        role: Some("chitin \"app\"".into()),
        asked_bound: Some("1500ms".into()),
        ..pg_good()
    };
    let r = checks::evaluate(&f, true);
    assert!(r[0].fix.contains(r#"ALTER ROLE "chitin ""app""" SET lock_timeout = '1500ms'"#), "{r:?}");
}

#[test]
fn sqlite_url_refused_in_cluster_mode_before_connecting() {
    let e = checks::check_url("sqlite:///tmp/x.db", true).unwrap_err();
    assert_eq!(e.refusals()[0].check, Check::SqliteInCluster);
    assert!(e.to_string().contains("enabled = false"), "{e}");
    checks::check_url("sqlite:///tmp/x.db", false).unwrap();
    checks::check_url("postgres://u@h/db", true).unwrap();
    checks::check_url("mariadb://u@h/db", true).unwrap();
    assert!(checks::check_url("redis://h", true).is_err());
}

#[test]
fn version_parsing() {
    assert_eq!(checks::parse_version("10.11.19-MariaDB-0+deb12u1"), Some((10, 11, 19)));
    assert_eq!(checks::parse_version("8.0.36"), Some((8, 0, 36)));
    assert_eq!(checks::parse_version("8"), Some((8, 0, 0)));
    assert_eq!(checks::parse_version("x8"), None);
}

// ---- the shared servers ------------------------------------------------------------

#[tokio::test]
async fn shared_postgres_passes() {
    let s = Store::connect(&crate::support::lease::postgres_admin_url()).await.unwrap();
    let facts = checks::gather(&s).await.unwrap();
    assert_eq!(facts.kind, ServerKind::Postgres);
    assert_eq!(facts.in_recovery, Some(false));
    assert!(facts.version_num.is_some() && facts.fsync.is_some() && facts.synchronous_commit.is_some());
    checks::run(&s, true).await.unwrap();
    s.close().await;
}

/// The shared MariaDB's facts are read completely; it passes unless it
/// writes a binary log and its `sync_binlog` is not 1 (CI tightens it with
/// `SET GLOBAL sync_binlog = 1`), in which case that is the only refusal.
/// Debian's MariaDB writes no binary log, and passes whatever `sync_binlog` is.
#[tokio::test]
async fn shared_mariadb_facts() {
    let s = Store::connect(&crate::support::lease::mysql_admin_url()).await.unwrap();
    let facts = checks::gather(&s).await.unwrap();
    assert!(matches!(facts.kind, ServerKind::MariaDb | ServerKind::MySql), "{facts:?}");
    assert!(
        facts.read_only.is_some()
            && facts.innodb_flush_log_at_trx_commit.is_some()
            && facts.sync_binlog.is_some()
            && facts.log_bin.is_some()
    );
    assert!(facts.replica_configured.is_some(), "root may read SHOW REPLICA STATUS");
    if facts.kind == ServerKind::MariaDb {
        assert!(facts.gtid_domain_id.is_some());
    }
    let refusals = checks::evaluate(&facts, true);
    if facts.sync_binlog.as_deref() == Some("1") || facts.binlog_off() {
        assert!(refusals.is_empty(), "{refusals:?}");
    } else {
        assert_eq!(refusals.len(), 1, "{refusals:?}");
        assert!(refusals[0].reason.contains("sync_binlog"));
    }
    s.close().await;
}

/// The start checks need none of chitin's tables, so the node runs them
/// before any migration: on a fresh, empty database they decide as on any
/// other, and leave it empty.
#[tokio::test]
async fn checks_run_on_an_empty_database() {
    for dialect in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
        crate::support::lease::run(dialect, |url| async move {
            let s = Store::connect(&url).await?;
            let cluster = dialect != Dialect::Sqlite;
            let facts = checks::gather(&s).await?;
            let refusals = checks::evaluate(&facts, cluster);
            // The shared MariaDB may run with sync_binlog != 1 (see shared_mariadb_facts).
            ensure!(refusals.iter().all(|r| r.reason.contains("sync_binlog")), "{dialect}: {refusals:?}");
            if refusals.is_empty() {
                checks::run(&s, cluster).await?;
            }
            ensure!(s.holders().await.is_err(), "{dialect}: the checks created no table");
            s.migrate().await?;
            ensure!(s.holders().await?.is_empty());
            s.close().await;
            Ok(())
        })
        .await;
    }
}

// ---- private servers ---------------------------------------------------------------

/// A private PostgreSQL cluster under a temporary directory.
fn private_pg(extra_conf: &str) -> Result<(PrivatePostgres, tempfile::TempDir)> {
    let dir = tempfile::Builder::new().prefix("chitin-pg-").tempdir()?;
    let pg = PrivatePostgres::start(dir.path(), None, extra_conf)?;
    Ok((pg, dir))
}

async fn refused_checks(store: &Store) -> Result<Vec<Check>> {
    match checks::run(store, true).await {
        Ok(_) => Ok(vec![]),
        Err(StartCheckError::Refused(r)) => Ok(r.into_iter().map(|r| r.check).collect()),
        Err(e) => bail!("checks could not run: {e}"),
    }
}

/// Reloads the server configuration and waits until `setting` reads `want`.
async fn pg_reload_until(store: &Store, admin: &sqlx::PgPool, setting: &str, want: &str) -> Result<()> {
    sqlx::query("SELECT pg_reload_conf()").execute(admin).await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let facts = checks::gather(store).await?;
        let got = match setting {
            "fsync" => facts.fsync,
            "synchronous_commit" => facts.synchronous_commit,
            _ => unreachable!(),
        };
        if got.as_deref() == Some(want) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{setting} still {got:?} after reload");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A private PostgreSQL with fsync = off is refused; then synchronous_commit
/// = off; fixed, it passes; restarted as a standby (in recovery), it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_postgres_bad_states() -> Result<()> {
    let (mut pg, _dir) = tokio::task::spawn_blocking(|| private_pg("fsync = off")).await??;
    let store = Store::connect(&pg.url("127.0.0.1")).await?;
    let admin = sqlx::PgPool::connect(&pg.url("127.0.0.1")).await?;

    let facts = checks::gather(&store).await?;
    ensure!(facts.fsync.as_deref() == Some("off"), "{facts:?}");
    match checks::run(&store, true).await {
        Err(StartCheckError::Refused(r)) => {
            ensure!(r.len() == 1 && r[0].check == Check::Durability && r[0].reason.contains("fsync"), "{r:?}")
        }
        other => bail!("fsync = off must be refused, got {other:?}"),
    }

    sqlx::query("ALTER SYSTEM SET fsync = on").execute(&admin).await?;
    sqlx::query("ALTER SYSTEM SET synchronous_commit = off").execute(&admin).await?;
    pg_reload_until(&store, &admin, "fsync", "on").await?;
    pg_reload_until(&store, &admin, "synchronous_commit", "off").await?;
    ensure!(refused_checks(&store).await? == vec![Check::Durability]);

    sqlx::query("ALTER SYSTEM RESET synchronous_commit").execute(&admin).await?;
    pg_reload_until(&store, &admin, "synchronous_commit", "on").await?;
    ensure!(refused_checks(&store).await?.is_empty(), "a healthy primary passes");
    store.close().await;
    admin.close().await;

    // Restart as a standby: in recovery, read-only.
    pg.down()?;
    std::fs::write(pg.data_dir().join("standby.signal"), "")?;
    let pg = tokio::task::spawn_blocking(move || pg.up().map(|_| pg)).await??;
    let store = Store::connect(&pg.url("127.0.0.1")).await?;
    let facts = checks::gather(&store).await?;
    ensure!(facts.in_recovery == Some(true), "{facts:?}");
    ensure!(refused_checks(&store).await? == vec![Check::Replica]);
    store.close().await;
    drop(pg);
    Ok(())
}

/// A private MariaDB server process; killed when dropped.
struct PrivateMariaDb {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl PrivateMariaDb {
    fn start(extra_args: &[&str]) -> Result<PrivateMariaDb> {
        let dir = tempfile::Builder::new().prefix("chitin-mariadb-").tempdir()?;
        let data = dir.path().join("data");
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg("--user=root")
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .output()
            .context("run mariadb-install-db")?;
        if !out.status.success() {
            bail!("mariadb-install-db failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let port = free_port()?;
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.path().join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.path().join("mysqld.pid").display()))
            .arg(format!("--log-error={}", dir.path().join("error.log").display()))
            .arg(format!("--port={port}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--user=root")
            .arg("--skip-grant-tables")
            .arg("--innodb-buffer-pool-size=16M")
            .args(extra_args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start mariadbd")?;
        let db = PrivateMariaDb { child, port, _dir: dir };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("private mariadbd did not listen on {port}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(db)
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private MariaDB with sync_binlog = 0 is refused; then also
/// innodb_flush_log_at_trx_commit = 2; fixed, it passes; read-only, refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_mariadb_bad_states() -> Result<()> {
    let db = tokio::task::spawn_blocking(|| {
        // With a binary log, whose flush `sync_binlog` decides.
        PrivateMariaDb::start(&["--log-bin", "--sync-binlog=0", "--innodb-flush-log-at-trx-commit=1"])
    })
    .await??;
    let store = Store::connect(&db.url()).await?;
    let facts = checks::gather(&store).await?;
    ensure!(
        facts.kind == ServerKind::MariaDb && facts.sync_binlog.as_deref() == Some("0") && facts.log_bin.as_deref() == Some("ON"),
        "{facts:?}"
    );
    match checks::run(&store, true).await {
        Err(StartCheckError::Refused(r)) => {
            ensure!(r.len() == 1 && r[0].check == Check::Durability && r[0].reason.contains("sync_binlog"), "{r:?}")
        }
        other => bail!("sync_binlog = 0 must be refused, got {other:?}"),
    }
    let admin = sqlx::MySqlPool::connect(&db.url()).await?;
    sqlx::raw_sql("SET GLOBAL innodb_flush_log_at_trx_commit = 2").execute(&admin).await?;
    ensure!(refused_checks(&store).await? == vec![Check::Durability, Check::Durability]);
    sqlx::raw_sql("SET GLOBAL innodb_flush_log_at_trx_commit = 1").execute(&admin).await?;
    sqlx::raw_sql("SET GLOBAL sync_binlog = 1").execute(&admin).await?;
    ensure!(refused_checks(&store).await?.is_empty(), "a durable source passes");
    sqlx::raw_sql("SET GLOBAL read_only = 1").execute(&admin).await?;
    ensure!(refused_checks(&store).await? == vec![Check::Replica]);
    admin.close().await;
    store.close().await;
    drop(db);
    Ok(())
}

/// A real SQLite store passes standalone and is refused in cluster mode.
#[tokio::test]
async fn sqlite_store_standalone_only() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("c.db").display());
    let s = Store::connect(&url).await.unwrap();
    let facts = checks::run(&s, false).await.unwrap();
    assert_eq!(facts.kind, ServerKind::Sqlite);
    assert!(facts.version.is_some());
    let e = checks::run(&s, true).await.unwrap_err();
    assert_eq!(e.refusals().len(), 1);
    assert_eq!(e.refusals()[0].check, Check::SqliteInCluster);
    s.close().await;
}
