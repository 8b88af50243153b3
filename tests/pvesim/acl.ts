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

import { forbidden } from "./errors.ts";
import type { SimCore } from "./router.ts";
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
export function hasPriv(acl: SimAcl, path: string, priv: string): boolean {
  return effectivePrivs(acl, path).has(priv);
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
