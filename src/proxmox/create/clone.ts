// Create's clone step: clone the zone's template (cluster/templates.ts;
// waiting out a lock such as a backup's) into a fresh VMID. Each attempt
// ends in one outcome (clone_failure.ts), and the loop does what that
// outcome calls for: a locked template is waited for, a storage-lock
// timeout (it made nothing) retried, a lost VMID race retried under a new
// VMID (vmid.ts). A clone POST that fails ambiguously (596) is looked for
// before anything is cloned again, and cloned into again under the same
// VMID: the unanswered POST may still run, and then one of the two finds
// the VMID taken. Clone tasks are bounded per node and storage (clone_slots.ts).

import { getLogger } from "@logtape/logtape";
import type { InstanceType, VmidRange } from "../../config/types.ts";
import { storageFor } from "../../config/instance_options.ts";
import { BackendError, type SlotSpec } from "../../kit/backend.ts";
import { pollUntil, pollWithin } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { type Effect, waitTask } from "../api/tasks.ts";
import { findTemplate, type TemplateRef } from "../cluster/templates.ts";
import { explainCloneRefusal } from "../cluster/clone_target.ts";
import {
  blockingLock,
  isPermissionError,
  type Located,
  readConfig,
  type VmAt,
  type VmConfig,
  vmOf,
  vmPath,
} from "../vm/vm.ts";
import type { ProxmoxContext } from "../context.ts";
import { buildDescription, parseMarker, vmName } from "../naming.ts";
import { destroyVm } from "../vm/destroy.ts";
import { freeLeftovers } from "../vm/volumes.ts";
import { isTemporaryConfig, resolveCandidate } from "./adopt.ts";
import { nodeHolding } from "../vm/ownership.ts";
import { type Attempt, classifyClone } from "./clone_failure.ts";
import { createCloneSlots } from "./clone_slots.ts";
import { createVmidAllocator } from "./vmid.ts";

const log = getLogger(["bigfleet", "proxmox"]);

/** Where clones go and how many run at once. */
export interface CloneLimits {
  /** Pool the clones go into ("" for none). */
  pool: string;
  /** Clone tasks at once per node and storage (a shared storage: per cluster); 0: no bound. */
  clonesPerStorage: number;
  /** --proxmox-vmid-range, kept to beside the datacenter's next-id range; null: that alone. */
  vmidRange?: VmidRange | null;
}

/** Clone the zone's template for a slot's machine into a fresh VMID. */
export type CloneNew = (
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
) => Promise<Located>;

/** The VMIDs one Create holds: each released, and its clone forgotten, when the Create ends. */
interface Held {
  hold(vmid: number): void;
  release(vmid: number): void;
  releaseAll(): void;
}

/** The VMID allocator and the clone bound live as long as the returned function. */
export function createCloner(ctx: ProxmoxContext, limits: CloneLimits): CloneNew {
  const { api, timing, memory } = ctx;
  const vmids = createVmidAllocator(api, limits.vmidRange ?? null);
  const slots = createCloneSlots(ctx, limits.clonesPerStorage);

  function heldBy(machineId: string): Held {
    const held = new Set<number>();
    const release = (vmid: number) => {
      held.delete(vmid);
      vmids.release(vmid);
      memory.cloneEnded(vmid);
    };
    return {
      hold(vmid) {
        held.add(vmid);
        memory.cloneStarted(vmid, machineId);
      },
      release,
      releaseAll: () => held.forEach(release),
    };
  }

  /** One clone POST into `pinned` or a fresh VMID, followed until its VM can be read. */
  async function cloneOnce(
    slot: SlotSpec,
    type: InstanceType,
    tmpl: TemplateRef,
    pinned: number | null,
    held: Held,
    signal: AbortSignal,
  ): Promise<Attempt> {
    const vmid = pinned ?? await vmids.reserve(signal);
    held.hold(vmid);
    const body = {
      newid: vmid,
      name: vmName(slot.machineId),
      // Name and marker go in the clone itself so an in-flight clone is recognisable.
      description: buildDescription(slot.machineId, slot.operationId),
      // A linked clone shares the template's base disks; a full one copies them, onto the
      // type's storage for the zone when it names one.
      full: type.clone === "linked" ? 0 : 1,
      storage: type.clone === "linked" ? undefined : storageFor(type, slot.zone) ?? undefined,
      pool: limits.pool !== "" ? limits.pool : undefined,
      // No target on the template's own node: only shared storage allows one.
      target: slot.zone !== tmpl.node ? slot.zone : undefined,
    };
    const started = await api.post(`${vmPath(tmpl)}/clone`, body, signal).then(
      (upid: unknown) => ({ upid, error: null as unknown }),
      (error: unknown) => ({ upid: null as unknown, error }),
    );
    try {
      if (started.error !== null) throw started.error;
      log.info("cloning template {template} into VM {vmid} on {node}", {
        template: tmpl.vmid,
        vmid,
        node: slot.zone,
        machineId: slot.machineId,
      });
      const upid = String(started.upid);
      memory.cloneTaskStarted(upid);
      try {
        await waitTask(api, upid, {
          what: `clone of template ${tmpl.vmid} into VM ${vmid}`,
          timing: timing.task,
          effect: cloneEffect(ctx, tmpl.node, { node: slot.zone, vmid }, slot.machineId),
        }, signal);
      } finally {
        memory.cloneTaskEnded(upid);
      }
      const config = await readConfig({ api, node: slot.zone, vmid }, signal);
      if (config === null) {
        throw new BackendError(`VM ${vmid} not found on ${slot.zone} after its clone finished`);
      }
      return { made: { node: slot.zone, vmid, config } };
    } catch (err) {
      if (signal.aborted) throw err;
      return { vmid, err, postFailed: started.error !== null };
    }
  }

  return async function cloneNew(slot, type, signal): Promise<Located> {
    const held = heldBy(slot.machineId);
    /** A VMID whose clone POST got no answer: its clone may still appear, so it is cloned into again. */
    let pinned: number | null = null;
    /** Clone attempts counted against raceAttempts: the first, then each after a lost race or a 596. */
    let attempts = 1;
    /** Storage-lock timeouts retried so far (also at most raceAttempts). */
    let storageLocks = 0;
    try {
      while (true) {
        const tmpl = await unlockedTemplate(ctx, slot, type, signal);
        const tried = await slots.run(
          tmpl,
          () => cloneOnce(slot, type, tmpl, pinned, held, signal),
          signal,
          type.clone === "linked" ? null : storageFor(type, slot.zone),
        );
        const left = {
          storageLock: storageLocks < timing.raceAttempts,
          clone: attempts < timing.raceAttempts,
        };
        const outcome = await classifyClone(ctx, tried, tmpl, left, signal);
        const at = (vmid: number) => ({ node: tmpl.node, vmid });
        switch (outcome.kind) {
          case "made":
            return outcome.vm;
          case "template-locked":
            // Nothing was made: wait for the lock to go, no attempt used.
            log.info("template {vmid} was locked when cloned; waiting", {
              vmid: tmpl.vmid,
              error: outcome.text,
            });
            if (pinned !== outcome.vmid) held.release(outcome.vmid);
            await sleep(timing.settleMs, signal);
            break;
          case "storage-locked": {
            const { vmid, text } = outcome;
            storageLocks++;
            // The worker freed what it made; a leftover of ours (a cleanup cut short) goes too.
            const what =
              "clone into VM {vmid} timed out on a storage lock; nothing was made, retrying";
            log.warn(what, { vmid, error: text });
            if (pinned === vmid) {
              // An earlier unanswered POST into this VMID may be cloning it right now.
              const found = await settleAmbiguousClone(ctx, slot, at(vmid), signal);
              if (found !== null) return found;
            } else {
              const cleared = await clearHalfMade(ctx, at(vmid), slot.machineId, text, signal);
              if (!cleared) vmids.lost(vmid);
              held.release(vmid);
            }
            await sleep(timing.settleMs * storageLocks, signal);
            break;
          }
          case "race-lost": {
            const { vmid } = outcome;
            attempts++;
            if (pinned === vmid) {
              // The clash may be our own unanswered POST, run late: if so, it is ours.
              const found = await settleAmbiguousClone(ctx, slot, at(vmid), signal);
              if (found !== null) return found;
            }
            log.warn("lost a VMID race for {vmid}; retrying with a new id", {
              vmid,
              error: outcome.text,
            });
            vmids.lost(vmid);
            pinned = null;
            held.release(vmid);
            break;
          }
          case "ambiguous": {
            const { vmid } = outcome;
            attempts++;
            // The clone may run behind the proxy error or the unreadable task: look for it first.
            log.warn("the clone into VM {vmid} may have run ({error}); looking for it", {
              vmid,
              error: (outcome.err as Error).message,
            });
            const found = await settleAmbiguousClone(ctx, slot, at(vmid), signal);
            if (found !== null) return found;
            // Not there (yet): clone into the same VMID, so the two cannot both succeed.
            pinned = vmid;
            break;
          }
          case "fatal":
            throw explainCloneRefusal(outcome.err, type, slot.zone, tmpl);
        }
      }
    } finally {
      held.releaseAll();
    }
  };
}

/**
 * What a clone did, read from its VM when its task cannot be read: done once
 * the VM shows the machine's marker, unlocked, on its target node; failed
 * when it is on neither the template's node nor the target (the clone
 * loop then looks for it as for a POST without an answer). The template's
 * node is read first: a finished clone moves from there to the target, so
 * it cannot slip between the two reads.
 */
function cloneEffect(
  ctx: ProxmoxContext,
  source: string,
  target: VmAt,
  machineId: string,
): (signal: AbortSignal) => Promise<Effect> {
  return async (signal) => {
    for (const node of new Set([source, target.node])) {
      let config: VmConfig | null;
      try {
        config = await readConfig(vmOf(ctx, { node, vmid: target.vmid }), signal);
      } catch (err) {
        // A pool-scoped token cannot read its clone before it joins the pool, at the end.
        if (isPermissionError(err)) return undefined;
        throw err;
      }
      if (config === null) continue;
      const done = node === target.node && blockingLock(config.lock) === null &&
        parseMarker(config.description)?.machineId === machineId;
      return done ? "done" : undefined;
    }
    return { failed: `VM ${target.vmid} is on neither ${source} nor ${target.node}` };
  };
}

/** The zone's template for the type, once no lock (a backup, a migration) is on it. */
async function unlockedTemplate(
  ctx: ProxmoxContext,
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
): Promise<TemplateRef> {
  // Backups take minutes: back off so many waiting Creates stay cheap.
  const { settleMs } = ctx.timing;
  const backoff = { initialMs: settleMs, maxMs: settleMs * 10, factor: 2 };
  return await pollUntil(signal, backoff, async (call) => {
    const tmpl = await findTemplate(ctx, type.template, slot.zone, signal);
    const lock = tmpl.config?.lock;
    if (typeof lock !== "string" || lock === "") return tmpl;
    if (call === 0) {
      log.info("template {vmid} on {node} is locked ({lock}); waiting", {
        vmid: tmpl.vmid,
        node: tmpl.node,
        lock,
        machineId: slot.machineId,
      });
    }
    return undefined;
  });
}

/**
 * After a clone into `vmid` failed on a storage lock: remove what is left
 * of it if it is ours (a worker's cleanup cut short leaves the config with
 * its marker, or the bare temporary config). True when the VMID holds
 * nothing of anyone's now, false when someone else's VM is there.
 */
async function clearHalfMade(
  ctx: ProxmoxContext,
  at: VmAt,
  machineId: string,
  why: string,
  signal: AbortSignal,
): Promise<boolean> {
  const vm = vmOf(ctx, at);
  const { node, vmid } = vm;
  const config = await readConfig(vm, signal);
  if (config === null) return true;
  const marker = parseMarker(config.description)?.machineId;
  const ours = marker === machineId || (marker === undefined && isTemporaryConfig(config));
  const lock = blockingLock(config.lock);
  if (!ours || (lock !== null && marker === undefined)) return false;
  if (lock !== null) {
    throw new BackendError(
      `VM ${vmid} on ${node} was left locked (${lock}) by its failed clone (${why}); ` +
        `remove it (qm unlock ${vmid}, then destroy it) and Create again`,
    );
  }
  log.warn("removing VM {vmid} on {node}, left half-made by its failed clone", {
    vmid,
    node,
    machineId,
    error: why,
  });
  const done = await destroyVm(vm, ctx.timing, signal);
  if (done.upid !== null) await freeLeftovers(ctx, vm, done.upid, config, signal);
  return true;
}

/** The clone behind an ambiguously failed POST, if it shows up within cloneSettleMs. */
async function settleAmbiguousClone(
  ctx: ProxmoxContext,
  slot: SlotSpec,
  at: VmAt,
  signal: AbortSignal,
): Promise<Located | null> {
  const { api, timing } = ctx;
  const { node: srcNode, vmid } = at;
  const found = await pollWithin(signal, timing.settleMs, timing.cloneSettleMs, async () => {
    // Unreadable now counts as not there yet: asked again until cloneSettleMs.
    const node = await nodeHolding(api, vmid, new Set([srcNode, slot.zone]), signal);
    if (node === null) return undefined;
    return await resolveCandidate(ctx, { node, vmid }, slot.machineId, signal);
  });
  return found ?? null;
}
