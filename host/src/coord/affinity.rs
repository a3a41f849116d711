//! Target affinity: `{ns}:affinity:{target_id}` = `{instance_id}:` (TTL
//! liveness) and the `{ns}:affinity:by-instance:{id}` set (same TTL).
//!
//! A claim is taken at dispatch. Ownership is the stored value starting with
//! `{instance_id}:`, so `n-1` never owns `n-10:`. Claim, ownership check and
//! the by-instance update are one Lua script.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;

use super::conn::RedisConn;
use super::keys::{InvalidInstanceId, Keys, validate_instance_id};
use super::time::ttl_secs;

/// A successful claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The target was free; it is ours now.
    Claimed,
    /// It was ours already; the claim's TTL was refreshed.
    AlreadyOurs,
}

#[derive(Debug, thiserror::Error)]
pub enum AffinityError {
    /// Another instance holds the target: decline the dispatch, never redirect.
    #[error("target {target} is owned by instance {owner}")]
    TargetOwnedByOther { target: String, owner: String },
    #[error("invalid target id {target:?}: {reason}")]
    InvalidTarget { target: String, reason: &'static str },
    #[error(transparent)]
    InstanceId(#[from] InvalidInstanceId),
    #[error("Redis: {0}")]
    Redis(#[from] redis::RedisError),
}

impl AffinityError {
    /// True for errors talking to Redis (the ones dispatch fails open on).
    pub fn is_redis(&self) -> bool {
        matches!(self, AffinityError::Redis(_))
    }
}

/// What [`Affinity::release_all`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReleaseAllReport {
    /// Claims deleted (they were still ours).
    pub released: u64,
}

/// Returns {1, ''} claimed, {2, ''} already ours, {0, value} owned by another.
const CLAIM: &str = r#"
local v = redis.call('GET', KEYS[1])
local code = 1
if v then
  if string.sub(v, 1, string.len(ARGV[1])) ~= ARGV[1] then
    return {0, v}
  end
  redis.call('EXPIRE', KEYS[1], ARGV[2])
  code = 2
else
  redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return {code, ''}
"#;

/// KEYS[1] by-instance set, KEYS[2..] claim keys; ARGV[1] value, ARGV[2]
/// ttl, ARGV[3] "1" to refresh the TTL of claims already ours, ARGV[4..]
/// target ids. Returns one entry per target: 1 claimed, 2 already ours, or
/// the other owner's claim value.
///
/// One command per target: `SET k v NX EX ttl GET` (Redis ≥ 7.0) claims a
/// free target and returns the current value of a taken one; on an older
/// Redis, which refuses NX with GET, it falls back to GET then SET.
const CLAIM_MANY: &str = r#"
local val, ttl, refresh = ARGV[1], ARGV[2], ARGV[3] == '1'
local n = string.len(val)
local out, mine = {}, {}
for i = 2, #KEYS do
  local k = KEYS[i]
  local v = redis.pcall('SET', k, val, 'NX', 'EX', ttl, 'GET')
  if type(v) == 'table' and v.err then
    v = redis.call('GET', k)
    if not v then redis.call('SET', k, val, 'EX', ttl) end
  end
  if not v then
    out[i - 1] = 1
    mine[#mine + 1] = ARGV[i + 2]
  elseif string.sub(v, 1, n) == val then
    if refresh then redis.call('EXPIRE', k, ttl) end
    out[i - 1] = 2
    mine[#mine + 1] = ARGV[i + 2]
  else
    out[i - 1] = v
  end
end
for i = 1, #mine, 1000 do
  redis.call('SADD', KEYS[1], unpack(mine, i, math.min(i + 999, #mine)))
end
if #mine > 0 then redis.call('EXPIRE', KEYS[1], ttl) end
return out
"#;

/// Deletes the claim only if ours; always drops the target from our set.
const RELEASE: &str = r#"
redis.call('SREM', KEYS[2], ARGV[2])
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, string.len(ARGV[1])) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"#;

/// KEYS[1] by-instance set; ARGV[1] value, ARGV[2] claim key prefix.
const RELEASE_ALL: &str = r#"
local n = string.len(ARGV[1])
local released = 0
for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local k = ARGV[2] .. t
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, n) == ARGV[1] then
    redis.call('DEL', k)
    released = released + 1
  end
end
redis.call('DEL', KEYS[1])
return released
"#;

/// KEYS[1] by-instance set; ARGV[1] value, ARGV[2] ttl, ARGV[3] claim key
/// prefix. Returns {refreshed, dropped}.
const REFRESH_ALL: &str = r#"
local n = string.len(ARGV[1])
local refreshed, dropped = 0, 0
for _, t in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local k = ARGV[3] .. t
  local v = redis.call('GET', k)
  if v and string.sub(v, 1, n) == ARGV[1] then
    redis.call('EXPIRE', k, ARGV[2])
    refreshed = refreshed + 1
  else
    redis.call('SREM', KEYS[1], t)
    dropped = dropped + 1
  end
end
if refreshed > 0 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
return {refreshed, dropped}
"#;

struct Scripts {
    claim: redis::Script,
    claim_many: redis::Script,
    release: redis::Script,
    release_all: redis::Script,
    refresh_all: redis::Script,
}

/// One instance's view of target affinity.
#[derive(Clone)]
pub struct Affinity {
    conn: RedisConn,
    keys: Keys,
    instance_id: Arc<str>,
    value: Arc<str>,
    liveness: Duration,
    refresh_owned: bool,
    scripts: Arc<Scripts>,
}

fn validate_target(target: &str) -> Result<(), AffinityError> {
    let reason = if target.is_empty() {
        "it is empty"
    } else if target.starts_with("by-instance:") {
        "it would collide with the by-instance sets"
    } else if target.chars().any(char::is_whitespace) {
        "it contains whitespace"
    } else {
        return Ok(());
    };
    Err(AffinityError::InvalidTarget { target: target.to_string(), reason })
}

impl Affinity {
    pub fn new(
        conn: RedisConn,
        keys: Keys,
        instance_id: &str,
        liveness: Duration,
    ) -> Result<Self, InvalidInstanceId> {
        validate_instance_id(instance_id)?;
        Ok(Affinity {
            conn,
            keys,
            instance_id: instance_id.into(),
            value: Keys::claim_value(instance_id).into(),
            liveness,
            refresh_owned: true,
            scripts: Arc::new(Scripts {
                claim: redis::Script::new(CLAIM),
                claim_many: redis::Script::new(CLAIM_MANY),
                release: redis::Script::new(RELEASE),
                release_all: redis::Script::new(RELEASE_ALL),
                refresh_all: redis::Script::new(REFRESH_ALL),
            }),
        })
    }

    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// Whether [`Affinity::claim_many`] refreshes the TTL of claims that are
    /// already ours (default true). Without it an already-owned claim costs
    /// one command instead of two; the heartbeat's [`Affinity::refresh_all`]
    /// keeps every claim alive anyway.
    pub fn with_refresh_on_claim(mut self, refresh: bool) -> Self {
        self.refresh_owned = refresh;
        self
    }

    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Claims `target` if free, refreshes it if ours, or fails with
    /// [`AffinityError::TargetOwnedByOther`].
    pub async fn claim(&self, target: &str) -> Result<Claim, AffinityError> {
        validate_target(target)?;
        let mut c = self.conn.get().await?;
        let (code, other): (i64, String) = self
            .scripts
            .claim
            .key(self.keys.affinity(target))
            .key(self.keys.affinity_by_instance(&self.instance_id))
            .arg(&*self.value)
            .arg(ttl_secs(self.liveness))
            .arg(target)
            .invoke_async(&mut c)
            .await?;
        match code {
            1 => Ok(Claim::Claimed),
            2 => Ok(Claim::AlreadyOurs),
            _ => Err(AffinityError::TargetOwnedByOther {
                target: target.to_string(),
                owner: Keys::owner_of_claim(&other).to_string(),
            }),
        }
    }

    /// Claims many targets in one script call (one round trip, atomic as a
    /// whole). Results are in the order of `targets`.
    pub async fn claim_many<S: AsRef<str>>(
        &self,
        targets: &[S],
    ) -> Result<Vec<Result<Claim, AffinityError>>, AffinityError> {
        if targets.is_empty() {
            return Ok(Vec::new());
        }
        for t in targets {
            validate_target(t.as_ref())?;
        }
        let mut inv = self.scripts.claim_many.prepare_invoke();
        inv.key(self.keys.affinity_by_instance(&self.instance_id));
        for t in targets {
            inv.key(self.keys.affinity(t.as_ref()));
        }
        inv.arg(&*self.value).arg(ttl_secs(self.liveness)).arg(if self.refresh_owned { "1" } else { "0" });
        for t in targets {
            inv.arg(t.as_ref());
        }
        let mut c = self.conn.get().await?;
        let values: Vec<redis::Value> = inv.invoke_async(&mut c).await?;
        Ok(targets
            .iter()
            .zip(values)
            .map(|(t, v)| match v {
                redis::Value::Int(1) => Ok(Claim::Claimed),
                redis::Value::Int(2) => Ok(Claim::AlreadyOurs),
                other => {
                    let owner: String = redis::from_redis_value(&other).unwrap_or_default();
                    Err(AffinityError::TargetOwnedByOther {
                        target: t.as_ref().to_string(),
                        owner: Keys::owner_of_claim(&owner).to_string(),
                    })
                }
            })
            .collect())
    }

    /// The instance owning `target`, if any.
    pub async fn owner(&self, target: &str) -> Result<Option<String>, AffinityError> {
        owner(&self.conn, &self.keys, target).await
    }

    /// Targets `instance` owns (members of its by-instance set whose claim
    /// is still its own), sorted.
    pub async fn list(&self, instance: &str) -> Result<Vec<String>, AffinityError> {
        list(&self.conn, &self.keys, instance).await
    }

    /// Targets this instance owns.
    pub async fn my_targets(&self) -> Result<Vec<String>, AffinityError> {
        self.list(&self.instance_id).await
    }

    /// Releases `target` if (and only if) ours. Returns whether a claim was deleted.
    pub async fn release(&self, target: &str) -> Result<bool, AffinityError> {
        validate_target(target)?;
        let mut c = self.conn.get().await?;
        let n: i64 = self
            .scripts
            .release
            .key(self.keys.affinity(target))
            .key(self.keys.affinity_by_instance(&self.instance_id))
            .arg(&*self.value)
            .arg(target)
            .invoke_async(&mut c)
            .await?;
        Ok(n == 1)
    }

    /// Graceful shutdown: releases every claim of this instance in one
    /// atomic step, and drops its by-instance set.
    pub async fn release_all(&self) -> Result<ReleaseAllReport, AffinityError> {
        let mut c = self.conn.get().await?;
        let n: u64 = self
            .scripts
            .release_all
            .key(self.keys.affinity_by_instance(&self.instance_id))
            .arg(&*self.value)
            .arg(self.keys.affinity_prefix())
            .invoke_async(&mut c)
            .await?;
        Ok(ReleaseAllReport { released: n })
    }

    /// Refreshes the TTL of every claim still ours (called on heartbeat) and
    /// drops lost ones from our set. Returns (refreshed, dropped).
    pub async fn refresh_all(&self) -> Result<(u64, u64), AffinityError> {
        let mut c = self.conn.get().await?;
        let r: (u64, u64) = self
            .scripts
            .refresh_all
            .key(self.keys.affinity_by_instance(&self.instance_id))
            .arg(&*self.value)
            .arg(ttl_secs(self.liveness))
            .arg(self.keys.affinity_prefix())
            .invoke_async(&mut c)
            .await?;
        Ok(r)
    }

    /// How many targets this instance's by-instance set holds.
    pub async fn owned_count(&self) -> Result<u64, AffinityError> {
        let mut c = self.conn.get().await?;
        Ok(c.scard(self.keys.affinity_by_instance(&self.instance_id)).await?)
    }

    /// Claims whose owner's instance key is gone.
    pub async fn orphaned_count(&self) -> Result<u64, AffinityError> {
        Ok(orphaned_claims(&self.conn, &self.keys).await?.len() as u64)
    }
}

/// The instance owning `target`, if any.
pub async fn owner(conn: &RedisConn, keys: &Keys, target: &str) -> Result<Option<String>, AffinityError> {
    validate_target(target)?;
    let mut c = conn.get().await?;
    let v: Option<String> = c.get(keys.affinity(target)).await?;
    Ok(v.map(|v| Keys::owner_of_claim(&v).to_string()))
}

/// Targets `instance` owns, sorted.
pub async fn list(conn: &RedisConn, keys: &Keys, instance: &str) -> Result<Vec<String>, AffinityError> {
    validate_instance_id(instance)?;
    let mut c = conn.get().await?;
    let mut targets: Vec<String> = c.smembers(keys.affinity_by_instance(instance)).await?;
    if targets.is_empty() {
        return Ok(targets);
    }
    targets.sort();
    let claim_keys: Vec<String> = targets.iter().map(|t| keys.affinity(t)).collect();
    let values: Vec<Option<String>> = redis::cmd("MGET").arg(&claim_keys).query_async(&mut c).await?;
    let prefix = Keys::claim_value(instance);
    Ok(targets
        .into_iter()
        .zip(values)
        .filter(|(_, v)| v.as_deref().is_some_and(|v| v.starts_with(&prefix)))
        .map(|(t, _)| t)
        .collect())
}

/// Every claim (`(target, owner)`) whose owner's instance key is gone,
/// sorted by target. Scans `{ns}:affinity:*`.
pub async fn orphaned_claims(conn: &RedisConn, keys: &Keys) -> Result<Vec<(String, String)>, redis::RedisError> {
    let mut c = conn.get().await?;
    let prefix = keys.affinity_prefix();
    let pattern = Keys::scan_pattern(&prefix);
    let set_prefix = format!("{prefix}by-instance:");
    let mut cursor: u64 = 0;
    let mut claim_keys = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut c)
            .await?;
        claim_keys.extend(batch.into_iter().filter(|k| !k.starts_with(&set_prefix)));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    claim_keys.sort();
    claim_keys.dedup();
    let mut claims = Vec::new();
    for chunk in claim_keys.chunks(1000) {
        let values: Vec<Option<String>> = redis::cmd("MGET").arg(chunk).query_async(&mut c).await?;
        for (k, v) in chunk.iter().zip(values) {
            if let Some(v) = v {
                claims.push((k[prefix.len()..].to_string(), Keys::owner_of_claim(&v).to_string()));
            }
        }
    }
    let owners: BTreeSet<&str> = claims.iter().map(|(_, o)| o.as_str()).collect();
    let owners: Vec<&str> = owners.into_iter().collect();
    let mut dead = BTreeSet::new();
    for chunk in owners.chunks(1000) {
        let mut p = redis::pipe();
        for o in chunk {
            p.exists(keys.instance(o));
        }
        let alive: Vec<bool> = p.query_async(&mut c).await?;
        dead.extend(chunk.iter().zip(alive).filter(|(_, a)| !a).map(|(o, _)| o.to_string()));
    }
    Ok(claims.into_iter().filter(|(_, o)| dead.contains(o)).collect())
}
