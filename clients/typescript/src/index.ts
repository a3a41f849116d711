/**
 * A client of chitin nodes for Node.js, at the level of the Rust and Python
 * clients (docs/clients.md): several nodes with failover and the **same
 * request id**, typed append outcomes read from the `chitin-outcome`
 * trailers, the whole assignment map routing keys locally, an ownership
 * watch that survives gaps and takes part in handoffs, load reports, and
 * fences for the application's own PostgreSQL, MySQL/MariaDB and Redis.
 */

export { AssignmentMap, Assignments, OutOfStep } from "./assignments";
export {
  type Applied,
  type Attempt,
  Client,
  classify,
  type Holder,
  type NotApplied,
  type Options,
  type Outcome,
  parseNodes,
  Refused,
  type Unknown,
  Unreachable,
} from "./client";
export * as fence from "./fence";
export { fnv1a, stream_key } from "./key";
export type { Assignment, AssignmentUpdate, Entry, LoadSample, OwnershipEvent, ShardLease } from "./proto";
export { OwnershipWatch, type WatchEvent } from "./watch";
