// The gRPC listener: CapacityProvider, grpc.health.v1 and reflection on one
// port, served by @grpc/grpc-js (which speaks h2c to grpc-go clients). The
// CapacityProvider methods use the project's own codec (src/server/codec.ts)
// at the paths their names give: parsing the .proto is left to reflection,
// loaded on its first call (docs/performance.md#what-loads-before-the-port-opens).
// Connections are accepted by src/server/listener.ts (TCP, TLS, limits, the
// HTTP/2 frame guard) and injected into grpc-js.

import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
import { setImmediate } from "node:timers";
import type { TlsOptions } from "node:tls";
import type { Ack, Call as KitCall, KitRpc } from "../kit/api.ts";
import { PROTO_PATH } from "../proto.ts";
import { Code, KitError } from "../kit/errors.ts";
import { encodeRevision } from "../kit/revision.ts";
import { assertShardAllowed, peerShardIds } from "./identity.ts";
import type { AuthSource } from "./identity.ts";
import { LISTENER_LIMITS, SESSION_LIMITS } from "./limits.ts";
import { startListener } from "./listener.ts";
import {
  decodeConfigure,
  decodeCreate,
  decodeDelete,
  decodeDrain,
  DecodeError,
  decodeListFilter,
  decodeMachineRef,
  machineEncoder,
} from "./codec.ts";
import { Health } from "./health.ts";
import { FRAME_HEADER_BYTES, pacedResponses, SLICE_BYTES } from "./large_response.ts";
import { LifecycleGate, SHUTTING_DOWN } from "./lifecycle_gate.ts";
import { addReflection } from "./reflection.ts";
import { passThrough } from "./interceptor.ts";

/** The CapacityProvider RPCs, in the order provider.proto declares them. */
export const METHODS = ["Create", "Configure", "Drain", "Delete", "Get", "List"] as const;
export type Method = typeof METHODS[number];

/** What a call was about, for its log line: the machine, the fencing token, the operation. */
export interface CallFields {
  machineId?: string;
  operationId?: string;
  shardId?: string;
  epoch?: string;
  sequence?: string;
}

/** Told about every finished RPC; metrics and logs hang off this. */
export interface RpcObserver {
  rpc(method: Method, code: number, seconds: number, error: string | null, call: CallFields): void;
  /** A handler threw something that was not a contract error. */
  panic(method: Method, error: unknown): void;
}

export interface GrpcOptions {
  kit: KitRpc;
  provider: string;
  host: string;
  port: number;
  /** node:tls server options (src/server/tls.ts); null serves plaintext. */
  tls: TlsOptions | null;
  reflection: boolean;
  observer: RpcObserver;
}

export interface GrpcServer {
  readonly port: number;
  /** Health goes SERVING; call once everything else is ready. */
  markServing(): void;
  /**
   * Health goes NOT_SERVING and lifecycle calls that begin from now on are
   * answered UNAVAILABLE; Get and List keep being served. Resolves once the
   * lifecycle calls begun before are answered, or when `signal` aborts.
   */
  refuseLifecycle(signal: AbortSignal): Promise<void>;
  /**
   * Health goes NOT_SERVING, new calls are refused, in-flight calls finish
   * (bounded by graceMs, or cut when `now` aborts).
   */
  shutdown(graceMs: number, now?: AbortSignal): Promise<void>;
}

export const SERVICE = "bigfleet.v1alpha1.CapacityProvider";

/** Where gRPC serves a method: /<package>.<service>/<method>, as protoc names it. */
export function methodPath(method: Method): string {
  return `/${SERVICE}/${method}`;
}

type Call = grpc.ServerUnaryCall<Uint8Array, Uint8Array>;
/** Decodes, calls the kit and encodes; fills `fields` with what the call was about. */
type Handler = (request: Uint8Array, call: Call, fields: CallFields) => Promise<Uint8Array>;

export async function startGrpcServer(opts: GrpcOptions): Promise<GrpcServer> {
  const { kit, observer } = opts;
  const enc = machineEncoder(opts.provider);
  /** Large List encodings made for one response; nothing else holds them. */
  const oneShot = new WeakSet<Uint8Array>();

  // Mutations check the peer's shard identity after decoding and before the
  // kit sees the request, so a refused call never moves a fence mark.
  function mutation<T extends KitCall>(
    decode: (b: Uint8Array) => T,
    run: (m: T) => Promise<Ack>,
  ): Handler {
    return async (b, call, fields) => {
      const m = decode(b);
      fields.machineId = m.machineId;
      fields.shardId = m.token.shardId;
      fields.epoch = m.token.epoch.toString();
      fields.sequence = m.token.seq.toString();
      assertShardAllowed(peerShardIds(authOf(call)), m.token.shardId);
      const ack = await run(m);
      fields.operationId = ack.operationId;
      return enc.ack(ack.operationId, ack.machine);
    };
  }

  const handlers: Record<Method, Handler> = {
    Create: mutation(decodeCreate, (m) => kit.create(m)),
    Configure: mutation(decodeConfigure, (m) => kit.configure(m)),
    Drain: mutation(decodeDrain, (m) => kit.drain(m)),
    Delete: mutation(decodeDelete, (m) => kit.delete(m)),
    Get: async (b, _call, fields) => {
      const id = decodeMachineRef(b);
      fields.machineId = id;
      return enc.machine(await kit.get(id));
    },
    List: async (b) => {
      const f = decodeListFilter(b);
      const res = await kit.list(f);
      const bytes = enc.list(res.machines, encodeRevision(res.revision), FRAME_HEADER_BYTES);
      if (bytes.length > SLICE_BYTES) oneShot.add(bytes);
      return bytes;
    },
  };

  const definition: Record<string, grpc.MethodDefinition<Uint8Array, Uint8Array>> = {};
  const implementation: grpc.UntypedServiceImplementation = {};
  for (const method of METHODS) {
    definition[method] = {
      path: methodPath(method),
      requestStream: false,
      responseStream: false,
      // Requests stay raw bytes: decoding happens inside the handler, so a
      // malformed message is answered like any other bad request.
      requestDeserialize: (buf: Buffer) => buf,
      requestSerialize: (b: Uint8Array) => Buffer.from(b),
      responseSerialize: (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength),
      responseDeserialize: (buf: Buffer) => buf,
    };
    implementation[method] = unary(method, handlers[method], observer);
  }

  const streams = new OpenStreams();
  const lifecycle: readonly Method[] = ["Create", "Configure", "Drain", "Delete"];
  const gate = new LifecycleGate(lifecycle.map(methodPath), (path) => {
    const method = lifecycle.find((m) => methodPath(m) === path)!;
    // Refused before its request is read: nothing of the call is known.
    setImmediate(() => observer.rpc(method, grpc.status.UNAVAILABLE, 0, SHUTTING_DOWN, {}));
  });
  const server = new grpc.Server({
    // pacedResponses first: it needs the call grpc-js built, which holds the HTTP/2 stream.
    interceptors: [
      pacedResponses((m) => oneShot.has(m as Uint8Array), new Set([methodPath("List")])),
      streams.interceptor,
      gate.interceptor,
    ],
    "grpc.max_receive_message_length": SESSION_LIMITS.maxReceiveBytes,
    "grpc.max_send_message_length": -1,
    "grpc.max_concurrent_streams": SESSION_LIMITS.maxConcurrentStreams,
    "grpc.keepalive_time_ms": SESSION_LIMITS.keepaliveTimeMs,
    "grpc.keepalive_timeout_ms": SESSION_LIMITS.keepaliveTimeoutMs,
    "grpc.max_connection_idle_ms": SESSION_LIMITS.idleTimeoutMs,
  });
  server.addService(definition, implementation);

  const health = new Health({ "": "NOT_SERVING", [SERVICE]: "NOT_SERVING" });
  health.addToServer(server);
  if (opts.reflection) addReflection(server, PROTO_PATH);

  // TLS ends in the listener, so grpc-js is handed plaintext HTTP/2.
  const injector = server.createConnectionInjector(grpc.ServerCredentials.createInsecure());
  const listener = await startListener({
    host: opts.host === "" ? "0.0.0.0" : opts.host,
    port: opts.port,
    tls: opts.tls,
    limits: LISTENER_LIMITS,
    onConnection: (stream) => injector.injectConnection(stream),
  });

  /** The call's client certificate, from the listener that verified it. */
  function authOf(call: Call): AuthSource {
    if (!opts.tls) return {};
    const cert = listener.peerCertificate(call.getPeer());
    // Gone means the connection closed under the call: never act unidentified.
    if (cert === undefined) throw new KitError(Code.Unavailable, "the connection has closed");
    return { getAuthContext: () => ({ sslPeerCertificate: cert ?? undefined }) };
  }

  function setHealth(status: "SERVING" | "NOT_SERVING"): void {
    health.setStatus("", status);
    health.setStatus(SERVICE, status);
  }

  return {
    port: listener.port,
    markServing: () => setHealth("SERVING"),
    refuseLifecycle(signal) {
      setHealth("NOT_SERVING");
      return gate.close(signal);
    },
    async shutdown(graceMs, now) {
      setHealth("NOT_SERVING");
      // Stops accepting; resolves once every connection has ended.
      const drained = listener.close();
      // GOAWAY to every connection: open unary calls finish and answer first.
      server.tryShutdown(() => {});
      // Watchers have just been told NOT_SERVING; their streams would
      // otherwise hold the shutdown open until the grace runs out.
      streams.endAll();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const graceOver = new Promise<true>((r) => {
        timer = setTimeout(() => r(true), graceMs);
        now?.addEventListener("abort", () => r(true), { once: true });
      });
      const late = await Promise.race([drained, graceOver]);
      clearTimeout(timer);
      if (late) {
        server.forceShutdown();
        listener.destroyAll();
        await drained;
      }
    },
  };
}

/** Open streaming calls (health Watch, reflection), ended when the server stops. */
class OpenStreams {
  readonly #calls = new Set<grpc.ServerInterceptingCallInterface>();

  readonly interceptor: grpc.ServerInterceptor = (desc, call) => {
    // A unary call passes through unwrapped: a layer is several objects per call.
    if (!desc.requestStream && !desc.responseStream) return passThrough(call);
    this.#calls.add(call);
    const forget = () => this.#calls.delete(call);
    return new grpc.ServerInterceptingCall(call, {
      start: (next) => next({ onCancel: forget }),
      sendStatus: (status, next) => {
        forget();
        next(status);
      },
    });
  };

  endAll(): void {
    for (const call of [...this.#calls]) {
      this.#calls.delete(call);
      call.sendStatus({ code: grpc.status.UNAVAILABLE, details: "server shutting down" });
    }
  }
}

function unary(
  method: Method,
  handler: Handler,
  observer: RpcObserver,
): grpc.handleUnaryCall<Uint8Array, Uint8Array> {
  return (call, callback) => {
    const started = performance.now();
    const fields: CallFields = {};
    // The answer is handed to grpc-js first; its metric sample and log line
    // (a synchronous stderr write) follow in the next turn of the event
    // loop, after the response's headers and data have gone out and before
    // its trailers, so a client that has seen the call end sees its metric.
    const answer = (code: number, error: string | null, send: () => void) => {
      const seconds = (performance.now() - started) / 1000;
      send();
      setImmediate(() => observer.rpc(method, code, seconds, error, fields));
    };
    let pending: Promise<Uint8Array>;
    try {
      pending = handler(call.request, call, fields);
    } catch (e) {
      pending = Promise.reject(e);
    }
    pending.then(
      (bytes) => answer(grpc.status.OK, null, () => callback(null, bytes)),
      (e) => {
        const [code, details] = toStatus(method, e, observer);
        answer(code, details, () => callback({ code, details }));
      },
    );
  };
}

function toStatus(method: Method, e: unknown, observer: RpcObserver): [number, string] {
  if (e instanceof KitError) return [e.code, e.message];
  if (e instanceof DecodeError) {
    return [Code.InvalidArgument, `malformed ${method} request: ${e.message}`];
  }
  observer.panic(method, e);
  return [Code.Internal, `internal error in ${method}`];
}
