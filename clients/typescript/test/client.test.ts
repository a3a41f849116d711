// The client against a real standalone node: failover past a dead node with
// the same request id applied once, routing (Route and the assignment map),
// typed outcomes, refusals, the watch, load reports.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";

import { Client, Refused } from "../src";
import { freePort, startNode, type Node } from "./node";

let node: Node;
let dead: string;
before(async () => {
  node = await startNode();
  dead = `127.0.0.1:${await freePort()}`;
});
after(() => node.stop());

const fresh = (name: string) => `ts-${name}-${randomUUID().slice(0, 8)}`;

// case: failover
test("an append fails over past a dead node", async () => {
  const c = new Client([dead, node.api], { route: false, backoffMs: 10 });
  const stream = fresh("failover");
  const out = await c.append(stream, "one");
  assert.equal(out.kind, "applied", JSON.stringify(out));
  assert.ok(out.kind === "applied" && out.attempts === 2 && out.node === node.api);
  assert.deepEqual((await c.read(stream)).map((e) => e.payload.toString()), ["one"]);
  c.close();
});

// case: applies-once
test("the same request id applies once", async () => {
  const [first, second] = [new Client([node.api]), new Client([dead, node.api], { route: false, backoffMs: 10 })];
  const stream = fresh("dedup");
  const a = await first.append(stream, "x", "ts-once");
  const b = await second.append(stream, "x", "ts-once");
  assert.ok(a.kind === "applied" && b.kind === "applied", JSON.stringify([a, b]));
  assert.ok(a.kind === "applied" && b.kind === "applied" && b.sequence === a.sequence && b.attempts === 2);
  assert.deepEqual((await first.read(stream)).map((e) => e.request_id), ["ts-once"]);
  first.close();
  second.close();
});

// case: routes-to-holder
// case: not-applied-names-holder
test("routing sends to the holder, and not applied names it", async () => {
  const c = new Client([dead, node.api], { backoffMs: 10 });
  const stream = fresh("routed");
  const lease = await c.routeStream(stream);
  const out = await c.append(stream, "r");
  assert.ok(out.kind === "applied" && out.attempts === 1 && out.node === lease.holder_address && out.shard === lease.shard, JSON.stringify(out));
  c.close();
  const once = new Client([dead, node.api], { route: false, attempts: 1 });
  const missed = await once.append(fresh("not-applied"), "n");
  assert.equal(missed.kind, "not_applied", JSON.stringify(missed));
  assert.ok(missed.kind === "not_applied" && missed.reason.includes("not sent") && missed.go_to?.address === node.api);
  once.close();
});

// case: refused
test("a bad request is refused, not retried", async () => {
  const c = new Client([node.api]);
  await assert.rejects(c.append("", "p"), (e: unknown) => {
    assert.ok(e instanceof Refused);
    assert.equal(e.code, grpc.status.INVALID_ARGUMENT);
    assert.match(e.details, /stream must be 1..=255 bytes/);
    return true;
  });
  c.close();
});

// case: watch-snapshot
// case: answer-nobody-waits-for
test("a watch subscribes past a dead node with everything held", async () => {
  const c = new Client([dead, node.api], { backoffMs: 10 });
  const watch = c.watchOwnership(true);
  const first = await watch.next();
  assert.ok(first.kind === "subscribed" && first.node === node.api, JSON.stringify(first));
  assert.ok(first.kind === "subscribed" && first.held.length === 16);
  const lease = first.kind === "subscribed" ? first.held[0] : undefined;
  // Answers nobody waits for are refused by the node: nothing to do.
  assert.equal(await watch.released(lease!.shard, lease!.epoch), false);
  assert.equal(await watch.ready(lease!.shard, lease!.epoch), false);
  watch.close();
  c.close();
});

// case: map-routes
test("the assignment map of a node routes appends to its holder", async () => {
  const c = new Client([dead, node.api], { route: false, backoffMs: 10 });
  const m = c.assignmentMap();
  assert.ok(await m.ready(10_000), "no snapshot within 10 s");
  const deadline = Date.now() + 20_000;
  while (!m.current().shards().every((s) => s.holder_address === node.api)) {
    assert.ok(await m.waitChanged(m.current().version, deadline - Date.now()), JSON.stringify(m.current().shards()));
  }
  const copy = m.current();
  assert.ok(copy.connected && copy.version >= 1);
  assert.equal(copy.shards().length, 16);
  assert.equal(copy.shards().reduce((n, s) => n + (s.upper - s.lower + 1), 0), 2 ** 32, "the ranges cover the keyspace");
  const stream = fresh("mapped");
  const lease = await c.routeStream(stream);
  assert.deepEqual([copy.routeStream(stream)?.shard, copy.routeStream(stream)?.epoch], [lease.shard, lease.epoch]);
  // Routed by the map (Route is off): the first attempt goes to the holder, not the dead first node.
  const out = await c.append(stream, "m");
  assert.ok(out.kind === "applied" && out.attempts === 1 && out.node === node.api, JSON.stringify(out));
  c.close();
});

// case: load-report
test("reported load is counted or refused naming the sample", async () => {
  const c = new Client([node.api]);
  await assert.rejects(c.reportLoad([{ application: "journal", key: 1, ops: 1 }, { application: "no-such-app", key: 1, ops: 1 }]), (e: unknown) => {
    assert.ok(e instanceof Refused && e.code === grpc.status.INVALID_ARGUMENT && /sample #1: unknown application `no-such-app`/.test(e.details), String(e));
    return true;
  });
  assert.equal(await c.reportLoad([{ application: "journal", key: 0x12345678, ops: 60, bytes: 10 }]), 1);
  c.close();
});
