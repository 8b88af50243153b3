// grpc.health.v1.Health (Check, Watch, List) as the gRPC health-checking
// protocol defines it, with the same answers as the grpc-health-check
// package: an unknown service is NOT_FOUND for Check and SERVICE_UNKNOWN for
// Watch, which stays open; List refuses more than 100 services. Its messages
// are encoded here by field number, like the CapacityProvider's
// (src/server/codec.ts), because loading the package and the proto-loader it
// parses health.proto with was a large part of start-up
// (docs/performance.md#what-loads-before-the-port-opens).

import * as grpc from "@grpc/grpc-js";
import { Buffer } from "node:buffer";
// The minimal build: Reader and Writer without the .proto parser, ~8 ms less start-up.
import protobuf from "protobufjs/minimal.js";
import { fields } from "./codec.ts";

export const HEALTH_SERVICE = "grpc.health.v1.Health";

/** HealthCheckResponse.ServingStatus, by name and enum number. */
export const SERVING_STATUS = {
  UNKNOWN: 0,
  SERVING: 1,
  NOT_SERVING: 2,
  /** Only Watch sends it: the service is not known (yet). */
  SERVICE_UNKNOWN: 3,
} as const;
export type ServingStatus = keyof typeof SERVING_STATUS;

const WIRE_VARINT = 0;
const WIRE_LEN = 2;
const LIST_LIMIT = 100;

/**
 * HealthCheckRequest { string service = 1; }. An object, not the bare name:
 * grpc-js takes a falsy request (the name "") for no request at all.
 */
export interface CheckRequest {
  service: string;
}

export function encodeCheckRequest({ service }: CheckRequest): Uint8Array {
  const w = protobuf.Writer.create();
  if (service !== "") w.uint32((1 << 3) | WIRE_LEN).string(service);
  return w.finish();
}

/** Throws DecodeError for bytes that are not a message. */
export function decodeCheckRequest(bytes: Uint8Array): CheckRequest {
  let service = "";
  fields(bytes, (f, w, r) => {
    if (f !== 1 || w !== WIRE_LEN) return false;
    service = r.string();
    return true;
  });
  return { service };
}

function writeCheckResponse(w: protobuf.Writer, status: ServingStatus): void {
  const n = SERVING_STATUS[status];
  // proto3 leaves a field at its default (UNKNOWN) off the wire.
  if (n !== 0) w.uint32((1 << 3) | WIRE_VARINT).int32(n);
}

/** HealthCheckResponse { ServingStatus status = 1; } */
export function encodeCheckResponse(status: ServingStatus): Uint8Array {
  const w = protobuf.Writer.create();
  writeCheckResponse(w, status);
  return w.finish();
}

const STATUS_NAME = new Map(
  Object.entries(SERVING_STATUS).map(([name, n]) => [n as number, name as ServingStatus]),
);

/** The status by name; a number this side does not know reads as UNKNOWN. */
export function decodeCheckResponse(bytes: Uint8Array): ServingStatus {
  let status: ServingStatus = "UNKNOWN";
  fields(bytes, (f, w, r) => {
    if (f !== 1 || w !== WIRE_VARINT) return false;
    status = STATUS_NAME.get(r.int32()) ?? "UNKNOWN";
    return true;
  });
  return status;
}

type Statuses = [string, ServingStatus][];

/** HealthListResponse { map<string, HealthCheckResponse> statuses = 1; } */
export function encodeListResponse(statuses: Statuses): Uint8Array {
  const w = protobuf.Writer.create();
  for (const [service, status] of statuses) {
    // A map entry is a message of its own: key = 1, value = 2.
    w.uint32((1 << 3) | WIRE_LEN).fork();
    w.uint32((1 << 3) | WIRE_LEN).string(service);
    w.uint32((2 << 3) | WIRE_LEN).fork();
    writeCheckResponse(w, status);
    w.ldelim();
    w.ldelim();
  }
  return w.finish();
}

export function decodeListResponse(bytes: Uint8Array): Statuses {
  const out: Statuses = [];
  fields(bytes, (f, w, r) => {
    if (f !== 1 || w !== WIRE_LEN) return false;
    let service = "";
    let status: ServingStatus = "UNKNOWN";
    fields(r.bytes(), (ef, ew, er) => {
      if (ef === 1 && ew === WIRE_LEN) service = er.string();
      else if (ef === 2 && ew === WIRE_LEN) status = decodeCheckResponse(er.bytes());
      else return false;
      return true;
    });
    out.push([service, status]);
    return true;
  });
  return out;
}

type ListRequest = Record<string, never>;

/** HealthListRequest has no fields: anything in it is skipped, a malformed one refused. */
function decodeListRequest(bytes: Uint8Array): ListRequest {
  fields(bytes, () => false);
  return {};
}

const toBuffer = (b: Uint8Array) => Buffer.from(b.buffer, b.byteOffset, b.byteLength);

function method<Req, Res>(
  name: string,
  responseStream: boolean,
  request: [(r: Req) => Uint8Array, (b: Uint8Array) => Req],
  response: [(r: Res) => Uint8Array, (b: Uint8Array) => Res],
): grpc.MethodDefinition<Req, Res> {
  return {
    path: `/${HEALTH_SERVICE}/${name}`,
    requestStream: false,
    responseStream,
    requestSerialize: (r) => toBuffer(request[0](r)),
    // A request that does not decode is answered by grpc-js (INTERNAL), as
    // it was with the package's generated decoder.
    requestDeserialize: request[1],
    responseSerialize: (r) => toBuffer(response[0](r)),
    responseDeserialize: response[1],
  };
}

const checkRequest: [typeof encodeCheckRequest, typeof decodeCheckRequest] = [
  encodeCheckRequest,
  decodeCheckRequest,
];
const checkResponse: [typeof encodeCheckResponse, typeof decodeCheckResponse] = [
  encodeCheckResponse,
  decodeCheckResponse,
];

/** The service definition, for the server and for clients (tests, tools). */
export const healthDefinition = {
  Check: method("Check", false, checkRequest, checkResponse),
  Watch: method("Watch", true, checkRequest, checkResponse),
  List: method<ListRequest, Statuses>("List", false, [() => new Uint8Array(0), decodeListRequest], [
    encodeListResponse,
    decodeListResponse,
  ]),
} satisfies grpc.ServiceDefinition;

/** The statuses this server reports and the Watch streams that follow them. */
export class Health {
  readonly #status = new Map<string, ServingStatus>();
  readonly #watchers = new Map<string, Set<(s: ServingStatus) => void>>();

  constructor(initial: Record<string, ServingStatus>) {
    for (const [service, status] of Object.entries(initial)) this.#status.set(service, status);
  }

  /** Sets a service's status; its watchers are told if it changed. */
  setStatus(service: string, status: ServingStatus): void {
    if (this.#status.get(service) === status) return;
    this.#status.set(service, status);
    for (const tell of this.#watchers.get(service) ?? []) tell(status);
  }

  addToServer(server: grpc.Server): void {
    const check: grpc.handleUnaryCall<CheckRequest, ServingStatus> = (call, callback) => {
      const { service } = call.request;
      const status = this.#status.get(service);
      if (status) return callback(null, status);
      callback({
        code: grpc.status.NOT_FOUND,
        details: `Health status unknown for service ${service}`,
      });
    };
    const watch: grpc.handleServerStreamingCall<CheckRequest, ServingStatus> = (call) => {
      const { service } = call.request;
      const tell = (s: ServingStatus) => call.write(s);
      let set = this.#watchers.get(service);
      if (!set) this.#watchers.set(service, set = new Set());
      set.add(tell);
      call.on("cancelled", () => {
        set.delete(tell);
        // Names come from clients: keep no empty entry behind.
        if (set.size === 0 && this.#watchers.get(service) === set) this.#watchers.delete(service);
      });
      tell(this.#status.get(service) ?? "SERVICE_UNKNOWN");
    };
    const list: grpc.handleUnaryCall<ListRequest, Statuses> = (_call, callback) => {
      if (this.#status.size > LIST_LIMIT) {
        return callback({
          code: grpc.status.RESOURCE_EXHAUSTED,
          details: "Too many services to list.",
        });
      }
      callback(null, [...this.#status]);
    };
    server.addService(healthDefinition, { Check: check, Watch: watch, List: list });
  }
}
