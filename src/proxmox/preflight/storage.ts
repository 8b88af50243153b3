// The storage check of preflight: each storage the clones land on (the
// template's, or the type's `storage`) is active and has room for every
// slot's disks (grown to the type's `disk_gib`).

import type { StorageInfo } from "../cluster/templates.ts";
import { cloneDisks } from "../cluster/clone_target.ts";
import { isCdrom } from "../vm/drives.ts";
import { isPermissionError } from "../vm/vm.ts";
import { type CheckResult, errText, failed, gib, pass, plural, warn } from "./result.ts";
import { guard, type PreflightRun } from "./run.ts";
import type { Found } from "./templates.ts";

/** The disks the offerings' clones need on one storage (of one node, for a local storage). */
export interface Demand {
  storage: string;
  /** Where the clones land (the node asked for the storage's status). */
  node: string;
  shared: boolean;
  bytes: number;
  /** instance type/zone → clones. */
  clones: Map<string, number>;
}

/** Disk bytes the offerings' clones need, per storage (per node for a local one). */
export async function storageDemand(
  run: PreflightRun,
  found: readonly Found[],
): Promise<Map<string, Demand>> {
  const out = new Map<string, Demand>();
  if (!found.some((f) => f.clonable)) return out;
  // Unreadable, every storage counts as local (the stricter bound); the template check that
  // reads it too reports the error.
  const storages = await run.storages().catch(() => new Map<string, StorageInfo>());
  for (const f of found.filter((x) => x.clonable)) {
    const config = f.tmpl.config;
    for (const v of cloneDisks(f.type, f.zone, config)) {
      // A CD-ROM (an ISO, the cloud-init drive) is referenced or regenerated, not copied.
      if (v.storage === null || isCdrom(config[v.key])) continue;
      const shared = storages.get(v.storage)?.shared ?? false;
      const key = shared ? v.storage : `${v.storage}\u0000${f.zone}`;
      const d = out.get(key) ?? {
        storage: v.storage,
        node: f.zone,
        shared,
        bytes: 0,
        clones: new Map<string, number>(),
      };
      d.bytes += v.bytes * f.count;
      d.clones.set(`${f.type.name}/${f.zone}`, f.count);
      out.set(key, d);
    }
  }
  return out;
}

/** Each storage the clones land on has room for every slot's disks. */
export async function storageChecks(
  run: PreflightRun,
  demand: ReadonlyMap<string, Demand>,
): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const d of demand.values()) {
    const subject = d.shared ? d.storage : `${d.storage} on ${d.node}`;
    out.push(...await guard(run, "storage", subject, () => room(run, d, subject)));
  }
  return out;
}

async function room(run: PreflightRun, d: Demand, subject: string): Promise<CheckResult[]> {
  let st: Record<string, unknown>;
  try {
    st = await run.api.get(
      `/nodes/${d.node}/storage/${d.storage}/status`,
      undefined,
      run.signal,
    );
  } catch (err) {
    return [warn(
      "storage",
      subject,
      `cannot read its free space: ${errText(err)}`,
      isPermissionError(err)
        ? `grant the token Datastore.Audit on /storage/${d.storage} (setup-token.sh --storages ${d.storage})`
        : `check the storage with pvesm status on ${d.node}`,
    )];
  }
  const clones = [...d.clones.values()].reduce((a, b) => a + b, 0);
  const who = [...d.clones].map(([k, n]) => `${k}: ${n}`).join(", ");
  if (Number(st?.active ?? 1) === 0) {
    return [failed(
      "storage",
      subject,
      `not active on ${d.node}, where ${plural(clones, "clone")} would go (${who})`,
      `bring it online (pvesm status on ${d.node})`,
    )];
  }
  const avail = Number(st?.avail);
  if (!Number.isFinite(avail)) {
    return [
      warn("storage", subject, "its status shows no free space", "check it with pvesm status"),
    ];
  }
  const need = `${plural(clones, "clone")} (${who}) need ${gib(d.bytes)} of disks`;
  if (d.bytes > avail) {
    return [failed(
      "storage",
      subject,
      `too small: ${need}, only ${gib(avail)} free`,
      `free space on ${d.storage}, lower the offerings' counts there, or put the template's disks ` +
        `on a bigger storage (thin pools such as lvmthin, zfs or rbd hold more until the guests ` +
        `fill their disks)`,
    )];
  }
  return [pass("storage", subject, `${need}; ${gib(avail)} free`)];
}
