// Loads the wire contract once, from the repository's proto file, with the
// decoding options every harness client relies on.

import * as protoLoader from "@grpc/proto-loader";
import * as grpc from "@grpc/grpc-js";

export const PROTO_PATH = new URL("../../proto/bigfleet/v1alpha1/provider.proto", import.meta.url)
  .pathname;

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String, // int64 arrives as an exact decimal string
  enums: Number,
  defaults: true, // absent messages decode as null, absent maps as {}
  // bytes: left at the default, so bytes decode as Buffer (a Uint8Array).
};

let cached: grpc.ServiceClientConstructor | undefined;

/** The generated CapacityProvider client constructor. */
export function capacityProviderCtor(): grpc.ServiceClientConstructor {
  if (cached) return cached;
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    bigfleet: { v1alpha1: { CapacityProvider: grpc.ServiceClientConstructor } };
  };
  cached = pkg.bigfleet.v1alpha1.CapacityProvider;
  return cached;
}
