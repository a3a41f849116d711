/**
 * A client of several chitin nodes (docs/clients.md, the contract the Rust
 * and Python clients follow): an append goes to its stream's holder (from
 * the assignment map once one is started, else asked once per stream with
 * `Ownership.Route`), retries keep the **same request id**, and the answer
 * is typed by the `chitin-outcome` trailer, never by wording.
 */

import { randomUUID } from "crypto";
import * as grpc from "@grpc/grpc-js";

import { AssignmentMap } from "./assignments";
import { stream_key } from "./key";
import * as proto from "./proto";
import { OwnershipWatch } from "./watch";

/** Trailer keys of an append's typed outcome (proto/chitin.proto). */
export const OUTCOME = "chitin-outcome";
export const NOT_APPLIED = "not-applied";
export const UNKNOWN = "unknown";
export const HOLDER = "chitin-holder";
export const HOLDER_ADDRESS = "chitin-holder-address";

/** A shard's holder: send the same request to `address`. */
export interface Holder {
  name: string;
  address: string;
}

/** Applied now, or earlier under the same request id. */
export interface Applied {
  kind: "applied";
  request_id: string;
  sequence: number;
  epoch: number;
  shard: string;
  /** The holder that committed it, by name. */
  holder: string;
  /** The address of the node that answered. */
  node: string;
  /** Attempts made (1: the first one answered). */
  attempts: number;
}

/** Certainly not committed by any attempt: safe to drop, or to resend (same id) to `go_to`. */
export interface NotApplied {
  kind: "not_applied";
  request_id: string;
  reason: string;
  go_to: Holder | null;
}

/** Some attempt may have committed: retry later with the same request id. */
export interface Unknown {
  kind: "unknown";
  request_id: string;
  reason: string;
  attempts: number;
}

export type Outcome = Applied | NotApplied | Unknown;

/** Refused before it ran (invalid request, token, protocol): a retry does not help. */
export class Refused extends Error {
  constructor(
    readonly code: grpc.status,
    readonly details: string,
  ) {
    super(`the node refused the request (${grpc.status[code]}): ${details}`);
    this.name = "Refused";
  }
}

/** No node answered; `failures` lists [address, error] in order. */
export class Unreachable extends Error {
  constructor(readonly failures: [string, string][]) {
    super(failures.map(([a, e]) => `${a}: ${e}`).join("; ") || "no node");
    this.name = "Unreachable";
  }
}

/** How a failed attempt reads. */
export type Attempt =
  | { kind: "not_applied"; reason: string; holder: Holder | null }
  | { kind: "unknown"; reason: string }
  | { kind: "refused"; reason: string };

const REFUSALS = new Set([
  grpc.status.INVALID_ARGUMENT,
  grpc.status.UNAUTHENTICATED,
  grpc.status.PERMISSION_DENIED,
  grpc.status.FAILED_PRECONDITION,
  // A request id applied before with another payload.
  grpc.status.ALREADY_EXISTS,
]);

/** A failed call's message: `grpc-message` is percent-encoded on the wire. */
export function details(error: grpc.ServiceError): string {
  const text = error.details ?? String(error);
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}

/** The reading of a failed call, the one rule of every client. */
export function classify(error: grpc.ServiceError): Attempt {
  const trailer = (key: string) => {
    const v = error.metadata?.get(key)?.[0];
    return v === undefined ? undefined : String(v);
  };
  const reason = details(error) || grpc.status[error.code] || String(error);
  const outcome = trailer(OUTCOME);
  if (outcome === NOT_APPLIED) {
    const [name, address] = [trailer(HOLDER), trailer(HOLDER_ADDRESS)];
    return { kind: "not_applied", reason, holder: name && address ? { name, address } : null };
  }
  if (outcome === UNKNOWN) return { kind: "unknown", reason };
  if (REFUSALS.has(error.code)) return { kind: "refused", reason };
  // No connection could be made: the request never left. Every other failure
  // (a broken connection, a deadline) may have reached the node.
  if (error.code === grpc.status.UNAVAILABLE && /failed to connect|ECONNREFUSED|No connection established/i.test(reason)) {
    return { kind: "not_applied", reason: `not sent: ${reason}`, holder: null };
  }
  return { kind: "unknown", reason };
}

/** `"a:1,b:2"` or a list; each entry `host:port` or `http(s)://host:port`. */
export function parseNodes(nodes: string | string[]): string[] {
  const parts = typeof nodes === "string" ? nodes.split(",").map((p) => p.trim()) : [...nodes];
  if (parts.length === 0 || (parts.length === 1 && parts[0] === "")) {
    throw new Error("no node address given; pass one or more, comma-separated: host:port[,host:port...]");
  }
  parts.forEach((p, i) => {
    if (!p) throw new Error(`node address #${i + 1} is empty (in ${JSON.stringify(nodes)}); separate addresses with single commas`);
    const rest = (p.includes("://") ? p.split("://", 2)[1] : p).split("/")[0];
    const at = rest.lastIndexOf(":");
    const port = Number(rest.slice(at + 1));
    if (at <= 0 || !/^\d+$/.test(rest.slice(at + 1)) || port <= 0 || port >= 65536) {
      throw new Error(`\`${p}\` is not a node address; expected host:port (e.g. 127.0.0.1:50051)`);
    }
  });
  return parts;
}

/** Options of a {@link Client}. */
export interface Options {
  /** The client token (`[api] client_token` of the nodes). */
  token?: string;
  /** Attempts of one append (default 6). */
  attempts?: number;
  /** Deadline of each attempt, in ms (default 30,000). */
  attemptTimeoutMs?: number;
  /** First pause between attempts, in ms, doubling up to 2 s (default 100). */
  backoffMs?: number;
  /** Send a stream's first attempt to the holder `Route` names (default true). */
  route?: boolean;
  /** The application journal streams route through (default `journal`). */
  application?: string;
  /** Channel credentials (default: plaintext). */
  credentials?: grpc.ChannelCredentials;
}

type Unary<Req, Res> = (client: grpc.Client, request: Req, metadata: grpc.Metadata, options: grpc.CallOptions) => Promise<Res>;

/** A unary call of `method` as a promise. */
export function unary<Req, Res>(method: string): Unary<Req, Res> {
  return (client, request, metadata, options) =>
    new Promise((resolve, reject) => {
      // eslint-disable-next-line @typescript-eslint/no-explicit-any
      (client as any)[method](request, metadata, options, (err: grpc.ServiceError | null, res: Res) => (err ? reject(err) : resolve(res)));
    });
}

const append = unary<object, proto.AppendResponse>("Append");
const route = unary<object, proto.ShardLease>("Route");
const read = unary<object, { entries: proto.Entry[] }>("Read");
const reportLoad = unary<object, { counted: number }>("ReportLoad");

const RETRYABLE = new Set([grpc.status.UNAVAILABLE, grpc.status.UNKNOWN, grpc.status.DEADLINE_EXCEEDED, grpc.status.CANCELLED]);

/** A client of several nodes, tried in order. `close()` when done. */
export class Client {
  readonly nodes: string[];
  readonly attempts: number;
  readonly attemptTimeoutMs: number;
  readonly application: string;
  private readonly backoffMs: number;
  private readonly routeAppends: boolean;
  private readonly credentials: grpc.ChannelCredentials;
  private readonly token?: string;
  private readonly channels = new Map<string, Map<proto.ServiceClient, grpc.Client>>();
  private readonly routes = new Map<string, string>();
  private current = 0;
  private map: AssignmentMap | null = null;

  constructor(nodes: string | string[], options: Options = {}) {
    this.nodes = parseNodes(nodes);
    this.attempts = Math.max(1, options.attempts ?? 6);
    this.attemptTimeoutMs = options.attemptTimeoutMs ?? 30_000;
    this.backoffMs = options.backoffMs ?? 100;
    this.routeAppends = options.route ?? true;
    this.application = options.application ?? "journal";
    this.credentials = options.credentials ?? grpc.credentials.createInsecure();
    this.token = options.token || undefined;
  }

  /** Closes every channel and stops the assignment map. */
  close(): void {
    this.map?.close();
    this.map = null;
    for (const clients of this.channels.values()) for (const c of clients.values()) c.close();
    this.channels.clear();
  }

  /** The request metadata (the token), fresh per call. */
  metadata(): grpc.Metadata {
    const m = new grpc.Metadata();
    if (this.token) m.set("authorization", `Bearer ${this.token}`);
    return m;
  }

  /** A deadline `ms` from now (default: the attempt timeout). */
  deadline(ms = this.attemptTimeoutMs): grpc.CallOptions {
    return { deadline: new Date(Date.now() + ms) };
  }

  /** The `service` client of `address`, opened on first use. */
  stub(service: proto.ServiceClient, address: string): grpc.Client {
    let clients = this.channels.get(address);
    if (!clients) this.channels.set(address, (clients = new Map()));
    let c = clients.get(service);
    if (!c) {
      const target = address.includes("://") ? address.split("://", 2)[1] : address;
      clients.set(service, (c = new service(target, this.credentials)));
    }
    return c;
  }

  /** Forgets `address`'s channels (a broken one is dialled afresh). */
  forget(address: string): void {
    const clients = this.channels.get(address);
    if (clients) for (const c of clients.values()) c.close();
    this.channels.delete(address);
  }

  private currentNode(): string {
    return this.nodes[this.current % this.nodes.length];
  }

  private nextNode(failed: string): void {
    if (this.currentNode() === failed) this.current = (this.current + 1) % this.nodes.length;
  }

  private pause(n: number): Promise<void> {
    return new Promise((r) => setTimeout(r, Math.min(this.backoffMs * 2 ** Math.min(n, 5), 2000)));
  }

  /**
   * Appends `payload` to `stream` under `requestId` (a fresh one if none):
   * however many attempts it takes, it applies at most once. Throws
   * {@link Refused} for a request no retry helps.
   */
  async append(stream: string, payload: Buffer | string, requestId: string = randomUUID()): Promise<Outcome> {
    const request = { stream, request_id: requestId, payload: Buffer.from(payload), forwarded: false };
    let maybeApplied = false;
    let goTo: Holder | null = null;
    let named: Holder | null = null;
    // Only the first attempt uses the route: after a failure the holder may
    // be gone, and any node waits for the takeover.
    let useRoute = true;
    let reason = "";
    let pauses = 0;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      let routed: string | null;
      if (goTo) {
        routed = goTo.address;
        goTo = null;
      } else {
        routed = useRoute ? await this.routeOf(stream) : null;
      }
      const target = routed ?? this.currentNode();
      let failure: Attempt;
      try {
        const r = await append(this.stub(proto.Journal, target), request, this.metadata(), this.deadline());
        return { kind: "applied", request_id: requestId, sequence: r.sequence, epoch: r.epoch, shard: r.shard, holder: r.holder, node: target, attempts: attempt };
      } catch (e) {
        failure = classify(e as grpc.ServiceError);
        if (failure.kind === "refused") throw new Refused((e as grpc.ServiceError).code, failure.reason);
      }
      this.routes.delete(stream);
      useRoute = false;
      reason = failure.reason;
      if (failure.kind === "not_applied" && failure.holder && failure.holder.address !== target) {
        // Follow the named holder at once.
        named = goTo = failure.holder;
        continue;
      }
      if (failure.kind === "unknown") {
        maybeApplied = true;
        this.forget(target);
      }
      if (routed === null) this.nextNode(target);
      if (attempt < this.attempts) await this.pause(pauses++);
    }
    if (maybeApplied) return { kind: "unknown", request_id: requestId, reason, attempts: this.attempts };
    if (!named) {
      try {
        const lease = await this.routeStream(stream);
        named = lease.holder_address ? { name: lease.holder, address: lease.holder_address } : null;
      } catch {
        named = null;
      }
    }
    return { kind: "not_applied", request_id: requestId, reason, go_to: named };
  }

  /** The holder address to send `stream`'s first attempt to, if known. */
  private async routeOf(stream: string): Promise<string | null> {
    const mapped = this.map?.current().route(this.application, stream_key(stream));
    if (mapped?.holder_address) return mapped.holder_address;
    if (!this.routeAppends) return null;
    let address = this.routes.get(stream);
    if (address === undefined) {
      try {
        address = (await this.routeStream(stream)).holder_address;
      } catch {
        return null;
      }
      if (!address) return null;
      if (this.routes.size >= 4096) this.routes.clear();
      this.routes.set(stream, address);
    }
    return address;
  }

  /**
   * Runs an idempotent call at the current node, moving on after a failure
   * that may be the node's; every node at least once.
   */
  async anyNode<T>(call: (address: string) => Promise<T>): Promise<T> {
    const failures: [string, string][] = [];
    const tries = Math.max(this.nodes.length, this.attempts);
    for (let i = 0; i < tries; i++) {
      const address = this.currentNode();
      try {
        return await call(address);
      } catch (e) {
        const err = e as grpc.ServiceError;
        const attempt = classify(err);
        if (attempt.kind === "refused") throw new Refused(err.code, attempt.reason);
        if (!RETRYABLE.has(err.code)) throw err;
        this.forget(address);
        failures.push([address, attempt.reason]);
      }
      this.nextNode(address);
      if ((i + 1) % this.nodes.length === 0 && i + 1 < tries) await this.pause(i);
    }
    throw new Unreachable(failures);
  }

  /** Which node holds the shard covering `key` of `application`. */
  route(application: string, key: number): Promise<proto.ShardLease> {
    return this.anyNode((a) => route(this.stub(proto.Ownership, a), { application, key }, this.metadata(), this.deadline()));
  }

  /** The lease of the shard `stream`'s appends go to. */
  routeStream(stream: string): Promise<proto.ShardLease> {
    return this.route(this.application, stream_key(stream));
  }

  /** Entries of `stream` from sequence `from` (any node answers). */
  async read(stream: string, from = 1, limit = 1000): Promise<proto.Entry[]> {
    const r = await this.anyNode((a) => read(this.stub(proto.Journal, a), { stream, from, limit }, this.metadata(), this.deadline()));
    return r.entries;
  }

  /**
   * Reports load the application served since its previous report
   * (`Ownership.ReportLoad`): counted with the node's appends. Throws
   * {@link Refused} naming the first bad sample. The samples counted.
   */
  async reportLoad(samples: proto.LoadSample[]): Promise<number> {
    const r = await this.anyNode((a) => reportLoad(this.stub(proto.Ownership, a), { samples }, this.metadata(), this.deadline()));
    return r.counted;
  }

  /**
   * The ownership events of the first node that answers, surviving gaps;
   * with `acknowledges` the watch takes part in handoffs (answer DRAINING
   * with `released`, ACQUIRED with `ready`).
   */
  watchOwnership(acknowledges = false): OwnershipWatch {
    return new OwnershipWatch(this, acknowledges);
  }

  /**
   * Starts following the whole assignment map and routes this client's
   * appends by it from then on, with no `Route` call. `close()` stops it.
   */
  assignmentMap(): AssignmentMap {
    if (!this.map) this.map = new AssignmentMap(this);
    return this.map;
  }
}
