// Create's VM step: adopt the VM a previous or concurrent attempt already made
// for the machine (found by its marker, waiting out in-flight clones), or
// clone the zone's template (templates.ts; waiting out a lock such as a
// backup's) into a fresh VMID, then apply the instance type's sizing.
//
// nextid reserves nothing (docs/proxmox-notes.md "VMID allocation and clone
// races"), so VMIDs are allocated under a process-wide mutex, held as
// reserved until their clone task ends, and remembered for a while after a
// lost race; a clone POST that fails ambiguously (596) is looked for before
// anything is cloned again.

import { getLogger } from "@logtape/logtape";
import type { InstanceType } from "../config/types.ts";
import { BackendError, type SlotSpec } from "../kit/backend.ts";
import type { Located, ProxmoxContext } from "./context.ts";
import {
  isTransient,
  ProxmoxApiError,
  refusedWith,
  serverTextOf,
  TaskFailedError,
} from "./errors.ts";
import { buildDescription, machineTag, parseMarker, parseTags, vmName } from "./naming.ts";
import { DEFAULT_NEXT_ID, readDatacenterOptions } from "./datacenter.ts";
import { isNodeUnreachable, offlineNodes } from "./nodes.ts";
import { relocate } from "./ownership.ts";
import { waitTask } from "./tasks.ts";
import { findTemplate, type TemplateRef } from "./templates.ts";
import { pollUntil, pollWithin, sleep } from "../kit/deadline.ts";
import { createMutex, mapLimit } from "./util.ts";
import {
  blockingLock,
  isPermissionError,
  listResources,
  type PendingView,
  readConfig,
  readPending,
  stopVm,
  type VmConfig,
  vmPath,
} from "./vm.ts";

/** Adopt or clone the VM for a slot's machine, sized and sourced by its instance type. */
export type CloneOrAdopt = (
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
) => Promise<Located>;

const log = getLogger(["bigfleet", "proxmox"]);

/** Failure texts of a lost newid race (docs/proxmox-notes.md "VMID allocation and clone races"). */
const RACE_RE = /config file already exists|can't lock file '[^']*lock-\d+\.conf'|File exists/i;

/** A source VM refusing a clone because of its config lock (`VM is locked (backup)`). */
const SOURCE_LOCKED_RE = /^VM is locked \(/;

/** Clones go into `pool` ("" for none); the VMID memory lives as long as the returned function. */
export function createCloner(ctx: ProxmoxContext, pool: string): CloneOrAdopt {
  const { api, nodes, timing, cloning } = ctx;
  const cloneMutex = createMutex();
  /** VMIDs handed to a clone POST whose task has not finished: nextid cannot see them yet. */
  const reserved = new Set<number>();
  /** VMIDs we just lost a race on → until when to skip them (the winner may not show in nextid yet). */
  const lostRace = new Map<number, number>();

  /** The datacenter's next-id range, read again at most once a minute. */
  let range: { lower: number; upper: number; at: number } | null = null;
  async function vmidRange(signal: AbortSignal): Promise<{ lower: number; upper: number }> {
    if (range !== null && Date.now() - range.at < 60_000) return range;
    const dc = await readDatacenterOptions(api, signal).catch((err) => {
      if (signal.aborted) throw err;
      return null;
    });
    if (dc !== null && !dc.readable && range === null) {
      log.warn(
        "the token cannot read datacenter.cfg (no Sys.Audit on /): a narrowed next-id range " +
          "is respected only from below (VMIDs are searched upward from /cluster/nextid's answer)",
      );
    }
    range = { ...(dc?.nextId ?? DEFAULT_NEXT_ID), at: Date.now() };
    return range;
  }

  /**
   * A VMID nobody else in this process is cloning into (nextid reserves
   * nothing), inside the datacenter's next-id range: nextid answers the
   * lowest free VMID there, but `nextid?vmid=` checks only that one is
   * free, so the search past our own reservations is bounded here.
   */
  async function allocateVmid(signal: AbortSignal): Promise<number> {
    const parse = (v: unknown) => {
      const n = Number(v); // nextid is a string on real PVE; accept numbers too
      if (!Number.isInteger(n) || n < 100) {
        throw new BackendError(`unexpected /cluster/nextid answer ${JSON.stringify(v)}`);
      }
      return n;
    };
    const now = Date.now();
    for (const [id, until] of lostRace) if (until <= now) lostRace.delete(id);
    const { lower, upper } = await vmidRange(signal);
    let id = parse(await api.get("/cluster/nextid", undefined, signal));
    for (let tries = 0; tries < 10_000 && id < upper; tries++, id++) {
      if (id < lower || reserved.has(id) || lostRace.has(id)) continue;
      if (tries === 0) return id;
      try {
        return parse(await api.get("/cluster/nextid", { vmid: id }, signal));
      } catch (err) {
        if (!(err instanceof ProxmoxApiError && err.status === 400)) throw err;
      }
    }
    throw new BackendError(
      `no free VMID in the datacenter's next-id range [${lower}, ${upper}) beyond the ` +
        `${reserved.size} this provider is cloning into; widen it (Datacenter > Options > ` +
        `Next Free VMID Range) or wait for clones to finish`,
    );
  }

  /** The zone's template for the type, once no lock (a backup, a migration) is on it. */
  async function unlockedTemplate(
    slot: SlotSpec,
    type: InstanceType,
    signal: AbortSignal,
  ): Promise<TemplateRef> {
    // Backups take minutes: back off so many waiting Creates stay cheap.
    const backoff = { initialMs: timing.settleMs, maxMs: timing.settleMs * 10, factor: 2 };
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

  /** Clone the zone's template into a fresh VMID, retrying lost races and waiting out locks. */
  async function cloneNew(
    slot: SlotSpec,
    type: InstanceType,
    signal: AbortSignal,
  ): Promise<Located> {
    const body = {
      newid: 0,
      name: vmName(slot.machineId),
      // Name and marker go in the clone itself so an in-flight clone is recognisable.
      description: buildDescription(slot.machineId, slot.operationId),
      full: 1,
      pool: pool !== "" ? pool : undefined,
    };
    for (let attempt = 1;;) {
      const tmpl = await unlockedTemplate(slot, type, signal);
      const srcNode = tmpl.node;
      const what = `clone of template ${tmpl.vmid}`;
      const started = await cloneMutex.run(async () => {
        const vmid = await allocateVmid(signal);
        reserved.add(vmid);
        cloning.set(vmid, slot.machineId);
        try {
          const upid = await api.post(
            `${vmPath(srcNode, tmpl.vmid)}/clone`,
            // No target on the template's own node: only shared storage allows one.
            { ...body, newid: vmid, target: slot.zone !== srcNode ? slot.zone : undefined },
            signal,
          );
          return { vmid, upid, error: null as unknown };
        } catch (error) {
          return { vmid, upid: null as unknown, error };
        }
      });
      const { vmid } = started;
      try {
        if (started.error !== null) throw started.error;
        log.info("cloning template {template} into VM {vmid} on {node}", {
          template: tmpl.vmid,
          vmid,
          node: slot.zone,
          machineId: slot.machineId,
        });
        await waitTask(api, started.upid, `${what} into VM ${vmid}`, timing.task, signal);
        const config = await readConfig(api, slot.zone, vmid, signal);
        if (config === null) {
          throw new BackendError(`VM ${vmid} not found on ${slot.zone} after its clone finished`);
        }
        return { node: slot.zone, vmid, config };
      } catch (err) {
        if (signal.aborted) throw err;
        const text = serverTextOf(err);
        const refused = started.error !== null;
        // Nothing was cloned when the POST or its task met a lock on the source
        // (a backup starting between our look and the clone): wait again, no attempt used.
        const nothingMade = refused || err instanceof TaskFailedError;
        if (nothingMade && await sourceLocked(ctx, err, tmpl, signal)) {
          log.info("template {vmid} was locked when cloned; waiting", {
            vmid: tmpl.vmid,
            error: text,
          });
          continue;
        }
        attempt++;
        if (
          (RACE_RE.test(text) ||
            (refused && await legacyRaceLost(ctx, err, srcNode, vmid, signal))) &&
          attempt <= timing.raceAttempts
        ) {
          log.warn("lost a VMID race for {vmid}; retrying with a new id", { vmid, error: text });
          lostRace.set(vmid, Date.now() + 60_000);
          continue;
        }
        if (started.error !== null && isTransient(err) && attempt <= timing.raceAttempts) {
          // The clone may have started behind the proxy error: look for it before cloning again.
          log.warn("clone POST for VM {vmid} failed ambiguously; looking for it", {
            vmid,
            error: (err as Error).message,
          });
          const found = await settleAmbiguousClone(ctx, slot, srcNode, vmid, signal);
          if (found !== null) return found;
          continue;
        }
        throw err;
      } finally {
        reserved.delete(vmid);
        cloning.delete(vmid);
      }
    }
  }

  return async function cloneOrAdopt(slot, type, signal): Promise<Located> {
    if (!nodes.includes(slot.zone)) {
      throw new BackendError(`zone ${slot.zone} is not one of the configured nodes`);
    }
    const existing = await findExisting(ctx, slot.machineId, signal);
    let loc: Located;
    if (existing !== null) {
      log.info("adopting VM {vmid} on {node} already made for machine {machineId}", {
        vmid: existing.vmid,
        node: existing.node,
        machineId: slot.machineId,
      });
      loc = existing;
    } else {
      loc = await cloneNew(slot, type, signal);
    }
    await applySizing(ctx, loc, slot, type, signal);
    return loc;
  };
}

/**
 * A VM already made for this machine (a previous or concurrent attempt), or
 * null. VMs on nodes that are down are not waited for: the cluster says which
 * nodes are offline, and a candidate whose node stops answering is dropped
 * with the others on that node (docs/proxmox-notes.md).
 */
async function findExisting(
  ctx: ProxmoxContext,
  machineId: string,
  signal: AbortSignal,
): Promise<Located | null> {
  const { api, nodes, cloning, outages } = ctx;
  const tag = machineTag(machineId);
  const name = vmName(machineId);
  const [listed, offline] = await Promise.all([
    listResources(api, signal).catch((err) => {
      if (!isPermissionError(err)) throw err;
      return [];
    }),
    offlineNodes(api, signal),
  ]);
  let entries: { node: string; vmid: number }[] = listed.filter((e) =>
    e.template !== 1 &&
    (parseTags(e.tags).includes(tag) || e.lock === "clone" || e.name === name ||
      e.name === undefined || cloning.get(e.vmid) === machineId)
  );
  for (const [vmid, owner] of cloning) {
    if (owner === machineId && !entries.some((e) => e.vmid === vmid)) {
      entries.push({ node: nodes[0], vmid });
    }
  }
  /** node → why it cannot be read now. */
  const down = new Map<string, string>([...offline].map((n) => [n, "offline in the cluster"]));
  entries = entries.filter((e) => !down.has(e.node));
  const found = (await mapLimit(
    entries,
    8,
    (e) => {
      if (down.has(e.node)) return Promise.resolve(null);
      return resolveCandidate(ctx, e.node, e.vmid, machineId, signal).catch((err) => {
        if (signal.aborted) throw err;
        if (isNodeUnreachable(err)) down.set(e.node, (err as Error).message);
        // One unreadable candidate must not block Create; it is logged and skipped.
        log.warn("could not inspect VM {vmid}: {error}", {
          vmid: e.vmid,
          error: (err as Error).message,
        });
        return null;
      });
    },
  )).filter((x): x is Located => x !== null);
  outages.observe(down, new Set(listed.map((e) => e.node).filter((n) => !down.has(n))), "Create");
  if (found.length > 1) {
    log.warn("several VMs carry the marker of machine {machineId}: {vmids}", {
      machineId,
      vmids: found.map((f) => f.vmid),
    });
  }
  return found.sort((a, b) => a.vmid - b.vmid)[0] ?? null;
}

/** How often resolveCandidate may miss a VM where it looked (it moved) before giving up on it. */
const MAX_MISSES = 4;

/** Keys a clone's temporary config has before its first disk is copied. */
const NAMELESS_KEYS = new Set(["lock", "digest"]);

/**
 * Follow one candidate VM until it is decidable: ours (marker matches, no
 * lock left), or not. An in-flight clone shows only `lock: clone` until its
 * first disk is copied, so it is waited on rather than judged. Once it shows
 * more (its name, description, the template's keys) without our marker, it
 * is someone else's clone: ours always carry the marker from the first full
 * config on, and a stranger's full clone may take many minutes more.
 */
async function resolveCandidate(
  ctx: ProxmoxContext,
  node: string,
  vmid: number,
  machineId: string,
  signal: AbortSignal,
): Promise<Located | null> {
  const { api, timing, cloning } = ctx;
  let misses = 0;
  return await pollUntil<Located | null>(signal, timing.settleMs, async (call) => {
    let config = await readConfig(api, node, vmid, signal);
    while (config === null) {
      // A finished clone moves to its target node.
      if (++misses >= MAX_MISSES) return null;
      const n = await relocate(ctx, vmid, node, signal);
      if (n === null || n === node) return null;
      node = n;
      config = await readConfig(api, node, vmid, signal);
    }
    const owner = parseMarker(config.description)?.machineId ?? cloning.get(vmid);
    if (owner !== undefined && owner !== machineId) return null;
    if (owner === undefined) {
      if (config.lock !== "clone") return null;
      if (Object.keys(config).some((k) => !NAMELESS_KEYS.has(k))) return null;
    } else if (blockingLock(config.lock) === null) return { node, vmid, config };
    if (call === 0) {
      log.info("VM {vmid} is being cloned; waiting to see whose it is", {
        vmid,
        node,
        machineId,
      });
    }
    return undefined;
  });
}

/** Whether a refused clone POST met a lock on its source (legacy servers: by its config). */
function sourceLocked(
  ctx: ProxmoxContext,
  err: unknown,
  tmpl: TemplateRef,
  signal: AbortSignal,
): Promise<boolean> {
  return refusedWith(err, SOURCE_LOCKED_RE, async () => {
    const lock = (await readConfig(ctx.api, tmpl.node, tmpl.vmid, signal))?.lock;
    return typeof lock === "string" && lock !== "";
  });
}

/**
 * A legacy server (no JSON `message`, reason phrase unreadable over fetch)
 * answers a synchronous newid collision with a bare 500. Decide it by
 * evidence: our POST was refused, so if the newid exists now, it is someone else's.
 */
async function legacyRaceLost(
  ctx: ProxmoxContext,
  err: unknown,
  srcNode: string,
  vmid: number,
  signal: AbortSignal,
): Promise<boolean> {
  if (!(err instanceof ProxmoxApiError) || err.status !== 500 || err.serverText !== "") {
    return false;
  }
  try {
    return (await readConfig(ctx.api, srcNode, vmid, signal)) !== null;
  } catch {
    return false;
  }
}

/** The clone behind an ambiguously failed POST, if it shows up within cloneSettleMs. */
async function settleAmbiguousClone(
  ctx: ProxmoxContext,
  slot: SlotSpec,
  srcNode: string,
  vmid: number,
  signal: AbortSignal,
): Promise<Located | null> {
  const { api, timing } = ctx;
  const found = await pollWithin(signal, timing.settleMs, timing.cloneSettleMs, async () => {
    for (const node of new Set([srcNode, slot.zone])) {
      let exists = false;
      try {
        exists = (await readConfig(api, node, vmid, signal)) !== null;
      } catch (err) {
        if (signal.aborted) throw err;
      }
      if (exists) return await resolveCandidate(ctx, node, vmid, slot.machineId, signal);
    }
    return undefined;
  });
  return found ?? null;
}

/**
 * PUT sizing, tags and marker; skipped when the config already matches.
 * Clones inherit every template key (docs/proxmox-notes.md "What a clone
 * inherits"): vCPUs are sockets × cores unless `vcpus` caps them, so the
 * count is pinned with sockets 1 and no vcpus; an inherited `protection`
 * would make every later destroy fail, so it is cleared. The check reads
 * the current values (`GET .../pending`): a running VM, adopted, may hold
 * its new size only as a pending change, which it takes when it starts
 * again; so it is stopped, and ensureRunning starts it. Tags follow
 * ctx.tags (tags.ts): a tag the datacenter's policy refuses is left as is.
 */
async function applySizing(
  ctx: ProxmoxContext,
  loc: Located,
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
): Promise<void> {
  const { api, timing } = ctx;
  const sizing = {
    cores: type.vcpu,
    sockets: 1,
    memory: type.memoryMib,
    protection: 0,
    description: buildDescription(slot.machineId, slot.operationId),
  };
  const read = async () => {
    const view = await readPending(api, loc.node, loc.vmid, signal);
    if (view === null) throw new BackendError(`VM ${loc.vmid} vanished from ${loc.node}`);
    return view;
  };
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
  if (sized(view) && tagsDone(view.current)) return;
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
      await api.put(`${vmPath(loc.node, loc.vmid)}/config`, body, signal);
      break;
    } catch (err) {
      if (signal.aborted) throw err;
      // A tag the policy refuses: the same PUT without changing it (each tag once).
      if (ctx.tags.refused(err, current) && ++refusals <= tags.length + current.length) continue;
      if (!isTransient(err) || ++call >= timing.actionAttempts) throw err;
      // The PUT may have landed behind the proxy error: look before repeating it.
      await sleep(timing.settleMs, signal);
      view = await read();
      if (sized(view) && tagsDone(view.current)) return;
    }
  }
  view = await read();
  const waiting = SIZING_KEYS.filter((k) => view.pending.has(k));
  if (waiting.length === 0) return;
  log.info("VM {vmid} runs with {keys} still pending; stopping it so its start applies them", {
    vmid: loc.vmid,
    node: loc.node,
    keys: waiting.join(", "),
    machineId: slot.machineId,
  });
  await stopVm(api, loc.node, loc.vmid, timing, signal);
}

/** The keys whose pending value means the VM does not run with its size yet. */
const SIZING_KEYS = ["cores", "sockets", "vcpus", "memory"];
