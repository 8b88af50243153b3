// What every part of the Proxmox backend shares: the metric operation names,
// the timing knobs, and the context object handed to each module.

import type { Backoff } from "../kit/deadline.ts";
import type { Timeouts } from "../kit/kit.ts";
import type { ApiClient } from "./http.ts";
import { NodeOutages } from "./nodes.ts";
import type { VmConfig } from "./vm.ts";

export type ApiOp =
  | "CloneVM"
  | "DeleteVM"
  | "DescribeManaged"
  | "EnsureRunning"
  | "Configure"
  | "Drain";

/** Poll intervals and limits; tests shrink them, production uses the defaults. */
export interface Timing {
  task: Backoff;
  exec: Backoff;
  agentPollMs: number;
  agentTimeoutMs: number;
  /** Pause between readiness checks (each is an agent exec; pvedaemon has 3 workers per node). */
  readyPollMs: number;
  /** Poll interval while waiting for a lock or a state change. */
  settleMs: number;
  requestTimeoutMs: number;
  readAttempts: number;
  retryBaseMs: number;
  /** Attempts for an action after ambiguous (596-type) failures. */
  actionAttempts: number;
  /** How long to look for a clone whose POST failed ambiguously (596). */
  cloneSettleMs: number;
  /** Clone attempts after lost VMID races. */
  raceAttempts: number;
  probeTimeoutMs: number;
  /** Bound of the startup template check; what it cannot check by then is left to Create. */
  startupCheckMs: number;
}

export interface ProxmoxDeps {
  observe?: (op: ApiOp, outcome: "ok" | "error", seconds: number) => void;
  timing?: Partial<Timing>;
  /** The kit's transition timeouts (default: the kit's defaults); waits in the guest end before them. */
  timeouts?: Partial<Timeouts>;
}

/** A VM found where it lives now, with the config read there. */
export interface Located {
  node: string;
  vmid: number;
  config: VmConfig;
}

/** The state one backend instance shares between its modules. */
export interface ProxmoxContext {
  api: ApiClient;
  /** The configured nodes (the backend's zones). */
  nodes: string[];
  timing: Timing;
  /** Clones this process started, vmid → machine id: recognisable before PVE writes the name. */
  cloning: Map<number, string>;
  /** vmid → machine id of every marker read so far: what a VM on a node that is down was. */
  known: Map<number, string>;
  /** Nodes found down, so each outage is logged once. */
  outages: NodeOutages;
}

export const DEFAULT_TIMING: Timing = {
  task: { initialMs: 200, maxMs: 2000 },
  exec: { initialMs: 100, maxMs: 1000 },
  agentPollMs: 500,
  agentTimeoutMs: 300_000,
  readyPollMs: 3000,
  settleMs: 1000,
  requestTimeoutMs: 60_000,
  readAttempts: 4,
  retryBaseMs: 500,
  actionAttempts: 3,
  cloneSettleMs: 10_000,
  raceAttempts: 5,
  probeTimeoutMs: 15_000,
  startupCheckMs: 30_000,
};

/** The context of one backend (or preflight) run: nothing cloning, known or down yet. */
export function newContext(
  api: ApiClient,
  nodes: readonly string[],
  timing: Timing,
): ProxmoxContext {
  return {
    api,
    nodes: [...nodes],
    timing,
    cloning: new Map(),
    known: new Map(),
    outages: new NodeOutages(),
  };
}
