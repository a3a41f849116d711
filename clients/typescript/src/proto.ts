/**
 * The node API (`proto/chitin.proto`, copied beside the build as
 * `dist/chitin.proto`) loaded at run time with `@grpc/proto-loader`: field
 * names as in the proto, 64-bit integers as numbers (epochs and sequences
 * stay far below 2^53), enums as their names.
 */

import * as path from "path";
import * as grpc from "@grpc/grpc-js";
import * as loader from "@grpc/proto-loader";

const PROTO = path.join(__dirname, "..", "chitin.proto");

const definition = loader.loadSync(PROTO, { keepCase: true, longs: Number, enums: String, defaults: true, oneofs: true });
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const v1 = (grpc.loadPackageDefinition(definition) as any).chitin.v1;

/** A service client's constructor. */
export type ServiceClient = new (address: string, credentials: grpc.ChannelCredentials) => grpc.Client;

export const Journal: ServiceClient = v1.Journal;
export const Ownership: ServiceClient = v1.Ownership;
export const Admin: ServiceClient = v1.Admin;

/** `ShardLease` (Route, Held). */
export interface ShardLease {
  shard: string;
  application: string;
  holder: string;
  holder_uuid: string;
  holder_address: string;
  epoch: number;
  expires_in_ms: number;
  parent: string;
}

/** `AppendResponse`. */
export interface AppendResponse {
  sequence: number;
  epoch: number;
  shard: string;
  holder: string;
}

/** `Entry` of a `ReadResponse`. */
export interface Entry {
  sequence: number;
  request_id: string;
  payload: Buffer;
  epoch: number;
}

/** `Assignment`: one shard of the assignment map. */
export interface Assignment {
  shard: string;
  application: string;
  lower: number;
  upper: number;
  state: string;
  routable: boolean;
  parent: string;
  holder: string;
  holder_uuid: string;
  holder_address: string;
  epoch: number;
}

/** `AssignmentUpdate`: a snapshot or a delta of one node's stream. */
export interface AssignmentUpdate {
  node: string;
  version: number;
  snapshot: boolean;
  changed: Assignment[];
  removed: string[];
}

/** `OwnershipEvent`. */
export interface OwnershipEvent {
  kind: "KIND_UNSPECIFIED" | "ACQUIRED" | "DRAINING" | "LOST" | string;
  shard: string;
  epoch: number;
}

/** `LoadSample` of `ReportLoad`: an application and key, or a shard. */
export interface LoadSample {
  application?: string;
  key?: number;
  shard?: string;
  ops: number;
  bytes?: number;
}
