// The privileges part of preflight: every privilege the provider will use, on
// every path it will use it (needs.ts), held against the
// token's effective permissions as Proxmox itself computes them
// (GET /access/permissions: `{ "<path>": { "<priv>": 1|0 } }`, the flag
// saying whether the grant propagates; a privilege-separated token already
// shows only what both it and its user hold).

import type { VmConfig } from "../vm/vm.ts";
import {
  AGENT_PRIVILEGES,
  auditAllNeed,
  nicSdnPaths,
  nicsOf,
  nodeAuditNeed,
  type PathNeed,
  poolNeed,
  sdnNeed,
  storageNeed,
  templateNeed,
  templateOptionNeeds,
} from "./needs.ts";
import { type Permissions, toGranted } from "./permissions.ts";
import { type CheckResult, errText, failed, pass, warn } from "./result.ts";
import type { PreflightRun } from "./run.ts";
import { poolExtra, typeSdnNeeds } from "./type_needs.ts";
import type { Demand } from "./storage.ts";
import { type Found, pairs } from "./templates.ts";

const CHECK = "privileges";
const DOCS = "docs/credentials.md#privileges-and-why-each-is-needed";

/**
 * The SDN.Use needs of the templates' NICs (PVE 8+). A bridge is looked up
 * in the zone `localnetwork` (plain Linux bridges); when the token holds
 * nothing there but holds SDN.Use under another zone for that name, it is an
 * SDN vnet of that zone.
 */
export async function sdnNeeds(
  configs: readonly VmConfig[],
  perms: Permissions,
): Promise<PathNeed[]> {
  const zones = new Map<string, string>();
  const out: PathNeed[] = [];
  for (const config of configs) {
    for (const net of nicsOf(config)) {
      const local = nicSdnPaths(net);
      if (local === null) continue;
      let zone = zones.get(local.bridge);
      if (zone === undefined) {
        zone = await zoneOf(local.bridge, local.paths, perms);
        zones.set(local.bridge, zone);
      }
      const nic = nicSdnPaths(net, zone)!;
      const tagged = nic.paths.some((p) => p !== `/sdn/zones/${zone}/${nic.bridge}`);
      for (const path of nic.paths) out.push(sdnNeed(path, nic.bridge, tagged));
    }
  }
  return out;
}

async function zoneOf(bridge: string, localPaths: string[], perms: Permissions): Promise<string> {
  for (const p of localPaths) if ((await perms.at(p)).has("SDN.Use")) return "localnetwork";
  const name = bridge.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  const re = new RegExp(`^/sdn/zones/([^/]+)/${name}(?:/\\d+)?$`);
  for (const [path, privs] of Object.entries(await perms.tree())) {
    const m = re.exec(path);
    if (m && m[1] !== "localnetwork" && toGranted(privs).has("SDN.Use")) return m[1];
  }
  return "localnetwork";
}

/** One need per path: privileges merged, propagation if any needs it, optional only if all are. */
export function mergeNeeds(needs: readonly PathNeed[]): PathNeed[] {
  const byPath = new Map<string, PathNeed>();
  for (const n of needs) {
    const had = byPath.get(n.path);
    if (had === undefined) {
      byPath.set(n.path, { ...n, privileges: [...n.privileges] });
      continue;
    }
    // The required need's wording leads.
    const base = had.optional && !n.optional ? n : had;
    byPath.set(n.path, {
      ...base,
      privileges: [...new Set([...had.privileges, ...n.privileges])].sort(),
      anyOf: [...had.anyOf ?? [], ...n.anyOf ?? []],
      propagated: had.propagated || n.propagated,
      optional: had.optional && n.optional,
      purpose: had.purpose === n.purpose ? had.purpose : `${had.purpose}; ${n.purpose}`,
      setupOption: had.setupOption === n.setupOption
        ? had.setupOption
        : [had.setupOption, n.setupOption].filter((o) => o !== null).join(", ") || null,
    });
  }
  return [...byPath.values()];
}

/** One line per path: PASS, or what is missing (FAIL; WARN for optional rights) with the grant. */
export async function checkPrivileges(
  needs: readonly PathNeed[],
  perms: Permissions,
  tokenId: string,
): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  const user = tokenId.split("!")[0];
  for (const need of mergeNeeds(needs)) {
    const granted = await perms.at(need.path);
    const groups = need.anyOf ?? [];
    const unmet = groups.filter((g) => !g.privileges.some((p) => granted.has(p)));
    const missing = [
      ...new Set([
        ...need.privileges.filter((p) => !granted.has(p)),
        ...unmet.map((g) => g.grant),
      ]),
    ].sort();
    const held = [
      ...new Set([
        ...need.privileges,
        ...groups.flatMap((g) => g.privileges.filter((p) => granted.has(p))),
      ]),
    ].sort();
    const unpropagated = need.propagated ? held.filter((p) => granted.get(p) === 0) : [];
    const verdict = need.optional ? warn : failed;
    const grant = (privs: string[], propagate: boolean) =>
      `grant ${privs.join(", ")} on ${need.path}${
        propagate ? " with propagate" : ""
      } to the token and to its user (a privilege-separated token holds only what both hold): ` +
      (need.setupOption === null
        ? ""
        : `deploy/host-setup/setup-token.sh ${need.setupOption} does both, or `) +
      `pveum acl modify ` +
      `${need.path} --roles <role> --tokens '${tokenId}'${
        propagate ? " --propagate 1" : ""
      } and the same with --users ${user} (${DOCS})`;
    if (missing.length > 0) {
      const renamed = missing.some((p) => AGENT_PRIVILEGES.has(p))
        ? "; after an upgrade between PVE 8 and 9, re-run setup-token.sh (PVE 9 renamed VM.Monitor to VM.GuestAgent.*)"
        : "";
      const purposes = unmet.length > 0 && need.privileges.every((p) => granted.has(p))
        ? unmet.map((g) => g.purpose).join("; ")
        : need.purpose;
      out.push(verdict(
        CHECK,
        need.path,
        `missing ${missing.join(", ")}, needed to ${purposes}`,
        grant(missing, need.propagated) + renamed,
      ));
    } else if (unpropagated.length > 0) {
      out.push(verdict(
        CHECK,
        need.path,
        `${unpropagated.join(", ")} granted on ${need.path} itself but not propagated below it, ` +
          `needed to ${need.purpose}`,
        grant(unpropagated, true),
      ));
    } else {
      out.push(pass(
        CHECK,
        need.path,
        `${held.join(", ")}${need.propagated ? " (propagated)" : ""}: to ${need.purpose}`,
      ));
    }
  }
  return out;
}

/** Every privilege the provider will use, on every path it will use it. */
export async function privilegeChecks(
  run: PreflightRun,
  found: readonly Found[],
  demand: readonly Demand[],
): Promise<CheckResult[]> {
  // The guest agent's privileges are those of the version each node runs.
  const majors = await Promise.all(run.px.nodes.map((n) => run.majorOf(n)));
  const needs: PathNeed[] = [poolNeed(run.px.pool, majors, poolExtra(run))];
  for (const node of run.px.nodes) needs.push(nodeAuditNeed(node));
  if (run.px.pool !== "") needs.push(auditAllNeed());
  const vmids = new Set<number>(found.map((f) => f.tmpl.vmid));
  for (const p of pairs(run.cfg)) {
    const src = p.type.template;
    if (src.kind === "vmid") vmids.add(src.vmid);
    if (src.kind === "per-zone" && src.vmids.has(p.zone)) vmids.add(src.vmids.get(p.zone)!);
  }
  for (const vmid of [...vmids].sort((a, b) => a - b)) needs.push(templateNeed(vmid));
  // What the templates' own options make clone check (a host CD-ROM, mapped devices, ...).
  for (const { tmpl } of new Map(found.map((f) => [f.tmpl.vmid, f])).values()) {
    needs.push(...templateOptionNeeds(tmpl.vmid, tmpl.config, await run.majorOf(tmpl.node)));
  }
  for (const s of [...new Set(demand.map((d) => d.storage))].sort()) needs.push(storageNeed(s));
  // SDN.Use on the NICs' bridges is checked by clone since PVE 8.
  if (run.major >= 8) {
    const configs = [...new Map(found.map((f) => [f.tmpl.vmid, f.tmpl.config])).values()];
    needs.push(...await sdnNeeds(configs, run.perms));
  }
  // What the instance types' own fields add (disk_gib, network).
  needs.push(...await typeSdnNeeds(run, (configs) => sdnNeeds(configs, run.perms)));
  try {
    return await checkPrivileges(needs, run.perms, run.px.tokenId);
  } catch (err) {
    if (run.signal.aborted) throw err;
    return [warn(
      "privileges",
      "",
      `could not read the token's permissions (GET /access/permissions): ${errText(err)}`,
      "check the privileges by hand against docs/credentials.md#privileges-and-why-each-is-needed",
    )];
  }
}
