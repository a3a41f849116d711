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

use super::conn::{Conn, RedisConn};
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
    InvalidTarget { target: String, reason: String },
    /// This instance holds its limit of claims: release some first.
    #[error(
        "target {target} not claimed: this instance already holds {limit} claims (`cluster.max_claims_per_instance`); \
         release targets it no longer serves, or raise the limit"
    )]
    TooManyClaims { target: String, limit: u64 },
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

/// KEYS[1] claim key, KEYS[2] by-instance set; ARGV[1] value, ARGV[2] ttl,
/// ARGV[3] target id, ARGV[4] the instance's claim limit. Returns 1
/// claimed, 2 already ours, 3 refused at the limit (nothing kept), or the
/// other owner's claim value.
///
/// Kept to the fewest server calls the layout allows, because at pipeline 1
/// this script's own run time is what separates a claim from a bare
/// `SET NX`: one `SET k v NX EX ttl GET` both claims a free target and reads a
/// taken one (Redis ≥ 7.0; an older Redis refuses NX with GET and gets GET
/// then SET), and the set's `SADD` and `EXPIRE` run only once we own the
/// target. An integer reply instead of a table spares both sides an array.
const CLAIM: &str = r#"
local val, ttl = ARGV[1], ARGV[2]
local v = redis.pcall('SET', KEYS[1], val, 'NX', 'EX', ttl, 'GET')
if type(v) == 'table' and v.err then
  v = redis.call('GET', KEYS[1])
  if not v then redis.call('SET', KEYS[1], val, 'EX', ttl) end
end
local code = 1
if v then
  if string.sub(v, 1, #val) ~= val then return v end
  redis.call('EXPIRE', KEYS[1], ttl)
  code = 2
elseif redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1])
  return 3
end
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ttl)
return code
"#;

/// Planted [`crate::plant::Plant::AffinityClaim`]: [`CLAIM`] without its
/// ownership check, so a claim of another instance's target overwrites it.
const CLAIM_OVERWRITING: &str = r#"
local v = redis.call('GET', KEYS[1])
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[2])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then return 2 end
return 1
"#;

/// KEYS[1] by-instance set, KEYS[2..] claim keys; ARGV[1] value, ARGV[2]
/// ttl, ARGV[3] "1" to refresh the TTL of claims already ours, ARGV[4] the
/// instance's claim limit, ARGV[5..] target ids. Returns one entry per
/// target: 1 claimed, 2 already ours, 3 refused at the limit, or the other
/// owner's claim value. Same commands per target as [`CLAIM`],
/// with one `SADD` and one `EXPIRE` of the set for the whole batch.
const CLAIM_MANY: &str = r#"
local val, ttl, refresh, limit = ARGV[1], ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local n = #val
local out, mine = {}, {}
local held = redis.call('SCARD', KEYS[1])
for i = 2, #KEYS do
  local k = KEYS[i]
  local v = redis.pcall('SET', k, val, 'NX', 'EX', ttl, 'GET')
  if type(v) == 'table' and v.err then
    v = redis.call('GET', k)
    if not v then redis.call('SET', k, val, 'EX', ttl) end
  end
  if not v and held >= limit then
    redis.call('DEL', k)
    out[i - 1] = 3
  elseif not v then
    held = held + 1
    out[i - 1] = 1
    mine[#mine + 1] = ARGV[i + 3]
  elseif string.sub(v, 1, n) == val then
    if refresh then redis.call('EXPIRE', k, ttl) end
    out[i - 1] = 2
    mine[#mine + 1] = ARGV[i + 3]
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
/// prefix, ARGV[4] the `SSCAN` cursor, ARGV[5] members per call. Refreshes
/// one slice of the set; returns {refreshed, dropped, next cursor} ("0"
/// when the scan is done). A script blocks the server while it runs, so the
/// set is walked a slice per call and other clients' commands run between.
const REFRESH_SLICE: &str = r#"
local n = string.len(ARGV[1])
local refreshed, dropped = 0, 0
local scan = redis.call('SSCAN', KEYS[1], ARGV[4], 'COUNT', ARGV[5])
for _, t in ipairs(scan[2]) do
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
return {refreshed, dropped, scan[1]}
"#;

/// Members of the by-instance set one refresh call walks.
const REFRESH_SLICE_LEN: usize = 1000;

/// Claims one instance may hold by default (`cluster.max_claims_per_instance`,
/// whose default the settings hold).
pub use crate::settings::DEFAULT_MAX_CLAIMS_PER_INSTANCE as DEFAULT_MAX_CLAIMS;

/// The longest target id, in bytes: an id is a key of the application's
/// (a user, a session, a job), and Redis keeps every claim in memory.
pub const MAX_TARGET_BYTES: usize = 512;

/// Targets per script call in [`Affinity::claim_many`]. A script blocks the
/// whole server while it runs (≈ 5–10 µs per target here), so a huge batch
/// is cut into calls of this size, all sent in one pipeline: still one round
/// trip, but other clients' commands (other nodes' heartbeats) interleave
/// between the calls instead of timing out behind one long script.
pub const CLAIM_BATCH_CHUNK: usize = 1000;

/// A Lua script invoked by its SHA1 (`EVALSHA`), loaded on the first
/// `NOSCRIPT`. The command is built straight from the caller's keys and
/// arguments instead of through an intermediate invocation that copies them.
struct Lua {
    src: &'static str,
    sha: String,
}

impl Lua {
    fn new(src: &'static str) -> Self {
        Lua { src, sha: redis::Script::new(src).get_hash().to_string() }
    }

    /// `EVALSHA {sha} {numkeys}`; keys and then arguments go after it.
    fn call(&self, numkeys: usize) -> redis::Cmd {
        let mut c = redis::cmd("EVALSHA");
        c.arg(&self.sha).arg(numkeys);
        c
    }

    async fn load(&self, c: &mut Conn) -> redis::RedisResult<()> {
        let _: String = redis::cmd("SCRIPT").arg("LOAD").arg(self.src).query_async(c).await?;
        Ok(())
    }

    /// Runs `cmd` (built by [`Lua::call`]); on `NOSCRIPT` (a fresh or
    /// flushed server) loads the script and sends it once more.
    async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, c: &mut Conn) -> redis::RedisResult<T> {
        match cmd.query_async(c).await {
            Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                self.load(c).await?;
                cmd.query_async(c).await
            }
            r => r,
        }
    }

    /// [`Lua::run`] for a pipeline of calls to this one script.
    async fn run_pipe<T: redis::FromRedisValue>(&self, p: &redis::Pipeline, c: &mut Conn) -> redis::RedisResult<T> {
        match p.query_async(c).await {
            Err(e) if e.kind() == redis::ErrorKind::NoScriptError => {
                self.load(c).await?;
                p.query_async(c).await
            }
            r => r,
        }
    }
}

struct Scripts {
    /// [`CLAIM`], or [`CLAIM_OVERWRITING`] under its plant.
    claim: Lua,
    claim_many: Lua,
    release: Lua,
    release_all: Lua,
    refresh_slice: Lua,
}

/// `{prefix}{target}` written straight into the command buffer, so a claim
/// does not format its key into a `String` first.
struct ClaimKey<'a>(&'a str, &'a str);

impl redis::ToRedisArgs for ClaimKey<'_> {
    fn write_redis_args<W: ?Sized + redis::RedisWrite>(&self, out: &mut W) {
        out.write_arg_fmt(format_args!("{}{}", self.0, self.1));
    }
}

/// One instance's view of target affinity.
#[derive(Clone)]
pub struct Affinity {
    conn: RedisConn,
    keys: Keys,
    instance_id: Arc<str>,
    value: Arc<str>,
    /// `{ns}:affinity:`, and this instance's by-instance set: fixed for its
    /// life, so formatted once instead of on every claim.
    claim_prefix: Arc<str>,
    set_key: Arc<str>,
    ttl: u64,
    /// Claims this instance may hold at once.
    max_claims: u64,
    scripts: Arc<Scripts>,
}

/// A target id as every call that names one takes it: 1 to
/// [`MAX_TARGET_BYTES`] bytes, no whitespace, not in the `by-instance:` space.
pub fn validate_target(target: &str) -> Result<(), AffinityError> {
    let reason = if target.is_empty() {
        "it is empty".to_string()
    } else if target.len() > MAX_TARGET_BYTES {
        format!("it is {} bytes long; at most {MAX_TARGET_BYTES}", target.len())
    } else if target.starts_with("by-instance:") {
        "it would collide with the by-instance sets".to_string()
    } else if target.chars().any(char::is_whitespace) {
        "it contains whitespace".to_string()
    } else {
        return Ok(());
    };
    // A long id is shown by its start: the message must not be the flood.
    let shown: String = target.chars().take(64).collect();
    Err(AffinityError::InvalidTarget { target: shown, reason })
}

/// What one claim script reply means for `target`: 1 claimed, 2 already
/// ours, 3 refused at the instance's `limit`, a string is the other owner's
/// claim value. Anything else is a
/// server that does not run our script; it counts as a Redis error, so
/// dispatch fails open on it like on any other.
fn claim_outcome(target: &str, limit: u64, reply: redis::Value) -> Result<Claim, AffinityError> {
    match reply {
        redis::Value::Int(1) => Ok(Claim::Claimed),
        redis::Value::Int(2) => Ok(Claim::AlreadyOurs),
        redis::Value::Int(3) => Err(AffinityError::TooManyClaims { target: target.to_string(), limit }),
        redis::Value::BulkString(v) => Err(AffinityError::TargetOwnedByOther {
            target: target.to_string(),
            owner: Keys::owner_of_claim(&String::from_utf8_lossy(&v)).to_string(),
        }),
        redis::Value::SimpleString(v) => {
            Err(AffinityError::TargetOwnedByOther { target: target.to_string(), owner: Keys::owner_of_claim(&v).to_string() })
        }
        other => Err(AffinityError::Redis(redis::RedisError::from((
            redis::ErrorKind::TypeError,
            "unexpected claim script reply",
            format!("{other:?}"),
        )))),
    }
}

impl Affinity {
    /// An instance's affinity handle. Does not touch Redis; fails only on
    /// an instance id the claim value cannot carry.
    pub fn new(conn: RedisConn, keys: Keys, instance_id: &str, liveness: Duration) -> Result<Self, InvalidInstanceId> {
        validate_instance_id(instance_id)?;
        Ok(Affinity {
            conn,
            instance_id: instance_id.into(),
            value: Keys::claim_value(instance_id).into(),
            claim_prefix: keys.affinity_prefix().into(),
            set_key: keys.affinity_by_instance(instance_id).into(),
            keys,
            ttl: ttl_secs(liveness),
            max_claims: DEFAULT_MAX_CLAIMS,
            scripts: Arc::new(Scripts {
                claim: Lua::new(if crate::plant::active(crate::plant::Plant::AffinityClaim) { CLAIM_OVERWRITING } else { CLAIM }),
                claim_many: Lua::new(CLAIM_MANY),
                release: Lua::new(RELEASE),
                release_all: Lua::new(RELEASE_ALL),
                refresh_slice: Lua::new(REFRESH_SLICE),
            }),
        })
    }

    /// At most `limit` claims at once: a claim past it is refused with
    /// [`AffinityError::TooManyClaims`] (default [`DEFAULT_MAX_CLAIMS`]).
    pub fn with_max_claims(mut self, limit: u64) -> Self {
        self.max_claims = limit;
        self
    }

    /// The source of the single-target claim script (KEYS: claim key,
    /// by-instance set; ARGV: claim value, TTL seconds, target id, claim
    /// limit), so that a
    /// benchmark can run exactly this script from another client.
    pub fn claim_script() -> &'static str {
        CLAIM
    }

    /// The source of the batch claim script (KEYS: by-instance set, then one
    /// claim key per target; ARGV: claim value, TTL seconds, "1" to refresh
    /// claims already ours, the claim limit, then one target id per target).
    pub fn claim_many_script() -> &'static str {
        CLAIM_MANY
    }

    /// How long a claim lives unless refreshed (the liveness timeout, in
    /// whole seconds as Redis keeps it).
    pub fn claim_ttl(&self) -> Duration {
        Duration::from_secs(self.ttl)
    }

    /// This instance's id.
    pub fn instance_id(&self) -> &str {
        &self.instance_id
    }

    /// The key layout this handle writes.
    pub fn keys(&self) -> &Keys {
        &self.keys
    }

    /// Claims `target` if free, refreshes it if ours, or fails with
    /// [`AffinityError::TargetOwnedByOther`]. One `EVALSHA` round trip.
    pub async fn claim(&self, target: &str) -> Result<Claim, AffinityError> {
        validate_target(target)?;
        let mut cmd = self.scripts.claim.call(2);
        cmd.arg(ClaimKey(&self.claim_prefix, target)).arg(&*self.set_key).arg(&*self.value).arg(self.ttl).arg(target);
        cmd.arg(self.max_claims);
        let mut c = self.conn.get().await?;
        let reply: redis::Value = self.scripts.claim.run(&cmd, &mut c).await?;
        claim_outcome(target, self.max_claims, reply)
    }

    /// Claims many targets in one round trip, each with its own outcome, in
    /// the order of `targets`: `Ok(Claimed)`, `Ok(AlreadyOurs)`,
    /// `Err(TargetOwnedByOther)` or `Err(InvalidTarget)` (an invalid id fails
    /// only its own entry). Each target's claim is atomic exactly like
    /// [`Affinity::claim`]; the batch is cut into script calls of
    /// [`CLAIM_BATCH_CHUNK`] targets, each atomic, all in one pipeline. A
    /// target listed twice is `Claimed` (or `AlreadyOurs`) and then
    /// `AlreadyOurs`. The outer error is Redis failing the whole batch.
    pub async fn claim_many<S: AsRef<str>>(&self, targets: &[S]) -> Result<Vec<Result<Claim, AffinityError>>, AffinityError> {
        let mut out: Vec<Option<Result<Claim, AffinityError>>> = Vec::with_capacity(targets.len());
        let mut valid = Vec::with_capacity(targets.len());
        for (i, t) in targets.iter().enumerate() {
            match validate_target(t.as_ref()) {
                Ok(()) => {
                    valid.push(i);
                    out.push(None);
                }
                Err(e) => out.push(Some(Err(e))),
            }
        }
        if !valid.is_empty() {
            // Claims already ours get their TTL refreshed too.
            let refresh = "1";
            let mut p = redis::pipe();
            for chunk in valid.chunks(CLAIM_BATCH_CHUNK) {
                let mut cmd = self.scripts.claim_many.call(1 + chunk.len());
                cmd.arg(&*self.set_key);
                for &i in chunk {
                    cmd.arg(ClaimKey(&self.claim_prefix, targets[i].as_ref()));
                }
                cmd.arg(&*self.value).arg(self.ttl).arg(refresh).arg(self.max_claims);
                for &i in chunk {
                    cmd.arg(targets[i].as_ref());
                }
                p.add_command(cmd);
            }
            let mut c = self.conn.get().await?;
            let replies: Vec<Vec<redis::Value>> = self.scripts.claim_many.run_pipe(&p, &mut c).await?;
            let replies: Vec<redis::Value> = replies.into_iter().flatten().collect();
            if replies.len() != valid.len() {
                return Err(AffinityError::Redis(redis::RedisError::from((
                    redis::ErrorKind::TypeError,
                    "claim script returned the wrong number of outcomes",
                    format!("{} for {} targets", replies.len(), valid.len()),
                ))));
            }
            for (i, reply) in valid.into_iter().zip(replies) {
                out[i] = Some(claim_outcome(targets[i].as_ref(), self.max_claims, reply));
            }
        }
        Ok(out.into_iter().map(|o| o.expect("every target has an outcome")).collect())
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
        let mut cmd = self.scripts.release.call(2);
        cmd.arg(ClaimKey(&self.claim_prefix, target)).arg(&*self.set_key).arg(&*self.value).arg(target);
        let mut c = self.conn.get().await?;
        let n: i64 = self.scripts.release.run(&cmd, &mut c).await?;
        Ok(n == 1)
    }

    /// Graceful shutdown: releases every claim of this instance in one
    /// atomic step, and drops its by-instance set.
    pub async fn release_all(&self) -> Result<ReleaseAllReport, AffinityError> {
        let mut cmd = self.scripts.release_all.call(1);
        cmd.arg(&*self.set_key).arg(&*self.value).arg(&*self.claim_prefix);
        let mut c = self.conn.get().await?;
        let n: u64 = self.scripts.release_all.run(&cmd, &mut c).await?;
        Ok(ReleaseAllReport { released: n })
    }

    /// Refreshes the TTL of every claim still ours (called on heartbeat) and
    /// drops lost ones from our set, a slice of the set per script call.
    /// Returns (refreshed, dropped).
    pub async fn refresh_all(&self) -> Result<(u64, u64), AffinityError> {
        let mut c = self.conn.get().await?;
        let (mut refreshed, mut dropped, mut cursor) = (0, 0, "0".to_string());
        loop {
            let mut cmd = self.scripts.refresh_slice.call(1);
            cmd.arg(&*self.set_key).arg(&*self.value).arg(self.ttl).arg(&*self.claim_prefix);
            cmd.arg(&cursor).arg(REFRESH_SLICE_LEN);
            let (r, d, next): (u64, u64, String) = self.scripts.refresh_slice.run(&cmd, &mut c).await?;
            (refreshed, dropped, cursor) = (refreshed + r, dropped + d, next);
            if cursor == "0" {
                return Ok((refreshed, dropped));
            }
        }
    }

    /// How many targets this instance's by-instance set holds.
    pub async fn owned_count(&self) -> Result<u64, AffinityError> {
        let mut c = self.conn.get().await?;
        Ok(c.scard(&*self.set_key).await?)
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
    let set_prefix = format!("{prefix}by-instance:");
    let mut claim_keys = c.scan_prefix(&prefix).await?;
    claim_keys.retain(|k| !k.starts_with(&set_prefix));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(r: Result<Claim, AffinityError>) -> String {
        match r {
            Err(AffinityError::TargetOwnedByOther { target, owner }) => {
                assert_eq!(target, "t");
                owner
            }
            other => panic!("expected TargetOwnedByOther, got {other:?}"),
        }
    }

    #[test]
    fn claim_replies_map_to_outcomes() {
        use redis::Value;
        assert_eq!(claim_outcome("t", 9, Value::Int(1)).unwrap(), Claim::Claimed);
        assert_eq!(claim_outcome("t", 9, Value::Int(2)).unwrap(), Claim::AlreadyOurs);
        assert!(matches!(claim_outcome("t", 9, Value::Int(3)), Err(AffinityError::TooManyClaims { limit: 9, .. })));
        assert_eq!(owner(claim_outcome("t", 9, Value::BulkString(b"n-10:".to_vec()))), "n-10");
        assert_eq!(owner(claim_outcome("t", 9, Value::SimpleString("n-2:".into()))), "n-2");
        // A value written by hand without the delimiter still names someone.
        assert_eq!(owner(claim_outcome("t", 9, Value::BulkString(b"legacy".to_vec()))), "legacy");
        for odd in [Value::Int(0), Value::Int(4), Value::Nil, Value::Array(vec![])] {
            let e = claim_outcome("t", 9, odd.clone()).unwrap_err();
            assert!(e.is_redis(), "{odd:?} must count as a Redis error (fail open), got {e:?}");
        }
    }

    #[test]
    fn claim_key_is_written_as_one_argument() {
        use redis::ToRedisArgs;
        assert_eq!(ClaimKey("ns:affinity:", "t-1").to_redis_args(), vec![b"ns:affinity:t-1".to_vec()]);
        assert_eq!(
            ClaimKey(&Keys::new("ns").affinity_prefix(), "t-1").to_redis_args(),
            vec![Keys::new("ns").affinity("t-1").into_bytes()]
        );
    }

    #[test]
    fn evalsha_command_carries_the_scripts_sha() {
        let lua = Lua::new(CLAIM);
        assert_eq!(lua.sha, redis::Script::new(CLAIM).get_hash());
        let mut cmd = lua.call(2);
        cmd.arg("k1").arg("k2").arg("v");
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .map(|a| match a {
                redis::Arg::Simple(b) => b.to_vec(),
                redis::Arg::Cursor => panic!("cursor"),
            })
            .collect();
        assert_eq!(
            args,
            vec![b"EVALSHA".to_vec(), lua.sha.as_bytes().to_vec(), b"2".to_vec(), b"k1".to_vec(), b"k2".to_vec(), b"v".to_vec()]
        );
    }

    #[test]
    fn target_ids() {
        for ok in ["t-1", "019b9450-0b91-8c10-86c3-5c2c3f6b9f04", "a:b"] {
            assert!(validate_target(ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(MAX_TARGET_BYTES + 1);
        for bad in ["", "by-instance:n-1", "a b", "x\t", &long] {
            assert!(matches!(validate_target(bad), Err(AffinityError::InvalidTarget { .. })), "{bad:?}");
        }
        assert!(validate_target(&long[1..]).is_ok(), "{MAX_TARGET_BYTES} bytes is the limit, not over it");
        let Err(AffinityError::InvalidTarget { target, reason }) = validate_target(&long) else { unreachable!() };
        assert!(target.len() <= 64 && reason.contains("513 bytes"), "{target} {reason}");
    }
}
