// GET /access/permissions (the caller's effective privileges, per path) and
// GET /pools, after pve-access-control: any user or token may dump its own
// permissions (a token not those of its user); with `path` the answer is
// `{ "<path>": { "<priv>": 1|0 } }` (the flag is propagation, 0 for what a
// pool grants its members), without it every path of interest that holds
// anything. With no ACL model (`faults.acl` null) the token holds every
// privilege everywhere, propagated.

import { fail, forbidden } from "../errors.ts";
import { poolId } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import {
  effectivePrivs,
  hasPriv,
  knownPrivileges,
  normalizeAclPath,
  type PrivMap,
  vmPoolOf,
} from "../acl.ts";
import { knownOnly } from "../versions.ts";

/** Paths get_effective_permissions always looks at. */
const TOP_PATHS = ["/", "/access", "/access/groups", "/nodes", "/pool", "/sdn", "/storage", "/vms"];

function aclPath(v: string): string | null {
  return /^[A-Za-z0-9.\-_/]+$/.test(v) ? null : "invalid format - invalid ACL path\n";
}

function privsAt(core: SimCore, path: string, who: "token" | "user"): PrivMap {
  const acl = core.faults.acl;
  if (acl === null) return new Map(knownPrivileges(core.pveVersion).map((p) => [p, true]));
  // user.cfg drops privilege names the version does not know (VM.Monitor on PVE 9).
  const privs = effectivePrivs(acl, path, who, vmPoolOf(core));
  return new Map(knownOnly(core, privs.keys()).map((p) => [p, privs.get(p)!]));
}

function asObject(privs: PrivMap): Record<string, number> {
  const out: Record<string, number> = {};
  for (const p of [...privs.keys()].sort()) out[p] = privs.get(p) ? 1 : 0;
  return out;
}

/**
 * Whose permissions a request asks for. A caller may read its own, and a
 * user those of its own tokens; anything else, a token's own user included,
 * needs Sys.Audit on /access (API2/AccessControl.pm `permissions`: the
 * owner check is on the token's user being the caller, not the reverse).
 * Only the token and its user are modelled.
 */
function subject(
  core: SimCore,
  authid: string,
  userid: string | undefined,
): "token" | "user" | "other" {
  if (userid === undefined || userid === authid) return "token";
  const acl = core.faults.acl;
  if (acl !== null && !hasPriv(acl, "/access", "Sys.Audit")) {
    throw forbidden("/access", "Sys.Audit");
  }
  return userid === authid.split("!")[0] ? "user" : "other";
}

function effectiveTree(core: SimCore, who: "token" | "user"): Record<string, unknown> {
  const paths = new Set(TOP_PATHS);
  for (const e of core.faults.acl?.entries ?? []) paths.add(normalizeAclPath(e.path));
  for (const vm of core.state.vms.values()) if (vm.pool) paths.add(`/vms/${vm.vmid}`);
  const out: Record<string, unknown> = {};
  for (const p of [...paths].sort()) {
    const privs = privsAt(core, p, who);
    if (privs.size > 0) out[p] = asObject(privs);
  }
  return out;
}

export const accessRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/access/permissions",
    schema: {
      path: { type: "string", optional: true, maxLength: 64, format: aclPath },
      userid: { type: "string", optional: true },
    },
    // Every user may ask for its own.
    perm: () => ["/access", "Sys.Audit"],
    handler: ({ core, params, authid }) => {
      const who = subject(core, authid, params.userid as string | undefined);
      const path = params.path as string | undefined;
      if (who === "other") return path === undefined ? {} : { [path]: {} };
      if (path === undefined) return effectiveTree(core, who);
      return { [path]: asObject(privsAt(core, normalizeAclPath(path), who)) };
    },
  },
  {
    // Without poolid: the pools the caller may audit (Pool.Audit or Pool.Allocate), no 403.
    // With it (PVE 8.1+): that pool and its members, or why not.
    method: "GET",
    pattern: "/pools",
    schema: {
      poolid: { type: "string", optional: true, format: poolId },
      type: { type: "string", optional: true, enum: ["qemu", "lxc", "storage"] },
    },
    perm: () => ["/pool", "Pool.Audit"],
    handler: ({ core, params }) => {
      const acl = core.faults.acl;
      const audit = (p: string) =>
        acl === null || hasPriv(acl, `/pool/${p}`, "Pool.Audit") ||
        hasPriv(acl, `/pool/${p}`, "Pool.Allocate");
      const one = params.poolid as string | undefined;
      if (one === undefined) {
        return [...core.state.pools].sort().filter(audit).map((p) => ({ poolid: p }));
      }
      if (!core.state.pools.has(one)) throw fail(`pool '${one}' does not exist`);
      if (!audit(one)) throw forbidden(`/pool/${one}`, "Pool.Audit");
      const members = [...core.state.vms.values()].filter((vm) => vm.pool === one)
        .map((vm) => ({ id: `qemu/${vm.vmid}`, vmid: vm.vmid, node: vm.node, type: "qemu" }));
      return [{ poolid: one, members }];
    },
  },
];
