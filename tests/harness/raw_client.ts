// A CapacityProvider client that sends and receives raw protobuf bytes over
// grpc-js, for benchmarks and memory tests: what they measure is the provider
// and the transport, not a client-side decode of a 100,000-machine List.
// Requests are written by field number (proto/bigfleet/v1alpha1/provider.proto);
// only id and state are read back.

import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { Buffer } from "node:buffer";
import protobuf from "protobufjs";

const SERVICE = "/bigfleet.v1alpha1.CapacityProvider/";
const WIRE_LEN = 2;

/** A fencing token; `seq` must grow per machine for the shard. */
export interface BenchToken {
  shard: string;
  epoch: number;
  seq: number;
}

export interface MachineView {
  id: string;
  state: number;
}

type Fields = { str?: [number, string][]; int?: [number, number][] };

function message({ str = [], int = [] }: Fields): Buffer {
  const w = protobuf.Writer.create();
  for (const [field, value] of str) w.uint32((field << 3) | WIRE_LEN).string(value);
  for (const [field, value] of int) w.uint32(field << 3).int64(value);
  return Buffer.from(w.finish());
}

/** id (1) and state (2) of an encoded Machine. */
export function readMachine(bytes: Uint8Array): MachineView {
  const r = protobuf.Reader.create(bytes);
  const out: MachineView = { id: "", state: 0 };
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag === ((1 << 3) | WIRE_LEN)) out.id = r.string();
    else if (tag === (2 << 3)) out.state = r.int32();
    else r.skipType(tag & 7);
  }
  return out;
}

/** The machine inside a TransitionAck (field 2). */
export function readAck(bytes: Uint8Array): MachineView {
  const r = protobuf.Reader.create(bytes);
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag === ((2 << 3) | WIRE_LEN)) return readMachine(r.bytes());
    r.skipType(tag & 7);
  }
  throw new Error("TransitionAck without a machine");
}

/** Every machine of an encoded MachineList, id and state only. */
export function readList(bytes: Uint8Array): MachineView[] {
  const r = protobuf.Reader.create(bytes);
  const out: MachineView[] = [];
  while (r.pos < r.len) {
    const tag = r.uint32();
    if (tag === ((1 << 3) | WIRE_LEN)) out.push(readMachine(r.bytes()));
    else r.skipType(tag & 7);
  }
  return out;
}

export class RawClient {
  readonly #client: grpc.Client;

  constructor(readonly addr: string) {
    this.#client = new grpc.Client(addr, withGoawayFilter(grpc.credentials.createInsecure()), {
      "grpc.max_receive_message_length": -1,
      "grpc.max_send_message_length": -1,
      // Each client its own HTTP/2 connection, as separate BigFleet shards would be.
      "grpc.use_local_subchannel_pool": 1,
    });
  }

  call(method: string, request: Buffer): Promise<Buffer> {
    return new Promise((resolve, reject) => {
      this.#client.makeUnaryRequest(
        SERVICE + method,
        (b: Buffer) => b,
        (b: Buffer) => b,
        request,
        { deadline: Date.now() + 60_000 },
        (err, value) => err ? reject(err) : resolve(value!),
      );
    });
  }

  /** A full List (no filter), as bytes. */
  list(): Promise<Buffer> {
    return this.call("List", Buffer.alloc(0));
  }

  get(id: string): Promise<Buffer> {
    return this.call("Get", message({ str: [[1, id]] }));
  }

  create(id: string, t: BenchToken): Promise<Buffer> {
    return this.call(
      "Create",
      message({ str: [[1, id], [3, t.shard]], int: [[4, t.epoch], [5, t.seq]] }),
    );
  }

  configure(id: string, cluster: string, t: BenchToken): Promise<Buffer> {
    return this.call(
      "Configure",
      message({ str: [[1, id], [2, cluster], [4, t.shard]], int: [[5, t.epoch], [6, t.seq]] }),
    );
  }

  drain(id: string, t: BenchToken): Promise<Buffer> {
    return this.call(
      "Drain",
      message({ str: [[1, id], [3, t.shard]], int: [[4, t.epoch], [5, t.seq]] }),
    );
  }

  delete(id: string, t: BenchToken): Promise<Buffer> {
    return this.call(
      "Delete",
      message({ str: [[1, id], [2, t.shard]], int: [[3, t.epoch], [4, t.seq]] }),
    );
  }

  close(): void {
    this.#client.close();
  }
}
