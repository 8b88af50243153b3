// DescribeManaged: the VMs this provider manages, as the cluster listing and
// each VM's marker report them. A node that is down costs at most one failed
// read per pass: its VMs are reported from the listing (status `unknown`,
// the machine id last read from their marker), never a failed pass.

import type { ManagedVm } from "../kit/backend.ts";
import type { ProxmoxContext } from "./context.ts";
import {
  isPermissionError,
  listResources,
  readConfig,
  type ResourceEntry,
  type VmConfig,
  vmOf,
} from "./vm/vm.ts";
import { hostRefOf, MANAGED_TAG, ORPHAN_TYPE, parseMarker, parseTags } from "./naming.ts";
import { isNodeUnreachable, nodeList, offlineOf } from "./cluster/nodes.ts";
import { listingOf, readOnboot } from "./cluster/room_read.ts";
import { mapLimit } from "../async/limit.ts";

/** A managed VM as the kit sees it, plus where it is and whether it runs. */
export interface PveVm extends ManagedVm {
  node: string;
  vmid: number;
  /** `unknown` when its node is down and it is reported from the listing. */
  status: "running" | "stopped" | "unknown";
}

/** Every managed (marked, tagged or in-flight) VM, templates excluded. */
export async function describeManaged(
  ctx: ProxmoxContext,
  signal: AbortSignal,
): Promise<PveVm[]> {
  const { api, memory, outages } = ctx;
  const requestedAt = Date.now();
  const [listed, nodes] = await Promise.all([
    listResources(api, signal),
    nodeList(api, signal, 1),
  ]);
  const offline = offlineOf(nodes);
  // The same listing tells each node's room.
  ctx.room.observe(listingOf(requestedAt, listed, nodes));
  // Which VMs to read: the name every clone gets, a marker read before, the
  // `bigfleet` tag (earlier versions always set it; the tag policy may now
  // refuse it, so no tag is required), an in-flight clone.
  // The listing's `template` flag is no guide (a fresh VM can show it for a moment,
  // an offline node's entries lose it): each VM's own config decides.
  const entries = listed.filter((e) => {
    const tags = parseTags(e.tags);
    return tags.includes(MANAGED_TAG) || e.lock === "clone" ||
      memory.cloningFor(e.vmid) !== undefined ||
      memory.knownAs(e.vmid) !== undefined || (e.name ?? "").startsWith("bigfleet-");
  });
  /** node → why it cannot be read this pass. */
  const down = new Map<string, string>([...offline].map((n) => [n, "offline in the cluster"]));
  const vms = await mapLimit(entries, 8, async (e): Promise<PveVm | null> => {
    let config: VmConfig | null = null;
    if (!down.has(e.node)) {
      try {
        // One attempt: a node that does not answer is skipped now and asked next pass.
        config = await readConfig(vmOf(ctx, e), signal, { attempts: 1 });
      } catch (err) {
        if (signal.aborted) throw err;
        if (isNodeUnreachable(err)) down.set(e.node, (err as Error).message);
        else if (!isPermissionError(err)) throw err;
        // A 403 says nothing of the marker: a destroy under a pool-scoped
        // token drops the VMID's rights before its config goes, so a listing
        // read just before shows a VM we can no longer read.
        else if (memory.didDestroy(e.vmid)) return null;
        else if (memory.knownAs(e.vmid) !== undefined) return fromListing(ctx, e, listedStatus(e));
        else config = {};
      }
    }
    if (down.has(e.node)) return fromListing(ctx, e, "unknown");
    if (config === null || Number(config.template ?? 0) === 1) return null;
    const marker = parseMarker(config.description);
    memory.markerRead(e.vmid, marker?.machineId ?? null);
    const tagged = parseTags(config.tags ?? e.tags).includes(MANAGED_TAG);
    const inflight = memory.cloningFor(e.vmid);
    // Unmarked, untagged VMs (a human's clone in flight) are not ours to report.
    if (marker === null && !tagged && inflight === undefined) return null;
    return {
      ...located(e, marker?.machineId ?? inflight ?? ""),
      status: listedStatus(e),
      cloning: config.lock === "clone" || e.lock === "clone",
    };
  });
  // A VMID that left the listing may come back as someone else's VM.
  memory.forgetUnlisted(new Set(listed.map((e) => e.vmid)));
  const working = new Set(listed.map((e) => e.node).filter((n) => !down.has(n)));
  outages.observe(down, working, "describe");
  await readOnboot(ctx, signal);
  return vms.filter((v): v is PveVm => v !== null);
}

/**
 * A VM whose config cannot be read this pass (its node is down, or a 403), as
 * the listing shows it: only when its marker was read before (an unidentified
 * VM would become a spurious orphan).
 */
function fromListing(
  ctx: ProxmoxContext,
  e: ResourceEntry,
  status: PveVm["status"],
): PveVm | null {
  const machineId = ctx.memory.knownAs(e.vmid) ?? ctx.memory.cloningFor(e.vmid);
  if (machineId === undefined) return null;
  return { ...located(e, machineId), status, cloning: e.lock === "clone" };
}

function listedStatus(e: ResourceEntry): PveVm["status"] {
  return e.status === "running" || e.status === "stopped" ? e.status : "unknown";
}

/** Where a listed VM is, in the kit's terms (a zone is a node) and ours. */
function located(e: ResourceEntry, machineId: string) {
  return {
    machineId,
    hostRef: hostRefOf(e.node, e.vmid),
    zone: e.node,
    instanceType: ORPHAN_TYPE,
    node: e.node,
    vmid: e.vmid,
  };
}
