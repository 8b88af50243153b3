// gRPC server reflection (v1 and v1alpha, what grpcurl asks) describing the
// CapacityProvider and grpc.health.v1. Both paths are registered before the
// port opens, but what answers them (src/server/reflection_service.ts:
// @grpc/reflection, proto-loader, the parsed .proto files, ~75–115 ms) is
// loaded on the first reflection call, so a restart never waits for it
// (docs/performance.md#what-loads-before-the-port-opens). Until then each path
// has a stand-in that waits for the load and hands the call to the library's
// handler; grpc-js decodes no request of a streaming call before its handler
// reads, so the library's (de)serializers are in place by then.

import * as grpc from "@grpc/grpc-js";
import { getLogger } from "@logtape/logtape";
import type { ReflectionMethod } from "./reflection_service.ts";

export const REFLECTION_PATHS = [
  "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
  "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
] as const;

const log = getLogger(["bigfleet", "reflection"]);

/**
 * Registers reflection on `server` for the contract in `contractProto`. A
 * failed load is logged and answered UNAVAILABLE; the next call tries again.
 */
export function addReflection(server: grpc.Server, contractProto: string): void {
  let methods: Map<string, ReflectionMethod> | undefined;
  let loading: Promise<Map<string, ReflectionMethod>> | undefined;
  const load = () =>
    loading ??= import("./reflection_service.ts")
      .then((m) => methods = m.reflectionMethods(contractProto))
      .catch((e) => {
        loading = undefined;
        throw e;
      });

  for (const path of REFLECTION_PATHS) {
    const real = (): grpc.MethodDefinition<unknown, unknown> => {
      const method = methods?.get(path);
      if (!method) throw new Error(`reflection is not loaded for ${path}`);
      return method.definition;
    };
    const definition: grpc.MethodDefinition<unknown, unknown> = {
      path,
      requestStream: true,
      responseStream: true,
      requestSerialize: (m) => real().requestSerialize(m),
      requestDeserialize: (b) => real().requestDeserialize(b),
      responseSerialize: (m) => real().responseSerialize(m),
      responseDeserialize: (b) => real().responseDeserialize(b),
    };
    const handler: grpc.handleBidiStreamingCall<unknown, unknown> = (call) => {
      load().then(
        (loaded) => loaded.get(path)!.handler(call),
        (e) => {
          log.error("server reflection could not be loaded: {error}", { error: String(e) });
          call.emit("error", {
            code: grpc.status.UNAVAILABLE,
            details: "server reflection could not be loaded",
          });
        },
      );
    };
    server.addService({ ServerReflectionInfo: definition }, { ServerReflectionInfo: handler });
  }
}
