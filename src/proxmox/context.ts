// What every part of the Proxmox backend shares: the metric operation names,
// the timing knobs, and the context object handed to each module.

import type { Backoff } from "../async/poll.ts";
import type { Timeouts } from "../kit/timeouts.ts";
import type { ApiClient } from "./api/client.ts";
import { BackendMemory } from "./memory.ts";
import { NodeOutages } from "./cluster/nodes.ts";
import { TagPolicy } from "./tags.ts";
import { MANAGED_TAG } from "./naming.ts";
import type { VmAt, VmConfig, VmRef } from "./vm/vm.ts";

export type ApiOp =
  | "CloneVM"
  | "DeleteVM"
  | "DescribeManaged"
  | "InspectVM"
  | "EnsureRunning"
  | "Configure"
  | "Drain";

/** Runs one step of an operation, timed and counted under `op` for the metrics. */
export type Observed = <T>(op: ApiOp, fn: () => Promise<T>) => Promise<T>;

/** Poll intervals and limits; tests shrink them, production uses the defaults. */
export interface Timing {
  task: Backoff;
  exec: Backoff;
  agentPollMs: number;
  /** After a start, the first ping waits this long (at most agentPollMs). */
  agentFirstPollMs: number;
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
  /** Frees tried per volume a destroy left behind, and the waits between them. */
  volumeAttempts: number;
  volumeRetry: Backoff;
  /** How long a `lock: destroyed` stub may stay before it counts as a destroy that died. */
  destroyedGraceMs: number;
  /** Waits between checks of --nodes when the API did not answer at startup. */
  nodeRecheck: Backoff;
}

export interface ProxmoxDeps {
  observe?: (op: ApiOp, outcome: "ok" | "error", seconds: number) => void;
  /** A volume a destroy left behind that could not be freed (counted in the metrics). */
  leaked?: (volid: string) => void;
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
  /**
   * The API token's user (`USER@REALM`, "" when not known): every task we start
   * runs as it, under whichever token a rotation made current.
   */
  taskUser: string;
  /** The configured nodes (the backend's zones). */
  nodes: string[];
  timing: Timing;
  /** What this backend remembers of the VMs it cloned, read and destroyed. */
  memory: BackendMemory;
  /** Nodes found down, so each outage is logged once. */
  outages: NodeOutages;
  /** Reports a volume left behind for good. */
  leaked: (volid: string) => void;
  /** The tags VMs get, and which ones the datacenter's tag policy refuses. */
  tags: TagPolicy;
}

export const DEFAULT_TIMING: Timing = {
  // A poll of a task's status is a short protected call; at most every second.
  task: { initialMs: 200, maxMs: 1000 },
  exec: { initialMs: 100, maxMs: 1000 },
  // ≥ 3 s: a ping to a booting guest holds one of pvedaemon's 3 workers for 3 s.
  agentPollMs: 3000,
  // A guest up within half a second of its start is found at once; others every agentPollMs.
  agentFirstPollMs: 500,
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
  volumeAttempts: 4,
  // An RBD image stays watched ~30 s after a hard stop: 2.5 + 5 + 10 + 20 s of waits outlast it.
  volumeRetry: { initialMs: 2_500, maxMs: 20_000, factor: 2 },
  destroyedGraceMs: 60_000,
  nodeRecheck: { initialMs: 5_000, maxMs: 60_000 },
};

/** The context of one backend (or preflight) run: nothing cloning, known or down yet. */
export function newContext(
  api: ApiClient,
  nodes: readonly string[],
  timing: Timing,
  opts: {
    leaked?: (volid: string) => void;
    tags?: readonly string[];
    /** The API token's user (`USER@REALM`): tasks we start run as it, whichever token. */
    taskUser?: string;
  } = {},
): ProxmoxContext {
  return {
    api,
    nodes: [...nodes],
    timing,
    taskUser: opts.taskUser ?? "",
    memory: new BackendMemory(),
    outages: new NodeOutages(),
    leaked: opts.leaked ?? (() => {}),
    tags: new TagPolicy(opts.tags ?? [MANAGED_TAG]),
  };
}

/** The VM at `at`, reached through this backend's client. */
export function vmOf(ctx: ProxmoxContext, at: VmAt): VmRef {
  return { api: ctx.api, node: at.node, vmid: at.vmid };
}
