// Create's sizing step: the instance type's vCPUs and memory, the marker and
// the tags, written into the VM's config.

import { getLogger } from "@logtape/logtape";
import type { InstanceType } from "../../config/types.ts";
import type { SlotSpec } from "../../kit/backend.ts";
import { sleep } from "../../async/sleep.ts";
import { isTransient } from "../api/errors.ts";
import {
  type Located,
  type PendingView,
  readPendingHere,
  stopVm,
  type VmConfig,
  vmOf,
  vmPath,
} from "../vm/vm.ts";
import type { ProxmoxContext } from "../context.ts";
import { buildDescription, parseMarker, parseTags } from "../naming.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** What sizing leaves to the VM's next start. */
export interface Sized {
  /** Sizing keys the running VM holds only as pending changes: it must start again to take them. */
  pendingUntilStart: string[];
}

/**
 * PUT sizing, tags and marker; skipped when the config already matches.
 * Clones inherit every template key (docs/proxmox-notes.md "What a clone
 * inherits"): vCPUs are sockets × cores unless `vcpus` caps them, so the
 * count is pinned with sockets 1 and no vcpus; an inherited `protection`
 * would make every later destroy fail, so it is cleared. The check reads
 * the current values (`GET .../pending`): a running VM, adopted, may hold
 * its new size only as a pending change, which it takes when it starts
 * again; those keys are returned, for Create to restart it. Tags follow
 * ctx.tags (tags.ts): a tag the datacenter's policy refuses is left as is.
 */
export async function applySizing(
  ctx: ProxmoxContext,
  loc: Located,
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
): Promise<Sized> {
  const { api, timing } = ctx;
  const vm = vmOf(ctx, loc);
  const sizing = {
    cores: type.vcpu,
    sockets: 1,
    memory: type.memoryMib,
    protection: 0,
    description: buildDescription(slot.machineId, slot.operationId),
  };
  const read = () => readPendingHere(vm, signal);
  const tagsNow = (c: VmConfig) => parseTags(c.tags);
  const tagsDone = (c: VmConfig) =>
    ctx.tags.target(tagsNow(c), slot.machineId).join(";") === [...tagsNow(c)].sort().join(";");
  const sized = (v: PendingView) =>
    Number(v.current.cores) === sizing.cores &&
    Number(v.current.sockets ?? 1) === 1 &&
    v.current.vcpus === undefined &&
    !Number(v.current.protection ?? 0) &&
    Number(String(v.current.memory ?? "").replace(/^current=/, "")) === sizing.memory &&
    parseMarker(v.current.description)?.machineId === slot.machineId &&
    !SIZING_KEYS.some((k) => v.pending.has(k));
  let view = await read();
  if (sized(view) && tagsDone(view.current)) return { pendingUntilStart: [] };
  for (let call = 0, refusals = 0;;) {
    const current = tagsNow(view.current);
    const tags = ctx.tags.target(current, slot.machineId);
    const drop = [
      ...(view.current.vcpus !== undefined ? ["vcpus"] : []),
      ...(tags.length === 0 && current.length > 0 ? ["tags"] : []),
    ];
    // `delete` may only name keys the PUT does not also set; an unset one is a mere warning.
    const body = {
      ...sizing,
      ...(tags.length > 0 && !tagsDone(view.current) ? { tags: tags.join(";") } : {}),
      ...(drop.length > 0 ? { delete: drop.join(",") } : {}),
    };
    try {
      await api.put(`${vmPath(loc)}/config`, body, signal);
      break;
    } catch (err) {
      if (signal.aborted) throw err;
      // A tag the policy refuses: the same PUT without changing it (each tag once).
      if (ctx.tags.refused(err, current) && ++refusals <= tags.length + current.length) continue;
      if (!isTransient(err) || ++call >= timing.actionAttempts) throw err;
      // The PUT may have landed behind the proxy error: look before repeating it.
      await sleep(timing.settleMs, signal);
      view = await read();
      if (sized(view) && tagsDone(view.current)) return { pendingUntilStart: [] };
    }
  }
  view = await read();
  return { pendingUntilStart: SIZING_KEYS.filter((k) => view.pending.has(k)) };
}

/**
 * Stop a VM that runs with its size still pending, so that its next start
 * (Create's next step) applies it.
 */
export async function stopToApplySizing(
  ctx: ProxmoxContext,
  loc: Located,
  sized: Sized,
  machineId: string,
  signal: AbortSignal,
): Promise<void> {
  log.info("VM {vmid} runs with {keys} still pending; stopping it so its start applies them", {
    vmid: loc.vmid,
    node: loc.node,
    keys: sized.pendingUntilStart.join(", "),
    machineId,
  });
  await stopVm(vmOf(ctx, loc), ctx.timing, signal);
}

/** The keys whose pending value means the VM does not run with its size yet. */
const SIZING_KEYS = ["cores", "sockets", "vcpus", "memory"];
