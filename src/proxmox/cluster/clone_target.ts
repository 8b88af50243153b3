// What an instance type asks of its template beyond a plain full clone
// (docs/configuration.md#instance-type-catalog): a target `storage` for the
// clone's disks, a `linked` clone, a `disk_gib` the boot disk is grown to.
// What storage.cfg and the template's config can tell is refused before any
// Create (the startup check and preflight); what only a clone can tell is
// worded here from Proxmox's own refusal (docs/proxmox-notes.md "Disks and
// clone targets").

import type { InstanceType } from "../../config/types.ts";
import { storageFor } from "../../config/instance_options.ts";
import { BackendError } from "../../kit/backend.ts";
import { serverTextOf } from "../api/errors.ts";
import { bootDisk, driveBytes, isCdrom } from "../vm/drives.ts";
import type { VmConfig } from "../vm/vm.ts";
import {
  type StorageInfo,
  type TemplateRef,
  templateVolumes,
  type TypeProblem,
} from "./templates.ts";

const GIB = 1024 ** 3;

/** Storage types whose volumes cannot be cloned as linked clones (pve-storage volume_has_feature). */
const NO_LINKED = new Set(["lvm", "iscsi", "iscsidirect", "drbd"]);

/** One disk a clone makes: the template drive it comes from, its storage and its size. */
export interface CloneDisk {
  key: string;
  /** The storage its volume lands on; null when the template's is not a storage volume. */
  storage: string | null;
  /** Its size once made and grown (disk_gib for the boot disk, never less than the template's). */
  bytes: number;
}

/** The disks a clone of `type` into `zone` makes from a template with `config` (not its CD-ROMs). */
export function cloneDisks(type: InstanceType, zone: string, config: VmConfig): CloneDisk[] {
  const target = type.clone === "linked" ? null : storageFor(type, zone);
  const boot = bootDisk(config)?.key;
  return templateVolumes(config)
    .filter((v) => !isCdrom(config[v.key]) || /cloudinit/.test(v.volid))
    .map((v) => {
      const bytes = driveBytes(config[v.key]);
      const grown = v.key === boot && type.diskGib !== undefined
        ? Math.max(bytes, type.diskGib * GIB)
        : bytes;
      return { key: v.key, storage: target ?? v.storage, bytes: grown };
    });
}

/** What stands in the way of a clone the type asks for, and what to do about it. */
export interface TargetFinding {
  problem: string;
  fix: string;
}

/**
 * Why a clone of `type` from `tmpl` into `zone` cannot be what the type
 * asks, with the fix; null when it can, or when it cannot be told (the
 * template's config or a storage the token cannot see).
 */
export async function cloneTargetFinding(
  type: InstanceType,
  tmpl: TemplateRef,
  zone: string,
  storages: () => Promise<ReadonlyMap<string, StorageInfo>>,
): Promise<TargetFinding | null> {
  const config = tmpl.config;
  if (config === null) return null;
  const disk = diskFinding(type, tmpl, config);
  if (disk !== null) return disk;
  if (type.clone === "linked") return linkedFinding(tmpl, config, await storages());
  const target = storageFor(type, zone);
  if (target === null) return null;
  return storageFinding(target, tmpl, zone, await storages());
}

/** The startup check's form: the finding as one line. */
export const cloneTargetProblem: TypeProblem = async (type, tmpl, zone, storages) => {
  const f = await cloneTargetFinding(type, tmpl, zone, storages);
  return f === null ? null : `${f.problem}; ${f.fix}`;
};

/** A template boot disk larger than disk_gib (never shrunk), or no disk to grow. */
function diskFinding(
  type: InstanceType,
  tmpl: TemplateRef,
  config: VmConfig,
): TargetFinding | null {
  if (type.diskGib === undefined) return null;
  const boot = bootDisk(config);
  if (boot === null) {
    return {
      problem:
        `template ${tmpl.vmid} has no disk to grow to disk_gib ${type.diskGib} of ${type.name}`,
      fix: "give the template a boot disk, or drop disk_gib",
    };
  }
  const bytes = driveBytes(boot.value);
  if (bytes <= type.diskGib * GIB) return null;
  const have = Math.ceil(bytes / GIB);
  return {
    problem: `template ${tmpl.vmid}'s boot disk ${boot.key} is ${have} GiB, larger than ` +
      `disk_gib ${type.diskGib} of ${type.name}, and Proxmox never shrinks a disk`,
    fix: `raise disk_gib to at least ${have}, or give the type a template with a smaller disk`,
  };
}

/** A target storage that does not exist for the token, holds no VM disks, or is not on the nodes. */
function storageFinding(
  id: string,
  tmpl: TemplateRef,
  zone: string,
  storages: ReadonlyMap<string, StorageInfo>,
): TargetFinding | null {
  const s = storages.get(id);
  if (s === undefined) {
    return {
      problem: `storage '${id}' is not in storage.cfg, or the token holds neither ` +
        "Datastore.Audit nor Datastore.AllocateSpace on it",
      fix: `create it, or grant them (setup-token.sh --storages ${id})`,
    };
  }
  if (s.content !== undefined && !s.content.includes("images")) {
    return {
      problem: `storage '${id}' does not hold VM disks (its content is ${s.content.join(",")})`,
      fix: `add images to it (pvesm set ${id} --content images,…) or name another storage`,
    };
  }
  for (const node of new Set([tmpl.node, zone])) {
    if (s.nodes !== undefined && !s.nodes.includes(node)) {
      const there = node === tmpl.node ? `template ${tmpl.vmid} is cloned` : "the clone lives";
      return {
        problem: `storage '${id}' is not available on ${node} (its nodes: ${s.nodes.join(",")}), ` +
          `where ${there}`,
        fix: `enable it on ${node} (Datacenter > Storage > ${id} > Nodes) or name another storage`,
      };
    }
  }
  if (zone !== tmpl.node && !s.shared) {
    return {
      problem: `storage '${id}' is not shared, and template ${tmpl.vmid} on ${tmpl.node} is ` +
        `cloned to ${zone} (a clone to another node goes to shared storage only)`,
      fix: `name a shared storage for ${zone}, or give ${zone} a template of its own`,
    };
  }
  return null;
}

/** A linked clone needs a template whose disks are on storage that clones volumes. */
function linkedFinding(
  tmpl: TemplateRef,
  config: VmConfig,
  storages: ReadonlyMap<string, StorageInfo>,
): TargetFinding | null {
  if (Number(config.template ?? 0) !== 1) {
    return {
      problem: `clone "linked" needs a template, and VM ${tmpl.vmid} is not one`,
      fix: `convert it (qm template ${tmpl.vmid}), or use clone "full"`,
    };
  }
  for (const v of templateVolumes(config)) {
    if (isCdrom(config[v.key]) || v.storage === null) continue;
    const type = storages.get(v.storage)?.type;
    if (type !== undefined && NO_LINKED.has(type)) {
      return {
        problem: `clone "linked" needs storage that can clone volumes: template ${tmpl.vmid}'s ` +
          `${v.key} is on '${v.storage}' (${type}), which cannot`,
        fix: 'use clone "full", or keep the template on LVM-thin, ZFS, Ceph RBD or a directory ' +
          "storage",
      };
    }
  }
  return null;
}

/** Proxmox's refusals of a clone's storage or linked mode, and what to do about each. */
const REFUSALS: [RegExp, string][] = [
  [
    /storage '([^']+)' is not available on node '([^']+)'/,
    "enable the storage on that node (Datacenter > Storage > Nodes) or name another storage",
  ],
  [
    /storage '([^']+)' does not support vm images/,
    "add images to its content (pvesm set <storage> --content images,…) or name another storage",
  ],
  [
    /can't clone to non-shared storage '([^']+)'/,
    "a clone to another node than its template's goes to shared storage only: name a shared " +
    "storage, or give the zone a template of its own",
  ],
  [
    /Linked clone feature is not supported/,
    'use clone "full", or keep the template on storage that clones volumes (LVM-thin, ZFS, ' +
    "Ceph RBD, a directory)",
  ],
  [
    /Permission check failed \(\/storage\/([^,]+), Datastore\.AllocateSpace\)/,
    "grant the token Datastore.AllocateSpace on that storage (setup-token.sh --storages <storage>)",
  ],
];

/**
 * A clone refused for its target storage or linked mode, worded with the
 * type, the zone and the fix; any other error as it is.
 */
export function explainCloneRefusal(
  err: unknown,
  type: InstanceType,
  zone: string,
  tmpl: TemplateRef,
): unknown {
  const text = serverTextOf(err);
  const hit = REFUSALS.find(([re]) => re.test(text));
  if (hit === undefined) return err;
  const mode = type.clone === "linked" ? "linked clone" : "clone";
  const target = storageFor(type, zone);
  const onto = type.clone !== "linked" && target !== null ? ` onto storage '${target}'` : "";
  return new BackendError(
    `${mode} of template ${tmpl.vmid} on ${tmpl.node}${onto} for ${type.name} in zone ${zone} ` +
      `refused: ${text.trim()}; ${hit[1]}`,
  );
}
