//! One `chitin node` process: started from a settings file, its stderr
//! appended to a log file, probed for readiness, signalled, and killed when
//! dropped (after a SIGCONT, so that a paused one dies too).

use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{KitError, http, log_tail};

/// One `chitin node` process, started or not.
pub struct NodeProc {
    /// The node's name (its `[cluster] instance_id` in cluster mode).
    pub name: String,
    /// gRPC address (`host:port`).
    pub api: String,
    /// HTTP address of `/readyz`, `/health` and `/metrics`.
    pub metrics: String,
    pub settings: PathBuf,
    /// Where the process's stderr (its tracing output) is appended.
    pub log: PathBuf,
    exe: PathBuf,
    /// Run inside this network namespace (`ip netns exec`).
    namespace: Option<String>,
    /// Extra environment of the process (a plant, failpoints).
    env: Vec<(String, String)>,
    /// How `/readyz` is probed when the node's HTTP listener speaks TLS.
    https: Option<std::sync::Arc<rustls::ClientConfig>>,
    child: Option<Child>,
}

impl NodeProc {
    /// A node not started yet: `exe node --settings <settings>`.
    pub fn new(
        exe: impl Into<PathBuf>,
        name: impl Into<String>,
        api: String,
        metrics: String,
        settings: PathBuf,
        log: PathBuf,
    ) -> NodeProc {
        NodeProc {
            name: name.into(),
            api,
            metrics,
            settings,
            log,
            exe: exe.into(),
            namespace: None,
            env: Vec::new(),
            https: None,
            child: None,
        }
    }

    /// [`NodeProc::new`] and [`NodeProc::start`].
    pub fn spawn(
        exe: impl Into<PathBuf>,
        name: impl Into<String>,
        api: String,
        metrics: String,
        settings: PathBuf,
        log: PathBuf,
    ) -> Result<NodeProc, KitError> {
        let mut node = NodeProc::new(exe, name, api, metrics, settings, log);
        node.start()?;
        Ok(node)
    }

    /// The same node, run inside network namespace `ns`.
    pub fn in_namespace(mut self, ns: Option<String>) -> NodeProc {
        self.namespace = ns;
        self
    }

    /// The same node, its `/readyz` probed over TLS with `tls` (a node
    /// with `[tls]`).
    pub fn with_https_probe(mut self, tls: std::sync::Arc<rustls::ClientConfig>) -> NodeProc {
        self.https = Some(tls);
        self
    }

    /// The same node, with `key=value` in its environment at every start.
    pub fn with_env(mut self, key: &str, value: &str) -> NodeProc {
        self.set_env(key, value);
        self
    }

    /// Puts `key=value` in the process's environment from its next start on.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.push((key.to_owned(), value.to_owned()));
    }

    /// (Re)starts the process with the same settings.
    pub fn start(&mut self) -> Result<(), KitError> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(KitError::io(format!("open {}", self.log.display())))?;
        let mut cmd = match &self.namespace {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.exe);
                c
            }
            None => Command::new(&self.exe),
        };
        // Its own process group: a Ctrl-C at the terminal reaches only the
        // parent (`chitin dev cluster`, `chitin chaos`), which stops the
        // nodes in order rather than all at once.
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let child = cmd
            .args(["node", "--settings"])
            .arg(&self.settings)
            .env("RUST_LOG", "info,sqlx=warn")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|source| KitError::Spawn { program: self.exe.display().to_string(), hint: "", source })?;
        self.child = Some(child);
        Ok(())
    }

    /// Whether the process was started and has not exited.
    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// The process id, if started.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, signal: &'static str) -> Result<(), KitError> {
        let pid = self.pid().ok_or_else(|| KitError::NotRunning { name: self.name.clone() })?;
        send_signal(pid, signal).map_err(|_| KitError::Signal { name: self.name.clone(), signal, pid })
    }

    /// SIGKILL, and reap the process.
    pub fn kill9(&mut self) -> Result<(), KitError> {
        self.signal("-KILL")?;
        if let Some(mut c) = self.child.take() {
            c.wait().map_err(KitError::io(format!("wait for {}", self.name)))?;
        }
        Ok(())
    }

    /// SIGHUP: the node reads its token files again and reloads its policies.
    pub fn hangup(&self) -> Result<(), KitError> {
        self.signal("-HUP")
    }

    /// SIGSTOP: the process keeps its sockets and answers nothing.
    pub fn pause(&self) -> Result<(), KitError> {
        self.signal("-STOP")
    }

    /// SIGCONT.
    pub fn resume(&self) -> Result<(), KitError> {
        self.signal("-CONT")
    }

    /// SIGTERM (the node drains, deregisters and exits) and wait for the
    /// exit status. A node still running after `within` is SIGKILLed and
    /// the answer is [`KitError::StopTimedOut`]: a graceful stop that hung
    /// is a failure, not a stop.
    pub fn terminate(&mut self, within: Duration) -> Result<ExitStatus, KitError> {
        self.signal("-TERM")?;
        let mut child = self.child.take().ok_or_else(|| KitError::NotRunning { name: self.name.clone() })?;
        let deadline = Instant::now() + within;
        let wait = KitError::io(format!("wait for {}", self.name));
        loop {
            if let Some(status) = child.try_wait().map_err(KitError::io(format!("wait for {}", self.name)))? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                child.wait().map_err(wait)?;
                return Err(KitError::StopTimedOut { name: self.name.clone(), within, log_tail: self.log_tail(30) });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `/readyz` answers 200; fails early when the process exits.
    pub async fn wait_ready(&mut self, within: Duration) -> Result<(), KitError> {
        let deadline = Instant::now() + within;
        loop {
            if !self.is_running() {
                return Err(KitError::ExitedEarly { name: self.name.clone(), log_tail: self.log_tail(30) });
            }
            let status = match &self.https {
                Some(tls) => http::https_status(&self.metrics, "/readyz", tls).await,
                None => http::http_status(&self.metrics, "/readyz").await,
            };
            if status == 200 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(KitError::NotReady { name: self.name.clone(), within, log_tail: self.log_tail(30) });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the log holds `line` at least `count` times (a reload's
    /// report after [`NodeProc::hangup`], say).
    pub async fn wait_logged(&self, line: &str, count: usize, within: Duration) -> Result<(), KitError> {
        let deadline = Instant::now() + within;
        while self.log_text().matches(line).count() < count {
            if Instant::now() > deadline {
                let (name, line, log_tail) = (self.name.clone(), line.to_string(), self.log_tail(30));
                return Err(KitError::NotLogged { name, line, count, within, log_tail });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    /// The whole log.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `lines` lines of the log.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }
}

/// `kill <signal> <pid>`; Err when kill refuses (no such process).
fn send_signal(pid: u32, signal: &str) -> Result<(), ()> {
    match Command::new("kill").args([signal, &pid.to_string()]).status() {
        Ok(s) if s.success() => Ok(()),
        _ => Err(()),
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // Woken first so that, should the kill fail, no process is
            // left stopped holding its ports.
            let _ = send_signal(c.id(), "-CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// A stand-in for `chitin`: `sh -c` ignores `node --settings <file>` as
    /// its extra arguments, so the signals and the hung-stop rule are tested
    /// on a real process.
    fn script(dir: &Path, body: &str) -> PathBuf {
        let exe = dir.join("fake-node");
        std::fs::write(&exe, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        exe
    }

    fn node(dir: &Path, body: &str) -> NodeProc {
        let exe = script(dir, body);
        NodeProc::new(exe, "n1", "127.0.0.1:1".into(), "127.0.0.1:1".into(), dir.join("n1.toml"), dir.join("n1.log"))
    }

    #[test]
    fn a_node_that_ignores_sigterm_is_killed_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path(), "trap '' TERM\necho started >&2\nwhile true; do sleep 0.05; done");
        n.start().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let err = n.terminate(Duration::from_millis(300)).unwrap_err();
        assert!(matches!(err, KitError::StopTimedOut { .. }), "{err}");
        assert!(!n.is_running());
        assert!(n.log_text().contains("started"), "stderr is captured in the log");
    }

    #[test]
    fn a_node_that_exits_on_sigterm_reports_its_status() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path(), "trap 'exit 0' TERM\nwhile true; do sleep 0.05; done");
        n.start().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(n.terminate(Duration::from_secs(5)).unwrap().success());
        assert!(matches!(n.pause(), Err(KitError::NotRunning { .. })));
    }

    #[tokio::test]
    async fn waiting_for_a_node_that_exits_fails_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path(), "echo 'bad settings' >&2\nexit 2");
        n.start().unwrap();
        let t = Instant::now();
        let err = n.wait_ready(Duration::from_secs(30)).await.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(10));
        assert!(matches!(&err, KitError::ExitedEarly { log_tail, .. } if log_tail.contains("bad settings")), "{err}");
    }

    #[test]
    fn pause_resume_and_kill() {
        let dir = tempfile::tempdir().unwrap();
        let mut n = node(dir.path(), "while true; do sleep 0.05; done");
        n.start().unwrap();
        n.pause().unwrap();
        n.resume().unwrap();
        assert!(n.is_running());
        n.kill9().unwrap();
        assert!(!n.is_running() && n.pid().is_none());
    }
}
