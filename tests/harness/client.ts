// A typed, promisified CapacityProvider client over @grpc/grpc-js.
// Each ProviderClient owns its own HTTP/2 connection (local subchannel pool),
// like a grpc-go test that dials its own ClientConn.

import * as grpc from "@grpc/grpc-js";
import { withGoawayFilter } from "../../src/client/goaway_credentials.ts";
import { capacityProviderCtor } from "./proto.ts";
import type {
  ConfigureRequest,
  CreateRequest,
  DeleteRequest,
  DrainRequest,
  Int64,
  ListFilter,
  Machine,
  MachineList,
  MachineRef,
  TransitionAck,
} from "./types.ts";
import { codeName } from "./types.ts";

/** grpc-go's default client receive limit. */
export const DEFAULT_RECEIVE_BYTES = 4 * 1024 * 1024;
export const MIB = 1024 * 1024;

export interface DialOptions {
  /** Max inbound message size; 4 MiB by default, 256 MiB for scale. */
  maxReceiveBytes?: number;
  /** Per-call deadline; 30 s by default, as the Go harness. */
  deadlineMs?: number;
  /** Transport; plaintext h2c by default, as the certification runner dials. */
  credentials?: grpc.ChannelCredentials;
  /** Extra channel options (e.g. a TLS server-name override). */
  channelOptions?: grpc.ChannelOptions;
}

/** A non-OK gRPC status. */
export class RpcError extends Error {
  override name = "RpcError";
  constructor(readonly method: string, readonly code: number, readonly details: string) {
    super(`${method}: ${codeName(code)} (${code}): ${details}`);
  }
}

export type Outcome<T> =
  | { ok: true; value: T; code: 0 }
  | { ok: false; code: number; message: string };

/** Resolve an RPC into OK-or-status without throwing for gRPC statuses. */
export async function outcome<T>(p: Promise<T>): Promise<Outcome<T>> {
  try {
    return { ok: true, value: await p, code: 0 };
  } catch (e) {
    if (e instanceof RpcError) return { ok: false, code: e.code, message: e.details };
    throw e;
  }
}

function int64(v: Int64 | undefined): string {
  if (v === undefined) return "0";
  if (typeof v === "number" && !Number.isSafeInteger(v)) {
    throw new Error(`int64 ${v} is not exact as a number; pass a bigint or string`);
  }
  return String(v);
}

/** The fencing triple every lifecycle request carries. */
function fence(r: { shard_id?: string; shard_epoch?: Int64; sequence_number?: Int64 }) {
  return {
    shard_id: r.shard_id ?? "",
    shard_epoch: int64(r.shard_epoch),
    sequence_number: int64(r.sequence_number),
  };
}

type Callback<T> = (err: grpc.ServiceError | null, value?: T) => void;
type UnaryFn = (
  req: unknown,
  meta: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: Callback<unknown>,
) => void;

export class ProviderClient {
  readonly #client: grpc.Client;
  readonly #deadlineMs: number;
  #closed = false;

  constructor(readonly addr: string, opts: DialOptions = {}) {
    const Ctor = capacityProviderCtor();
    this.#client = new Ctor(
      addr,
      opts.credentials ?? withGoawayFilter(grpc.credentials.createInsecure()),
      {
        ...opts.channelOptions,
        "grpc.max_receive_message_length": opts.maxReceiveBytes ?? DEFAULT_RECEIVE_BYTES,
        "grpc.max_send_message_length": -1,
        "grpc.use_local_subchannel_pool": 1,
      },
    );
    this.#deadlineMs = opts.deadlineMs ?? 30_000;
  }

  #call<T>(method: string, req: unknown, deadlineMs?: number): Promise<T> {
    const fn = (this.#client as unknown as Record<string, UnaryFn>)[method];
    const deadline = new Date(Date.now() + (deadlineMs ?? this.#deadlineMs));
    return new Promise<T>((resolve, reject) => {
      fn.call(this.#client, req, new grpc.Metadata(), { deadline }, (err, value) => {
        if (err) reject(new RpcError(method, err.code, err.details ?? err.message));
        else resolve(value as T);
      });
    });
  }

  create(r: CreateRequest): Promise<TransitionAck> {
    return this.#call("Create", {
      machine_id: r.machine_id,
      ...fence(r),
    });
  }

  configure(r: ConfigureRequest): Promise<TransitionAck> {
    return this.#call("Configure", {
      machine_id: r.machine_id,
      cluster_id: r.cluster_id ?? "",
      bootstrap_blob: r.bootstrap_blob ?? new Uint8Array(),
      ...fence(r),
      // Copied so the caller's object is never what is encoded (B505).
      shard_metadata: { ...(r.shard_metadata ?? {}) },
    });
  }

  drain(r: DrainRequest): Promise<TransitionAck> {
    return this.#call("Drain", {
      machine_id: r.machine_id,
      grace_period_seconds: int64(r.grace_period_seconds),
      ...fence(r),
    });
  }

  delete(r: DeleteRequest): Promise<TransitionAck> {
    return this.#call("Delete", {
      machine_id: r.machine_id,
      ...fence(r),
    });
  }

  get(r: MachineRef, deadlineMs?: number): Promise<Machine> {
    return this.#call("Get", { id: r.id }, deadlineMs);
  }

  async list(f: ListFilter = {}, deadlineMs?: number): Promise<MachineList> {
    const out = await this.#call<MachineList>("List", {
      states: f.states ?? [],
      max_results: f.max_results ?? 0,
      since_revision: f.since_revision ?? new Uint8Array(),
    }, deadlineMs);
    // Buffer is a Uint8Array subclass; normalise so deep equality is plain bytes.
    return { machines: out.machines, revision: new Uint8Array(out.revision) };
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#client.close();
  }
}
