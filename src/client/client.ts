// A read-only CapacityProvider client (Get and List) over grpc-js, for the
// machines commands. One channel per client; every call has a deadline.

import * as grpc from "@grpc/grpc-js";
import type { Channel } from "./credentials.ts";
import { capacityProviderCtor, type WireMachine, type WireMachineList } from "./wire.ts";

/** What a provider may legitimately send for a big fleet; beyond this is a fault. */
const MAX_RECEIVE_BYTES = 512 * 1024 * 1024;

const TARGET = /^(\[[0-9a-fA-F:.%\w]+\]|[^\s:\/\[\]]+):(\d{1,5})$/;

/** A dial target `HOST:PORT` (`[v6]:PORT`); throws the problem otherwise (callers name the flag). */
export function checkTarget(text: string): string {
  const m = TARGET.exec(text);
  const port = m ? Number(m[2]) : 0;
  if (!m || port < 1 || port > 65535) {
    throw new Error(`want HOST:PORT (e.g. 127.0.0.1:9000), got ${JSON.stringify(text)}`);
  }
  return text;
}

/** A non-OK gRPC status, or a transport failure grpc-js reports as one. */
export class RpcFailure extends Error {
  override name = "RpcFailure";
  /** "UNAVAILABLE (14): details" */
  readonly status: string;
  constructor(readonly method: string, readonly code: number, readonly details: string) {
    // grpc-js appends an empty "Resolution note:" to connection failures.
    const why = details.replace(/\s*Resolution note:\s*$/, "");
    const status = `${grpc.status[code] ?? "CODE"} (${code}): ${why}`;
    super(`${method}: ${status}`);
    this.status = status;
  }
}

type UnaryFn = (
  req: unknown,
  meta: grpc.Metadata,
  opts: grpc.CallOptions,
  cb: (err: grpc.ServiceError | null, value?: unknown) => void,
) => void;

export class ProviderReader {
  readonly #client: grpc.Client;

  constructor(readonly target: string, channel: Channel, readonly timeoutMs: number) {
    const Ctor = capacityProviderCtor();
    this.#client = new Ctor(target, channel.credentials, {
      ...channel.options,
      "grpc.max_receive_message_length": MAX_RECEIVE_BYTES,
    });
  }

  #call<T>(method: string, req: unknown): Promise<T> {
    const fn = (this.#client as unknown as Record<string, UnaryFn>)[method];
    const deadline = new Date(Date.now() + this.timeoutMs);
    return new Promise<T>((resolve, reject) => {
      fn.call(this.#client, req, new grpc.Metadata(), { deadline }, (err, value) => {
        if (err) reject(new RpcFailure(method, err.code, err.details ?? err.message));
        else resolve(value as T);
      });
    });
  }

  get(id: string): Promise<WireMachine> {
    return this.#call("Get", { id });
  }

  /** List in `states` (all when empty), only what changed after `since` when given. */
  async list(states: number[], since: Uint8Array = new Uint8Array()): Promise<WireMachineList> {
    const out = await this.#call<WireMachineList>("List", {
      states,
      max_results: 0,
      since_revision: since,
    });
    return { machines: out.machines, revision: new Uint8Array(out.revision) };
  }

  close(): void {
    this.#client.close();
  }
}
