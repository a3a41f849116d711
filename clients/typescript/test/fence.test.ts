// The fences against real servers: a PostgreSQL and a MariaDB database of
// the test's own (not chitin's), and Redis. The same cases as the Rust and
// Python clients: a claim only raises the epoch, waits for the older
// holder's open transaction and refuses its later writes; a split child's
// claim retires the parent.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { test } from "node:test";
import Redis from "ioredis";
import * as mysql from "mysql2/promise";
import { Client as PgClient } from "pg";

import { fence } from "../src";

const PG = new URL(process.env.CHITIN_TEST_POSTGRES_URL ?? "postgres://postgres@127.0.0.1:5432/postgres");
const MY = new URL(process.env.CHITIN_TEST_MYSQL_URL ?? "mysql://root@127.0.0.1:3306/test");
const REDIS = process.env.CHITIN_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

const uuid = (n: number) => `00000000-0000-0000-0000-${n.toString(16).padStart(12, "0")}`;
const OLD: fence.Token = { shard: "s1", holder: uuid(1), epoch: 5 };
const NEW: fence.Token = { shard: "s1", holder: uuid(2), epoch: 6 };
const CHILD: fence.Token = { shard: "s1_a", holder: uuid(3), epoch: 1 };

interface Store {
  connect(): Promise<fence.Queryable & { end(): Promise<void> }>;
  dialect: fence.Dialect;
  insert: string;
  drop(): Promise<void>;
}

async function postgres(): Promise<Store> {
  const name = `chitin_ts_${randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const admin = new PgClient({ host: PG.hostname, port: Number(PG.port || 5432), user: PG.username || "postgres", database: PG.pathname.slice(1) || "postgres" });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  return {
    connect: async () => {
      const c = new PgClient({ host: PG.hostname, port: Number(PG.port || 5432), user: PG.username || "postgres", database: name });
      await c.connect();
      return c;
    },
    dialect: fence.POSTGRES,
    insert: "INSERT INTO app_writes (k, epoch) VALUES ($1, $2)",
    drop: async () => {
      await admin.query(`DROP DATABASE ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}

async function mariadb(): Promise<Store> {
  const name = `chitin_ts_${randomUUID().replace(/-/g, "").slice(0, 12)}`;
  const options = { host: MY.hostname, port: Number(MY.port || 3306), user: MY.username || "root", password: MY.password || "" };
  const admin = await mysql.createConnection(options);
  await admin.query(`CREATE DATABASE ${name}`);
  return {
    connect: async () => mysql.createConnection({ ...options, database: name }),
    dialect: fence.MYSQL,
    insert: "INSERT INTO app_writes (k, epoch) VALUES (?, ?)",
    drop: async () => {
      await admin.query(`DROP DATABASE ${name}`);
      await admin.end();
    },
  };
}

// case: fence-postgres
// case: fence-mariadb
for (const [label, open] of [["postgres", postgres], ["mariadb", mariadb]] as const) {
  test(`${label}: a claim waits for the older epoch, refuses it after, and a child retires the parent`, async () => {
    const store = await open();
    const [a, b] = [await store.connect(), await store.connect()];
    try {
      const d = store.dialect;
      await fence.migrate(a, d);
      await fence.migrate(a, d); // idempotent
      await a.query("CREATE TABLE app_writes (k VARCHAR(64) NOT NULL, epoch BIGINT NOT NULL)");

      await assert.rejects(fence.fenced(a, d, OLD, async () => undefined), fence.Lost);
      await fence.claim(a, d, OLD);
      await fence.claim(a, d, OLD); // the same token again: a no-op

      // The old holder's transaction is open when the new holder claims.
      let claimed = false;
      let claim: Promise<void> | undefined;
      await fence.fenced(a, d, OLD, async (q) => {
        await q(store.insert, ["k", 5]);
        claim = fence.claim(b, d, NEW).then(() => {
          claimed = true;
        });
        await new Promise((r) => setTimeout(r, 500));
        assert.equal(claimed, false, "the claim did not wait for the older epoch's open transaction");
      });
      await claim;
      assert.equal(claimed, true);

      await assert.rejects(fence.fenced(a, d, OLD, (q) => q(store.insert, ["k", 99])), fence.Lost);
      await assert.rejects(fence.claim(a, d, OLD), fence.Superseded);
      await fence.fenced(b, d, NEW, (q) => q(store.insert, ["k", 6]));

      await fence.claim(b, d, CHILD, "s1");
      await assert.rejects(fence.fenced(b, d, NEW, async () => undefined), fence.Lost);
      await assert.rejects(fence.claim(b, d, { ...NEW, epoch: 7 }), fence.Retired);

      const rows = d.rows(await a.query("SELECT epoch FROM app_writes ORDER BY epoch"));
      assert.deepEqual(rows.map((r) => Number(r.epoch)), [5, 6]);
    } finally {
      await a.end();
      await b.end();
      await store.drop();
    }
  });
}

// case: fence-redis
test("redis: the fence refuses stale writes and retires parents", async () => {
  const client = new Redis(REDIS);
  const prefix = `chitin-test-${randomUUID().slice(0, 12)}:`;
  const key = `${prefix}{s1}:counter`;
  const f = new fence.RedisFence(client, prefix);
  try {
    await assert.rejects(f.write(OLD, [["INCRBY", key, 1]]), fence.Lost);
    await f.claim(OLD);
    assert.deepEqual(await f.write(OLD, [["INCRBY", key, 1], ["INCRBY", key, 1]]), [1, 2]);
    await f.claim(NEW);
    await assert.rejects(f.write(OLD, [["INCRBY", key, 1]]), fence.Lost);
    await assert.rejects(f.claim(OLD), fence.Superseded);
    assert.deepEqual(await f.write(NEW, [["INCRBY", key, 1]]), [3]);
    await f.claim(CHILD, "s1");
    await assert.rejects(f.write(NEW, [["INCRBY", key, 1]]), fence.Lost);
    await assert.rejects(f.claim({ ...NEW, epoch: 7 }), fence.Retired);
    assert.equal(Number(await client.get(key)), 3);
  } finally {
    const keys = await client.keys(`${prefix}*`);
    if (keys.length) await client.del(...keys);
    client.disconnect();
  }
});
