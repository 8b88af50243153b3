// What user.cfg holds besides ACLs, as far as an admin script needs it:
// roles (pve-access-control API2/Role.pm) and pools (pve-manager
// API2/Pool.pm create_pool). Privilege names are checked against the
// version's list (acl.ts knownPrivileges): PVE 9 refuses `VM.Monitor`, PVE 8
// the `VM.GuestAgent.*` family, as a parameter error (pve-priv-list). Pool
// names follow the version's pve-poolid (versions.ts). Roles here do not feed
// the ACL model: faults.acl lists privileges directly. Built-in roles:
// Administrator (every privilege of the version) and NoAccess, both
// auto-generated (read-only).

import { fail, paramError } from "../errors.ts";
import { knownPrivileges, requirePriv } from "../acl.ts";
import type { Params } from "../params.ts";
import type { Route, SimCore } from "../router.ts";
import { poolNameError } from "../versions.ts";

const SPECIAL = new Set(["Administrator", "NoAccess"]);

const ROLES = new WeakMap<SimCore, Map<string, Set<string>>>();

function roles(core: SimCore): Map<string, Set<string>> {
  let r = ROLES.get(core);
  if (!r) {
    r = new Map([
      ["Administrator", new Set(knownPrivileges(core.pveVersion))],
      ["NoAccess", new Set<string>()],
    ]);
    ROLES.set(core, r);
  }
  return r;
}

/** PVE::Tools::split_list. */
function splitList(v: string): string[] {
  return v.split(/[,;\s]+/).filter((x) => x !== "");
}

function roleIdFormat(v: string): string | null {
  return /^[A-Za-z0-9.\-_]+$/.test(v)
    ? null
    : `invalid format - role name '${v}' contains invalid characters\n`;
}

/** pve-priv-list: every name must be one the version knows. */
function checkPrivList(core: SimCore, p: Params): void {
  if (p.privs === undefined) return;
  const known = new Set(knownPrivileges(core.pveVersion));
  const bad = splitList(String(p.privs)).find((priv) => !known.has(priv));
  if (bad !== undefined) {
    throw paramError({ privs: `invalid format - invalid privilege '${bad}'\n` });
  }
}

/** What creating and changing a role share: the names checked first, then Sys.Modify on /access. */
const roleWrite = {
  perm: (): [string, string] => ["/access", "Sys.Modify"],
  check: (core: SimCore, p: Params) => {
    checkPrivList(core, p);
    requirePriv(core, "/access", "Sys.Modify");
  },
};

const roleSchema = {
  roleid: { type: "string" as const, format: roleIdFormat },
  privs: { type: "string" as const, optional: true },
};

export const userConfigRoutes: Route[] = [
  {
    method: "GET",
    pattern: "/access/roles",
    schema: {},
    perm: () => ["/access", "Sys.Audit"],
    handler: ({ core }) =>
      [...roles(core)].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([roleid, privs]) => ({
        roleid,
        privs: [...privs].sort().join(","),
        special: SPECIAL.has(roleid) ? 1 : 0,
      })),
  },
  {
    method: "POST",
    pattern: "/access/roles",
    schema: roleSchema,
    ...roleWrite,
    handler: ({ core, params }) => {
      const id = String(params.roleid);
      if (/^PVE/i.test(id)) {
        throw paramError({
          roleid: "cannot use role ID starting with the (case-insensitive) 'PVE' namespace",
        });
      }
      if (roles(core).has(id)) throw fail(`create role failed: role '${id}' already exists`);
      roles(core).set(id, new Set(splitList(String(params.privs ?? ""))));
      return null;
    },
  },
  {
    method: "PUT",
    pattern: "/access/roles/{roleid}",
    schema: { ...roleSchema, append: { type: "boolean", optional: true } },
    ...roleWrite,
    handler: ({ core, params }) => {
      const id = String(params.roleid);
      if (SPECIAL.has(id)) throw fail(`auto-generated role '${id}' cannot be modified`);
      const role = roles(core).get(id);
      if (!role) throw fail(`update role failed: role '${id}' does not exist`);
      if (params.append !== true) role.clear();
      for (const priv of splitList(String(params.privs ?? ""))) role.add(priv);
      return null;
    },
  },
  {
    method: "POST",
    pattern: "/pools",
    schema: { poolid: { type: "string" }, comment: { type: "string", optional: true } },
    perm: (p) => [`/pool/${p.poolid}`, "Pool.Allocate"],
    check: (core, p) => {
      const error = poolNameError(core, String(p.poolid));
      if (error !== null) throw paramError({ poolid: error });
      requirePriv(core, `/pool/${p.poolid}`, "Pool.Allocate");
    },
    handler: ({ core, params }) => {
      const id = String(params.poolid);
      if (core.state.pools.has(id)) throw fail(`create pool failed: pool '${id}' already exists`);
      core.state.pools.add(id);
      return null;
    },
  },
];
