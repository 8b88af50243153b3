// Route table plumbing: path patterns with {placeholders}, per-route schema,
// and the context handlers receive.

import type { AgentEnv } from "./agent.ts";
import type { WorkerPool } from "./daemon.ts";
import type { Params, Schema } from "./params.ts";
import type { ClusterState } from "./state.ts";
import type { TaskRegistry, Timers } from "./tasks.ts";
import type { SimFaults } from "./types.ts";

/** Everything a handler may touch. */
export interface SimCore extends AgentEnv {
  state: ClusterState;
  tasks: TaskRegistry;
  timers: Timers;
  faults: SimFaults;
  /** Each node's pvedaemon workers (daemon.ts). */
  daemons: Map<string, WorkerPool>;
  /** The pve-manager version the simulator claims to be (SimOptions.pveVersion). */
  pveVersion: string;
  /** The qemu-server behind it (versions.ts). */
  qemuServerVersion: string;
}

export interface RouteCtx {
  core: SimCore;
  params: Params;
  /** Token id of the caller, e.g. "bigfleet@pve!autoscaler" (UPID user field). */
  authid: string;
}

export interface Route {
  method: "GET" | "POST" | "PUT" | "DELETE";
  /** Below /api2/json, e.g. "/nodes/{node}/qemu/{vmid}/config". */
  pattern: string;
  schema: Schema;
  /** ACL path + privilege named in a forced 403 (faults.forbidden). */
  perm: (p: Params) => [string, string];
  /** The method's own permission check under the ACL model (acl.ts), before the handler; 403s. */
  check?: (core: SimCore, p: Params) => void;
  handler: (ctx: RouteCtx) => unknown | Promise<unknown>;
  /**
   * How long a protected call holds its pvedaemon worker before the handler
   * answers (daemon.ts); default timing.daemonCallMs. Unprotected routes
   * hold none.
   */
  workerMs?: (ctx: RouteCtx) => number;
}

export interface RouteMatch {
  route: Route;
  pathParams: Record<string, string>;
}

/** Finds the route for method + path; null means 501 "not implemented". */
export function matchRoute(routes: Route[], method: string, path: string): RouteMatch | null {
  const segs = path.split("/").filter((s) => s !== "");
  for (const route of routes) {
    if (route.method !== method) continue;
    const pats = route.pattern.split("/").filter((s) => s !== "");
    if (pats.length !== segs.length) continue;
    const pathParams: Record<string, string> = {};
    let ok = true;
    for (let i = 0; i < pats.length && ok; i++) {
      const m = pats[i].match(/^\{(.+)\}$/);
      if (m) pathParams[m[1]] = safeDecode(segs[i]);
      else ok = pats[i] === segs[i];
    }
    if (ok) return { route, pathParams };
  }
  return null;
}

// PVE URI-unescapes the path, so "%3A" in a UPID works as well as ":".
function safeDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}
