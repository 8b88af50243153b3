// The reflection service itself: @grpc/reflection over the parsed .proto
// files of the contract and of grpc.health.v1. Loaded by
// src/server/reflection.ts on the first reflection call, never at start-up.

import type * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
// Only the path of its health.proto: src/server/health.ts serves that service.
import { protoPath as HEALTH_PROTO_PATH } from "grpc-health-check";

export interface ReflectionMethod {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.handleBidiStreamingCall<unknown, unknown>;
}

/** The library's methods by path, as it would register them on a server. */
export function reflectionMethods(contractProto: string): Map<string, ReflectionMethod> {
  const definitions = {
    ...protoLoader.loadSync(contractProto, { keepCase: true }),
    ...protoLoader.loadSync(HEALTH_PROTO_PATH, { keepCase: true }),
  };
  const methods = new Map<string, ReflectionMethod>();
  // addToServer only calls addService: collect what it adds.
  const collector = {
    addService(service: grpc.ServiceDefinition, impl: grpc.UntypedServiceImplementation) {
      for (const [name, definition] of Object.entries(service)) {
        const handler = impl[name] as grpc.handleBidiStreamingCall<unknown, unknown>;
        methods.set(definition.path, { definition, handler });
      }
    },
  };
  new ReflectionService(definitions).addToServer(collector as unknown as grpc.Server);
  return methods;
}
