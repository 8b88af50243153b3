// Fault switch defaults and the helpers that consume them.

import type { Http596Rule, SimFaults, TaskType } from "./types.ts";

export function defaultFaults(auditHidden: boolean): SimFaults {
  return {
    nextidRace: 0,
    nextidRaceKind: "config-exists",
    cloneWarnings: false,
    cloneCleanupFails: false,
    cloneHeld: [],
    taskError: {},
    http596: [],
    agentSlowMs: 0,
    agentTimeouts: 0,
    agentDown: false,
    bootstrapExitCode: 0,
    bootstrapStderr: "",
    bootstrapStdout: "",
    bootstrapDelayMs: 0,
    drainExitCode: 0,
    drainStderr: "",
    drainDelayMs: 0,
    readyAfterMs: 0,
    unauthorized: false,
    forbidden: false,
    auditHidden,
    hiddenStorages: [],
    offlineStorages: [],
    offlineNodes: [],
    unreportedNodes: [],
    acl: null,
    offlineReply: { status: 595, reason: "No route to host", delayMs: 0 },
    statusCacheWorkers: 0,
    datacenter: {},
    volumeFreeFailures: [],
    destroyDies: 0,
    workerStartFailures: {},
  };
}

/** The failure text for freeing `volid` now, consuming one use (faults.volumeFreeFailures). */
export function takeVolumeFailure(f: SimFaults, volid: string): string | undefined {
  const i = f.volumeFreeFailures.findIndex((r) => pathMatches(r.match, volid));
  if (i < 0) return undefined;
  const rule = f.volumeFreeFailures[i];
  if (rule.times !== undefined) {
    if (rule.times <= 0) return undefined;
    rule.times--;
    if (rule.times === 0) f.volumeFreeFailures.splice(i, 1);
  }
  return rule.message;
}

/** The injected error text for a task of this type, consuming one use. */
export function takeTaskError(f: SimFaults, type: TaskType): string | undefined {
  const rule = f.taskError[type];
  if (rule === undefined) return undefined;
  if (typeof rule === "string") return rule;
  if (rule.times !== undefined) {
    if (rule.times <= 0) return undefined;
    rule.times--;
    if (rule.times === 0) delete f.taskError[type];
  }
  return rule.message;
}

function pathMatches(p: string | RegExp, path: string): boolean {
  return typeof p === "string" ? path.includes(p) : p.test(path);
}

/** The proxy-failure rule hitting this request, consuming one count. */
export function take596(f: SimFaults, method: string, path: string): Http596Rule | undefined {
  const i = f.http596.findIndex((r) =>
    r.count > 0 && (!r.method || r.method.toUpperCase() === method) && pathMatches(r.path, path)
  );
  if (i < 0) return undefined;
  const rule = f.http596[i];
  rule.count--;
  if (rule.count <= 0) f.http596.splice(i, 1);
  return rule;
}

/** The offline node a request path is proxied to, or null (faults.offlineNodes). */
export function offlineNodeOf(f: SimFaults, path: string): string | null {
  const m = /^\/nodes\/([^/]+)(?:\/|$)/.exec(path);
  return m && f.offlineNodes.includes(m[1]) ? m[1] : null;
}

export function isForbidden(f: SimFaults, path: string): boolean {
  if (f.forbidden === false) return false;
  if (f.forbidden === true) return true;
  return pathMatches(f.forbidden, path);
}
