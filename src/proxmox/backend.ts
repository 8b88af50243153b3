// The Proxmox implementation of the kit's Backend (src/kit/backend.ts):
// connects, checks the nodes and templates once, then assembles the Backend
// from one module per operation (create/, configure.ts, drain.ts, delete.ts,
// describe.ts, inspect.ts), timing each step for the metrics.

import type { Config } from "../config/types.ts";
import { type Backend, BackendError } from "../kit/backend.ts";
import { withDefaultTimeouts } from "../kit/timeouts.ts";
import { createCreate } from "./create/create.ts";
import { connectApi } from "./api/connect.ts";
import { DEFAULT_TIMING, type Timing } from "./timing.ts";
import { newContext, type Observed, type ProxmoxDeps } from "./context.ts";
import { describeManaged, type PveVm } from "./describe.ts";
import { inspectVm } from "./inspect.ts";
import { runBootstrap } from "./configure.ts";
import { deleteVm } from "./delete.ts";
import { drainNode } from "./drain.ts";
import { ensureRunning } from "./vm/running.ts";
import { parseHostRef } from "./naming.ts";
import { locateOwned } from "./vm/ownership.ts";
import { checkNodes, type NodeCheck, outlastOutages } from "./cluster/nodes.ts";
import { readyDeadline, waitReady } from "./vm/ready.ts";
import { checkOfferingTemplates } from "./cluster/templates.ts";
import { cloneTargetProblem } from "./cluster/clone_target.ts";
import { checkVmidRange } from "./create/vmid.ts";
import { secondsSince } from "../async/elapsed.ts";
import { checkOfferingRoom, offeredTypes } from "./cluster/room_startup.ts";
import { roomRefresher } from "./cluster/room_read.ts";
import { watchRetiringTokens } from "./retiring.ts";

/** The Backend, describing VMs with their node, VMID and power state too. */
export interface ProxmoxBackend extends Backend {
  describe(signal: AbortSignal): Promise<PveVm[]>;
}

export async function createProxmoxBackend(
  cfg: Config,
  deps: ProxmoxDeps = {},
): Promise<ProxmoxBackend> {
  const px = cfg.proxmox;
  if (px === null) throw new BackendError("proxmox backend selected without proxmox settings");
  const timing: Timing = { ...DEFAULT_TIMING, ...deps.timing };
  const ctx = newContext(await connectApi(px, timing), px.nodes, timing, {
    tags: px.tags,
    taskUser: px.tokenId.split("!")[0],
    leaked: (volid) => {
      try {
        deps.leaked?.(volid);
      } catch {
        // Metrics must never break an operation.
      }
    },
    room: { policy: px.room, catalog: cfg.catalog, offered: offeredTypes(cfg.offerings) },
  });
  // A node the cluster lacks, and a zone its template cannot reach, are refused now, not once per
  // Create (docs/troubleshooting.md#startup-failures-after-validation).
  const startup = AbortSignal.timeout(timing.startupCheckMs);
  let nodes: NodeCheck | undefined;
  try {
    nodes = await checkNodes(ctx.api, px.nodes, startup, timing.nodeRecheck);
    await checkOfferingTemplates(ctx, cfg.catalog, cfg.offerings, startup);
    await checkOfferingRoom(ctx, cfg.catalog, cfg.offerings, startup);
    await checkOfferingTemplates(ctx, cfg.catalog, cfg.offerings, startup, cloneTargetProblem);
    await checkVmidRange(ctx.api, px.vmidRange ?? null, startup);
  } catch (err) {
    nodes?.stop();
    ctx.api.close();
    throw err;
  }
  ctx.room.setRefresher(roomRefresher(ctx));
  // Says once per token a rotation retires when removing it loses nothing.
  const retiring = watchRetiringTokens(ctx);
  const { drain: drainTimeoutMs, configure: configureTimeoutMs } = withDefaultTimeouts(
    deps.timeouts,
  );

  const observed: Observed = async (op, fn) => {
    const t0 = performance.now();
    let outcome: "ok" | "error" = "error";
    try {
      const r = await fn();
      outcome = "ok";
      return r;
    } finally {
      try {
        deps.observe?.(op, outcome, secondsSince(t0));
      } catch {
        // Metrics must never break an operation.
      }
    }
  };

  const create = createCreate(ctx, {
    catalog: cfg.catalog,
    nodes,
    limits: { pool: px.pool, clonesPerStorage: px.clonesPerStorage, vmidRange: px.vmidRange },
    observed,
  });

  return {
    kind: "proxmox",
    admit(slot) {
      const type = cfg.catalog.get(slot.instanceType);
      // What Create refuses on its own (no such type or node) it refuses with its own words.
      if (type === undefined || !px.nodes.includes(slot.zone)) return null;
      return ctx.room.admit(slot.machineId, type, slot.zone);
    },
    room: () => ctx.room.report(),
    create,
    async configure(machine, spec, signal) {
      const started = Date.now();
      const loc = await locateOwned(ctx, machine, signal);
      await observed("EnsureRunning", () => ensureRunning(ctx, loc, signal));
      await observed("Configure", async () => {
        const job = { hook: cfg, machineId: machine.machineId, bootstrap: spec.bootstrap };
        await runBootstrap(ctx, loc, job, signal);
        // CONFIGURED means the node is Ready, not that the hook exited 0 (BigFleet's contract).
        const gate = cfg.readyGate;
        if (gate === null) return;
        const deadline = readyDeadline(gate, started, configureTimeoutMs, Date.now());
        await waitReady(ctx, loc, gate, deadline, signal);
      });
    },
    // A Delete or Drain that meets a node that is down waits for it within its timeout.
    drain: (machine, graceSeconds, signal) =>
      outlastOutages(
        ctx.api,
        `Drain of machine ${machine.machineId}`,
        async () => {
          const loc = await locateOwned(ctx, machine, signal);
          await observed("EnsureRunning", () => ensureRunning(ctx, loc, signal));
          await observed("Drain", () => drainNode(ctx, loc, graceSeconds, drainTimeoutMs, signal));
        },
        signal,
        timing.outageRecheck,
      ),
    delete: (machine, signal) =>
      outlastOutages(
        ctx.api,
        `Delete of machine ${machine.machineId}`,
        () =>
          observed("DeleteVM", async () => {
            await deleteVm(ctx, machine, signal);
            // The VMID is free for anyone now: no longer known as this machine's.
            const ref = parseHostRef(machine.hostRef);
            if (ref !== null) {
              ctx.memory.deleted(ref.vmid, machine.machineId);
              ctx.room.vmGone(ref.vmid);
            }
          }),
        signal,
        timing.outageRecheck,
      ),
    describe: (signal) => observed("DescribeManaged", () => describeManaged(ctx, signal)),
    inspect: (machine, signal) =>
      observed(
        "InspectVM",
        () => inspectVm(ctx, cfg.catalog.get(machine.instanceType), machine, signal),
      ),
    close() {
      retiring.stop();
      nodes.stop();
      ctx.api.close();
      return Promise.resolve();
    },
  };
}
