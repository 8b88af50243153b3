// An ACL model after pve-access-control: privileges granted on a path apply
// there, and below it only with propagate=1; a grant on a deeper path
// replaces what the caller had from above; a privilege-separated token holds
// the intersection of its own and its user's privileges. Enforced for the
// SDN.Use checks qemu-server's clone_vm runs on the source's NICs before it
// forks the task (check_vnet_access, PVE 8+): the bridge path for an
// untagged NIC, `<bridge>/<tag>` for `tag=`, `<bridge>/<vlan>` for each VLAN
// of `trunks=`. Plain Linux bridges are in the zone `localnetwork`.

import { forbidden } from "./errors.ts";
import type { SimCore } from "./router.ts";
import type { SimAcl, SimAclEntry } from "./types.ts";

/** `/a/b/c` → ["/", "/a", "/a/b", "/a/b/c"]. */
function pathChain(path: string): string[] {
  const parts = path.split("/").filter((p) => p !== "");
  return ["/", ...parts.map((_, i) => "/" + parts.slice(0, i + 1).join("/"))];
}

/** One principal's privileges on `path` (the deepest applicable ACL wins). */
function privsOf(entries: SimAclEntry[], ugid: "user" | "token", path: string): Set<string> {
  let have = new Set<string>();
  for (const p of pathChain(path)) {
    const here = entries.filter((e) =>
      (e.ugid ?? "token") === ugid && e.path.replace(/\/+$/, "") === (p === "/" ? "" : p) &&
      (p === path || e.propagate === true)
    );
    if (here.length > 0) have = new Set(here.flatMap((e) => e.privs));
  }
  return have;
}

/** Whether the (privilege-separated) token holds `priv` on `path` under `acl`. */
export function hasPriv(acl: SimAcl, path: string, priv: string): boolean {
  const clean = path.replace(/\/+$/, "") || "/";
  const token = privsOf(acl.entries, "token", clean);
  // Without any user entries the token is modelled as not privilege-separated.
  const hasUserEntries = acl.entries.some((e) => e.ugid === "user");
  const user = hasUserEntries ? privsOf(acl.entries, "user", clean) : token;
  return token.has(priv) && user.has(priv);
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
