//! The mixed-version test: the previous release (the last line of
//! `RELEASES`) and this build side by side in one cluster under load.
//!
//! The release's commit is exported with `git archive` into
//! `<target>/upgrade-from/<version>/src` and built with cargo: the build's
//! intermediate artifacts go to a build directory of its own seeded with
//! hard links to this build's (`CARGO_BUILD_BUILD_DIR`), so every
//! dependency compiled for this build is reused and only the release's
//! workspace crates compile; its binary lands in
//! `<target>/upgrade-from/<version>/out/debug/chitin`, never over this
//! build's `chitin`. A second run finds the export and the build in place.
//!
//! Two runs on a fresh PostgreSQL database each, three nodes, a 2 s TTL,
//! a client appending without pause through every node:
//! - roll forward: every node stopped gracefully (SIGTERM) and started as
//!   this build on the same settings, one by one; finalize is refused while
//!   a 0.1.0 node is live, then succeeds;
//! - roll back: two nodes upgraded, one of them back to the release (which
//!   starts on the newer schema and logs the migration it does not know),
//!   finalize refused naming the release's nodes, then every node forward
//!   and finalized.
//!
//! Both require no failed append, every acknowledged append stored exactly
//! once with gapless sequence numbers (read from the database), and each
//! node replacement's longest append stall under a TTL (the planned-handoff
//! target of `ownership_cluster.rs`); the stalls are printed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::support::cluster::*;
use anyhow::{Context, Result, anyhow, bail};
use chitin::node::shard_map::ShardMap;
use chitin::proto;
use chitin::topology::ClusterConfig;
use chitin::upgrade::{self, BINARY_VERSION};

/// One cluster at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The previous release's binary, built once per test process.
static PREVIOUS: OnceLock<Result<(String, PathBuf), String>> = OnceLock::new();

/// `(version, commit)` of the newest release in `RELEASES`.
fn previous_release(root: &Path) -> Result<(String, String)> {
    let path = root.join("RELEASES");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let line = text
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or_else(|| anyhow!("{} lists no release", path.display()))?;
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some(v), Some(c), None) if c.len() == 40 && c.bytes().all(|b| b.is_ascii_hexdigit()) => Ok((v.into(), c.into())),
        _ => bail!("{}: `{line}` is not `<version> <full 40-hex commit hash>`", path.display()),
    }
}

fn git(root: &Path, args: &[&str]) -> Result<std::process::Output> {
    Command::new("git").arg("-C").arg(root).args(args).output().with_context(|| format!("run git {}", args.join(" ")))
}

/// Fails with how to get the commit when the clone lacks it.
fn require_commit(root: &Path, version: &str, commit: &str) -> Result<()> {
    let found = git(root, &["cat-file", "-e", &format!("{commit}^{{commit}}")])?;
    if found.status.success() {
        return Ok(());
    }
    let shallow =
        git(root, &["rev-parse", "--is-shallow-repository"]).map(|o| String::from_utf8_lossy(&o.stdout).trim() == "true");
    bail!(
        "release {version} (commit {commit}, from RELEASES) is not in this clone{}. The mixed-version test builds it: \
         fetch the history with `git fetch --unshallow` (or `git fetch origin {commit}`); a CI checkout needs the full \
         history (e.g. fetch-depth: 0)",
        if shallow.unwrap_or(false) { ", which is shallow" } else { "" }
    )
}

/// Exports `commit` into `dir` once; a later run keeps it (and its mtimes,
/// so that cargo finds the build fresh).
fn export(root: &Path, commit: &str, dir: &Path) -> Result<()> {
    let stamp = dir.join(".chitin-release-commit");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == commit) {
        return Ok(());
    }
    let partial = dir.with_extension("partial");
    let _ = std::fs::remove_dir_all(&partial);
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(&partial)?;
    let archive = partial.join("release.tar");
    let out = git(root, &["archive", "--format=tar", "-o", &archive.display().to_string(), commit])?;
    if !out.status.success() {
        bail!("git archive {commit}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let untar = Command::new("tar").arg("-xf").arg(&archive).arg("-C").arg(&partial).status()?;
    if !untar.success() {
        bail!("tar -xf {}: {untar}", archive.display());
    }
    std::fs::remove_file(&archive)?;
    touch_all(&partial, std::time::SystemTime::now())?;
    std::fs::write(partial.join(".chitin-release-commit"), commit)?;
    std::fs::rename(&partial, dir)?;
    Ok(())
}

/// Sets every file's mtime to `now`. `git archive` gives the commit's
/// time, older than any artifact a build of another tree with the same
/// crate versions and relative paths left in the shared build dir: cargo
/// would take those as fresh.
fn touch_all(dir: &Path, now: std::time::SystemTime) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            touch_all(&path, now)?;
        } else {
            std::fs::File::options().write(true).open(&path)?.set_modified(now)?;
        }
    }
    Ok(())
}

/// A build directory of the release's own, seeded once with hard links to
/// this build's compiled units (`deps`, `build`, `.fingerprint`), so that
/// every dependency compiled alike is reused while the release's workspace
/// crates never land beside this build's: a crate found twice under one
/// name in `target/debug/deps` would break this build's next compile.
/// Cargo writes a unit only under its own hash, so the links are never
/// written through.
fn seeded_build_dir(base: &Path) -> Result<PathBuf> {
    let dir = base.join("build");
    let profile = dir.join("debug");
    if profile.exists() {
        return Ok(dir);
    }
    let partial = base.join("build.partial");
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(partial.join("debug"))?;
    for sub in ["deps", "build", ".fingerprint"] {
        let from = crate::support::build_dir().join("debug").join(sub);
        let linked = Command::new("cp").arg("-al").arg(&from).arg(partial.join("debug").join(sub)).status()?;
        if !linked.success() {
            bail!("cp -al {} failed: {linked}", from.display());
        }
    }
    std::fs::rename(&partial, &dir)?;
    Ok(dir)
}

/// The environment cargo gives a test that would mislead a nested build.
fn set_by_cargo_for_this_test(key: &str) -> bool {
    [
        "CARGO_PKG_",
        "CARGO_BIN_",
        "CARGO_MANIFEST_",
        "CARGO_CRATE_",
        "CARGO_PRIMARY_PACKAGE",
        "CARGO_TARGET_TMPDIR",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_BUILD_DIR",
        "OUT_DIR",
    ]
    .iter()
    .any(|p| key.starts_with(p))
}

/// Builds the release's `chitin`; returns `(version, binary)`.
fn build_previous() -> Result<(String, PathBuf)> {
    let root = crate::support::repo_root();
    let (version, commit) = previous_release(&root)?;
    require_commit(&root, &version, &commit)?;
    let base = crate::support::build_dir().join("upgrade-from").join(&version);
    let src = base.join("src");
    export(&root, &commit, &src)?;
    let out_dir = base.join("out");
    let build_dir = seeded_build_dir(&base)?;
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    // Scrubbed first, then set: the outer build's CARGO_TARGET_DIR (which
    // CI exports) must not undo the release's own.
    for (key, _) in std::env::vars() {
        if set_by_cargo_for_this_test(&key) {
            cmd.env_remove(&key);
        }
    }
    cmd.args(["build", "--locked", "-p", "chitin", "--bin", "chitin", "--manifest-path"])
        .arg(src.join("Cargo.toml"))
        .env("CARGO_TARGET_DIR", &out_dir)
        .env("CARGO_BUILD_BUILD_DIR", &build_dir);
    let started = Instant::now();
    let built = cmd.output().context("run cargo for the previous release")?;
    let log = String::from_utf8_lossy(&built.stderr);
    if !built.status.success() {
        bail!("building release {version} ({commit}) failed:\n{log}");
    }
    let compiled: Vec<&str> = log.lines().filter(|l| l.trim_start().starts_with("Compiling")).collect();
    eprintln!(
        "release {version}: built in {:.1?}, {} crates compiled{}",
        started.elapsed(),
        compiled.len(),
        if compiled.is_empty() {
            String::new()
        } else {
            format!(": {}", compiled.iter().map(|l| l.trim().trim_start_matches("Compiling ")).collect::<Vec<_>>().join(", "))
        }
    );
    let exe = out_dir.join("debug").join("chitin");
    if !exe.exists() {
        bail!("the build of {version} left no {}", exe.display());
    }
    Ok((version, exe))
}

fn previous() -> (String, PathBuf) {
    PREVIOUS.get_or_init(|| build_previous().map_err(|e| format!("{e:#}"))).clone().unwrap_or_else(|e| panic!("{e}"))
}

// ---------------------------------------------------------------- the cluster

/// `value` without what equals `default`: the settings a file must spell
/// out, so that a release that predates a newer default key still reads it.
fn differing(value: &toml::Value, default: &toml::Value) -> Option<toml::Value> {
    match (value, default) {
        (toml::Value::Table(v), toml::Value::Table(d)) => {
            let kept: toml::map::Map<String, toml::Value> = v
                .iter()
                .filter_map(|(k, x)| match d.get(k) {
                    Some(dx) => differing(x, dx).map(|y| (k.clone(), y)),
                    None => Some((k.clone(), x.clone())),
                })
                .collect();
            (!kept.is_empty()).then_some(toml::Value::Table(kept))
        }
        _ => (value != default).then(|| value.clone()),
    }
}

/// A three-node cluster of `exe` on a fresh PostgreSQL database, started.
async fn cluster_of(exe: &Path) -> Result<Cluster> {
    let dir = tempfile::tempdir()?;
    let db = TestDb::create(Dialect::Postgres).await?;
    let ports = free_ports(6)?;
    let names: Vec<(String, String, String)> = (0..3)
        .map(|i| (format!("node-{:02}", i + 1), format!("127.0.0.1:{}", ports[2 * i]), format!("127.0.0.1:{}", ports[2 * i + 1])))
        .collect();
    let config = dir.path().join("cluster_config.json");
    let pairs: Vec<(String, String)> = names.iter().map(|(n, a, _)| (n.clone(), a.clone())).collect();
    std::fs::write(&config, cluster_config(&pairs, 8))?;
    let namespace = format!("chitin-test-{}", uuid::Uuid::new_v4().simple());
    let shared = ClusterShared {
        redis_url: "redis://127.0.0.1:6379",
        namespace: &namespace,
        database_url: &db.url,
        ttl: TTL,
        renew: RENEW,
    };
    let default = toml::Value::try_from(chitin::settings::Settings::default())?;
    let mut nodes = Vec::new();
    for (name, api, metrics) in names {
        let node = ClusterNode {
            name: &name,
            api: &api,
            metrics: &metrics,
            data_dir: dir.path().join(&name),
            config_file: Some(&config),
        };
        let full = toml::Value::try_from(node_settings::cluster_node(&node, &shared))?;
        let settings = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &settings,
            toml::to_string(&differing(&full, &default).unwrap_or(toml::Value::Table(Default::default())))?,
        )?;
        let log = dir.path().join(format!("{name}.log"));
        nodes.push(NodeProc::new(exe, name, api, metrics, settings, log));
    }
    let mut cluster = Cluster { dir, db: Some(db), config, nodes, namespace, lan: None };
    for node in &mut cluster.nodes {
        node.start()?;
    }
    for node in &mut cluster.nodes {
        node.wait_ready(Duration::from_secs(60)).await?;
    }
    cluster.wait_settled(Duration::from_secs(60)).await?;
    Ok(cluster)
}

/// One node replaced: when, and by what.
struct Replacement {
    node: String,
    to: String,
    window: (Instant, Instant),
}

/// Stops node `i` gracefully and starts `exe` in its place on the same
/// settings, ports and log; waits until every shard is owned and the
/// holders are stable (the handoffs back to it are done).
async fn replace(c: &mut Cluster, i: usize, exe: &Path, to: &str) -> Result<Replacement> {
    let started = Instant::now();
    let old = &mut c.nodes[i];
    let exit = old.terminate(Duration::from_secs(30))?;
    if !exit.success() {
        bail!("graceful stop of {}: {exit:?}\n{}", old.name, old.log_tail(40));
    }
    let mut new =
        NodeProc::new(exe, old.name.clone(), old.api.clone(), old.metrics.clone(), old.settings.clone(), old.log.clone());
    new.start()?;
    new.wait_ready(Duration::from_secs(60)).await?;
    let node = new.name.clone();
    c.nodes[i] = new;
    c.wait_settled(Duration::from_secs(60)).await?;
    Ok(Replacement { node, to: to.into(), window: (started, Instant::now()) })
}

// ---------------------------------------------------------------- the load

/// One acknowledged append.
struct Acked {
    stream: String,
    request_id: String,
    sequence: u64,
}

#[derive(Default)]
struct Load {
    acked: Vec<Acked>,
    failed: Vec<String>,
    /// (start, how long until acknowledged) of every acknowledged append.
    latencies: Vec<(Instant, Duration)>,
}

impl Load {
    /// The longest stall of an append that was in flight during `window`.
    fn stall_in(&self, (from, to): (Instant, Instant)) -> Duration {
        self.latencies
            .iter()
            .filter(|(at, took)| *at <= to && *at + *took >= from)
            .map(|(_, took)| *took)
            .max()
            .unwrap_or_default()
    }
}

/// Appends without pause through `apis` until `stop`, as the ownership
/// test's client does: a broken transport (a stopping node) is retried on
/// the next node with the same request id; any typed failure counts.
async fn client(apis: Vec<String>, streams: Vec<String>, stop: Arc<AtomicBool>) -> Load {
    let mut load = Load::default();
    let (mut next, mut i) = (0usize, 0usize);
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let stream = streams[i % streams.len()].clone();
        let request_id = format!("u-{i}");
        let started = Instant::now();
        loop {
            let api = &apis[next % apis.len()];
            let Ok(mut j) = proto::journal_client::JournalClient::connect(format!("http://{api}")).await else {
                next += 1;
                if started.elapsed() > Duration::from_secs(30) {
                    load.failed.push(format!("{request_id}: no node reachable for 30 s"));
                    break;
                }
                continue;
            };
            let request = proto::AppendRequest {
                stream: stream.clone(),
                request_id: request_id.clone(),
                payload: b"u".to_vec(),
                forwarded: false,
            };
            match j.append(request).await {
                Ok(ack) => {
                    load.acked.push(Acked {
                        stream: stream.clone(),
                        request_id: request_id.clone(),
                        sequence: ack.into_inner().sequence,
                    });
                    load.latencies.push((started, started.elapsed()));
                    break;
                }
                Err(s) if s.metadata().get(proto::outcome::KEY).is_none() && started.elapsed() < Duration::from_secs(30) => {
                    next += 1
                }
                Err(s) => {
                    load.failed.push(format!("{request_id} via {api}: {s}"));
                    break;
                }
            }
        }
    }
    load
}

/// Every acknowledged append is in the journal once, at its sequence
/// number, and every stream's sequence numbers are gapless.
async fn check_nothing_lost(url: &str, load: &Load) -> Result<()> {
    let pool = sqlx::PgPool::connect(url).await?;
    let rows: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT stream, request_id, seq FROM chitin_journal").fetch_all(&pool).await?;
    pool.close().await;
    let stored: HashMap<(&str, &str), i64> = rows.iter().map(|(s, r, q)| ((s.as_str(), r.as_str()), *q)).collect();
    let mut problems = Vec::new();
    for a in &load.acked {
        match stored.get(&(a.stream.as_str(), a.request_id.as_str())) {
            None => problems.push(format!("lost: {} {} (acknowledged at {})", a.stream, a.request_id, a.sequence)),
            Some(&seq) if seq as u64 != a.sequence => {
                problems.push(format!("{} {}: acknowledged at {}, stored at {seq}", a.stream, a.request_id, a.sequence))
            }
            Some(_) => {}
        }
    }
    let mut per_stream: BTreeMap<&str, Vec<i64>> = BTreeMap::new();
    for (s, _, q) in &rows {
        per_stream.entry(s.as_str()).or_default().push(*q);
    }
    for (stream, mut seqs) in per_stream {
        seqs.sort_unstable();
        if seqs.iter().enumerate().any(|(k, q)| *q != k as i64 + 1) {
            problems.push(format!("stream {stream}: sequence numbers not gapless from 1: {seqs:?}"));
        }
    }
    if problems.is_empty() { Ok(()) } else { bail!("{} problems:\n{}", problems.len(), problems.join("\n")) }
}

// ---------------------------------------------------------------- the admin plane

async fn admin(c: &Cluster, i: usize) -> proto::admin_client::AdminClient<tonic::transport::Channel> {
    c.nodes[i].admin().await.unwrap()
}

async fn upgrade_status(c: &Cluster, i: usize) -> proto::UpgradeStatusResponse {
    admin(c, i).await.upgrade_status(proto::UpgradeStatusRequest {}).await.unwrap().into_inner()
}

/// The version each live node reports in `chitin cluster status`, asked
/// through node `i`.
async fn versions(c: &Cluster, i: usize) -> BTreeMap<String, String> {
    let s = admin(c, i).await.status(proto::StatusRequest {}).await.unwrap().into_inner();
    s.nodes.into_iter().map(|n| (n.name, n.version)).collect()
}

/// Finalize through node `i` must be refused, naming every node of
/// `older` as running `version`.
async fn finalize_refused(c: &Cluster, i: usize, older: &[&str], version: &str) {
    let e = admin(c, i).await.finalize_upgrade(proto::FinalizeUpgradeRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
    for name in older {
        assert!(
            e.message().contains(&format!("node `{name}`")) && e.message().contains(&format!("runs chitin {version}")),
            "{name}: {e:?}"
        );
    }
    let s = upgrade_status(c, i).await;
    assert_eq!(s.cluster_version, "0.1", "a refused finalize changed the cluster version: {s:?}");
    assert!(s.gates.iter().all(|g| !g.active), "{s:?}");
}

/// Held leases with their own expiry, and on their holder's liveness.
async fn lease_kinds(store: &chitin::lease::Store) -> (usize, usize) {
    let rows = store.holders().await.unwrap();
    let held = || rows.iter().filter(|r| r.holder.is_some());
    (held().filter(|r| r.liveness_epoch.is_none()).count(), held().filter(|r| r.liveness_epoch.is_some()).count())
}

async fn finalize(c: &Cluster) {
    let out = tokio::process::Command::new(CHITIN)
        .args(["cluster", "finalize-upgrade", "--node", &c.nodes[0].api])
        .env("RUST_LOG", "warn")
        .output()
        .await
        .unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("gate on: peer-protocol-2"), "finalize-upgrade:\n{said}");
    let s = upgrade_status(c, 1).await;
    assert_eq!(s.cluster_version, upgrade::Release::binary().to_string(), "{s:?}");
    assert!(s.gates.iter().all(|g| g.active) && s.blockers.is_empty(), "{s:?}");
}

/// Starts the load, runs `roll`, stops the load after a settled second, and
/// checks what the client and the database saw.
async fn under_load<F>(c: &mut Cluster, what: &str, roll: F) -> Result<()>
where
    F: AsyncFnOnce(&mut Cluster) -> Result<Vec<Replacement>>,
{
    let map = ShardMap::from_config(&ClusterConfig::from_json(&std::fs::read_to_string(&c.config)?)?);
    let streams: Vec<String> = map.shards().iter().map(|s| stream_on(&map, &s.id, &format!("u-{}", s.id))).collect();
    let apis: Vec<String> = c.nodes.iter().map(|n| n.api.clone()).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(client(apis, streams, stop.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rolled = roll(c).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let load = load.await?;
    let replacements = rolled.map_err(|e| anyhow!("{e:#}\n{}", c.logs()))?;

    eprintln!("{what}: {} appends acknowledged, {} failed", load.acked.len(), load.failed.len());
    for r in &replacements {
        eprintln!(
            "{what}: {} → {}: longest append stall {:?} (replacement took {:?})",
            r.node,
            r.to,
            load.stall_in(r.window),
            r.window.1 - r.window.0
        );
    }
    if !load.failed.is_empty() {
        bail!("{what}: failed appends: {:?}\n{}", load.failed, c.logs());
    }
    if load.acked.len() < 100 {
        bail!("{what}: too little load to prove anything: {} appends", load.acked.len());
    }
    check_nothing_lost(&c.db.as_ref().unwrap().url, &load).await.with_context(|| what.to_string())?;
    for r in &replacements {
        let stall = load.stall_in(r.window);
        // A planned handoff never waits for a lease to expire.
        if stall >= TTL {
            bail!(
                "{what}: replacing {} with {} stalled an append {stall:?} (target: under the {TTL:?} TTL)\n{}",
                r.node,
                r.to,
                c.logs()
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rolling_upgrade_from_the_previous_release_fails_no_append() {
    let _serial = SERIAL.lock().await;
    let (old_version, old) = previous();
    let mut c = cluster_of(&old).await.unwrap();
    let new = PathBuf::from(CHITIN);
    under_load(&mut c, "roll forward", async |c: &mut Cluster| {
        let mut done = vec![replace(c, 0, &new, BINARY_VERSION).await?];
        let seen = versions(c, 0).await;
        let want: BTreeMap<String, String> =
            [("node-01", BINARY_VERSION), ("node-02", old_version.as_str()), ("node-03", old_version.as_str())]
                .map(|(n, v)| (n.into(), v.into()))
                .into();
        assert_eq!(seen, want, "cluster status during the roll");
        finalize_refused(c, 0, &["node-02", "node-03"], &old_version).await;
        done.push(replace(c, 1, &new, BINARY_VERSION).await?);
        done.push(replace(c, 2, &new, BINARY_VERSION).await?);
        let store = c.store().await;
        let (_, on_liveness) = lease_kinds(&store).await;
        assert_eq!(on_liveness, 0, "a lease rode on liveness before finalize (gate node-leases is off)");
        finalize(c).await;
        // Within a few rounds every held lease is on its holder's liveness.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let (own, on_liveness) = lease_kinds(&store).await;
            if own == 0 && on_liveness > 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{own} leases still carry their own expiry after finalize\n{}",
                c.logs()
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        store.close().await;
        Ok(done)
    })
    .await
    .unwrap();
    assert!(versions(&c, 2).await.values().all(|v| v == BINARY_VERSION));
    c.teardown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_rolled_back_before_finalize_fails_no_append() {
    let _serial = SERIAL.lock().await;
    let (old_version, old) = previous();
    let mut c = cluster_of(&old).await.unwrap();
    let new = PathBuf::from(CHITIN);
    under_load(&mut c, "roll back", async |c: &mut Cluster| {
        let mut done = vec![replace(c, 0, &new, BINARY_VERSION).await?, replace(c, 1, &new, BINARY_VERSION).await?];
        done.push(replace(c, 0, &old, &old_version).await?);
        // The release started on a schema with a migration it does not know.
        let log = c.nodes[0].log_text();
        assert!(
            log.contains("the schema has a migration this binary does not know"),
            "the rolled-back node did not log the newer schema:\n{}",
            c.nodes[0].log_tail(60)
        );
        finalize_refused(c, 1, &["node-01", "node-03"], &old_version).await;
        done.push(replace(c, 0, &new, BINARY_VERSION).await?);
        done.push(replace(c, 2, &new, BINARY_VERSION).await?);
        finalize(c).await;
        Ok(done)
    })
    .await
    .unwrap();
    c.teardown().await.unwrap();
}
