// Turns every finished RPC into a metric sample and one log line: lifecycle
// calls at INFO, Get/List at DEBUG (the shard Lists every few seconds), any
// error at WARN; a handler exception at ERROR and in panics_total. A line
// carries what the call was about (machine, operation, fencing token) as far
// as the request decoded; never the request itself, which may hold a
// bootstrap blob.

import * as grpc from "@grpc/grpc-js";
import { getLogger } from "@logtape/logtape";
import type { Method, RpcObserver } from "./grpc.ts";
import type { Metrics } from "./metrics.ts";

const rpcLog = getLogger(["bigfleet", "rpc"]);
const READS: ReadonlySet<Method> = new Set(["Get", "List"]);

/** OK, NOT_FOUND, …: the name Prometheus labels and log lines carry. */
export function codeName(code: number): string {
  return grpc.status[code] ?? String(code);
}

export function createRpcObserver(metrics: Metrics): RpcObserver {
  return {
    rpc(method, code, seconds, error, call) {
      const name = codeName(code);
      metrics.grpcRequest(method, name, seconds);
      const props = { method, code: name, dur_ms: Math.round(seconds * 1e6) / 1000, ...call };
      if (error !== null) rpcLog.warn("{method} failed: {error}", { ...props, error });
      else if (READS.has(method)) rpcLog.debug("{method}", props);
      else rpcLog.info("{method} {machineId}", props);
    },
    panic(method, error) {
      metrics.panic();
      rpcLog.error("{method} handler threw: {error}", { method, error: describeError(error) });
    },
  };
}

/** Message and stack of a thrown value; never the request, which may hold a bootstrap blob. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return error.stack ?? `${error.name}: ${error.message}`;
  return String(error);
}
