/**
 * Fencing an application's own data, as the Rust crate's `fence::table` and
 * `fence::redis` (docs/clients.md, examples/ownership.md): a fence row per
 * shard beside your data, whose epoch only rises.
 *
 * 1. **Claim** before serving a shard (on `acquired`, or for each shard of a
 *    `subscribed` snapshot): {@link claim} writes your epoch into the shard's
 *    row, waiting for the older holder's open write transactions; a split
 *    child's claim retires its parent's row in the same transaction.
 * 2. **Check** first in every write transaction: {@link fenced} runs your
 *    work in a transaction whose first statement is the check, committing on
 *    success and rolling back on any error.
 *
 * The statements are the Rust crate's constants, verbatim (a test keeps
 * them equal): `$n` placeholders for `pg`, `?` for `mysql2`.
 *
 * ```ts
 * const token = tokenOf(lease);                       // from Held, Route, the map
 * await claim(pgClient, POSTGRES, token, lease.parent);
 * await fenced(pgClient, POSTGRES, token, (q) => q("INSERT INTO orders (id) VALUES ($1)", [7]));
 * ```
 */

import type * as proto from "./proto";

/** The token may not write (a newer holder claimed, the shard was split, or it was never claimed): nothing was written; route the key again. */
export class Lost extends Error {
  name = "Lost";
}

/** A claim found a newer epoch (or another holder at this one): stop serving the shard. */
export class Superseded extends Error {
  name = "Superseded";
}

/** A claim found the shard retired (split, and a child claimed). */
export class Retired extends Error {
  name = "Retired";
}

/** A lease as a fencing token: shard, holder UUID (lower-case text), epoch. */
export interface Token {
  shard: string;
  holder: string;
  epoch: number;
}

/** The token of a lease (`Held`, `Route`) or of an assignment of the map. */
export function tokenOf(lease: Pick<proto.ShardLease, "shard" | "holder_uuid" | "epoch">): Token {
  if (!lease.holder_uuid) throw new Error(`shard ${lease.shard} has no holder: wait for one and ask again`);
  return { shard: lease.shard, holder: lease.holder_uuid.toLowerCase(), epoch: Number(lease.epoch) };
}

/** Any connection with `query(sql, params)`: a `pg` client, a `mysql2/promise` connection. */
export interface Queryable {
  query(sql: string, params?: unknown[]): Promise<unknown>;
}

/** One dialect's statements, and how its driver returns rows. */
export interface Dialect {
  migration: string;
  claim: string;
  retire: string;
  read: string;
  check: string;
  /** The rows of a `query` result. */
  rows(result: unknown): Record<string, unknown>[];
}

/** clients/rust/src/fence/table.rs: POSTGRES_MIGRATION, _CLAIM, _RETIRE, _READ, _CHECK (for `pg`). */
export const POSTGRES: Dialect = {
  migration: `DO $$ BEGIN
  PERFORM pg_advisory_xact_lock(27980661893770854);
  CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder UUID,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMPTZ NOT NULL DEFAULT now());
END $$`,
  claim:
    "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES ($1, $2, $3) " +
    "ON CONFLICT (shard_id) DO UPDATE SET epoch = EXCLUDED.epoch, holder = EXCLUDED.holder, claimed_at = now() " +
    "WHERE chitin_fence.epoch < EXCLUDED.epoch AND NOT chitin_fence.retired",
  retire: "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES ($1, 0, TRUE) ON CONFLICT (shard_id) DO UPDATE SET retired = TRUE",
  read: "SELECT epoch, holder::text AS holder, retired FROM chitin_fence WHERE shard_id = $1",
  check: "SELECT 1 FROM chitin_fence WHERE shard_id = $1 AND epoch = $2 AND holder = $3 AND NOT retired FOR SHARE",
  rows: (r) => (r as { rows: Record<string, unknown>[] }).rows,
};

/** The MySQL/MariaDB twins (MYSQL_*, for `mysql2/promise`). */
export const MYSQL: Dialect = {
  migration: `CREATE TABLE IF NOT EXISTS chitin_fence (
    shard_id VARBINARY(255) NOT NULL PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder CHAR(36) NULL,
    retired BOOLEAN NOT NULL DEFAULT FALSE,
    claimed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`,
  claim:
    "INSERT INTO chitin_fence (shard_id, epoch, holder) VALUES (?, ?, ?) " +
    "ON DUPLICATE KEY UPDATE " +
    "holder = IF(NOT retired AND epoch < VALUES(epoch), VALUES(holder), holder), " +
    "claimed_at = IF(NOT retired AND epoch < VALUES(epoch), CURRENT_TIMESTAMP(6), claimed_at), " +
    "epoch = IF(NOT retired AND epoch < VALUES(epoch), VALUES(epoch), epoch)",
  retire: "INSERT INTO chitin_fence (shard_id, epoch, retired) VALUES (?, 0, TRUE) ON DUPLICATE KEY UPDATE retired = TRUE",
  read: "SELECT epoch, holder, retired FROM chitin_fence WHERE shard_id = ?",
  check: "SELECT 1 FROM chitin_fence WHERE shard_id = ? AND epoch = ? AND holder = ? AND NOT retired LOCK IN SHARE MODE",
  rows: (r) => (r as [Record<string, unknown>[]])[0],
};

/** Runs `work` in a transaction: commits when it returns, rolls back when it throws. */
async function transaction<T>(conn: Queryable, work: () => Promise<T>): Promise<T> {
  await conn.query("BEGIN");
  try {
    const result = await work();
    await conn.query("COMMIT");
    return result;
  } catch (e) {
    await conn.query("ROLLBACK");
    throw e;
  }
}

/** Creates the fence table if it is missing. */
export async function migrate(conn: Queryable, dialect: Dialect): Promise<void> {
  await conn.query(dialect.migration);
}

/**
 * Claims `token`'s shard for its epoch before serving it, retiring `parent`
 * in the same transaction; throws {@link Superseded} or {@link Retired}
 * (writing nothing) when the shard is not ours.
 */
export async function claim(conn: Queryable, dialect: Dialect, token: Token, parent?: string): Promise<void> {
  await transaction(conn, async () => {
    await conn.query(dialect.claim, [token.shard, token.epoch, token.holder]);
    const [row] = dialect.rows(await conn.query(dialect.read, [token.shard]));
    if (truthy(row.retired)) throw new Retired(`the fence of shard ${token.shard} is retired (split, and a child claimed)`);
    if (Number(row.epoch) !== token.epoch || String(row.holder ?? "").toLowerCase() !== token.holder) {
      throw new Superseded(`the fence of shard ${token.shard} holds epoch ${row.epoch}, this claim ${token.epoch}`);
    }
    if (parent) await conn.query(dialect.retire, [parent]);
  });
}

/**
 * Runs `work` in a transaction whose first statement is the check: commits
 * when it returns, rolls back when it throws; throws {@link Lost} (writing
 * nothing) when the token may not write.
 */
export async function fenced<T>(conn: Queryable, dialect: Dialect, token: Token, work: (query: Queryable["query"]) => Promise<T>): Promise<T> {
  return transaction(conn, async () => {
    const rows = dialect.rows(await conn.query(dialect.check, [token.shard, token.epoch, token.holder]));
    if (rows.length === 0) throw new Lost(`the lease of shard ${token.shard} at epoch ${token.epoch} is lost: route the key again`);
    return work((sql, params) => conn.query(sql, params));
  });
}

function truthy(v: unknown): boolean {
  return v === true || v === 1 || v === "1" || v === "t";
}

/** clients/rust/src/fence/redis.rs: CLAIM_SCRIPT. */
export const CLAIM_SCRIPT = `
local cur = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'retired')
if cur[3] == '1' then return {'retired', cur[1] or '0'} end
local stored = tonumber(cur[1] or '0')
local epoch = tonumber(ARGV[1])
if stored > epoch or (stored == epoch and cur[2] ~= ARGV[2]) then return {'superseded', tostring(stored)} end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1], 'holder', ARGV[2])
if KEYS[2] then redis.call('HSET', KEYS[2], 'retired', '1') end
return {'ok', ARGV[1]}
`;

/** clients/rust/src/fence/redis.rs: WRITE_SCRIPT. */
export const WRITE_SCRIPT = `
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
`;

/** A Redis client with `eval(script, numKeys, ...keysAndArgs)` (ioredis). */
export interface Evaluator {
  eval(script: string, numKeys: number, ...args: (string | number)[]): Promise<unknown>;
}

/** The fence of an application's Redis data under `prefix`; the same keys and scripts as the Rust `RedisFence`. */
export class RedisFence {
  constructor(
    private readonly redis: Evaluator,
    readonly prefix: string,
  ) {}

  /** The fence hash of `shard` (hash-tagged by the shard, for Redis Cluster). */
  key(shard: string): string {
    return `${this.prefix}fence:{${shard}}`;
  }

  /** Claims `token`'s shard, retiring `parent`; throws {@link Superseded} or {@link Retired}. */
  async claim(token: Token, parent?: string): Promise<void> {
    const keys = [this.key(token.shard), ...(parent ? [this.key(parent)] : [])];
    const [status, stored] = (await this.redis.eval(CLAIM_SCRIPT, keys.length, ...keys, token.epoch, token.holder)) as [string, string];
    if (status === "retired") throw new Retired(`the fence of shard ${token.shard} is retired (split, and a child claimed)`);
    if (status !== "ok") throw new Superseded(`the fence of shard ${token.shard} holds epoch ${stored}, this claim ${token.epoch}`);
  }

  /** Runs `commands` (each: name, then arguments) atomically if the fence holds `token`; throws {@link Lost} (running nothing) if not. */
  async write(token: Token, commands: (string | number)[][]): Promise<unknown[]> {
    const args: (string | number)[] = [token.epoch, token.holder, commands.length];
    for (const c of commands) args.push(c.length, ...c);
    const [allowed, replies] = (await this.redis.eval(WRITE_SCRIPT, 1, this.key(token.shard), ...args)) as [number, unknown[]];
    if (allowed !== 1) throw new Lost(`the lease of shard ${token.shard} at epoch ${token.epoch} is lost: route the key again`);
    return replies;
  }
}
