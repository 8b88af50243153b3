// Nodes that leave and rejoin the cluster, as a real 3-node PVE 8.4 cluster
// (corosync/knet, pmxcfs) showed them (docs/proxmox-notes.md "A node that is
// down"):
// - pveproxy forwards every /nodes/<node>/… call; to a node whose link is
//   cut the first call fails after its 30 s timeout, `595 Connection timed
//   out`, later ones quickly with `595 No route to host` (the neighbour entry
//   has failed by then); to a node whose PVE services are stopped, `595
//   Connection refused` at once; always with an empty body;
// - the others keep quorum while at least half the nodes are up (a real
//   cluster of an even size needs a QDevice for the half case; the simulator
//   grants it); without quorum pmxcfs is read-only and writes die `cluster
//   not ready - no quorum?`;
// - /cluster/resources keeps a cut node's last status (its guests `running`
//   with a frozen uptime, templates, storages `available`) until pmxcfs drops
//   status older than 300 s; then its guests are bare entries (status
//   `unknown`, no name, no template flag; tags, lock and pool come from the
//   config files and stay);
// - a node that rejoins reads `unknown` until its pvestatd reports again.
// `faults.offlineNodes` is the membership's view; a node put there directly
// (not through cutNode) is one gone for longer than the stale window, and its
// calls get `faults.offlineReply`.

import { fail } from "./errors.ts";
import type { SimCore } from "./router.ts";
import { type StatusView, usageStats, type VmRecord } from "./state.ts";
import { vmFigures } from "./capacity.ts";
import type { CutMode } from "./types_cluster.ts";
import { statusExtras } from "./versions.ts";

interface Cut {
  mode: CutMode;
  at: number;
  /** A link cut: until when the first call's connect attempt runs (then: no route). */
  probeUntil?: number;
  /** The guests' resource fields as the cluster last had them from the node. */
  frozen: Map<number, Record<string, unknown>>;
}

interface Links {
  cuts: Map<string, Cut>;
  /** When each node last rejoined. */
  rejoined: Map<string, number>;
}

const LINKS = new WeakMap<SimCore, Links>();

function links(core: SimCore): Links {
  let l = LINKS.get(core);
  if (!l) {
    l = { cuts: new Map(), rejoined: new Map() };
    LINKS.set(core, l);
  }
  return l;
}

function offline(core: SimCore, node: string): boolean {
  return core.faults.offlineNodes.includes(node);
}

/** The cut a node is under, if it is offline because of one. */
function cutOf(core: SimCore, node: string): Cut | undefined {
  return offline(core, node) ? links(core).cuts.get(node) : undefined;
}

/**
 * The RRD-derived fields pvestatd's last report gives a guest in
 * /cluster/resources, as of `view` (statuscache.ts); undefined before its
 * first report.
 */
function liveFields(
  core: SimCore,
  vm: VmRecord,
  view: StatusView,
): Record<string, unknown> | undefined {
  const rrd = core.state.rrdView(vm, view);
  if (!rrd) return undefined;
  // maxcpu is capped at the node's CPUs and maxdisk is the boot disk's size (capacity.ts).
  const { cpus, maxdisk } = vmFigures(core, vm);
  return statusExtras(core, {
    status: rrd.status,
    name: rrd.name,
    template: rrd.template,
    ...usageStats(vm, rrd.status === "running"),
    maxcpu: cpus,
    maxdisk,
  });
}

/** Cut `node` off the cluster (Simulator.cutNode). */
export function cutNode(core: SimCore, node: string, mode: CutMode): void {
  const { state } = core;
  if (!state.isNode(node)) throw new Error(`pvesim: no node ${node}`);
  if (node === state.nodes[0]) throw new Error(`pvesim: ${node} serves the API; it cannot be cut`);
  if (cutOf(core, node)) throw new Error(`pvesim: ${node} is cut already`);
  const frozen = new Map<number, Record<string, unknown>>();
  // Only what the cluster still has from the node is kept.
  if (!offline(core, node) && !nodeSilent(core, node)) {
    for (const vm of state.vms.values()) {
      if (vm.node !== node) continue;
      const fields = liveFields(core, vm, core.state.statusNow());
      if (fields) frozen.set(vm.vmid, fields);
    }
  }
  links(core).cuts.set(node, { mode, at: Date.now(), frozen });
  links(core).rejoined.delete(node);
  if (!offline(core, node)) core.faults.offlineNodes.push(node);
}

/** `node` is back (Simulator.rejoinNode). */
export function rejoinNode(core: SimCore, node: string): void {
  if (!core.state.isNode(node)) throw new Error(`pvesim: no node ${node}`);
  links(core).cuts.delete(node);
  core.faults.offlineNodes = core.faults.offlineNodes.filter((n) => n !== node);
  links(core).rejoined.set(node, Date.now());
}

/** What pveproxy answers for a call it forwards to offline `node` (an empty body). */
export async function offlineAnswer(
  core: SimCore,
  node: string,
): Promise<{ status: number; reason: string }> {
  const { timers, state } = core;
  const cut = cutOf(core, node);
  if (!cut) {
    const { status, reason, delayMs } = core.faults.offlineReply;
    if (delayMs > 0) await timers.sleep(delayMs);
    return { status, reason };
  }
  if (cut.mode === "daemons") return { status: 595, reason: "Connection refused" };
  const now = Date.now();
  cut.probeUntil ??= now + state.timing.proxyTimeoutMs;
  if (now < cut.probeUntil) {
    await timers.sleep(cut.probeUntil - now);
    return { status: 595, reason: "Connection timed out" };
  }
  await timers.sleep(state.timing.noRouteMs);
  return { status: 595, reason: "No route to host" };
}

/** Whether the node the API is served from has quorum: at least half the nodes are members. */
export function quorate(core: SimCore): boolean {
  const { nodes } = core.state;
  const down = nodes.filter((n) => offline(core, n)).length;
  return down * 2 <= nodes.length;
}

/**
 * Without quorum pmxcfs is read-only: a call that writes a guest's config or
 * user.cfg (every POST, PUT and DELETE but the guest agent's) dies
 * check_cfs_quorum's way. Reads and agent calls still work.
 */
export function checkQuorum(core: SimCore, method: string, path: string): void {
  if (method === "GET" || quorate(core) || path.includes("/agent/")) return;
  throw fail("cluster not ready - no quorum?");
}

/** Whether the cluster has no status from `n` now: its pvestatd silent, or just rejoined. */
export function nodeSilent(core: SimCore, n: string): boolean {
  if (core.faults.unreportedNodes.includes(n)) return true;
  const at = links(core).rejoined.get(n);
  return at !== undefined && Date.now() - at < core.state.timing.rejoinUnknownMs;
}

/** Whether `n` is offline but the cluster still holds its last status (the stale window). */
export function statusHeld(core: SimCore, n: string): boolean {
  const cut = cutOf(core, n);
  return cut !== undefined && Date.now() - cut.at < core.state.timing.statusStaleMs;
}

/**
 * A guest's status fields in /cluster/resources as of `at`: live from
 * pvestatd; frozen while its offline node's status is still held; none (a
 * bare entry) when the cluster has no status from its node.
 */
export function guestFields(
  core: SimCore,
  vm: VmRecord,
  view: StatusView,
): Record<string, unknown> | undefined {
  if (offline(core, vm.node)) {
    return statusHeld(core, vm.node) ? cutOf(core, vm.node)?.frozen.get(vm.vmid) : undefined;
  }
  if (nodeSilent(core, vm.node)) return undefined;
  return liveFields(core, vm, view);
}
