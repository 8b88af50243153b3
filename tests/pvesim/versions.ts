// What differs between Proxmox VE 8 and 9 (SimOptions.pveVersion, and the
// qemu-server version behind it, SimOptions.qemuServerVersion), as seen on a
// real PVE 9.2.11 and read from the 8.4 and 9.x sources
// (docs/proxmox-notes.md "Proxmox VE 9"):
// - privileges: PVE 9 dropped VM.Monitor for the VM.GuestAgent.* family
//   (pve-access-control), and qemu-server checks one of them per agent
//   command where PVE 8 checked VM.Monitor for all;
// - clone task logs: `creating a clone of VM <src> with ID <new>` first, and
//   `allocated target volume '<volid>'` after each full-copy allocation;
// - `memhost` in status/current and /cluster/resources;
// - qemu-server ≥ 9.1.15: Mapping.Use on /mapping/cpu/<name> to clone a VM
//   whose `cpu` is a custom model; ≥ 9.1.19: a disk a destroy cannot free is
//   a counted warning (`WARN: `, task `WARNINGS: n`), not a plain Perl warn;
// - pool names must start with a letter (pve-manager 9).

import { forbidden } from "./errors.ts";
import { knownPrivileges, mayOnVm, requirePriv } from "./acl.ts";
import type { Params } from "./params.ts";
import type { SimCore } from "./router.ts";

/** `a.b.c` ≥ `x.y.z`, numerically, part by part. */
export function versionAtLeast(version: string, min: string): boolean {
  const a = version.split(".").map((x) => Number.parseInt(x, 10) || 0);
  const b = min.split(".").map((x) => Number.parseInt(x, 10) || 0);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  }
  return true;
}

/** Releases seen together on real nodes: pve-manager → qemu-server. */
const SEEN_QEMU_SERVER: Record<string, string> = { "9.2.11": "9.2.6", "8.4.21": "8.4.10" };

/** The qemu-server a pve-manager release ships with, as far as the simulator needs it. */
export function qemuServerFor(pveVersion: string): string {
  const seen = SEEN_QEMU_SERVER[pveVersion];
  if (seen !== undefined) return seen;
  const [major, minor] = pveVersion.split(".");
  return `${major}.${minor ?? 0}.0`;
}

export function isPve9(core: SimCore): boolean {
  return versionAtLeast(core.pveVersion, "9.0");
}

// ---- guest agent privileges (qemu-server API2/Qemu/Agent.pm) -------------

const UNRESTRICTED = "VM.GuestAgent.Unrestricted";

/** PVE 9's privilege per agent command; VM.GuestAgent.Unrestricted also does for each. */
const AGENT_PRIVS: Record<string, string[]> = {
  exec: [UNRESTRICTED],
  "exec-status": [UNRESTRICTED],
  "set-user-password": [UNRESTRICTED],
  "file-read": ["VM.GuestAgent.FileRead"],
  "file-write": ["VM.GuestAgent.FileWrite"],
  "fsfreeze-freeze": ["VM.GuestAgent.FileSystemMgmt"],
  "fsfreeze-thaw": ["VM.GuestAgent.FileSystemMgmt"],
  fstrim: ["VM.GuestAgent.FileSystemMgmt"],
  "fsfreeze-status": ["VM.GuestAgent.Audit", "VM.GuestAgent.FileSystemMgmt"],
  shutdown: ["VM.PowerMgmt"],
  "suspend-disk": ["VM.PowerMgmt"],
  "suspend-ram": ["VM.PowerMgmt"],
  "suspend-hybrid": ["VM.PowerMgmt"],
};

/**
 * The privileges of which one lets the token run agent `command` on a VM:
 * PVE 8 VM.Monitor for every command; PVE 9 the command's own (the read-only
 * ones, ping, info, get-*, network-get-interfaces, VM.GuestAgent.Audit) or
 * VM.GuestAgent.Unrestricted.
 */
export function agentPrivileges(pveVersion: string, command: string): string[] {
  if (!versionAtLeast(pveVersion, "9.0")) return ["VM.Monitor"];
  const own = AGENT_PRIVS[command] ?? ["VM.GuestAgent.Audit"];
  return own.includes(UNRESTRICTED) ? own : [...own, UNRESTRICTED];
}

/**
 * The agent route's permission check under the ACL model: one of
 * agentPrivileges on /vms/<vmid> (pool-derived rights included), else 403
 * naming them as rpcenv's `any` check does (`a|b`).
 */
export function agentCheck(command: string): (core: SimCore, p: Params) => void {
  return (core, p) => {
    const vmid = p.vmid as number;
    const privs = agentPrivileges(core.pveVersion, command);
    if (!privs.some((priv) => mayOnVm(core, vmid, priv))) {
      throw forbidden(`/vms/${vmid}`, privs.join("|"));
    }
  };
}

/** What the version leaves of a privilege list: user.cfg drops the names it does not know. */
export function knownOnly(core: SimCore, privs: Iterable<string>): string[] {
  const known = new Set(knownPrivileges(core.pveVersion));
  return [...privs].filter((p) => known.has(p));
}

// ---- clone and destroy task logs ------------------------------------------

/** The first line of a clone task's log (PVE 9 only). */
export function cloneStartLog(core: SimCore, src: number, newid: number): string[] {
  return isPve9(core) ? [`creating a clone of VM ${src} with ID ${newid}`] : [];
}

/** clone_disk's line before it allocates a drive (PVE 8 and 9). */
export function driveCloneLog(key: string, source: string, full: boolean): string {
  return `create ${full ? "full" : "linked"} clone of drive ${key} (${source.split(",")[0]})`;
}

/** The line after a full copy's volume was allocated (PVE 9 only). */
export function allocatedLog(core: SimCore, volume: string, full: boolean): string[] {
  return isPve9(core) && full ? [`allocated target volume '${volume.split(",")[0]}'`] : [];
}

/**
 * A disk destroy_vm could not free: qemu-server ≥ 9.1.19 warns with log_warn
 * (`WARN: `, counted in `WARNINGS: n`), older ones with a plain Perl warn
 * (printed as is, not counted: the task ends OK).
 */
export function destroyWarning(core: SimCore, text: string): { line: string; counted: number } {
  return versionAtLeast(core.qemuServerVersion, "9.1.19")
    ? { line: `WARN: ${text}`, counted: 1 }
    : { line: text, counted: 0 };
}

// ---- status fields ----------------------------------------------------------

/** PVE 9's extra status fields: `memhost`, the host memory the guest's process uses. */
export function statusExtras(
  core: SimCore,
  fields: Record<string, unknown>,
): Record<string, unknown> {
  if (!isPve9(core) || !("mem" in fields)) return fields;
  return { ...fields, memhost: fields.mem };
}

// ---- clone's custom CPU check ----------------------------------------------

/** The custom model a `cpu` value names (`custom-<name>` or `cputype=custom-<name>`), if any. */
export function customCpuModel(cpu: string | number | undefined): string | undefined {
  if (cpu === undefined) return undefined;
  for (const [i, part] of String(cpu).split(",").entries()) {
    const eq = part.indexOf("=");
    const model = eq < 0
      ? (i === 0 ? part : undefined)
      : part.slice(0, eq) === "cputype"
      ? part.slice(eq + 1)
      : undefined;
    if (model?.startsWith("custom-")) return model.slice("custom-".length);
  }
  return undefined;
}

/**
 * qemu-server ≥ 9.1.15: cloning a VM whose `cpu` is a custom model needs
 * Mapping.Use on /mapping/cpu/<name> (403 before the task); older versions
 * check nothing about the CPU at clone time.
 */
export function checkCpuModelAccess(core: SimCore, config: Record<string, string | number>): void {
  if (!versionAtLeast(core.qemuServerVersion, "9.1.15")) return;
  const name = customCpuModel(config.cpu);
  if (name !== undefined) requirePriv(core, `/mapping/cpu/${name}`, "Mapping.Use");
}

// ---- user.cfg names ----------------------------------------------------------

/**
 * pve-poolid: up to three `/`-separated levels of letters, digits, `.`, `-`,
 * `_`; from pve-manager 9 each must start with a letter. The text for a name
 * that breaks it, or null.
 */
export function poolNameError(core: SimCore, name: string): string | null {
  if (name.split("/").length > 3) {
    return `invalid format - pool name '${name}' nested too deeply (max levels = 3)\n`;
  }
  const level = isPve9(core) ? "[A-Za-z][A-Za-z0-9.\\-_]*" : "[A-Za-z0-9.\\-_]+";
  return new RegExp(`^${level}(?:/${level}){0,2}$`).test(name)
    ? null
    : `invalid format - pool name '${name}' contains invalid characters\n`;
}
