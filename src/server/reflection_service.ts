// The reflection service itself: @grpc/reflection over the parsed .proto
// files of the contract and of grpc.health.v1. Loaded by
// src/server/reflection.ts on the first reflection call, never at start-up.

import type * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ReflectionService } from "@grpc/reflection";
import { Buffer } from "node:buffer";
import descriptor from "protobufjs/ext/descriptor/index.js";
// Only the path of its health.proto: src/server/health.ts serves that service.
import { protoPath as HEALTH_PROTO_PATH } from "grpc-health-check";

export interface ReflectionMethod {
  definition: grpc.MethodDefinition<unknown, unknown>;
  handler: grpc.handleBidiStreamingCall<unknown, unknown>;
}

/** The library's methods by path, as it would register them on a server. */
export function reflectionMethods(contractProto: string): Map<string, ReflectionMethod> {
  const definitions = withProtocDescriptors({
    ...protoLoader.loadSync(contractProto, { keepCase: true }),
    ...protoLoader.loadSync(HEALTH_PROTO_PATH, { keepCase: true }),
  });
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

/** The parts of a decoded FileDescriptorProto / DescriptorProto this reads and renames. */
interface MessageDescriptor {
  name: string;
  field?: { name: string; typeName?: string }[];
  nestedType?: MessageDescriptor[];
  reservedRange?: { start?: number; end?: number }[];
  options?: { mapEntry?: boolean } | null;
}

/**
 * The descriptors as protoc writes them. protobufjs differs in two ways that
 * strict readers of descriptors (grpcurl, Go's protodesc) refuse:
 * - it names a map field's entry type after the field (`Shard_metadata` for
 *   `shard_metadata`; `Resources` for `resources` inside `Resources`, which
 *   then shadows its own message), where protoc names it CamelCase(field) +
 *   `Entry` ("incorrect implicit map entry name");
 * - it writes a message's reserved range with its end inclusive, where
 *   descriptor.proto's is exclusive (`reserved 11;` read back as 11 to 10).
 * Each file's descriptor is rewritten once.
 */
function withProtocDescriptors(defs: protoLoader.PackageDefinition): protoLoader.PackageDefinition {
  const fixed = new Map<Buffer, Buffer>();
  const fix = (bin: Buffer): Buffer => {
    let out = fixed.get(bin);
    if (out === undefined) {
      const file = descriptor.FileDescriptorProto.decode(bin) as unknown as {
        package?: string;
        messageType?: MessageDescriptor[];
      };
      for (const m of file.messageType ?? []) asProtoc(m, `.${file.package ?? ""}`);
      // deno-lint-ignore no-explicit-any
      const encoded = descriptor.FileDescriptorProto.encode(file as any).finish();
      out = Buffer.from(encoded.buffer, encoded.byteOffset, encoded.byteLength);
      fixed.set(bin, out);
    }
    return out;
  };
  const out: protoLoader.PackageDefinition = {};
  for (const [name, def] of Object.entries(defs)) {
    const protos = (def as { fileDescriptorProtos?: Buffer[] }).fileDescriptorProtos;
    out[name] = Array.isArray(protos)
      ? { ...def, fileDescriptorProtos: protos.map(fix) } as protoLoader.AnyDefinition
      : def;
  }
  return out;
}

function asProtoc(m: MessageDescriptor, scope: string): void {
  const fqn = `${scope}.${m.name}`;
  for (const f of m.field ?? []) {
    const entry = m.nestedType?.find((n) => n.options?.mapEntry && n.name === f.typeName);
    if (entry === undefined) continue;
    entry.name = f.name.split("_").map((w) => w.charAt(0).toUpperCase() + w.slice(1)).join("") +
      "Entry";
    f.typeName = `${fqn}.${entry.name}`;
  }
  for (const r of m.reservedRange ?? []) r.end = (r.end ?? r.start ?? 0) + 1;
  for (const n of m.nestedType ?? []) asProtoc(n, fqn);
}
