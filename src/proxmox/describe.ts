// DescribeManaged: the VMs this provider manages, as the cluster listing and
// each VM's marker report them.

import type { ManagedVm } from "../kit/backend.ts";
import type { ProxmoxContext } from "./context.ts";
import { hostRefOf, MANAGED_TAG, parseMarker, parseTags } from "./naming.ts";
import { mapLimit } from "./util.ts";
import { isPermissionError, listResources, readConfig, type VmConfig } from "./vm.ts";

/** Every managed (marked, tagged or in-flight) VM, templates excluded. */
export async function describeManaged(
  ctx: ProxmoxContext,
  signal: AbortSignal,
): Promise<ManagedVm[]> {
  const { api, cloning } = ctx;
  const entries = (await listResources(api, signal)).filter((e) => {
    if (e.template === 1) return false;
    const tags = parseTags(e.tags);
    return tags.includes(MANAGED_TAG) || e.lock === "clone" || cloning.has(e.vmid) ||
      (e.name ?? "").startsWith("bigfleet-");
  });
  const vms = await mapLimit(entries, 8, async (e): Promise<ManagedVm | null> => {
    let config: VmConfig | null;
    try {
      config = await readConfig(api, e.node, e.vmid, signal);
    } catch (err) {
      if (signal.aborted || !isPermissionError(err)) throw err;
      config = {};
    }
    if (config === null || Number(config.template ?? 0) === 1) return null;
    const marker = parseMarker(config.description);
    const tagged = parseTags(config.tags ?? e.tags).includes(MANAGED_TAG);
    const inflight = cloning.get(e.vmid);
    // Unmarked, untagged VMs (a human's clone in flight) are not ours to report.
    if (marker === null && !tagged && inflight === undefined) return null;
    const status = e.status === "running" || e.status === "stopped" ? e.status : "unknown";
    return {
      machineId: marker?.machineId ?? inflight ?? "",
      hostRef: hostRefOf(e.node, e.vmid),
      node: e.node,
      vmid: e.vmid,
      status,
      cloning: config.lock === "clone" || e.lock === "clone",
    };
  });
  return vms.filter((v): v is ManagedVm => v !== null);
}
