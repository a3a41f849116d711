/**
 * The cluster's whole assignment map, kept current from a node's
 * `WatchAssignments` stream, as the Rust crate's `AssignmentMap`
 * (docs/clients.md): every shard's key range, state, lineage and holder as
 * the streaming node last read them, so that keys are routed here. A holder
 * is a route, not a grant: a node that no longer holds the shard forwards
 * the request or names the new holder, and the holder's fence decides.
 */

import * as grpc from "@grpc/grpc-js";

import type { Client } from "./client";
import { stream_key } from "./key";
import * as proto from "./proto";

/** The application journal streams route through when the map has it. */
const JOURNAL = "journal";

/** Longest pause between subscription attempts, in ms. */
const MAX_PAUSE_MS = 1000;

/** An update that does not fit the copy it is applied to. */
export class OutOfStep extends Error {
  constructor(message: string) {
    super(message);
    this.name = "OutOfStep";
  }
}

/** The map at one version of one node's stream. */
export class Assignments {
  /** The node whose stream built this copy ("" before the first snapshot). */
  node = "";
  /** That node's version (0 before the first snapshot). */
  version = 0;
  /** Whether the stream is open; false: the copy is the last one seen. */
  connected = false;
  private shardsById = new Map<string, proto.Assignment>();
  /** Per application, its routable shards as [lower, upper, id], by lower. */
  private ranges = new Map<string, [number, number, string][]>();

  /** A copy to change without touching this one. */
  copy(): Assignments {
    const c = new Assignments();
    c.node = this.node;
    c.version = this.version;
    c.connected = this.connected;
    c.shardsById = new Map(this.shardsById);
    c.ranges = this.ranges;
    return c;
  }

  /** Applies one update: a snapshot replaces the copy, a delta changes it; throws {@link OutOfStep} (unchanged). */
  apply(update: proto.AssignmentUpdate): void {
    if (!update.snapshot) {
      if (this.version === 0 || this.node !== update.node) {
        throw new OutOfStep(`a delta of version ${update.version} from \`${update.node}\` came before its snapshot`);
      }
      if (update.version <= this.version) {
        throw new OutOfStep(`version ${update.version} from \`${update.node}\` does not follow ${this.version}`);
      }
    }
    const shards = update.snapshot ? new Map<string, proto.Assignment>() : new Map(this.shardsById);
    for (const id of update.removed) shards.delete(id);
    for (const a of update.changed) shards.set(a.shard, a);
    const ranges = new Map<string, [number, number, string][]>();
    for (const a of shards.values()) {
      if (!a.routable) continue;
      if (!ranges.has(a.application)) ranges.set(a.application, []);
      ranges.get(a.application)!.push([a.lower, a.upper, a.shard]);
    }
    for (const r of ranges.values()) r.sort((x, y) => x[0] - y[0]);
    this.shardsById = shards;
    this.ranges = ranges;
    this.node = update.node;
    this.version = update.version;
  }

  /** The routable shard of `application` covering `key`. */
  route(application: string, key: number): proto.Assignment | undefined {
    const ranges = this.ranges.get(application);
    if (!ranges) return undefined;
    let [lo, hi] = [0, ranges.length];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (ranges[mid][0] <= key) lo = mid + 1;
      else hi = mid;
    }
    const at = ranges[lo - 1];
    return at && key <= at[1] ? this.shardsById.get(at[2]) : undefined;
  }

  /** The shard of journal stream `stream`: routed in `journal`, or in the only application there is. */
  routeStream(stream: string): proto.Assignment | undefined {
    const apps = [...this.ranges.keys()];
    const application = this.ranges.has(JOURNAL) ? JOURNAL : apps.length === 1 ? apps[0] : undefined;
    return application === undefined ? undefined : this.route(application, stream_key(stream));
  }

  /** The shard `id`. */
  shard(id: string): proto.Assignment | undefined {
    return this.shardsById.get(id);
  }

  /** Every shard. */
  shards(): proto.Assignment[] {
    return [...this.shardsById.values()];
  }
}

/** A live copy of the map, followed until {@link AssignmentMap.close}. Made by `Client.assignmentMap()`. */
export class AssignmentMap {
  private latest = new Assignments();
  private waiters: (() => void)[] = [];
  private closed = false;
  private call: grpc.ClientReadableStream<proto.AssignmentUpdate> | null = null;

  constructor(
    private readonly client: Client,
    private readonly application = "",
  ) {
    void this.follow();
  }

  /** The copy as it is now (do not change it). */
  current(): Assignments {
    return this.latest;
  }

  /** Waits for the first snapshot, at most `timeoutMs`; false if none came. */
  ready(timeoutMs: number): Promise<boolean> {
    return this.until(() => this.latest.version > 0, timeoutMs);
  }

  /** Waits for a copy other than `version` (or a close), at most `timeoutMs`. */
  waitChanged(version: number, timeoutMs: number): Promise<boolean> {
    return this.until(() => this.latest.version !== version || this.closed, timeoutMs);
  }

  /** Stops following the stream. */
  close(): void {
    this.closed = true;
    this.call?.cancel();
    this.publish(this.latest);
  }

  private async until(done: () => boolean, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!done()) {
      const left = deadline - Date.now();
      if (left <= 0) return false;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return true;
  }

  private publish(next: Assignments): void {
    this.latest = next;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  /** Subscribes at the first node that answers and applies its updates, again after every break. */
  private async follow(): Promise<void> {
    let pause = 50;
    while (!this.closed) {
      for (const node of this.client.nodes) {
        if (this.closed) return;
        let served = false;
        try {
          // eslint-disable-next-line @typescript-eslint/no-explicit-any
          const stub = this.client.stub(proto.Ownership, node) as any;
          const call: grpc.ClientReadableStream<proto.AssignmentUpdate> = stub.WatchAssignments({ application: this.application }, this.client.metadata());
          call.on("error", () => undefined); // read through the iterator below
          this.call = call;
          for await (const update of call) {
            const next = this.latest.copy();
            next.apply(update as proto.AssignmentUpdate);
            next.connected = true;
            this.publish(next);
            served = true;
            pause = 50;
          }
        } catch {
          // The stream broke, or it was out of step: subscribe again.
        }
        if (served) {
          const broken = this.latest.copy();
          broken.connected = false;
          this.publish(broken);
          break;
        }
      }
      if (this.closed) return;
      await new Promise((r) => setTimeout(r, pause));
      pause = Math.min(pause * 2, MAX_PAUSE_MS);
    }
  }
}
