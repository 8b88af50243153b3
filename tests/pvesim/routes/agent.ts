// /nodes/{node}/qemu/{vmid}/agent/*: get-osinfo, ping, file-write, exec, exec-status.

import { agentWorkerMs, assertAgent, exec, execStatus, fileWrite, osInfo } from "../agent.ts";
import { disabledResult } from "../guestcaps.ts";
import { NODE, type Params, VMID } from "../params.ts";
import type { Route, RouteCtx } from "../router.ts";
import { openVm, vmPerm } from "./qemu.ts";
import { agentCheck } from "../versions.ts";

// The 403 a forced faults.forbidden names; the real check is per command and version (agentCheck).
const perm = vmPerm("VM.Monitor");

/** Wraps an agent handler with faults.agentSlowMs (QGA answering late). */
function slow(fn: (ctx: RouteCtx) => unknown): (ctx: RouteCtx) => Promise<unknown> {
  return async (ctx) => {
    if (ctx.core.faults.agentSlowMs > 0) await ctx.core.timers.sleep(ctx.core.faults.agentSlowMs);
    return fn(ctx);
  };
}

const base = { node: NODE, vmid: VMID };

/** The worker time of an agent call of `rounds` QGA round trips (agentWorkerMs). */
const held = (rounds: number) => ({ core, params }: RouteCtx) =>
  agentWorkerMs(
    core,
    String(params.node),
    Number(params.vmid),
    rounds,
    typeof params.content === "string" ? params.content.length : 0,
  );

function osinfoHandler({ core, params }: RouteCtx) {
  const vm = openVm(core, params);
  assertAgent(core, vm, "guest-get-osinfo");
  return disabledResult(vm, "guest-get-osinfo") ?? osInfo();
}

export const agentRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/get-osinfo",
    schema: base,
    perm,
    check: agentCheck("get-osinfo"),
    workerMs: held(2),
    handler: slow(osinfoHandler),
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/ping",
    schema: base,
    perm,
    check: agentCheck("ping"),
    workerMs: held(2),
    handler: slow(({ core, params }) => {
      const vm = openVm(core, params);
      assertAgent(core, vm, "guest-ping");
      return disabledResult(vm, "guest-ping") ?? { result: {} };
    }),
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/file-write",
    schema: {
      ...base,
      file: { type: "string" },
      content: { type: "string", maxLength: 61440 },
      encode: { type: "boolean", optional: true },
    },
    perm,
    check: agentCheck("file-write"),
    workerMs: held(6),
    handler: slow(({ core, params }) => {
      const p = params as Params;
      fileWrite(
        core,
        openVm(core, p),
        p.file as string,
        p.content as string,
        (p.encode as boolean | undefined) ?? true,
      );
      return null;
    }),
  },
  {
    method: "POST",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/exec",
    schema: {
      ...base,
      command: { type: "array" },
      "input-data": { type: "string", optional: true, maxLength: 65536 },
    },
    perm,
    check: agentCheck("exec"),
    workerMs: held(2),
    handler: slow(({ core, params }) => {
      const pid = exec(
        core,
        openVm(core, params),
        params.command as string[],
        (params["input-data"] as string | undefined) ?? "",
      );
      return { pid };
    }),
  },
  {
    method: "GET",
    pattern: "/nodes/{node}/qemu/{vmid}/agent/exec-status",
    schema: { ...base, pid: { type: "integer" } },
    perm,
    check: agentCheck("exec-status"),
    workerMs: held(2),
    handler: slow(({ core, params }) =>
      execStatus(core, openVm(core, params), params.pid as number)
    ),
  },
];
