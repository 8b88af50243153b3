// datacenter.cfg options that restrict what a token may do, after
// pve-manager's PVE/DataCenterConfig.pm and pve-guest-common's
// PVE/GuestHelpers.pm: the tag policy (`user-tag-access` with `user-allow`
// free | list | existing | none and the literal `user-allow-list`, plus
// `registered-tags`, which always need Sys.Modify on /), checked by
// assert_tag_permissions for every tag a config change adds or removes, and
// the VMID range `next-id` (lower inclusive, upper exclusive) that
// /cluster/nextid searches. GET /cluster/options shows them only with
// Sys.Audit on / (routes/cluster.ts).

import { forbidden } from "./errors.ts";
import { hasPriv, mayOnVm } from "./acl.ts";
import type { SimCore } from "./router.ts";
import type { SimDatacenter } from "./types.ts";

/** PVE::Tools::split_list: the raw tags of a value, case kept (the check compares them raw). */
export function rawTags(v: unknown): string[] {
  return typeof v === "string" || typeof v === "number"
    ? String(v).split(/[;,\s]+/).filter((t) => t !== "")
    : [];
}

/** The token holds Sys.Modify on / (no ACL model: it holds everything). */
function privileged(core: SimCore): boolean {
  const acl = core.faults.acl;
  return acl === null || hasPriv(acl, "/", "Sys.Modify");
}

export interface TagRights {
  /** Tags the token may set or remove even outside `free`. */
  allowed: Set<string>;
  /** registered-tags: never for a token without Sys.Modify. */
  registered: Set<string>;
  /** `user-allow` is free: any tag that is not registered. */
  freeform: boolean;
  privileged: boolean;
}

/** GuestHelpers::get_allowed_tags for the token. */
export function tagRights(core: SimCore): TagRights {
  const dc: SimDatacenter = core.faults.datacenter;
  const priv = privileged(core);
  const registered = new Set(dc.registeredTags ?? []);
  const mode = dc.userTagAccess?.userAllow ?? "free";
  const allowed = new Set<string>();
  if (mode !== "none" || priv) {
    for (const t of dc.userTagAccess?.userAllowList ?? []) allowed.add(t);
  }
  if (mode === "free" || mode === "existing" || priv) {
    // The tags of every guest the token may audit count as "existing".
    for (const vm of core.state.vms.values()) {
      if (priv || mayOnVm(core, vm.vmid, "VM.Audit")) {
        for (const t of rawTags(vm.config.tags)) allowed.add(t);
      }
    }
  }
  for (const t of registered) {
    if (priv) allowed.add(t);
    else allowed.delete(t);
  }
  return { allowed, registered, freeform: mode === "free", privileged: priv };
}

/**
 * GuestHelpers::assert_tag_permissions: every tag whose count differs
 * between the old and the new value must be allowed; removing a tag the
 * VM inherited is checked like adding one. 403 names the first refused tag.
 */
export function assertTagPermissions(core: SimCore, oldTags: unknown, newTags: unknown): void {
  const rights = tagRights(core);
  if (rights.privileged) return;
  const count = (list: string[]) => {
    const m = new Map<string, number>();
    for (const t of list) m.set(t, (m.get(t) ?? 0) + 1);
    return m;
  };
  const before = count(rawTags(oldTags));
  const after = count(rawTags(newTags));
  for (const tag of new Set([...before.keys(), ...after.keys()])) {
    if ((before.get(tag) ?? 0) === (after.get(tag) ?? 0)) continue;
    if ((!rights.allowed.has(tag) && !rights.freeform) || rights.registered.has(tag)) {
      throw forbidden("/", `Sys.Modify for modifying tag '${tag}'`);
    }
  }
}

/** The `next-id` range: [lower, upper), PVE's defaults 100 and 1,000,000. */
export function nextIdRange(core: SimCore): { lower: number; upper: number } {
  const r = core.faults.datacenter.nextId ?? {};
  return { lower: r.lower ?? 100, upper: r.upper ?? 1_000_000 };
}

/**
 * GET /cluster/options: all of datacenter.cfg with Sys.Audit on /, else
 * only `console` and `tag-style`; `allowed-tags` always (sorted).
 */
export function clusterOptions(core: SimCore): Record<string, unknown> {
  const acl = core.faults.acl;
  const out: Record<string, unknown> = {};
  if (acl === null || hasPriv(acl, "/", "Sys.Audit")) {
    const dc = core.faults.datacenter;
    Object.assign(out, { keyboard: "en-us", mac_prefix: "BC:24:11", description: "" });
    if (dc.nextId !== undefined) {
      // Property-string values come back as strings.
      const r: Record<string, string> = {};
      if (dc.nextId.lower !== undefined) r.lower = String(dc.nextId.lower);
      if (dc.nextId.upper !== undefined) r.upper = String(dc.nextId.upper);
      out["next-id"] = r;
    }
    if (dc.userTagAccess !== undefined) {
      const u: Record<string, unknown> = {};
      if (dc.userTagAccess.userAllow !== undefined) u["user-allow"] = dc.userTagAccess.userAllow;
      if (dc.userTagAccess.userAllowList !== undefined) {
        u["user-allow-list"] = [...dc.userTagAccess.userAllowList];
      }
      out["user-tag-access"] = u;
    }
    if (dc.registeredTags !== undefined) out["registered-tags"] = [...dc.registeredTags];
  }
  out["allowed-tags"] = [...tagRights(core).allowed].sort();
  return out;
}
