// Adoption: the VM an earlier or concurrent attempt already made for a
// machine, found by its marker, its per-machine tag or its name, and waited
// for while it is still being cloned (its temporary config carries no marker
// yet). A clone of our token that this process does not follow (its POST
// went unanswered, its Create was aborted, a provider before a restart ran
// it) may be the machine's own: it is waited for before anything is cloned.

import { getLogger } from "@logtape/logtape";
import { mapLimit } from "../../async/limit.ts";
import { pollUntil } from "../../async/poll.ts";
import { isNodeUnreachable, nodeList, offlineOf } from "../cluster/nodes.ts";
import { listingOf } from "../cluster/room_read.ts";
import {
  blockingLock,
  isPermissionError,
  listResources,
  type Located,
  readConfig,
  type VmAt,
  type VmConfig,
} from "../vm/vm.ts";
import type { ProxmoxContext } from "../context.ts";
import { machineTag, parseMarker, parseTags, vmName } from "../naming.ts";
import { relocate } from "../vm/ownership.ts";

const log = getLogger(["bigfleet", "proxmox"]);

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
export async function findExisting(
  ctx: ProxmoxContext,
  machineId: string,
  signal: AbortSignal,
  afterLostClones = false,
): Promise<Located | null> {
  const { api, nodes, memory, outages } = ctx;
  const tag = machineTag(machineId);
  const name = vmName(machineId);
  const requestedAt = Date.now();
  const [listing, nodeStates] = await Promise.all([
    listResources(api, signal).catch((err) => {
      if (!isPermissionError(err)) throw err;
      return null;
    }),
    nodeList(api, signal),
  ]);
  const listed = listing ?? [];
  const offline = offlineOf(nodeStates);
  // The listing tells each node's room too: Create checks it before it clones.
  if (listing !== null) ctx.room.observe(listingOf(requestedAt, listing, nodeStates));
  // The listing's `template` flag is no guide: a fresh VM can show it for a moment
  // (docs/proxmox-notes.md "A node that is down"); each candidate's own config decides.
  let entries: { node: string; vmid: number }[] = listed.filter((e) =>
    afterLostClones || parseTags(e.tags).includes(tag) || e.lock === "clone" || e.name === name ||
    e.name === undefined || memory.cloningFor(e.vmid) === machineId
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
    // Clone tasks run on the template's node, which may be outside --nodes.
    const online = [...new Set([...nodes, ...memory.templateNodes()])].filter((n) => !down.has(n));
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
export async function resolveCandidate(
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
    // A template is never a machine's VM, whatever it carries.
    if (Number(config.template ?? 0) === 1) return null;
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
 * Whether a clone task started by one of our tokens runs on `node` that this
 * process does not follow (its POST went unanswered, its Create was aborted,
 * or a provider before a restart started it): only such a task can be
 * writing a temporary config of ours. A token sees only its own tasks, so
 * the node's task list is asked with every token this process knows (the
 * one in use and those a rotation retires: docs/credentials.md#rotating-the-token);
 * pveproxy answers it without a pvedaemon worker. When one cannot be read
 * (a token refused: removed), assume such a clone runs (`unreadable`).
 */
async function lostCloneRunning(
  ctx: ProxmoxContext,
  node: string,
  signal: AbortSignal,
  unreadable = true,
): Promise<boolean> {
  for (const token of ctx.api.tokens.ids()) {
    let list: unknown;
    try {
      list = await ctx.api.get(
        `/nodes/${node}/tasks`,
        { source: "active", typefilter: "qmclone", limit: 1000 },
        signal,
        { as: token, only: true },
      );
    } catch (err) {
      if (signal.aborted) throw err;
      if (unreadable) return true;
      continue;
    }
    const lost = (Array.isArray(list) ? list : []).some((e) => {
      const t = e as Record<string, unknown>;
      // PVE shows a token's task as run by the full token id (`USER@REALM!TOKENID`); the
      // user alone still matches a task started under a token this process does not know.
      const user = String(t.user ?? "").split("!")[0];
      return t.status === "RUNNING" && !ctx.memory.followsTask(String(t.upid)) &&
        (ctx.taskUser === "" || user === ctx.taskUser);
    });
    if (lost) return true;
  }
  return false;
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
