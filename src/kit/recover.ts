// An operator's recovery of a FAILED machine (`machines recover`, through the
// admin socket; docs/troubleshooting.md#machines-failed): inspect its host,
// say the plan, and when applied destroy the VM (or adopt it) and move the
// machine on. Refused like any change while the store cannot commit or the
// kit stops; a graceful stop waits for one under way like for a transition.

import { getLogger } from "@logtape/logtape";
import type { Answers } from "./answers.ts";
import type { RecoverCall, RecoverResult } from "./api.ts";
import type { Backend } from "./backend.ts";
import { formatMs, withDeadline } from "../async/deadline.ts";
import { Code, KitError } from "./errors.ts";
import type { Fleet } from "./fleet.ts";
import type { Inflight } from "./inflight.ts";
import { State, STATE_NAMES } from "./model.ts";
import type { MachineRecord } from "./model.ts";
import { checkId, unbound } from "./rules.ts";
import type { Timeouts } from "./timeouts.ts";

export interface RecoveryDeps {
  backend: Backend;
  fleet: Fleet;
  answers: Answers;
  inflight: Inflight;
  timeouts: Timeouts;
}

/** Bound of an adoption's inspection (a destroy has the Delete timeout). */
const ADOPT_MS = 2 * 60_000;
const log = getLogger(["bigfleet", "kit"]);

export function createRecovery(deps: RecoveryDeps): (call: RecoverCall) => Promise<RecoverResult> {
  const { fleet, answers, inflight, timeouts } = deps;
  /** Machines with a recovery under way: one at a time each. */
  const recovering = new Set<string>();

  return async function recover(call) {
    answers.refuseChanges();
    const { machineId: id, action } = call;
    checkId(id, "machine_id");
    const before = fleet.get(id);
    if (!before) throw new KitError(Code.NotFound, `machine ${id} not found`);
    if (before.state !== State.Failed) {
      throw refused(
        `machine ${id} is ${STATE_NAMES[before.state]}, not FAILED: nothing to recover`,
      );
    }
    // Which transition failed is recorded only in last_error, which the kit always writes as
    // `<kind> …` (dispatch.ts, the deadline, boot.ts's restart note): its own format.
    if (action === "adopt" && !before.lastError.startsWith("create ")) {
      throw refused(
        `only a FAILED Create can be adopted; ${id} failed with "${before.lastError}": ` +
          "use --destroy",
      );
    }
    if (recovering.has(id)) {
      throw new KitError(Code.Unavailable, `a recovery of ${id} is already running`);
    }
    recovering.add(id);
    const ms = action === "destroy" ? timeouts.delete : ADOPT_MS;
    const work = withDeadline(
      ms,
      `recover --${action} of ${id} timed out after ${formatMs(ms)}`,
      (signal) => recoverWork(deps, before, call, signal),
    ).finally(() => recovering.delete(id));
    // A graceful stop waits for it like for a transition; its outcome is the caller's.
    return await inflight.track(id, work);
  };
}

async function recoverWork(
  deps: RecoveryDeps,
  before: MachineRecord,
  call: RecoverCall,
  signal: AbortSignal,
): Promise<RecoverResult> {
  const { backend, fleet, answers } = deps;
  const { machineId: id, action } = call;
  const host = await backend.inspect({
    machineId: id,
    hostRef: before.hostRef,
    instanceType: before.instanceType,
    zone: before.zone,
  }, signal);
  let plan: string;
  if (action === "adopt") {
    if (host === null) throw refused(`cannot adopt ${id}: no VM carries its marker`);
    if (host.problems.length > 0) {
      throw refused(`cannot adopt ${id} (${host.summary}): ${host.problems.join("; ")}`);
    }
    plan = `adopt ${host.summary} as ${id}, IDLE`;
  } else {
    const rest = before.orphan
      ? `remove ${id} from the inventory (it has no slot)`
      : `return ${id} to SPECULATIVE`;
    plan = host === null
      ? `no VM carries its marker (nothing to destroy); ${rest}`
      : `stop and destroy ${host.summary}; ${rest}`;
  }
  if (!call.apply) return { plan, host, before, after: null, applied: false };
  if (action === "destroy") {
    const target = host?.hostRef ?? before.hostRef;
    if (target !== "") await backend.delete({ machineId: id, hostRef: target }, signal);
  }
  if (answers.closed) {
    throw new KitError(Code.Unavailable, `the provider stopped during the recovery of ${id}`);
  }
  // Nothing but reconcile (its host ref) touches a FAILED machine meanwhile.
  const now = fleet.get(id);
  if (!now || now.state !== State.Failed) {
    throw new KitError(Code.Internal, `machine ${id} changed during its recovery; look again`);
  }
  let after: MachineRecord | null;
  if (action === "adopt") {
    after = { ...unbound(now), state: State.Idle, hostRef: host!.hostRef, lastError: "" };
    fleet.put(after);
  } else if (now.orphan) {
    after = null;
    fleet.remove(id);
  } else {
    after = { ...unbound(now), state: State.Speculative, hostRef: "", lastError: "" };
    fleet.put(after);
  }
  log.info("recover {machineId}: {action} by an operator: {plan}", {
    audit: true,
    machineId: id,
    action,
    plan,
    was: before.lastError,
    hostRef: host?.hostRef ?? before.hostRef,
    to: after ? STATE_NAMES[after.state] : "removed",
  });
  await answers.awaitCommit();
  return { plan, host, before, after, applied: true };
}

function refused(message: string): KitError {
  return new KitError(Code.FailedPrecondition, message);
}
