// The privileges the provider uses and the ACL paths it uses them on: the
// table of docs/credentials.md#privileges-and-why-each-is-needed, which
// deploy/host-setup/setup-token.sh grants. Kept as data so the preflight
// command can hold a token's effective permissions (GET /access/permissions)
// against exactly what the backend will call.

import type { VmConfig } from "../vm/vm.ts";

/** Privileges of which the token must hold at least one on a path (one agent command's). */
export interface AnyOf {
  privileges: readonly string[];
  /** The one to grant when none is held (what setup-token.sh grants). */
  grant: string;
  purpose: string;
}

/** What the provider needs on one ACL path. */
export interface PathNeed {
  path: string;
  privileges: readonly string[];
  /** Besides `privileges`: groups of which one privilege each must be held. */
  anyOf?: readonly AnyOf[];
  /** The grant must reach below the path (checked by its propagate flag). */
  propagated: boolean;
  /** Missing it degrades the provider instead of breaking it. */
  optional: boolean;
  /** What the privileges are used for, one short clause. */
  purpose: string;
  /** The setup-token.sh option that grants it; null when the script grants no such right. */
  setupOption: string | null;
}

/**
 * What the guest agent's commands need, per Proxmox VE major version
 * (docs/proxmox-notes.md "Proxmox VE 9"): PVE 8 checks VM.Monitor for every
 * command; PVE 9 one privilege per command, each also satisfied by
 * VM.GuestAgent.Unrestricted: VM.GuestAgent.Audit for ping, FileWrite for
 * file-write, Unrestricted itself for exec and exec-status.
 */
export function agentNeeds(pveMajor: number): { privileges: string[]; anyOf: AnyOf[] } {
  if (pveMajor < 9) return { privileges: ["VM.Monitor"], anyOf: [] };
  const all = "VM.GuestAgent.Unrestricted";
  return {
    privileges: [],
    anyOf: [
      {
        privileges: ["VM.GuestAgent.Audit", all],
        grant: "VM.GuestAgent.Audit",
        purpose: "ping the guest agent (agent ping)",
      },
      {
        privileges: ["VM.GuestAgent.FileWrite", all],
        grant: all,
        purpose: "write the bootstrap into the guest (agent file-write)",
      },
      {
        privileges: [all],
        grant: all,
        purpose: "run the bootstrap hook and kubectl drain in the guest (agent exec, exec-status)",
      },
    ],
  };
}

const NO_EXTRA = { privileges: [], options: [] };

/** Every privilege name an agent need of some version names (for the PVE 8 → 9 rename hint). */
export const AGENT_PRIVILEGES: ReadonlySet<string> = new Set([
  "VM.Monitor",
  ...agentNeeds(9).anyOf.flatMap((a) => a.privileges),
]);

const VM_PRIVS = [
  "VM.Allocate",
  "VM.Audit",
  "VM.Config.CPU",
  "VM.Config.Memory",
  "VM.Config.Options",
  "VM.PowerMgmt",
];

/**
 * Rights on the provider's own VMs: through the pool they are created in
 * (PVE applies a pool's grants to its members), or without a pool on /vms,
 * propagated to every new VMID. The guest agent's are those of each major
 * version the nodes run.
 */
export function poolNeed(
  pool: string,
  pveMajors: readonly number[],
  /** What the instance types add (disk_gib, network: type_needs.ts) and the options granting it. */
  extra: { privileges: readonly string[]; options: readonly string[] } = NO_EXTRA,
): PathNeed {
  const agent = [...new Set(pveMajors)].map(agentNeeds);
  const privileges = [...VM_PRIVS, ...agent.flatMap((a) => a.privileges), ...extra.privileges]
    .sort();
  const anyOf = agent.flatMap((a) => a.anyOf);
  const options = extra.options.map((o) => ` ${o}`).join("");
  if (pool === "") {
    return {
      path: "/vms",
      privileges,
      anyOf,
      propagated: true,
      optional: false,
      purpose: "clone into a new VMID, size, tag, start, stop, destroy and use the guest agent",
      setupOption: `--pool POOL${options} (then run with --proxmox-pool=POOL)`,
    };
  }
  return {
    path: `/pool/${pool}`,
    privileges: [...privileges, "Pool.Audit"].sort(),
    anyOf,
    propagated: false,
    optional: false,
    purpose: "clone into the pool, size, tag, start, stop, destroy and use the guest agent",
    setupOption: `--pool ${pool}${options}`,
  };
}

/** Cloning and reading a template, never changing it. */
export function templateNeed(vmid: number): PathNeed {
  return {
    path: `/vms/${vmid}`,
    privileges: ["VM.Audit", "VM.Clone"],
    propagated: false,
    optional: false,
    purpose: "clone the template and read its config",
    setupOption: `--templates ${vmid}`,
  };
}

/** Allocating a clone's disks on a storage (and seeing whether it is shared). */
export function storageNeed(storage: string): PathNeed {
  return {
    path: `/storage/${storage}`,
    privileges: ["Datastore.AllocateSpace", "Datastore.Audit"],
    propagated: false,
    optional: false,
    purpose: "allocate the clones' disks and read the storage",
    setupOption: `--storages ${storage}`,
  };
}

/** A node's memory and CPUs, which /nodes shows only with Sys.Audit on it (node capacity). */
export function nodeAuditNeed(node: string): PathNeed {
  return {
    path: `/nodes/${node}`,
    privileges: ["Sys.Audit"],
    propagated: false,
    optional: false,
    purpose: "read the node's memory and CPUs, so no VM is cloned into a node without room",
    setupOption: "with its defaults",
  };
}

/** Seeing an in-flight clone before it joins the pool (docs/credentials.md). */
export function auditAllNeed(): PathNeed {
  return {
    path: "/vms",
    privileges: ["VM.Audit"],
    propagated: true,
    optional: true,
    purpose: "see an in-flight clone before it joins the pool, to adopt it instead of cloning " +
      "again, and count what the other VMs on a node hold",
    setupOption: "the default (leave out --no-audit-all-vms)",
  };
}

/**
 * The SDN paths PVE 8+ checks SDN.Use on when cloning a VM with this NIC
 * (`netN` value): the bridge (or vnet) path when untagged, `<path>/<vlan>`
 * for `tag=` and for every VLAN of `trunks=` (`10;20-22`). `zone` is the
 * SDN zone of the bridge: `localnetwork` for plain Linux bridges.
 */
export function nicSdnPaths(
  net: string,
  zone = "localnetwork",
): { bridge: string; paths: string[] } | null {
  const fields = new Map(
    net.split(",").map((kv) => {
      const eq = kv.indexOf("=");
      return [eq < 0 ? kv : kv.slice(0, eq), eq < 0 ? "" : kv.slice(eq + 1)] as const;
    }),
  );
  const bridge = fields.get("bridge");
  if (bridge === undefined || bridge === "") return null;
  const base = `/sdn/zones/${zone}/${bridge}`;
  const vlans: number[] = [];
  const tag = fields.get("tag");
  if (tag !== undefined && tag !== "") vlans.push(Number(tag));
  for (const range of (fields.get("trunks") ?? "").split(";")) {
    const [lo, hi] = range.split("-").map((x) => Number(x));
    if (range === "" || !Number.isInteger(lo)) continue;
    for (let v = lo; v <= (Number.isInteger(hi) ? hi : lo); v++) vlans.push(v);
  }
  const paths = vlans.length === 0 ? [base] : [...new Set(vlans)].map((v) => `${base}/${v}`);
  return { bridge, paths };
}

/** SDN.Use on one NIC path, for the network of the template's NICs. */
export function sdnNeed(path: string, bridge: string, tagged: boolean): PathNeed {
  return {
    path,
    privileges: ["SDN.Use"],
    propagated: false,
    optional: false,
    purpose: `clone a template whose NIC uses ${tagged ? "this VLAN of " : ""}bridge ${bridge}`,
    setupOption: tagged
      ? `--bridges ${bridge} (without --vlan-tags, or with this VLAN in it)`
      : `--bridges ${bridge}`,
  };
}

/** The `netN` values of a config, in key order. */
export function nicsOf(config: VmConfig): string[] {
  return Object.keys(config).filter((k) => /^net\d+$/.test(k)).sort()
    .map((k) => String(config[k]));
}

/** A drive key of a config (`ide2`, `sata0`, `scsi1`, ...). */
const DRIVE_KEY = /^(ide|sata|scsi|virtio)\d+$/;

/** `key=value` of a property string, or its bare first element as the default key. */
function optionOf(value: unknown, key: string, defaultKey: string): string | undefined {
  for (const [i, part] of String(value).split(",").entries()) {
    const eq = part.indexOf("=");
    if (eq < 0 && i === 0 && key === defaultKey) return part;
    if (eq >= 0 && part.slice(0, eq) === key) return part.slice(eq + 1);
  }
  return undefined;
}

/**
 * What clone_vm checks for what the template's own config uses, besides its
 * disks' storages and NICs (qemu-server check_storage_access_clone and
 * check_mapping_access, docs/proxmox-notes.md "What a clone checks"):
 * Sys.Console on / for the host's CD-ROM drive, Datastore.AllocateSpace on
 * `vmstatestorage`, Mapping.Use on each mapped USB or PCI device, on
 * /mapping/hwrng for the host's hardware RNG and on a virtiofs directory
 * mapping; on PVE 9 (qemu-server 9.1.15 and later) Mapping.Use on
 * /mapping/cpu/<name> for a custom CPU model (`custom-<name>`). `pveMajor`
 * is the version of the template's node, where the clone runs.
 */
export function templateOptionNeeds(vmid: number, config: VmConfig, pveMajor: number): PathNeed[] {
  const out: PathNeed[] = [];
  const need = (path: string, privilege: string, purpose: string, setupOption: string | null) =>
    out.push({
      path,
      privileges: [privilege],
      propagated: false,
      optional: false,
      purpose: `clone template ${vmid}${purpose}`,
      setupOption,
    });
  for (const key of Object.keys(config).sort()) {
    const value = config[key];
    const mapping = optionOf(value, "mapping", "");
    if (DRIVE_KEY.test(key)) {
      const file = String(value).split(",")[0];
      if (file === "cdrom" && /(^|,)media=cdrom(,|$)/.test(String(value))) {
        need("/", "Sys.Console", `, whose ${key} is the host's CD-ROM drive`, null);
      }
    } else if (/^(usb|hostpci)\d+$/.test(key) && mapping !== undefined) {
      const kind = key.startsWith("usb") ? "usb" : "pci";
      const what = `, whose ${key} uses mapping ${mapping}`;
      need(`/mapping/${kind}/${mapping}`, "Mapping.Use", what, null);
    } else if (/^rng\d+$/.test(key) && optionOf(value, "source", "source") === "/dev/hwrng") {
      need("/mapping/hwrng", "Mapping.Use", `, whose ${key} uses the host's hardware RNG`, null);
    } else if (/^virtiofs\d$/.test(key)) {
      const dir = optionOf(value, "dirid", "dirid");
      need(`/mapping/dir/${dir}`, "Mapping.Use", `, whose ${key} shares directory ${dir}`, null);
    }
  }
  const cpu = customCpuModel(config.cpu);
  if (cpu !== undefined && pveMajor >= 9) {
    // setup-token.sh reads each template's cpu and grants exactly this (PVE 9).
    need(
      `/mapping/cpu/${cpu}`,
      "Mapping.Use",
      `, whose cpu is the custom model ${cpu}`,
      `--templates ${vmid}`,
    );
  }
  if (config.vmstatestorage !== undefined) {
    const s = String(config.vmstatestorage);
    need(`/storage/${s}`, "Datastore.AllocateSpace", ` (vmstatestorage ${s})`, `--storages ${s}`);
  }
  return out;
}

/** The custom CPU model a `cpu` value names (`custom-<name>`, or `cputype=custom-<name>,…`). */
export function customCpuModel(cpu: unknown): string | undefined {
  if (cpu === undefined) return undefined;
  const model = optionOf(cpu, "cputype", "cputype");
  return model?.startsWith("custom-") ? model.slice("custom-".length) : undefined;
}

/** Devices of a template only root@pam may pass on to a clone: a host USB or PCI device, unmapped. */
export function rootOnlyDevices(config: VmConfig): { key: string; kind: "USB" | "PCI" }[] {
  const out: { key: string; kind: "USB" | "PCI" }[] = [];
  for (const key of Object.keys(config).sort()) {
    const value = config[key];
    if (/^usb\d+$/.test(key)) {
      const host = optionOf(value, "host", "host");
      if (host !== undefined && !/^spice$/i.test(host)) out.push({ key, kind: "USB" });
    } else if (/^hostpci\d+$/.test(key) && optionOf(value, "mapping", "") === undefined) {
      out.push({ key, kind: "PCI" });
    }
  }
  return out;
}
