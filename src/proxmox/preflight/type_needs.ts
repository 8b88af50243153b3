// The privileges the instance types' own fields add (docs/credentials.md):
// `disk_gib` resizes (VM.Config.Disk), `network` sets net0
// (VM.Config.Network, and SDN.Use on the type's bridge or its VLAN). A
// type's `storage` adds Datastore rights on it, which the storage demand
// (storage.ts) already names. Each with the setup-token.sh option granting it.

import { nicValue } from "../create/network.ts";
import type { VmConfig } from "../vm/vm.ts";
import type { PathNeed } from "./needs.ts";
import type { PreflightRun } from "./run.ts";
import { pairs } from "./templates.ts";

/** What the types add on the pool (or /vms): privileges and the setup-token.sh options. */
export function poolExtra(run: PreflightRun): { privileges: string[]; options: string[] } {
  const types = pairs(run.cfg).map((p) => p.type);
  const privileges: string[] = [];
  const options: string[] = [];
  if (types.some((t) => t.diskGib !== undefined)) {
    privileges.push("VM.Config.Disk");
    options.push("--resize-disks");
  }
  if (types.some((t) => t.network !== undefined)) {
    privileges.push("VM.Config.Network");
    options.push("--set-network");
  }
  return { privileges, options };
}

/**
 * SDN.Use on each type's bridge (or `<bridge>/<tag>`), which setting net0
 * needs on PVE 8+; `sdnNeeds` finds the SDN zone of a NIC's bridge as for
 * the templates' NICs (privileges.ts).
 */
export async function typeSdnNeeds(
  run: PreflightRun,
  sdnNeeds: (configs: readonly VmConfig[]) => Promise<PathNeed[]>,
): Promise<PathNeed[]> {
  if (run.major < 8) return [];
  const out: PathNeed[] = [];
  const seen = new Set<string>();
  for (const { type } of pairs(run.cfg)) {
    const net = type.network;
    if (net === undefined || seen.has(type.name)) continue;
    seen.add(type.name);
    const vlan = net.tag !== undefined ? ` VLAN ${net.tag}` : "";
    for (const need of await sdnNeeds([{ net0: nicValue(undefined, net) }])) {
      out.push({
        ...need,
        purpose: `put the net0 of ${type.name}'s clones on bridge ${net.bridge}${vlan}`,
        setupOption: `--set-network --bridges ${net.bridge}` +
          (net.tag !== undefined ? ` (with ${net.tag} in --vlan-tags, if you give them)` : ""),
      });
    }
  }
  return out;
}
