// The kit's data model: machine records, states and operation kinds. Records
// are immutable: every change replaces the record, so a reference taken at
// accept time is a consistent snapshot and encoders can cache by identity.

/** Numeric values equal the wire enum bigfleet.v1alpha1.MachineState. */
export const State = {
  Unspecified: 0,
  Speculative: 1,
  Creating: 2,
  Idle: 3,
  Configuring: 4,
  Configured: 5,
  Draining: 6,
  Deleting: 7,
  Failed: 8,
} as const;
export type State = (typeof State)[keyof typeof State];

export const STATE_NAMES: Record<State, string> = {
  0: "UNSPECIFIED",
  1: "SPECULATIVE",
  2: "CREATING",
  3: "IDLE",
  4: "CONFIGURING",
  5: "CONFIGURED",
  6: "DRAINING",
  7: "DELETING",
  8: "FAILED",
};

/** Wire value of CAPACITY_TYPE_ON_DEMAND: every slot is on-demand (the offerings accept no other). */
export const ON_DEMAND = 3;

export type OpKind = "create" | "configure" | "drain" | "delete";

/**
 * Where each lifecycle call may start, what it shows meanwhile, and where it
 * lands; RULES in kit.ts says what each does (docs/design.md#transitions-and-timeouts).
 */
export const EDGES: Record<OpKind, { from: State; via: State; to: State }> = {
  create: { from: State.Speculative, via: State.Creating, to: State.Idle },
  configure: { from: State.Idle, via: State.Configuring, to: State.Configured },
  drain: { from: State.Configured, via: State.Draining, to: State.Idle },
  delete: { from: State.Idle, via: State.Deleting, to: State.Speculative },
};

export type Pairs = readonly (readonly [string, string])[];

/** One slot of the offerings: a machine BigFleet may ask for, fully described before it exists. */
export interface Slot {
  /** The machine id. */
  readonly id: string;
  readonly instanceType: string;
  readonly zone: string;
  readonly pricePerHour: number;
  /** Ordered [key, value] pairs; may be empty. */
  readonly resources: Pairs;
  readonly allocatable: Pairs;
  readonly labels: Pairs;
}

export interface MachineRecord {
  readonly id: string;
  readonly state: State;
  /** Where the machine lives, as its backend's create named it (opaque here); "" while it has no host. */
  readonly hostRef: string;
  readonly instanceType: string;
  readonly zone: string;
  readonly capacityType: number;
  readonly pricePerHour: number;
  readonly interruptionProbability: number;
  readonly resources: Pairs;
  readonly allocatable: Pairs;
  readonly labels: Pairs;
  readonly cluster: string;
  readonly shardMetadata: Pairs;
  readonly lastError: string;
  /** Idempotency history: the last operation id minted per kind. Never cleared. */
  readonly ops: Readonly<Partial<Record<OpKind, string>>>;
  /** A machine with no slot (a host found on the substrate, or a retired slot): removed from inventory once deleted. */
  readonly orphan: boolean;
}

/**
 * The empty map and the empty op-id history, one object each for every record
 * that has them (records are immutable): at 100,000 machines, ~8 MB less heap
 * than an empty array and object per record.
 */
export const NO_PAIRS: Pairs = Object.freeze([]);
export const NO_OPS: MachineRecord["ops"] = Object.freeze({});

/** The transition a state belongs to (CREATING → create, …); checked per machine at every restart. */
const KIND_VIA = new Map(
  (Object.entries(EDGES) as [OpKind, (typeof EDGES)[OpKind]][]).map(([kind, e]) => [e.via, kind]),
);

export function transitionalKind(state: State): OpKind | null {
  return KIND_VIA.get(state) ?? null;
}
