//! Fencing in the application's own Redis: the claim and the check of
//! [`super::table`] as scripts, so that the check and the application's
//! writes run as one atomic step.
//!
//! A shard's fence is the hash `<prefix>fence:{<shard>}` (fields `epoch`,
//! `holder`, `retired`). [`RedisFence::claim`] writes a higher epoch into it
//! (refusing an older one, or a retired shard) and retires the parent of a
//! split child in the same script. [`RedisFence::write`] runs the
//! application's commands only if the fence holds its token. Redis runs one
//! script at a time, so a write under an older epoch either ran before the
//! newer holder's claim or not at all: the same guarantee as the SQL fence
//! table, on one server.
//!
//! Limits, as Redis replicates: replication is asynchronous, so a failover
//! to a replica that had not received the claim lets the older token write
//! again until the new holder claims once more (claim again after a Redis
//! failover, or use `WAIT` after the claim); on Redis Cluster, the fence
//! key and the keys a write touches must share a hash slot: put the shard
//! in a hash tag of your keys (`{<shard>}:…`), as the fence key does.

use redis::aio::ConnectionLike;
use redis::{Cmd, Script, Value};

use super::{FenceError, LeaseToken};

/// The claim: KEYS[1] the shard's fence, KEYS[2] (optional) the parent's;
/// ARGV epoch, holder. Answers `{status, stored epoch}`.
pub const CLAIM_SCRIPT: &str = r#"
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'retired')
if cur[3] == '1' then return {'retired', cur[1] or '0'} end
local stored = tonumber(cur[1] or '0')
local epoch = tonumber(ARGV[1])
if stored > epoch or (stored == epoch and cur[2] ~= ARGV[2]) then return {'superseded', tostring(stored)} end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'holder', ARGV[2])
if KEYS[2] then redis.call('HSET', KEYS[2], 'retired', '1') end
return {'ok', ARGV[1]}
"#;

/// The fenced write: KEYS[1] the shard's fence; ARGV epoch, holder, the
/// number of commands, then each command as its argument count and its
/// arguments. Answers `{0, stored epoch}` when the token may not write,
/// else `{1, {replies}}`.
pub const WRITE_SCRIPT: &str = r#"
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'retired')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] or cur[3] == '1' then return {0, cur[1] or 'none'} end
local i, replies = 4, {}
for c = 1, tonumber(ARGV[3]) do
  local n, args = tonumber(ARGV[i]), {}
  for a = 1, n do args[a] = ARGV[i + a] end
  i = i + n + 1
  replies[c] = redis.call(unpack(args))
end
return {1, replies}
"#;

/// The fence of an application's Redis data under one key prefix.
#[derive(Clone, Debug)]
pub struct RedisFence {
    prefix: String,
    claim: Script,
    write: Script,
}

impl RedisFence {
    /// Fences under `prefix` (the application's namespace, `app:` say).
    pub fn new(prefix: impl Into<String>) -> RedisFence {
        RedisFence { prefix: prefix.into(), claim: Script::new(CLAIM_SCRIPT), write: Script::new(WRITE_SCRIPT) }
    }

    /// The fence key of `shard`.
    pub fn key(&self, shard: &str) -> String {
        format!("{}fence:{{{shard}}}", self.prefix)
    }

    /// Claims `token`'s shard for its epoch before serving it, retiring
    /// `parent` (the shard it was split from) in the same step. Claiming
    /// again with the same token is a no-op.
    pub async fn claim<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: &LeaseToken,
        parent: Option<&str>,
    ) -> Result<(), FenceError> {
        let mut call = self.claim.key(self.key(&token.shard));
        if let Some(parent) = parent.filter(|p| !p.is_empty()) {
            call.key(self.key(parent));
        }
        let (status, stored): (String, String) =
            call.arg(token.epoch()?).arg(token.holder.to_string()).invoke_async(conn).await?;
        match status.as_str() {
            "ok" => Ok(()),
            "retired" => Err(FenceError::Retired { shard: token.shard.clone() }),
            _ => Err(FenceError::Superseded {
                shard: token.shard.clone(),
                epoch: token.epoch,
                stored: stored.parse().unwrap_or(-1),
            }),
        }
    }

    /// Runs `commands` atomically if the fence holds `token`, answering
    /// their replies; [`FenceError::Lost`] (and nothing written) if not.
    pub async fn write<C: ConnectionLike>(
        &self,
        conn: &mut C,
        token: &LeaseToken,
        commands: &[Cmd],
    ) -> Result<Vec<Value>, FenceError> {
        let mut call = self.write.key(self.key(&token.shard));
        call.arg(token.epoch()?).arg(token.holder.to_string()).arg(commands.len());
        for command in commands {
            let args: Vec<&[u8]> = command
                .args_iter()
                .filter_map(|a| match a {
                    redis::Arg::Simple(bytes) => Some(bytes),
                    redis::Arg::Cursor => None,
                })
                .collect();
            call.arg(args.len());
            for arg in args {
                call.arg(arg);
            }
        }
        let (allowed, replies): (i64, Value) = call.invoke_async(conn).await?;
        if allowed != 1 {
            return Err(token.lost());
        }
        Ok(match replies {
            Value::Array(replies) => replies,
            Value::Nil => Vec::new(),
            other => vec![other],
        })
    }
}
