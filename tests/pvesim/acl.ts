// An ACL model after pve-access-control: privileges granted on a path apply
// there, and below it only with propagate=1; a grant on a deeper path
// replaces what the caller had from above; the grants on `/pool/<pool>` also
// apply to the pool's member VMs (never propagated, and only where the VM's
// own path sets nothing); a privilege-separated token holds the intersection
// of its own and its user's privileges. Enforced for the SDN.Use checks
// qemu-server's clone_vm runs on the source's NICs before it forks the task
// (check_vnet_access, PVE 8+): the bridge path for an untagged NIC,
// `<bridge>/<tag>` for `tag=`, `<bridge>/<vlan>` for each VLAN of `trunks=`.
// Plain Linux bridges are in the zone `localnetwork`. Answered as the
// caller's effective permissions by GET /access/permissions (routes/access.ts).

import { fail, forbidden } from "./errors.ts";
import type { SimCore } from "./router.ts";
import { isCdrom, volumesOf } from "./storage.ts";
import type { SimAcl, SimAclEntry } from "./types.ts";

/** Privileges every PVE 8 and 9 knows (pve-access-control's privilege groups). */
const COMMON_PRIVS = [
  "Datastore.Allocate",
  "Datastore.AllocateSpace",
  "Datastore.AllocateTemplate",
  "Datastore.Audit",
  "Group.Allocate",
  "Mapping.Audit",
  "Mapping.Modify",
  "Mapping.Use",
  "Permissions.Modify",
  "Pool.Allocate",
  "Pool.Audit",
  "Realm.Allocate",
  "Realm.AllocateUser",
  "SDN.Allocate",
  "SDN.Audit",
  "SDN.Use",
  "Sys.Audit",
  "Sys.Console",
  "Sys.Incoming",
  "Sys.Modify",
  "Sys.PowerMgmt",
  "Sys.Syslog",
  "User.Modify",
  "VM.Allocate",
  "VM.Audit",
  "VM.Backup",
  "VM.Clone",
  "VM.Config.CDROM",
  "VM.Config.CPU",
  "VM.Config.Cloudinit",
  "VM.Config.Disk",
  "VM.Config.HWType",
  "VM.Config.Memory",
  "VM.Config.Network",
  "VM.Config.Options",
  "VM.Console",
  "VM.Migrate",
  "VM.PowerMgmt",
  "VM.Snapshot",
  "VM.Snapshot.Rollback",
];

/** PVE 9 split VM.Monitor into the guest-agent privileges (and dropped it). */
const PVE9_AGENT_PRIVS = [
  "VM.GuestAgent.Audit",
  "VM.GuestAgent.FileRead",
  "VM.GuestAgent.FileSystemMgmt",
  "VM.GuestAgent.FileWrite",
  "VM.GuestAgent.Unrestricted",
];

/** Every privilege the given pve-manager version knows (what Administrator holds). */
export function knownPrivileges(pveVersion: string): string[] {
  const major = Number(pveVersion.split(".")[0]);
  const agent = major >= 9 ? PVE9_AGENT_PRIVS : ["VM.Monitor"];
  return [...COMMON_PRIVS, ...agent].sort();
}

/** Privilege → propagate flag (true = 1), as pve-access-control reports them. */
export type PrivMap = Map<string, boolean>;

/** `/a/b/c` → ["/", "/a", "/a/b", "/a/b/c"]. */
function pathChain(path: string): string[] {
  const parts = path.split("/").filter((p) => p !== "");
  return ["/", ...parts.map((_, i) => "/" + parts.slice(0, i + 1).join("/"))];
}

/** `//vms/100/` → `/vms/100`, as normalize_path does. */
export function normalizeAclPath(path: string): string {
  const p = path.replace(/\/+/g, "/").replace(/\/$/, "");
  return p === "" ? "/" : p.startsWith("/") ? p : `/${p}`;
}

/** One principal's ACL privileges on `path`: the deepest applicable level wins. */
function aclPrivs(entries: SimAclEntry[], ugid: "user" | "token", path: string): PrivMap {
  let have: PrivMap = new Map();
  for (const p of pathChain(path)) {
    const here = entries.filter((e) =>
      (e.ugid ?? "token") === ugid && normalizeAclPath(e.path) === p &&
      (p === path || e.propagate === true)
    );
    if (here.length === 0) continue;
    have = new Map();
    for (const e of here) {
      for (const priv of e.privs) have.set(priv, (have.get(priv) ?? false) || e.propagate === true);
    }
  }
  return have;
}

/** Pool-derived privileges fill in, unpropagated, what the VM's own path leaves unset. */
function withPool(
  entries: SimAclEntry[],
  ugid: "user" | "token",
  path: string,
  poolOf: (path: string) => string | undefined,
): PrivMap {
  const own = aclPrivs(entries, ugid, path);
  const pool = poolOf(path);
  if (pool === undefined) return own;
  for (const priv of aclPrivs(entries, ugid, `/pool/${pool}`).keys()) {
    if (!own.has(priv)) own.set(priv, false);
  }
  return own;
}

/**
 * What `who` holds on `path` under `acl`: the token (token ∩ user, flags
 * and-ed) or its user alone. `poolOf` names the pool a `/vms/<id>` path's VM
 * is in. Without any user entries the token is modelled as not
 * privilege-separated.
 */
export function effectivePrivs(
  acl: SimAcl,
  path: string,
  who: "token" | "user" = "token",
  poolOf: (path: string) => string | undefined = () => undefined,
): PrivMap {
  const clean = normalizeAclPath(path);
  const hasUserEntries = acl.entries.some((e) => e.ugid === "user");
  const user = withPool(acl.entries, hasUserEntries ? "user" : "token", clean, poolOf);
  if (who === "user") return user;
  const token = withPool(acl.entries, "token", clean, poolOf);
  const out: PrivMap = new Map();
  for (const [priv, propagate] of token) {
    if (user.has(priv)) out.set(priv, propagate && user.get(priv)!);
  }
  return out;
}

/** Whether the (privilege-separated) token holds `priv` on `path` under `acl`. */
export function hasPriv(
  acl: SimAcl,
  path: string,
  priv: string,
  poolOf: (path: string) => string | undefined = () => undefined,
): boolean {
  return effectivePrivs(acl, path, "token", poolOf).has(priv);
}

/**
 * The pool a `/vms/<id>` path's VM is in now. destroy_vm's remove_vm_access
 * drops the VMID from its pool before the config goes, so a destroyed (or
 * never created) VMID has none: a token whose rights come only through the
 * pool then gets 403 there, not "does not exist".
 */
export function vmPoolOf(core: SimCore): (path: string) => string | undefined {
  return (path) => {
    const m = /^\/vms\/(\d+)$/.exec(path);
    return m ? core.state.vms.get(Number(m[1]))?.pool : undefined;
  };
}

/** Whether the token may do `priv` on VM `vmid` (everything without an ACL model). */
export function mayOnVm(core: SimCore, vmid: number, priv: string): boolean {
  const acl = core.faults.acl;
  return acl === null || hasPriv(acl, `/vms/${vmid}`, priv, vmPoolOf(core));
}

/** rpcenv->check on `/vms/<vmid>` (pool-derived rights included): 403 like PVE. */
export function requireOnVm(core: SimCore, vmid: number, priv: string): void {
  if (!mayOnVm(core, vmid, priv)) throw forbidden(`/vms/${vmid}`, priv);
}

/** rpcenv->check on any other path (no pool involved): 403 like PVE. */
export function requirePriv(core: SimCore, path: string, priv: string): void {
  const acl = core.faults.acl;
  if (acl !== null && !hasPriv(acl, path, priv)) throw forbidden(path, priv);
}

/** VLAN ids of a `trunks=` value: `10;20-22` → 10, 20, 21, 22. */
function trunkVlans(trunks: string): number[] {
  const out: number[] = [];
  for (const part of trunks.split(";").filter((p) => p !== "")) {
    const [a, b] = part.split("-").map(Number);
    for (let v = a; v <= (b ?? a); v++) out.push(v);
  }
  return out;
}

/** The ACL paths check_vnet_access needs SDN.Use on for one `netN` value. */
export function vnetPaths(net: string, vnetZones: Record<string, string> = {}): string[] {
  const opt = (k: string) => new RegExp(`(?:^|,)${k}=([^,]+)`).exec(net)?.[1];
  const bridge = opt("bridge");
  if (bridge === undefined) return [];
  const base = `/sdn/zones/${vnetZones[bridge] ?? "localnetwork"}/${bridge}`;
  const tag = opt("tag");
  const trunks = opt("trunks");
  const paths: string[] = [];
  if (tag !== undefined) paths.push(`${base}/${tag}`);
  if (trunks !== undefined) { for (const v of trunkVlans(trunks)) paths.push(`${base}/${v}`); }
  if (tag === undefined && trunks === undefined) paths.push(base);
  return paths;
}

/** clone_vm's network permission check on the source config: 403 like PVE. */
export function checkNetworkAccess(core: SimCore, config: Record<string, unknown>): void {
  const acl = core.faults.acl;
  if (acl === null) return;
  for (const [k, v] of Object.entries(config)) {
    if (!/^net\d+$/.test(k)) continue;
    for (const path of vnetPaths(String(v), acl.vnetZones)) {
      if (!hasPriv(acl, path, "SDN.Use")) throw forbidden(path, "SDN.Use");
    }
  }
}

/** A `key=value,...` property string's value for `key` (or the bare first element for `first`). */
function prop(value: string | number, key: string, first?: string): string | undefined {
  for (const [i, part] of String(value).split(",").entries()) {
    const eq = part.indexOf("=");
    if (eq < 0 && i === 0 && first === key) return part;
    if (eq >= 0 && part.slice(0, eq) === key) return part.slice(eq + 1);
  }
  return undefined;
}

/**
 * clone_vm's checks on what the source config uses, before the fork:
 * check_storage_access_clone (Datastore.AllocateSpace on each disk's storage,
 * or on `storage` when given, and on `vmstatestorage`; Sys.Console on / for
 * the host's physical `cdrom`; ISO and cloud-init drives pass) and
 * check_mapping_access (Mapping.Use on /mapping/usb|pci/<name>,
 * /mapping/hwrng, /mapping/dir/<id>; a host USB or PCI device only root may
 * pass on). 403s like PVE; the device cases die with their 500 text.
 */
export function checkCloneAccess(
  core: SimCore,
  config: Record<string, string | number>,
  storage: string | undefined,
): void {
  if (core.faults.acl === null) return;
  for (const [key, value] of Object.entries(config)) {
    if (!/^(ide|sata)\d+$/.test(key) || !isCdrom(value)) continue;
    if (String(value).split(",")[0] === "cdrom") requirePriv(core, "/", "Sys.Console");
  }
  for (const v of volumesOf(config)) {
    if (v.cdrom || v.storage === null) continue;
    requirePriv(core, `/storage/${storage ?? v.storage}`, "Datastore.AllocateSpace");
  }
  if (config.vmstatestorage !== undefined) {
    requirePriv(core, `/storage/${config.vmstatestorage}`, "Datastore.AllocateSpace");
  }
  for (const [key, value] of Object.entries(config)) {
    if (/^usb\d+$/.test(key)) {
      const host = prop(value, "host", "host");
      if (host !== undefined && !/^spice$/i.test(host)) {
        throw fail(`only root can set '${key}' config for real devices`);
      }
      const mapping = prop(value, "mapping");
      if (mapping !== undefined) requirePriv(core, `/mapping/usb/${mapping}`, "Mapping.Use");
    } else if (/^hostpci\d+$/.test(key)) {
      const mapping = prop(value, "mapping");
      if (mapping === undefined) {
        throw fail(`only root can set '${key}' config for non-mapped devices`);
      }
      requirePriv(core, `/mapping/pci/${mapping}`, "Mapping.Use");
    } else if (/^rng\d+$/.test(key) && prop(value, "source", "source") === "/dev/hwrng") {
      requirePriv(core, "/mapping/hwrng", "Mapping.Use");
    } else if (/^virtiofs\d$/.test(key)) {
      requirePriv(core, `/mapping/dir/${prop(value, "dirid", "dirid")}`, "Mapping.Use");
    }
  }
}
