// What each kind of lifecycle call does, in one place, read with EDGES
// (model.ts): where each kind may start, what it shows meanwhile and where it
// lands. The dispatch (dispatch.ts) runs `check` and `enter` as it accepts a
// call, the deadline runs `work`, and the completion applies `done`.

import type { Backend, HostedMachine } from "./backend.ts";
import type { Call, CallOf, ConfigureCall } from "./api.ts";
import { Code, KitError } from "./errors.ts";
import { NO_PAIRS } from "./model.ts";
import type { MachineRecord, OpKind } from "./model.ts";

/** What one kind of lifecycle call does beyond the order all share (dispatch.ts). */
export interface KindRule<C extends Call> {
  /** The kind's request checks: after the fence, before the machine is looked up. */
  check?(call: C): void;
  /** The backend's admission of a legal start: a refusal leaves the machine as it is. */
  admit?(m: MachineRecord): string | null;
  /** The machine as it enters its transitional state (given: state, op id, last_error cleared). */
  enter?(m: MachineRecord, call: C): MachineRecord;
  /** The backend's part, under the kind's timeout; resolves to what it learned about the machine. */
  work(
    m: MachineRecord,
    call: C,
    opId: string,
    signal: AbortSignal,
  ): Promise<Partial<MachineRecord>>;
  /** The machine once the work succeeded (given: target state, work's result); null drops it. */
  done?(m: MachineRecord): MachineRecord | null;
}

export type Rules = { [K in OpKind]: KindRule<CallOf[K]> };

const MAX_ID_BYTES = 512;
const utf8 = new TextEncoder();

export function createRules(backend: Backend, maxMetadata: number): Rules {
  return {
    create: {
      // The zone may have no room for the machine now: RESOURCE_EXHAUSTED, still SPECULATIVE.
      admit: (m) =>
        backend.admit?.({ machineId: m.id, instanceType: m.instanceType, zone: m.zone }) ?? null,
      work: async (m, _call, opId, signal) => {
        // BigFleet facts only: the backend resolves sizing and source itself.
        const { hostRef } = await backend.create({
          machineId: m.id,
          operationId: opId,
          instanceType: m.instanceType,
          zone: m.zone,
        }, signal);
        return { hostRef };
      },
    },
    configure: {
      check: (call) => checkConfigure(call, maxMetadata),
      // The binding is visible from CONFIGURING on. The map is copied: the
      // caller's array may change after the call, the stored record may not.
      enter: (m, call) => ({
        ...m,
        cluster: call.clusterId,
        shardMetadata: call.shardMetadata.map(([k, v]) => [k, v] as const),
      }),
      work: async (m, call, _opId, signal) => {
        const { clusterId, bootstrap } = call;
        await backend.configure(hosted(m), { clusterId, bootstrap }, signal);
        return {};
      },
    },
    drain: {
      work: async (m, call, _opId, signal) => {
        await backend.drain(hosted(m), call.graceSeconds, signal);
        return {};
      },
      // The binding ends when the Drain completes, not before: the shard needs
      // the cluster while DRAINING.
      done: unbound,
    },
    delete: {
      work: async (m, _call, _opId, signal) => {
        await backend.delete(hosted(m), signal);
        return {};
      },
      // The host is released too; a machine without a slot leaves the inventory.
      done: (m) => m.orphan ? null : { ...unbound(m), hostRef: "" },
    },
  };
}

/** An id every call names: required, and at most 512 bytes (INVALID_ARGUMENT). */
export function checkId(id: string, what: string): void {
  if (id === "") throw new KitError(Code.InvalidArgument, `${what} is required`);
  if (utf8.encode(id).length > MAX_ID_BYTES) {
    throw new KitError(Code.InvalidArgument, `${what} is longer than ${MAX_ID_BYTES} bytes`);
  }
}

/** The record without its cluster binding. */
export function unbound(m: MachineRecord): MachineRecord {
  return { ...m, cluster: "", shardMetadata: NO_PAIRS };
}

function hosted(m: MachineRecord): HostedMachine {
  return { machineId: m.id, hostRef: m.hostRef };
}

function checkConfigure(call: ConfigureCall, maxMetadata: number): void {
  if (call.clusterId === "") {
    throw new KitError(Code.InvalidArgument, "cluster_id is required");
  }
  let bytes = 0;
  for (const [k, v] of call.shardMetadata) bytes += utf8.encode(k + v).length;
  if (bytes > maxMetadata) {
    throw new KitError(
      Code.InvalidArgument,
      `shard_metadata is ${bytes} bytes; the limit is ${maxMetadata}`,
    );
  }
}
