// Create's VM step: adopt the VM a previous or concurrent attempt already made
// for the machine (found by its marker, waiting out in-flight clones), or
// clone the zone's template (templates.ts; waiting out a lock such as a
// backup's) into a fresh VMID, then apply the instance type's sizing.
//
// nextid reserves nothing (docs/proxmox-notes.md "VMID allocation and clone
// races"), so VMIDs are allocated under a process-wide mutex, held as
// reserved until their clone task ends, and remembered for a while after a
// lost race. A clone POST that fails ambiguously (596) is looked for before
// anything is cloned again, and cloned into again under the same VMID: the
// unanswered POST may still run, and then one of the two finds the VMID
// taken. Clone tasks are bounded per node and storage (docs/proxmox-notes.md
// "Storage locks"); a storage lock timeout made nothing and is retried.

import { getLogger } from "@logtape/logtape";
import type { InstanceType } from "../../config/types.ts";
import { BackendError, type SlotSpec } from "../../kit/backend.ts";
import { type Located, type ProxmoxContext, vmOf } from "../context.ts";
import {
  isTransient,
  ProxmoxApiError,
  refusedWith,
  serverTextOf,
  TaskFailedError,
} from "../api/errors.ts";
import { buildDescription, machineTag, parseMarker, parseTags, vmName } from "../naming.ts";
import { DEFAULT_NEXT_ID, readDatacenterOptions } from "../cluster/datacenter.ts";
import { isNodeUnreachable, offlineNodes } from "../cluster/nodes.ts";
import { relocate } from "../vm/ownership.ts";
import { waitTask } from "../api/tasks.ts";
import { destroyVm } from "../vm/destroy.ts";
import { freeLeftovers } from "../vm/volumes.ts";
import {
  findTemplate,
  readStorages,
  type StorageInfo,
  type TemplateRef,
  templateVolumes,
} from "../cluster/templates.ts";
import { pollUntil, pollWithin } from "../../async/poll.ts";
import { sleep } from "../../async/sleep.ts";
import { createKeyedLimit, mapLimit } from "../../async/limit.ts";
import { createMutex } from "../../async/mutex.ts";
import {
  blockingLock,
  isPermissionError,
  listResources,
  type PendingView,
  readConfig,
  readPending,
  stopVm,
  type VmAt,
  type VmConfig,
  vmPath,
} from "../vm/vm.ts";

/** Adopt or clone the VM for a slot's machine, sized and sourced by its instance type. */
export type CloneOrAdopt = (
  slot: SlotSpec,
  type: InstanceType,
  signal: AbortSignal,
) => Promise<Located>;

const log = getLogger(["bigfleet", "proxmox"]);

/** A config flock a clone worker gave up on: the source's (shared) or the newid's (exclusive). */
const CONFIG_FLOCK_RE = /can't lock file '[^']*\/lock-(\d+)\.conf' - got timeout/;

/** The newid exists already (docs/proxmox-notes.md "VMID allocation and clone races"). */
const EXISTS_RE = /config file already exists|File exists/i;

/** vdisk_alloc gave up on its storage's lock (docs/proxmox-notes.md "Storage locks"). */
const STORAGE_LOCK_RE =
  /can't lock file '[^']*\/pve-storage-[^']+' - got timeout|cfs-lock 'storage-[^']+' error: got lock request timeout/;

/** A source VM refusing a clone because of its config lock (`VM is locked (backup)`). */
const SOURCE_LOCKED_RE = /^VM is locked \(/;

/**
 * What a failed clone's text says: `template-lock` (the template's config
 * flock, taken shared with a 1 s timeout, was held by someone: nothing was
 * made), `race` (the newid is someone else's), `storage-lock` (vdisk_alloc
 * timed out on the storage lock: the worker removed what it made), or null.
 */
export function cloneFailure(
  text: string,
  template: number,
): "template-lock" | "race" | "storage-lock" | null {
  const flock = CONFIG_FLOCK_RE.exec(text);
  if (flock !== null) return Number(flock[1]) === template ? "template-lock" : "race";
  if (EXISTS_RE.test(text)) return "race";
  if (STORAGE_LOCK_RE.test(text)) return "storage-lock";
  return null;
}

/**
 * The temporary config clone_vm writes before the first disk is copied,
 * `# qmclone temporary file` and `lock: clone` (its comment reads back as
 * the description): no name, no marker yet, whoever's clone it is.
 */
export function isTemporaryConfig(config: VmConfig): boolean {
  const keys = Object.keys(config).filter((k) => k !== "digest");
  if (!keys.every((k) => k === "lock" || k === "description")) return false;
  const d = config.description;
  return d === undefined || String(d).trim() === "qmclone temporary file";
}

/** Where clones go and how many run at once. */
export interface CloneLimits {
  /** Pool the clones go into ("" for none). */
  pool: string;
  /** Clone tasks at once per node and storage (a shared storage: per cluster); 0: no bound. */
  clonesPerStorage: number;
}

/** How long a VMID we lost a race on is skipped: the winner may not show in nextid yet. */
const LOST_RACE_MS = 60_000;

/** The VMID memory and the clone bound live as long as the returned function. */
export function createCloner(ctx: ProxmoxContext, limits: CloneLimits): CloneOrAdopt {
  const { api, nodes, timing, memory } = ctx;
  const { pool } = limits;
  const cloneMutex = createMutex();
  /** VMIDs handed to a clone POST whose task has not finished: nextid cannot see them yet. */
  const reserved = new Set<number>();
  /** VMIDs we just lost a race on → until when to skip them (the winner may not show in nextid yet). */
  const lostRace = new Map<number, number>();
  const cloneSlots = createKeyedLimit(limits.clonesPerStorage);
  /** storage.cfg as the token sees it, read when a clone first needs it. */
  let storages: { at: number; map: Promise<Map<string, StorageInfo>> } | null = null;

  /** The datacenter's next-id range, read again at most once a minute. */
  let range: { lower: number; upper: number; at: number } | null = null;
  async function vmidRange(signal: AbortSignal): Promise<{ lower: number; upper: number }> {
    if (range !== null && Date.now() - range.at < 60_000) return range;
    const dc = await readDatacenterOptions(api, signal).catch((err) => {
      if (signal.aborted) throw err;
      log.warn("could not read the next-id range ({error}); using the default for a minute", {
        error: (err as Error).message,
      });
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
        // 400: that VMID is taken; try the next one.
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

  /**
   * The places a clone of `tmpl` takes while its task runs: one per storage
   * its disks are allocated on, where vdisk_alloc's lock lives (the node's
   * for local storage, the cluster's for shared storage).
   */
  async function storageKeys(tmpl: TemplateRef): Promise<string[]> {
    const ids = new Set(copiedVolumes(tmpl.config).map((v) => v.storage ?? ""));
    if (ids.size === 0) return [`${tmpl.node} *`];
    const read = () => ({
      at: Date.now(),
      // Shared by every Create, so not cut short by one of them. Storages the
      // token cannot see count as local: the stricter of the two bounds (all
      // of them while storage.cfg cannot be read).
      map: readStorages(api, AbortSignal.timeout(timing.requestTimeoutMs)).catch((err) => {
        log.debug("could not read storage.cfg ({error}); every storage counts as local", {
          error: (err as Error).message,
        });
        return new Map<string, StorageInfo>();
      }),
    });
    storages ??= read();
    let map = await storages.map;
    if ([...ids].some((id) => !map.has(id)) && Date.now() - storages.at > 60_000) {
      storages = read();
      map = await storages.map;
    }
    const keys = [...ids].map((id) => map.get(id)?.shared ? `cluster ${id}` : `${tmpl.node} ${id}`);
    return keys.sort();
  }

  /** Run `fn` holding a place for every key (taken in order, so no two clones deadlock). */
  function inCloneSlots<T>(keys: string[], fn: () => Promise<T>, signal: AbortSignal): Promise<T> {
    const run = keys.reduceRight<() => Promise<T>>(
      (inner, key) => () => cloneSlots.run(key, inner, signal),
      fn,
    );
    return run();
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
    /** VMIDs this Create reserved; released when it ends. */
    const held = new Set<number>();
    const drop = (vmid: number) => {
      held.delete(vmid);
      reserved.delete(vmid);
      memory.cloneEnded(vmid);
    };
    /** A VMID whose clone POST got no answer: its clone may still appear, so it is kept. */
    let pinned: number | null = null;
    let attempt = 1;
    let lockRetries = 0;
    try {
      for (;;) {
        const tmpl = await unlockedTemplate(slot, type, signal);
        const srcNode = tmpl.node;
        const what = `clone of template ${tmpl.vmid}`;
        const keys = await storageKeys(tmpl);
        const outcome = await inCloneSlots(keys, async () => {
          // Reserved under the mutex, so no two clones of this process pick one VMID.
          const vmid = pinned ?? await cloneMutex.run(async () => {
            const id = await allocateVmid(signal);
            reserved.add(id);
            return id;
          });
          held.add(vmid);
          reserved.add(vmid);
          memory.cloneStarted(vmid, slot.machineId);
          const started = await api.post(
            `${vmPath(tmpl)}/clone`,
            // No target on the template's own node: only shared storage allows one.
            { ...body, newid: vmid, target: slot.zone !== srcNode ? slot.zone : undefined },
            signal,
          ).then(
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
              await waitTask(api, upid, `${what} into VM ${vmid}`, timing.task, signal);
            } finally {
              memory.cloneTaskEnded(upid);
            }
            const config = await readConfig({ api, node: slot.zone, vmid }, signal);
            if (config === null) {
              throw new BackendError(
                `VM ${vmid} not found on ${slot.zone} after its clone finished`,
              );
            }
            return { vmid, loc: { node: slot.zone, vmid, config }, refused: false, err: null };
          } catch (err) {
            if (signal.aborted) throw err;
            return { vmid, loc: null, refused: started.error !== null, err: err as unknown };
          }
        }, signal);
        if (outcome.loc !== null) return outcome.loc;
        const { vmid, refused, err } = outcome;
        const text = serverTextOf(err);
        // Nothing was cloned when the POST or its task met a lock on the source
        // (a backup starting between our look and the clone, the template's
        // config flock held by a `qm set`): wait again, no attempt used.
        const nothingMade = refused || err instanceof TaskFailedError;
        const failure = nothingMade ? cloneFailure(text, tmpl.vmid) : null;
        if (
          nothingMade &&
          (failure === "template-lock" || await sourceLocked(ctx, err, tmpl, signal))
        ) {
          log.info("template {vmid} was locked when cloned; waiting", {
            vmid: tmpl.vmid,
            error: text,
          });
          if (pinned !== vmid) drop(vmid);
          await sleep(timing.settleMs, signal);
          continue;
        }
        if (failure === "storage-lock" && lockRetries < timing.raceAttempts) {
          // The worker freed what it made; a leftover of ours (a cleanup cut short) goes too.
          lockRetries++;
          log.warn("clone into VM {vmid} timed out on a storage lock; nothing was made, retrying", {
            vmid,
            error: text,
          });
          if (pinned === vmid) {
            // An earlier unanswered POST into this VMID may be cloning it right now.
            const found = await settleAmbiguousClone(ctx, slot, { node: srcNode, vmid }, signal);
            if (found !== null) return found;
          } else if (
            !(await clearHalfMade(ctx, { node: srcNode, vmid }, slot.machineId, text, signal))
          ) {
            lostRace.set(vmid, Date.now() + LOST_RACE_MS);
          }
          if (pinned !== vmid) drop(vmid);
          await sleep(timing.settleMs * lockRetries, signal);
          continue;
        }
        attempt++;
        const raced = failure === "race" ||
          (refused && await legacyRaceLost(ctx, err, { node: srcNode, vmid }, signal));
        if (raced && attempt <= timing.raceAttempts) {
          if (pinned === vmid) {
            // The clash may be our own unanswered POST, run late: if so, it is ours.
            const found = await settleAmbiguousClone(ctx, slot, { node: srcNode, vmid }, signal);
            if (found !== null) return found;
          }
          log.warn("lost a VMID race for {vmid}; retrying with a new id", { vmid, error: text });
          lostRace.set(vmid, Date.now() + LOST_RACE_MS);
          pinned = null;
          drop(vmid);
          continue;
        }
        if (refused && isTransient(err) && attempt <= timing.raceAttempts) {
          // The clone may have started behind the proxy error: look for it before cloning again.
          log.warn("clone POST for VM {vmid} failed ambiguously; looking for it", {
            vmid,
            error: (err as Error).message,
          });
          const found = await settleAmbiguousClone(ctx, slot, { node: srcNode, vmid }, signal);
          if (found !== null) return found;
          // Not there (yet): clone into the same VMID, so the two cannot both succeed.
          pinned = vmid;
          continue;
        }
        throw err;
      }
    } finally {
      for (const vmid of held) drop(vmid);
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
 * with the others on that node (docs/proxmox-notes.md). When none is found
 * while a clone task of our token runs that this process does not follow,
 * it is waited for and the search made once more over every VM listed: the
 * listing's `name` is pvestatd's, up to a cycle old, so a clone just made in
 * a reused VMID shows the name of the VM that had it before.
 */
async function findExisting(
  ctx: ProxmoxContext,
  machineId: string,
  signal: AbortSignal,
  afterLostClones = false,
): Promise<Located | null> {
  const { api, nodes, memory, outages } = ctx;
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
    (afterLostClones || parseTags(e.tags).includes(tag) || e.lock === "clone" || e.name === name ||
      e.name === undefined || memory.cloningFor(e.vmid) === machineId)
  );
  for (const vmid of memory.clonesOf(machineId)) {
    if (!entries.some((e) => e.vmid === vmid)) entries.push({ node: nodes[0], vmid });
  }
  /** node → why it cannot be read now. */
  const down = new Map<string, string>([...offline].map((n) => [n, "offline in the cluster"]));
  entries = entries.filter((e) => !down.has(e.node));
  const found = (await mapLimit(
    entries,
    8,
    (e) => {
      if (down.has(e.node)) return Promise.resolve(null);
      return resolveCandidate(ctx, e, machineId, signal).catch((err) => {
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
  if (found.length === 0 && !afterLostClones) {
    const online = nodes.filter((n) => !down.has(n));
    if (await waitedForLostClones(ctx, online, machineId, signal)) {
      return await findExisting(ctx, machineId, signal, true);
    }
  }
  return found.sort((a, b) => a.vmid - b.vmid)[0] ?? null;
}

/** How often resolveCandidate may miss a VM where it looked (it moved) before giving up on it. */
const MAX_MISSES = 4;

/**
 * Follow one candidate VM until it is decidable: ours (marker matches, no
 * lock left), or not. An in-flight clone shows only its temporary config
 * until its first disk is copied, so it is waited on rather than judged
 * (unless this process knows it is another machine's clone). Once it shows
 * its full config without our marker, it is someone else's clone: ours
 * always carry the marker from the first full config on, and a stranger's
 * full clone may take many minutes more.
 */
async function resolveCandidate(
  ctx: ProxmoxContext,
  at: VmAt,
  machineId: string,
  signal: AbortSignal,
): Promise<Located | null> {
  const { api, timing, memory } = ctx;
  const { vmid } = at;
  let { node } = at;
  let misses = 0;
  return await pollUntil<Located | null>(signal, timing.settleMs, async (call) => {
    let config = await readConfig({ api, node, vmid }, signal);
    while (config === null) {
      // A finished clone moves to its target node.
      if (++misses >= MAX_MISSES) return null;
      const n = await relocate(ctx, vmid, node, signal);
      if (n === null || n === node) return null;
      node = n;
      config = await readConfig({ api, node, vmid }, signal);
    }
    const owner = parseMarker(config.description)?.machineId;
    if (owner !== undefined && owner !== machineId) return null;
    if (owner === undefined) {
      if (config.lock !== "clone" || !isTemporaryConfig(config)) return null;
      const inflight = memory.cloningFor(vmid);
      if (inflight !== undefined && inflight !== machineId) return null;
      // Not one this process follows: ours only if a clone task of ours runs that we lost track of.
      if (inflight === undefined && !(await lostCloneRunning(ctx, node, signal))) return null;
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

/**
 * Whether a clone task started by our token runs on `node` that this process
 * does not follow (its POST went unanswered, its Create was aborted, or a
 * provider before a restart started it): only such a task can be writing a
 * temporary config of ours. The node's task list is answered by pveproxy,
 * without a pvedaemon worker. When it cannot be read, assume one runs
 * (`unreadable`).
 */
async function lostCloneRunning(
  ctx: ProxmoxContext,
  node: string,
  signal: AbortSignal,
  unreadable = true,
): Promise<boolean> {
  let list: unknown;
  try {
    list = await ctx.api.get(
      `/nodes/${node}/tasks`,
      { source: "active", typefilter: "qmclone", limit: 1000 },
      signal,
    );
  } catch (err) {
    if (signal.aborted) throw err;
    return unreadable;
  }
  return (Array.isArray(list) ? list : []).some((e) => {
    const t = e as Record<string, unknown>;
    // PVE shows a token's task as run by the full token id (`USER@REALM!TOKENID`); the
    // user alone still matches a task started before a rotation, under the old token.
    const user = String(t.user ?? "").split("!")[0];
    return t.status === "RUNNING" && !ctx.memory.followsTask(String(t.upid)) &&
      (ctx.taskUser === "" || user === ctx.taskUser);
  });
}

/**
 * Whether clone tasks of our token that this process does not follow ran on
 * `nodes`; if so, waited until none does. When Create finds no VM of the
 * machine, such a clone may still be its own, out of sight: a token whose
 * rights come through the pool cannot read a clone until clone_vm adds it to
 * the pool, at its very end (docs/proxmox-notes.md "What a clone inherits").
 */
async function waitedForLostClones(
  ctx: ProxmoxContext,
  nodes: readonly string[],
  machineId: string,
  signal: AbortSignal,
): Promise<boolean> {
  const running = async () => {
    for (const node of nodes) if (await lostCloneRunning(ctx, node, signal, false)) return true;
    return false;
  };
  if (!(await running())) return false;
  log.info(
    "a clone task of this token that this process does not follow is running; waiting for " +
      "it to end before cloning for machine {machineId} (it may be that machine's)",
    { machineId },
  );
  await pollUntil(signal, ctx.timing.settleMs, async () => (await running()) ? undefined : true);
  return true;
}

/** The template volumes a full clone allocates anew: disks and the cloud-init drive, not ISOs. */
function copiedVolumes(config: VmConfig | null) {
  if (config === null) return [];
  return templateVolumes(config).filter((v) =>
    !/(?:^|,)media=cdrom(?:,|$)/.test(String(config[v.key])) || /cloudinit/.test(v.volid)
  );
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
  if (done.upid !== null) await freeLeftovers(ctx, vm, done.upid, signal);
  return true;
}

/** Whether a refused clone POST met a lock on its source (legacy servers: by its config). */
function sourceLocked(
  ctx: ProxmoxContext,
  err: unknown,
  tmpl: TemplateRef,
  signal: AbortSignal,
): Promise<boolean> {
  return refusedWith(err, SOURCE_LOCKED_RE, async () => {
    const lock = (await readConfig(vmOf(ctx, tmpl), signal))?.lock;
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
  at: VmAt,
  signal: AbortSignal,
): Promise<boolean> {
  if (!(err instanceof ProxmoxApiError) || err.status !== 500 || err.serverText !== "") {
    return false;
  }
  try {
    return (await readConfig(vmOf(ctx, at), signal)) !== null;
  } catch {
    // No evidence of a race: the caller handles the refusal as the error it is.
    return false;
  }
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
    for (const node of new Set([srcNode, slot.zone])) {
      let exists = false;
      try {
        exists = (await readConfig({ api, node, vmid }, signal)) !== null;
      } catch (err) {
        if (signal.aborted) throw err;
        // Unreadable now counts as not there yet: asked again until cloneSettleMs.
        log.debug("could not look for VM {vmid} on {node}: {error}", {
          vmid,
          node,
          error: (err as Error).message,
        });
      }
      if (exists) return await resolveCandidate(ctx, { node, vmid }, slot.machineId, signal);
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
  const vm = vmOf(ctx, loc);
  const sizing = {
    cores: type.vcpu,
    sockets: 1,
    memory: type.memoryMib,
    protection: 0,
    description: buildDescription(slot.machineId, slot.operationId),
  };
  const read = async () => {
    const view = await readPending(vm, signal);
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
  await stopVm(vm, timing, signal);
}

/** The keys whose pending value means the VM does not run with its size yet. */
const SIZING_KEYS = ["cores", "sockets", "vcpus", "memory"];
