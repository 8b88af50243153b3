// Wire types as the harness sees them after proto-loader decoding
// (keepCase, longs as decimal strings, enums as numbers, defaults on).

export const MachineState = {
  UNSPECIFIED: 0,
  SPECULATIVE: 1,
  CREATING: 2,
  IDLE: 3,
  CONFIGURING: 4,
  CONFIGURED: 5,
  DRAINING: 6,
  DELETING: 7,
  FAILED: 8,
} as const;
export type MachineState = (typeof MachineState)[keyof typeof MachineState];

export const CapacityType = {
  UNSPECIFIED: 0,
  BARE_METAL: 1,
  RESERVED: 2,
  ON_DEMAND: 3,
  SPOT: 4,
} as const;
export type CapacityType = (typeof CapacityType)[keyof typeof CapacityType];

/** gRPC status codes the catalog names. */
export const Code = {
  OK: 0,
  CANCELLED: 1,
  UNKNOWN: 2,
  INVALID_ARGUMENT: 3,
  DEADLINE_EXCEEDED: 4,
  NOT_FOUND: 5,
  RESOURCE_EXHAUSTED: 8,
  FAILED_PRECONDITION: 9,
  UNIMPLEMENTED: 12,
  INTERNAL: 13,
  UNAVAILABLE: 14,
} as const;

const STATE_NAMES = Object.fromEntries(Object.entries(MachineState).map(([k, v]) => [v, k]));
const CODE_NAMES = Object.fromEntries(Object.entries(Code).map(([k, v]) => [v, k]));

export function stateName(s: number | undefined): string {
  return s === undefined ? "<none>" : (STATE_NAMES[s] ?? `STATE(${s})`);
}
export function codeName(c: number): string {
  return CODE_NAMES[c] ?? `CODE(${c})`;
}

export const STABLE_STATES: readonly number[] = [
  MachineState.SPECULATIVE,
  MachineState.IDLE,
  MachineState.CONFIGURED,
];
export const TRANSITIONAL_STATES: readonly number[] = [
  MachineState.CREATING,
  MachineState.CONFIGURING,
  MachineState.DRAINING,
  MachineState.DELETING,
];

export interface HostRef {
  provider: string;
  ref: string;
}

export interface Resources {
  resources: Record<string, string>;
}

export interface Machine {
  id: string;
  state: MachineState;
  /** null when absent on the wire. */
  host: HostRef | null;
  instance_type: string;
  zone: string;
  capacity_type: CapacityType;
  price_per_hour: number;
  interruption_probability: number;
  resources: Resources | null;
  labels: Record<string, string>;
  last_error: string;
  allocatable: Resources | null;
  cluster: string;
  shard_metadata: Record<string, string>;
}

export interface MachineList {
  machines: Machine[];
  revision: Uint8Array;
}

export interface TransitionAck {
  operation_id: string;
  machine: Machine | null;
}

/** int64 on the request side: sent as a decimal string so every value is exact. */
export type Int64 = bigint | number | string;

export interface FenceToken {
  shard: string;
  epoch: bigint;
  seq: bigint;
}

export interface CreateRequest {
  machine_id: string;
  shard_id?: string;
  shard_epoch?: Int64;
  sequence_number?: Int64;
}

export interface ConfigureRequest {
  machine_id: string;
  cluster_id?: string;
  bootstrap_blob?: Uint8Array;
  shard_id?: string;
  shard_epoch?: Int64;
  sequence_number?: Int64;
  shard_metadata?: Record<string, string>;
}

export interface DrainRequest {
  machine_id: string;
  grace_period_seconds?: Int64;
  shard_id?: string;
  shard_epoch?: Int64;
  sequence_number?: Int64;
}

export interface DeleteRequest {
  machine_id: string;
  shard_id?: string;
  shard_epoch?: Int64;
  sequence_number?: Int64;
}

export interface MachineRef {
  id: string;
}

export interface ListFilter {
  states?: number[];
  max_results?: number;
  since_revision?: Uint8Array;
}

/** A host counts as set only with a non-empty provider or ref (the suite's rule, §0). */
export function hostSet(m: Machine): boolean {
  return m.host != null && (m.host.provider !== "" || m.host.ref !== "");
}

export function metadataOf(m: Machine): Record<string, string> {
  return m.shard_metadata ?? {};
}
