/**
 * An ownership watch that survives gaps, as the Rust crate's
 * `OwnershipWatch` (docs/clients.md): the events of one node's
 * `WatchOwnership` stream; when it breaks (the node restarted, or DATA_LOSS:
 * this watcher fell behind) it yields a `gap`, subscribes again at the first
 * node of the list that answers and yields `subscribed` with everything that
 * node holds now (subscribed before `Held` is asked, so no change falls
 * between the two).
 *
 * A watch opened with `acknowledges` takes part in handoffs: answer each
 * `draining` with {@link OwnershipWatch.released} once the application
 * flushed the shard, and each `acquired` with {@link OwnershipWatch.ready}
 * once it claimed its fence; the node waits for the answers (bounded).
 */

import * as grpc from "@grpc/grpc-js";

import { type Client, details, unary } from "./client";
import * as proto from "./proto";

/** What a watch yields. */
export type WatchEvent =
  | { kind: "subscribed"; node: string; held: proto.ShardLease[] }
  | { kind: "acquired"; shard: string; epoch: number }
  | { kind: "draining"; shard: string; epoch: number }
  | { kind: "lost"; shard: string; epoch: number }
  | { kind: "gap"; node: string; reason: string };

const KINDS: Record<string, "acquired" | "draining" | "lost"> = { ACQUIRED: "acquired", DRAINING: "draining", LOST: "lost" };

/** Longest pause between subscription attempts, in ms. */
const MAX_PAUSE_MS = 1000;

const held = unary<object, { leases: proto.ShardLease[] }>("Held");
const acknowledge = unary<object, object>("Acknowledge");

/** Iterate it (`for await`) for events. Made by `Client.watchOwnership()`. */
export class OwnershipWatch implements AsyncIterable<WatchEvent> {
  private stream: { node: string; call: grpc.ClientReadableStream<proto.OwnershipEvent>; events: AsyncIterator<proto.OwnershipEvent> } | null = null;
  private pause = 50;

  constructor(
    private readonly client: Client,
    private readonly acknowledges: boolean,
  ) {}

  [Symbol.asyncIterator](): AsyncIterator<WatchEvent> {
    return { next: async () => ({ value: await this.next(), done: false }) };
  }

  /** The next event; waits (subscribing again as needed) until there is one. */
  async next(): Promise<WatchEvent> {
    for (;;) {
      if (!this.stream) {
        const event = await this.subscribe();
        if (event) return event;
        await new Promise((r) => setTimeout(r, this.pause));
        this.pause = Math.min(this.pause * 2, MAX_PAUSE_MS);
        continue;
      }
      const { node, events } = this.stream;
      let reason: string;
      try {
        const r = await events.next();
        if (!r.done) {
          const kind = KINDS[r.value.kind];
          // A kind this client does not know (a newer node): skip it.
          if (kind) return { kind, shard: r.value.shard, epoch: r.value.epoch };
          continue;
        }
        reason = "the node ended the stream";
      } catch (e) {
        const err = e as grpc.ServiceError;
        reason = `${grpc.status[err.code] ?? "ERROR"}: ${details(err)}`;
      }
      this.stream = null;
      return { kind: "gap", node, reason };
    }
  }

  /** Answers `draining`: the application is done with the shard. False: nothing waits for it any more. */
  released(shard: string, epoch: number): Promise<boolean> {
    return this.acknowledge("RELEASED", shard, epoch);
  }

  /** Answers `acquired`: the application claimed its fence and is ready. False: nothing waits for it any more. */
  ready(shard: string, epoch: number): Promise<boolean> {
    return this.acknowledge("READY", shard, epoch);
  }

  /** Ends the stream (and this watch's part in handoffs). */
  close(): void {
    this.stream?.call.cancel();
    this.stream = null;
  }

  private async acknowledge(ack: "RELEASED" | "READY", shard: string, epoch: number): Promise<boolean> {
    if (!this.stream) return false;
    try {
      await acknowledge(this.client.stub(proto.Ownership, this.stream.node), { ack, shard, epoch }, this.client.metadata(), this.client.deadline());
      return true;
    } catch {
      return false;
    }
  }

  private async subscribe(): Promise<WatchEvent | null> {
    for (const node of this.client.nodes) {
      const stub = this.client.stub(proto.Ownership, node);
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      const call: grpc.ClientReadableStream<proto.OwnershipEvent> = (stub as any).WatchOwnership({ acknowledges: this.acknowledges }, this.client.metadata());
      // Errors reach the reader through the iterator; without a listener of
      // its own, one before the first read (a dead node) would be uncaught.
      call.on("error", () => undefined);
      const events = call[Symbol.asyncIterator]() as AsyncIterator<proto.OwnershipEvent>;
      try {
        const leases = (await held(stub, {}, this.client.metadata(), this.client.deadline())).leases;
        this.stream = { node, call, events };
        this.pause = 50;
        return { kind: "subscribed", node, held: leases };
      } catch {
        call.cancel();
        this.client.forget(node);
      }
    }
    return null;
  }
}
