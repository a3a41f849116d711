// The client's pure parts, without I/O: the stream key, node lists, and the
// assignment map's copy (snapshot, deltas, split routing, updates out of step).

import assert from "node:assert/strict";
import { test } from "node:test";

import { Assignments, OutOfStep, parseNodes, stream_key } from "../src";
import type { Assignment, AssignmentUpdate } from "../src";

// case: stream-key
test("the stream key is the nodes' FNV-1a", () => {
  assert.equal(stream_key(""), 0x811c9dc5);
  assert.equal(stream_key("a"), 0xe40c292c);
  assert.equal(stream_key("foobar"), 0xbf9cf968);
});

// case: node-list
test("bad node lists say what is wrong", () => {
  assert.deepEqual(parseNodes(" a:1 ,b:2"), ["a:1", "b:2"]);
  assert.throws(() => parseNodes("a:1,,b:2"), /node address #2 is empty/);
  assert.throws(() => parseNodes("localhost"), /`localhost` is not a node address/);
  assert.throws(() => parseNodes(""), /no node address given/);
});

function shard(id: string, application: string, lower: number, upper: number, routable = true, holder = "a"): Assignment {
  return {
    shard: id,
    application,
    lower,
    upper,
    state: routable ? "active" : "activating",
    routable,
    parent: "",
    holder,
    holder_uuid: "",
    holder_address: holder ? `${holder}:1` : "",
    epoch: 1,
  };
}

function update(node: string, version: number, snapshot: boolean, changed: Assignment[] = [], removed: string[] = []): AssignmentUpdate {
  return { node, version, snapshot, changed, removed };
}

const holder = (m: Assignments, app: string, key: number) => m.route(app, key)?.holder;

// case: map-copy
test("a snapshot then deltas route every key to its shard", () => {
  const m = new Assignments();
  assert.equal(m.route("kv", 0), undefined);
  m.apply(update("n1", 3, true, [shard("lo", "kv", 0, 0x7fffffff, true, "a"), shard("hi", "kv", 0x80000000, 0xffffffff, true, "b")]));
  for (const [key, want] of [[0, "a"], [0x7fffffff, "a"], [0x80000000, "b"], [0xffffffff, "b"]] as const) {
    assert.equal(holder(m, "kv", key), want, key.toString(16));
  }
  assert.equal(m.route("other", 0), undefined);
  m.apply(update("n1", 4, false, [shard("hi.0", "kv", 0x80000000, 0xbfffffff, false, ""), shard("hi.1", "kv", 0xc0000000, 0xffffffff, false, "")]));
  assert.equal(holder(m, "kv", 0xc0000000), "b", "the parent still routes");
  m.apply(update("n1", 6, false, [shard("hi.0", "kv", 0x80000000, 0xbfffffff, true, "c"), shard("hi.1", "kv", 0xc0000000, 0xffffffff, true, "a")], ["hi"]));
  assert.deepEqual([holder(m, "kv", 0x80000000), holder(m, "kv", 0xffffffff), m.shard("hi"), m.version], ["c", "a", undefined, 6]);
  m.apply(update("n2", 1, true, [shard("all", "kv", 0, 0xffffffff, true, "d")]));
  assert.deepEqual([m.node, m.version, m.shards().length, holder(m, "kv", 0x80000000)], ["n2", 1, 1, "d"]);
});

test("an update out of step is refused and changes nothing", () => {
  const m = new Assignments();
  assert.throws(() => m.apply(update("n1", 2, false, [shard("s", "kv", 0, 0xffffffff)])), OutOfStep);
  assert.equal(m.version, 0);
  m.apply(update("n1", 5, true, [shard("s", "kv", 0, 0xffffffff)]));
  for (const bad of [update("n1", 5, false, [], ["s"]), update("n1", 4, false, [], ["s"]), update("n2", 6, false, [], ["s"])]) {
    assert.throws(() => m.apply(bad), OutOfStep);
    assert.deepEqual([m.node, m.version, holder(m, "kv", 7)], ["n1", 5, "a"]);
  }
});

test("journal streams route in the journal application or the only one", () => {
  const only = new Assignments();
  only.apply(update("n", 1, true, [shard("s", "orders", 0, 0xffffffff)]));
  assert.equal(only.routeStream("x")?.shard, "s");
  const two = new Assignments();
  two.apply(update("n", 1, true, [shard("j", "journal", 0, 0xffffffff), shard("o", "orders", 0, 0xffffffff)]));
  assert.equal(two.routeStream("x")?.shard, "j");
  const neither = new Assignments();
  neither.apply(update("n", 1, true, [shard("p", "a", 0, 0xffffffff), shard("q", "b", 0, 0xffffffff)]));
  assert.equal(neither.routeStream("x"), undefined);
});
