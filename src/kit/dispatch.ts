// Accepting a lifecycle call and completing its transition
// (docs/design.md#order-of-checks-and-idempotency, #transitions-and-timeouts).
// accept() is synchronous from the first check to the state change, so
// parallel identical calls in one event loop collapse to one operation; the
// kind's work then runs in the background under its timeout, and its outcome
// is a later state change unless the machine has left the transition meanwhile.

import { getLogger } from "@logtape/logtape";
import type { Ack, CallOf } from "./api.ts";
import { DeadlineError, formatMs, withDeadline } from "../async/deadline.ts";
import { Code, KitError } from "./errors.ts";
import type { FenceTable } from "./fence.ts";
import type { Fleet } from "./fleet.ts";
import type { Inflight } from "./inflight.ts";
import { EDGES, State, STATE_NAMES } from "./model.ts";
import type { MachineRecord, OpKind } from "./model.ts";
import { checkId } from "./rules.ts";
import type { KindRule, Rules } from "./rules.ts";
import type { Timeouts } from "./timeouts.ts";
import type { TransitionLog } from "./transitions.ts";

export interface DispatchDeps {
  rules: Rules;
  fleet: Fleet;
  fences: FenceTable;
  transitions: TransitionLog;
  timeouts: Timeouts;
  inflight: Inflight;
  /** True once the kit closed: completions are ignored from then on. */
  closed(): boolean;
}

export type Accept = <K extends OpKind>(kind: K, call: CallOf[K]) => Ack;

const MAX_ERROR_CHARS = 4096;
const log = getLogger(["bigfleet", "kit"]);

export function createDispatch(deps: DispatchDeps): Accept {
  const { rules, fleet, fences, transitions, timeouts, inflight } = deps;
  let opCounter = 0;
  // Unique per process life: op ids never repeat across restarts.
  const bootId = Date.now().toString(36) + crypto.randomUUID().slice(0, 6);

  /**
   * The order every lifecycle call shares: empty id, fence, the kind's request
   * checks, not-found, idempotent replay, position, the backend's admission
   * (Create). On a legal start the
   * machine enters its transitional state before this returns and the kind's
   * work starts under its timeout.
   */
  function accept<K extends OpKind>(kind: K, call: CallOf[K]): Ack {
    const rule: KindRule<CallOf[K]> = rules[kind];
    checkId(call.machineId, "machine_id");
    if (call.token.shardId !== "") checkId(call.token.shardId, "shard_id");
    fences.admit(call.machineId, call.token);
    rule.check?.(call);
    const m = fleet.get(call.machineId);
    if (!m) throw new KitError(Code.NotFound, `machine ${call.machineId} not found`);
    const edge = EDGES[kind];
    const previous = m.ops[kind];
    if (previous && (m.state === edge.via || m.state === edge.to)) {
      return { operationId: previous, machine: m };
    }
    if (m.state !== edge.from) {
      throw new KitError(
        Code.Internal,
        `cannot ${kind} machine ${m.id} in state ${STATE_NAMES[m.state]}` +
          (m.state === State.Failed ? " (FAILED is terminal)" : ""),
      );
    }
    const refusal = rule.admit?.(m) ?? null;
    if (refusal !== null) throw new KitError(Code.ResourceExhausted, refusal);
    const opId = `op-${bootId}-${++opCounter}`;
    const via: MachineRecord = {
      ...m,
      state: edge.via,
      lastError: "",
      ops: { ...m.ops, [kind]: opId },
    };
    const entered = rule.enter ? rule.enter(via, call) : via;
    fleet.put(entered);
    transitions.started(kind, entered, opId, call.token);
    const ms = timeouts[kind];
    inflight.track(
      entered.id,
      withDeadline(
        ms,
        `${kind} timed out after ${formatMs(ms)}`,
        (signal) => rule.work(entered, call, opId, signal),
      ).then(
        (patch) => complete(kind, entered.id, opId, patch, null),
        (err) => complete(kind, entered.id, opId, {}, err),
      ),
    );
    return { operationId: opId, machine: entered };
  }

  function complete(
    kind: OpKind,
    id: string,
    opId: string,
    patch: Partial<MachineRecord>,
    err: unknown,
  ): void {
    if (deps.closed()) return;
    const m = fleet.get(id);
    const edge = EDGES[kind];
    // Stale: the machine left this transition (timed out, restarted) meanwhile.
    if (!m || m.state !== edge.via || m.ops[kind] !== opId) {
      log.debug("discarding stale {kind} completion for {machineId}", {
        kind,
        machineId: id,
        operationId: opId,
      });
      return;
    }
    if (err !== null) {
      const message = err instanceof Error ? err.message : String(err);
      // The deadline's own message already reads `<kind> timed out after …`; a backend's
      // text is the backend's, whatever it begins with.
      const lastError = (err instanceof DeadlineError ? message : `${kind} failed: ${message}`)
        .slice(0, MAX_ERROR_CHARS);
      const failed: MachineRecord = { ...m, state: State.Failed, lastError };
      fleet.put(failed);
      transitions.ended(kind, failed, opId, lastError);
      return;
    }
    const landed: MachineRecord = { ...m, ...patch, state: edge.to };
    const done = rules[kind].done;
    const next = done ? done(landed) : landed;
    if (next === null) fleet.remove(id);
    else fleet.put(next);
    transitions.ended(kind, next ?? landed, opId, null);
  }

  return accept;
}
