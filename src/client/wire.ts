// The CapacityProvider contract as a client decodes it (proto-loader over the
// repository's proto file): only the wire contract, so the CLI works against
// any CapacityProvider. Enum names come from the proto itself; a value this
// proto does not know is shown as a number, never dropped.

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { PROTO_PATH } from "../proto.ts";

export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String, // int64 arrives as an exact decimal string
  enums: Number,
  defaults: true, // absent messages decode as null, absent maps as {}
  // bytes: left at the default, so bytes decode as Buffer (a Uint8Array).
};

export interface WireMachine {
  id: string;
  state: number;
  host: { provider: string; ref: string } | null;
  instance_type: string;
  zone: string;
  capacity_type: number;
  price_per_hour: number;
  interruption_probability: number;
  resources: { resources: Record<string, string> } | null;
  labels: Record<string, string>;
  last_error: string;
  allocatable: { resources: Record<string, string> } | null;
  cluster: string;
  shard_metadata: Record<string, string>;
}

export interface WireMachineList {
  machines: WireMachine[];
  revision: Uint8Array;
}

interface Loaded {
  ctor: grpc.ServiceClientConstructor;
  states: Map<number, string>;
  capacityTypes: Map<number, string>;
}

let loaded: Loaded | undefined;

function load(): Loaded {
  if (loaded) return loaded;
  const def = protoLoader.loadSync(PROTO_PATH, LOADER_OPTIONS);
  const pkg = grpc.loadPackageDefinition(def) as unknown as {
    bigfleet: { v1alpha1: { CapacityProvider: grpc.ServiceClientConstructor } };
  };
  loaded = {
    ctor: pkg.bigfleet.v1alpha1.CapacityProvider,
    states: enumNames(def, "bigfleet.v1alpha1.MachineState", "MACHINE_STATE_"),
    capacityTypes: enumNames(def, "bigfleet.v1alpha1.CapacityType", "CAPACITY_TYPE_"),
  };
  return loaded;
}

/** number → short name (IDLE, ON_DEMAND) from the enum's descriptor. */
function enumNames(def: protoLoader.PackageDefinition, type: string, prefix: string) {
  const desc = def[type] as unknown as { type: { value: { name: string; number: number }[] } };
  return new Map(desc.type.value.map((v) => [v.number, v.name.replace(prefix, "")]));
}

/** The generated CapacityProvider client constructor. */
export function capacityProviderCtor(): grpc.ServiceClientConstructor {
  return load().ctor;
}

/** Every machine state: short name → number, in proto order (UNSPECIFIED left out). */
export function machineStates(): Map<string, number> {
  return new Map([...load().states].filter(([n]) => n !== 0).map(([n, name]) => [name, n]));
}

export function stateName(n: number): string {
  return load().states.get(n) ?? String(n);
}

export function capacityTypeName(n: number): string {
  return load().capacityTypes.get(n) ?? String(n);
}
