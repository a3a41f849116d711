//! Shared helpers for the coord_* tests: a private namespace per test on the
//! real Redis (127.0.0.1:6379, or `CHITIN_TEST_REDIS_URL`), removed on drop.

use std::time::{Duration, Instant};

use chitin::coord::{
    Affinity, CoordConfig, Coordinator, Deployments, FailOpenPolicy, InstanceInfo, Keys, Monitor, RedisConn, RedisSettings,
    Registry,
};

pub fn redis_url() -> String {
    std::env::var("CHITIN_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_string())
}

/// A random namespace `chitin-test-<random>`; every key under it is deleted
/// when this is dropped (also after a failed assertion).
pub struct TestNs {
    pub ns: String,
    pub url: String,
    pub keys: Keys,
}

impl TestNs {
    pub fn new() -> Self {
        Self::with_url(redis_url())
    }

    pub fn with_url(url: String) -> Self {
        let ns = format!("chitin-test-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        TestNs { keys: Keys::new(&ns), ns, url }
    }

    /// A new connection of its own (a separate client).
    pub fn conn(&self) -> RedisConn {
        RedisConn::open(&self.url).expect("redis url")
    }

    pub fn config(&self, liveness: Duration) -> CoordConfig {
        let mut c = CoordConfig::new(&self.url);
        c.namespace = self.ns.clone();
        c.liveness_timeout = liveness;
        c.heartbeat_interval = liveness / 3;
        c.monitor_interval = liveness / 3;
        c.redis = RedisSettings::new(&self.url);
        c.fail_open = FailOpenPolicy { attempts: 3, backoff: Duration::from_millis(20), log_every: Duration::from_secs(3600) };
        c
    }

    /// A node with its own connection.
    pub fn node(&self, id: &str, liveness: Duration) -> Coordinator {
        let info = InstanceInfo::new(id, format!("host-{id}"), "127.0.0.1:50051", "0.1.0-test");
        Coordinator::new(self.config(liveness), info).expect("coordinator")
    }

    pub fn affinity(&self, id: &str, liveness: Duration) -> Affinity {
        Affinity::new(self.conn(), self.keys.clone(), id, liveness).expect("affinity")
    }

    pub fn registry(&self, id: &str, liveness: Duration) -> Registry {
        let info = InstanceInfo::new(id, format!("host-{id}"), format!("10.0.0.1:{}", 50000 + id.len()), "0.1.0");
        Registry::new(self.conn(), self.keys.clone(), info, liveness)
    }

    pub fn deployments(&self, id: &str) -> Deployments {
        Deployments::new(self.conn(), self.keys.clone(), id).expect("deployments")
    }

    pub fn monitor(&self) -> Monitor {
        Monitor::new(self.conn(), self.keys.clone(), Default::default())
    }

    /// A plain synchronous connection for raw checks (what `redis-cli` sees).
    pub fn raw(&self) -> redis::Connection {
        redis::Client::open(self.url.as_str()).unwrap().get_connection().unwrap()
    }

    pub fn get(&self, key: &str) -> Option<String> {
        redis::cmd("GET").arg(key).query(&mut self.raw()).unwrap()
    }

    pub fn ttl(&self, key: &str) -> i64 {
        redis::cmd("TTL").arg(key).query(&mut self.raw()).unwrap()
    }

    pub fn exists(&self, key: &str) -> bool {
        redis::cmd("EXISTS").arg(key).query(&mut self.raw()).unwrap()
    }

    pub fn set(&self, key: &str, value: &str) {
        let _: () = redis::cmd("SET").arg(key).arg(value).query(&mut self.raw()).unwrap();
    }

    pub fn del(&self, key: &str) {
        let _: i64 = redis::cmd("DEL").arg(key).query(&mut self.raw()).unwrap();
    }

    pub fn smembers(&self, key: &str) -> Vec<String> {
        let mut v: Vec<String> = redis::cmd("SMEMBERS").arg(key).query(&mut self.raw()).unwrap();
        v.sort();
        v
    }

    /// Every key in the namespace.
    pub fn all_keys(&self) -> Vec<String> {
        let mut c = self.raw();
        let pattern = Keys::scan_pattern(&format!("{}:", self.ns));
        let mut keys: Vec<String> = redis::cmd("KEYS").arg(pattern).query(&mut c).unwrap_or_default();
        keys.sort();
        keys
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(self.url.as_str()) else { return };
        let Ok(mut c) = client.get_connection_with_timeout(Duration::from_secs(1)) else { return };
        let keys = self.all_keys_with(&mut c);
        for chunk in keys.chunks(500) {
            let _: redis::RedisResult<i64> = redis::cmd("DEL").arg(chunk).query(&mut c);
        }
    }
}

impl TestNs {
    fn all_keys_with(&self, c: &mut redis::Connection) -> Vec<String> {
        let pattern = Keys::scan_pattern(&format!("{}:", self.ns));
        redis::cmd("KEYS").arg(pattern).query(c).unwrap_or_default()
    }
}

/// Polls `f` every 50 ms until it is true or `limit` passes; returns whether it became true.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if f().await {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
