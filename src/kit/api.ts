// What the kit offers, as types: the lifecycle requests (decoded straight into
// these by src/server/codec.ts, declared only here), the answers, and the
// kit's three surfaces: the RPCs the gRPC server calls, what an operator asks
// through the admin socket, and what the process running the kit uses from
// boot to stop. src/kit/kit.ts builds one object with all three.

import type { HostInspection } from "./backend.ts";
import type { Token } from "./fence.ts";
import type { Selection } from "./fleet.ts";
import type { MachineRecord, Pairs } from "./model.ts";
import type { StateStore } from "./store.ts";

// The lifecycle requests, as the server's codec decodes them (src/server/codec.ts).

/** What every lifecycle call carries; all a Create or a Delete carries. */
export interface Call {
  machineId: string;
  token: Token;
}
export interface ConfigureCall extends Call {
  clusterId: string;
  /** Secret: handed to the backend, never stored. */
  bootstrap: Uint8Array;
  shardMetadata: Pairs;
}
export interface DrainCall extends Call {
  graceSeconds: bigint;
}

/** Each lifecycle call's request. */
export interface CallOf {
  create: Call;
  configure: ConfigureCall;
  drain: DrainCall;
  delete: Call;
}

export interface Ack {
  operationId: string;
  machine: MachineRecord;
}

export type ListQuery = Selection;

export interface ListResult {
  machines: MachineRecord[];
  revision: number;
}

export interface ReconcileResult {
  /** Host refs updated: VMs that moved, and FAILED machines' VMs found. */
  changed: number;
  /** Managed VMs no machine claimed, added as orphans. */
  orphans: number;
  /** SPECULATIVE machines whose VM was found: IDLE again (a restored older state). */
  rejoined: number;
}

/** What an operator asks of a FAILED machine (docs/troubleshooting.md#machines-failed). */
export type RecoverAction = "destroy" | "adopt";

export interface RecoverCall {
  machineId: string;
  action: RecoverAction;
  /** false: only say what would be done. */
  apply: boolean;
}

export interface RecoverResult {
  /** What was done, or would be done. */
  plan: string;
  /** The machine's host as the backend found it; null when it has none. */
  host: HostInspection | null;
  before: MachineRecord;
  /** The machine afterwards; null when not applied, or when it left the inventory (no slot). */
  after: MachineRecord | null;
  applied: boolean;
}

export interface BackupResult {
  machines: number;
  fences: number;
  revision: number;
}

/** The contract's six RPCs: what the gRPC server calls (src/server/grpc.ts). */
export interface KitRpc {
  create(c: Call): Promise<Ack>;
  configure(c: ConfigureCall): Promise<Ack>;
  drain(c: DrainCall): Promise<Ack>;
  delete(c: Call): Promise<Ack>;
  get(id: string): Promise<MachineRecord>;
  list(q: ListQuery): Promise<ListResult>;
}

/** What an operator asks through the admin socket (src/server/admin.ts), never BigFleet. */
export interface KitOperator {
  /**
   * An operator's intervention on a FAILED machine, never reached by BigFleet:
   * `destroy` stops and destroys its VM (if any) and returns the slot to
   * SPECULATIVE; `adopt` makes a FAILED Create whose VM is usable IDLE on it.
   * Refused (FAILED_PRECONDITION) for a machine that is not FAILED or a host
   * that does not qualify; the change bumps the revision like any other.
   */
  recover(call: RecoverCall): Promise<RecoverResult>;
  /**
   * Write the whole state as it is at one instant (machines, fence marks,
   * revision) into `target`, a store that has never been written: a
   * consistent online copy that loads like the live state file.
   */
  backup(target: StateStore): Promise<BackupResult>;
}

/** What the process running the kit uses from boot to stop (src/app.ts): facts, upkeep, the stop. */
export interface KitLifecycle {
  readonly size: number;
  /** What a changed set of slots did at boot (`+N slots, -M retired, K pending`); null for a new fleet. */
  readonly capacityChange: string | null;
  /**
   * One pass of substrate refresh: host refs follow the VMs, unknown VMs become
   * orphans, a SPECULATIVE slot with a VM rejoins it IDLE; never touches a
   * binding or last_error, never destroys anything.
   */
  reconcile(signal: AbortSignal): Promise<ReconcileResult>;
  /** Transitions (and recoveries) whose backend work is still running. */
  readonly running: number;
  /** FAILED machines with a host ref (their VM was seen) and without. */
  countFailed(): { withHost: number; withoutHost: number };
  /**
   * The first step of a graceful stop: from now on lifecycle calls (and
   * reconcile passes) are refused with UNAVAILABLE before they change
   * anything, while Get and List keep answering. Resolves once no transition
   * runs, or when `signal` aborts; either way with the ids of the machines
   * whose transition is still running.
   */
  finish(signal: AbortSignal): Promise<string[]>;
  /**
   * finish() for up to `waitMs`, then stop reacting to completions and flush
   * the store. Anything still running comes back FAILED after a restart, as
   * the contract requires.
   */
  close(waitMs?: number): Promise<void>;
}

/** The whole kit, as startKit makes it. */
export interface Kit extends KitRpc, KitOperator, KitLifecycle {}
