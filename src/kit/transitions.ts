// What the kit tells about its machines as they change: one log line when a
// transition starts and one when it lands (its target state, or FAILED with
// last_error) with its duration, and the same events, plus every record
// change, to an optional observer (the metrics hang off it). The kit calls
// `started` and `ended` from accept() and complete() only, so this is the one
// place transitions are logged (docs/observability.md#logs).

import { getLogger } from "@logtape/logtape";
import type { Token } from "./fence.ts";
import { type MachineRecord, type OpKind, State, STATE_NAMES } from "./model.ts";

export interface TransitionEvent {
  kind: OpKind;
  phase: "started" | "landed" | "failed";
  /** Started: the machine in its transitional state; ended: as it landed (FAILED included). */
  machine: MachineRecord;
  operationId: string;
  /** Milliseconds since the start (0 when started). */
  ms: number;
  /** Unix ms of the oldest `kind` transition still running after this event; null when none. */
  oldestRunning: number | null;
}

/** Told about every change the kit makes; each call must be cheap (it runs on the request path). */
export interface KitObserver {
  /** A record changed: before and after (undefined: absent). Called for every record at boot too. */
  machineChanged?(before: MachineRecord | undefined, after: MachineRecord | undefined): void;
  transition?(event: TransitionEvent): void;
}

interface Running {
  operationId: string;
  /** performance.now() at the start, for the duration. */
  t0: number;
  /** Date.now() at the start, for the oldest-running timestamp. */
  at: number;
}

export interface TransitionLog {
  started(kind: OpKind, m: MachineRecord, operationId: string, token: Token): void;
  /** `m` as it landed; `error` is its last_error when it failed. */
  ended(kind: OpKind, m: MachineRecord, operationId: string, error: string | null): void;
}

const log = getLogger(["bigfleet", "kit"]);

export function createTransitionLog(observer?: KitObserver): TransitionLog {
  // Per kind, the running transitions in start order: the first is the oldest.
  const running: Record<OpKind, Map<string, Running>> = {
    create: new Map(),
    configure: new Map(),
    drain: new Map(),
    delete: new Map(),
  };
  const oldest = (kind: OpKind) => running[kind].values().next().value?.at ?? null;

  return {
    started(kind, m, operationId, token) {
      running[kind].set(m.id, { operationId, t0: performance.now(), at: Date.now() });
      log.info("{kind} of {machineId} started", {
        kind,
        machineId: m.id,
        operationId,
        shardId: token.shardId,
        epoch: token.epoch.toString(),
        sequence: token.seq.toString(),
        state: STATE_NAMES[m.state],
      });
      observer?.transition?.({
        kind,
        phase: "started",
        machine: m,
        operationId,
        ms: 0,
        oldestRunning: oldest(kind),
      });
    },

    ended(kind, m, operationId, error) {
      const r = running[kind].get(m.id);
      if (r?.operationId === operationId) running[kind].delete(m.id);
      const ms = r ? Math.round((performance.now() - r.t0) * 1000) / 1000 : 0;
      const fields = {
        kind,
        machineId: m.id,
        operationId,
        state: STATE_NAMES[m.state],
        dur_ms: ms,
      };
      if (error !== null || m.state === State.Failed) {
        log.warn("{kind} of {machineId} failed after {dur_ms} ms: {error}", {
          ...fields,
          error: error ?? m.lastError,
        });
      } else {
        log.info("{kind} of {machineId} landed {state} after {dur_ms} ms", fields);
      }
      observer?.transition?.({
        kind,
        phase: error !== null ? "failed" : "landed",
        machine: m,
        operationId,
        ms,
        oldestRunning: oldest(kind),
      });
    },
  };
}
