// What every part of the Proxmox backend shares: the metric operation names
// and the context object handed to each module (the timing knobs: timing.ts).

import type { Timeouts } from "../kit/timeouts.ts";
import type { Timing } from "./timing.ts";
import type { ApiClient } from "./api/client.ts";
import { BackendMemory } from "./memory.ts";
import { NodeOutages } from "./outages.ts";
import { TagPolicy } from "./tags.ts";
import { MANAGED_TAG } from "./naming.ts";
import { createRoom, type Room, type RoomOptions } from "./room/room.ts";

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

export interface ProxmoxDeps {
  observe?: (op: ApiOp, outcome: "ok" | "error", seconds: number) => void;
  /** A volume a destroy left behind that could not be freed (counted in the metrics). */
  leaked?: (volid: string) => void;
  timing?: Partial<Timing>;
  /** The kit's transition timeouts (default: the kit's defaults); waits in the guest end before them. */
  timeouts?: Partial<Timeouts>;
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
  /** Each node's room: what its guests and our accepted Creates hold. */
  room: Room;
}

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
    /** The capacity policy and what is offered where (default: no zone to admit into). */
    room?: Pick<RoomOptions, "policy" | "catalog" | "offered">;
  } = {},
): ProxmoxContext {
  const memory = new BackendMemory();
  const room = createRoom({
    policy: new Map(),
    catalog: new Map(),
    offered: new Map(),
    ...opts.room,
    memory,
    settleMs: timing.roomSettleMs,
    refreshMs: timing.roomRefreshMs,
  });
  return {
    api,
    nodes: [...nodes],
    timing,
    taskUser: opts.taskUser ?? "",
    memory,
    outages: new NodeOutages(),
    leaked: opts.leaked ?? (() => {}),
    tags: new TagPolicy(opts.tags ?? [MANAGED_TAG]),
    room,
  };
}
